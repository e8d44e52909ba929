"""The papers' tables as LaTeX (booktabs), Markdown and CSV.

Accuracies are shown in percent as mean ± std over the seeds of a cell; the best mean of the
compared cells is bold and the second underlined (ranked on the value as printed, so ties share
the mark). The CSV holds the same cells in long form with separate mean, std and n_seeds columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from fedkd.report.aggregate import ReportError
from fedkd.report.common import (
    DASH,
    KEY_HEADERS,
    Cell,
    Options,
    Text,
    cell_text,
    check_keys,
    check_same_setting,
    format_key_value,
    group_runs,
    highlight,
    key_value,
    make_cell,
    md_escape,
    order_rows,
    output_path,
    tex_escape,
    write_atomic,
)

PERCENT = 100.0
GRID_TARGETS = ("table3", "table4", "table7", "table8", "table9")
SETTING_STYLE_KEYS = ("alpha", "participation", "local_epochs", "shards", "clients")


# --------------------------------------------------------------------------- document
@dataclass
class TableDoc:
    caption: str  # plain text
    label: str
    columns: list[Text]  # one header entry per column, stub columns first
    body: list[list[Text]]
    n_stub: int  # leading columns that name the row (left-aligned)
    csv: pd.DataFrame
    groups: list[tuple[Text, int]] | None = None  # an upper header row: (text, span) left to right
    needs: tuple[str, ...] = ("booktabs",)
    blank_repeats: bool = True  # LaTeX: print a repeated first stub value once per group
    notes: list[str] = field(default_factory=list)


def _styled_tex(t: Text) -> str:
    if t.style == "best":
        return rf"\textbf{{{t.tex}}}"
    if t.style == "second":
        return rf"\underline{{{t.tex}}}"
    return t.tex


def _styled_md(t: Text) -> str:
    if t.style == "best":
        return f"**{t.md}**"
    if t.style == "second":
        return f"<u>{t.md}</u>"
    return t.md


def to_latex(doc: TableDoc, target: str) -> str:
    ncol = len(doc.columns)
    spec = "l" * doc.n_stub + "c" * (ncol - doc.n_stub)
    out = [
        f"% fedkd render {target}; needs \\usepackage{{{','.join(doc.needs)}}}",
        r"\begin{table}[htbp]",
        r"\centering",
        rf"\caption{{{tex_escape(doc.caption)}}}",
        rf"\label{{{doc.label}}}",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
    ]
    if doc.groups:
        cells, rules, col = [], [], 1
        for text, span in doc.groups:
            if span == 1:
                cells.append(text.tex)
            else:
                cells.append(rf"\multicolumn{{{span}}}{{c}}{{{text.tex}}}")
            if text.tex:
                rules.append(rf"\cmidrule(lr){{{col}-{col + span - 1}}}")
            col += span
        out.append(" & ".join(cells) + r" \\")
        out.append(" ".join(rules))
    out.append(" & ".join(c.tex for c in doc.columns) + r" \\")
    out.append(r"\midrule")
    prev = None
    for row in doc.body:
        texts = [_styled_tex(t) for t in row]
        if doc.blank_repeats and doc.n_stub > 1:
            first = row[0].tex
            if prev is not None and first == prev:
                texts[0] = ""
            elif prev is not None:
                out.append(r"\midrule")
            prev = first
        out.append(" & ".join(texts) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(out)


def to_markdown(doc: TableDoc) -> str:
    headers = [c.md for c in doc.columns]
    if doc.groups:
        col = 0
        for text, span in doc.groups:
            for j in range(col, col + span):
                if text.md:
                    headers[j] = f"{text.md} {headers[j]}".strip()
            col += span
    lines = [f"Table: {doc.caption}", ""]
    lines.append("| " + " | ".join(headers) + " |")
    lines.append(
        "|" + "|".join(":--" if j < doc.n_stub else ":-:" for j in range(len(headers))) + "|"
    )
    for row in doc.body:
        lines.append("| " + " | ".join(_styled_md(t) for t in row) + " |")
    lines.append("")
    return "\n".join(lines)


def write_table(doc: TableDoc, prefix, target: str) -> list:
    paths = []
    for suffix, text in (
        (".tex", to_latex(doc, target)),
        (".md", to_markdown(doc)),
        (".csv", _csv_text(doc.csv)),
    ):
        path = output_path(prefix, suffix)
        write_atomic(path, text)
        paths.append(path)
    return paths


def _csv_text(df: pd.DataFrame) -> str:
    df = df.copy()
    for col in df.columns:
        if pd.api.types.is_float_dtype(df[col]):
            df[col] = df[col].round(6)
    return df.to_csv(index=False, lineterminator="\n")


# --------------------------------------------------------------------------- shared pieces
def key_header(key: str) -> Text:
    tex, md = KEY_HEADERS.get(key, (tex_escape(key), key))
    return Text(tex, md)


def setting_text(key: str, value, names: dict) -> Text:
    """A run-key value as a column header: "α=0.1", "C=0.2", or just the value (dataset names)."""
    text = format_key_value(key, value, names)
    if key in SETTING_STYLE_KEYS and text == format_key_value(key, value, None):
        head = key_header(key)
        return Text(f"{head.tex}={tex_escape(text)}", f"{head.md}={text}")
    return Text.plain(text)


def label_text(label: str, names: dict) -> Text:
    """A label's shown name: plain text (escaped for LaTeX), or {"tex": ..., "md": ...} to give
    LaTeX markup such as "FedGKD$^{+}$" verbatim."""
    name = names.get(label, label)
    if isinstance(name, dict):
        if not {"tex", "md"} <= set(name) or not all(isinstance(v, str) for v in name.values()):
            raise ReportError(
                f"the name given for {label!r} must be a string or an object with string 'tex' "
                f"and 'md' entries, got {name!r}"
            )
        return Text(name["tex"], md_escape(name["md"]))
    return Text.plain(str(name))


def _stat_fn(stat: str) -> Callable:
    def value(rows: pd.DataFrame, status: str):
        from fedkd import metrics

        return metrics.best_accuracy(rows) if stat == "best" else metrics.final_accuracy(rows)

    return value


def _labels_in(df: pd.DataFrame, opts: Options) -> list[str]:
    present = sorted(df["label"].unique())
    columns = opts.str_list("columns", present)
    if not set(columns) & set(present):
        raise ReportError(
            f"none of the labels {columns} (option 'columns' of target {opts.target!r}) is in the "
            f"aggregate; its labels are: {', '.join(present)}"
        )
    return columns


def _cells(
    df: pd.DataFrame,
    keys: list[str],
    labels: list[str],
    make: Callable[[dict | None], Cell],
    target: str,
    keys_option: str,
) -> tuple[dict[tuple, dict[str, Cell]], list[tuple]]:
    groups = group_runs(df[df["label"].isin(labels)], keys)
    cells: dict[tuple, dict[str, Cell]] = {}
    for row, by_label in groups.items():
        for label in labels:
            runs = by_label.get(label)
            if runs:
                where = f"{target} cell ({_row_desc(keys, row)}, label {label!r})"
                check_same_setting(runs, where, keys_option)
            cells.setdefault(row, {})[label] = make(runs)
    return cells, list(groups)


def _row_desc(keys: list[str], row: tuple) -> str:
    return (
        ", ".join(f"{k}={format_key_value(k, v, None)}" for k, v in zip(keys, row, strict=True))
        or "all runs"
    )


def _csv_rows(keys: list[str], row: tuple, label: str, cell: Cell, extra: dict, scale: float):
    rec = {k: key_value(v) for k, v in zip(keys, row, strict=True)}
    rec["label"] = label
    rec.update(extra)
    ok = cell.kind == "value"
    rec.update(
        mean=cell.mean * scale if ok else float("nan"),
        std=cell.std * scale if ok else float("nan"),
        n_seeds=cell.n if ok else 0,
        seeds=";".join(str(s) for s in cell.seeds),
        status="ok" if ok else cell.kind,
    )
    return rec


def _caption(opts: Options, default: str) -> tuple[str, str]:
    return opts.text("caption", default), opts.text("label", f"tab:{opts.target}")


# --------------------------------------------------------------------------- table1
TRAIT_COLUMNS = ("Add. inf. sharing", "Proxy data", "Model modification")


def table1(opts: Options) -> TableDoc:
    from fedkd.strategies import get_strategy_class, strategy_names

    names = opts.mapping("names")
    strategies = opts.str_list("strategies", strategy_names())
    body, recs = [], []
    for name in strategies:
        cls = get_strategy_class(name)  # names the unknown strategy and lists the known ones
        tr = cls.traits
        shares = str(tr.extra_information).strip().lower() not in ("", "none")
        flags = (shares, bool(tr.proxy_data), bool(tr.modifies_model))
        body.append([label_text(name, names)] + [_mark(f) for f in flags])
        recs.append(
            {
                "strategy": name,
                "extra_information_shared": shares,
                "extra_information": tr.extra_information,
                "proxy_data": bool(tr.proxy_data),
                "modifies_model": bool(tr.modifies_model),
                "paper": cls.paper,
            }
        )
    caption, label = _caption(opts, "Comparison of federated learning approaches.")
    return TableDoc(
        caption, label,
        [Text("Method", "Method")] + [Text.plain(c) for c in TRAIT_COLUMNS],
        body, 1, pd.DataFrame(recs), needs=("booktabs", "amssymb"),
    )  # fmt: skip


def _mark(flag: bool) -> Text:
    return Text(r"$\checkmark$", "✓") if flag else Text(r"$\times$", "✗")


# --------------------------------------------------------------------------- table2
def table2(df: pd.DataFrame, opts: Options) -> TableDoc:
    from fedkd.config import DATASETS

    names = opts.mapping("row_names")
    present = list(dict.fromkeys(df["dataset"]))
    wanted = opts.str_list("datasets")
    if wanted is None:
        order = sorted(present, key=lambda d: (DATASETS.index(d) if d in DATASETS else 99, d))
    else:
        # datasets not listed are kept, after the listed ones: a table never drops data silently
        order = wanted + [d for d in present if d not in wanted]
    first = df.drop_duplicates("run")
    cols = [
        ("dataset_kind", "Task"),
        ("train_size", "Train"),
        ("val_size", "Validation"),
        ("test_size", "Test"),
        ("num_classes", "Classes"),
        ("clients", "Clients"),
    ]
    body, recs = [], []
    for ds in order:
        runs = first[first["dataset"] == ds]
        row = [Text.plain(format_key_value("dataset", ds, names))]
        rec = {"dataset": ds}
        for col, _ in cols:
            found = {key_value(v) for v in runs[col]} - {None} if col in runs else set()
            values = sorted(found, key=lambda v: (isinstance(v, str), str(v).zfill(20)))
            row.append(Text.plain(", ".join(_count(v) for v in values) if values else DASH))
            rec[col] = ";".join(str(v) for v in values)
        body.append(row)
        recs.append(rec)
    caption, label = _caption(opts, "Statistics of the datasets.")
    header = [Text("Dataset", "Dataset")] + [Text.plain(h) for _, h in cols]
    return TableDoc(caption, label, header, body, 2, pd.DataFrame(recs), blank_repeats=False)


def _count(v) -> str:
    return f"{v:,}" if isinstance(v, int) else str(v)


# --------------------------------------------------------------------------- accuracy grids
def table_grid(df: pd.DataFrame, opts: Options) -> TableDoc:
    """Tables 3, 4, 7, 8 and 9: one accuracy per (row keys, label).

    By default the labels are the columns (option ``across``: ["label"]); ``across`` may instead
    name run keys among ``rows`` that become the columns while the labels move into the rows, to
    get the papers' own layouts (table 7: across ["alpha"]; table 9: across ["dataset"]). Bold and
    underline always compare the labels of one setting.
    """
    keys = opts.str_list("rows", ["dataset", "alpha"])
    check_keys(df, keys, "rows", opts.target)
    labels = _labels_in(df, opts)
    stat = opts.choice("stat", ("best", "final"), "best")
    across = opts.str_list("across", ["label"])
    bad = [a for a in across if a != "label" and a not in keys]
    if bad:
        raise ReportError(
            f"option 'across' of target {opts.target!r} names {bad}, which are not in option "
            f"'rows' {keys} (nor 'label')"
        )
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    order = {**opts.mapping("order"), "label": labels}
    ddof, decimals, marks = (
        opts.ddof(),
        opts.integer("decimals", 2, 0, 6),
        opts.boolean("highlight", True),
    )
    value = _stat_fn(stat)
    cells, rows = _cells(
        df, keys, labels, lambda runs: make_cell(runs, value, ddof), opts.target, "rows"
    )
    rows = order_rows(keys, rows, order)
    styles = {}
    if marks:
        for row in rows:
            for label, style in highlight(list(cells[row].items()), 100, decimals).items():
                styles[(row, label)] = style

    # layout: every cell has coordinates over keys + ["label"]; "across" picks the column ones
    all_keys = keys + ["label"]
    stub_keys = [k for k in all_keys if k not in across]
    full = [(row, label) for row in rows for label in labels]

    def coords(row, label, which):
        values = dict(zip(keys, row, strict=True), label=label)
        return tuple(values[k] for k in which)

    col_ids = order_rows(across, {coords(r, lab, across) for r, lab in full}, order)
    row_ids = order_rows(stub_keys, {coords(r, lab, stub_keys) for r, lab in full}, order)
    lookup = {(coords(r, lab, stub_keys), coords(r, lab, across)): (r, lab) for r, lab in full}

    def show(key, v, header: bool) -> Text:
        if key == "label":
            return label_text(v, col_names)
        return (
            setting_text(key, v, names) if header else Text.plain(format_key_value(key, v, names))
        )

    header = [Text(*_header_pair(k)) for k in stub_keys]
    for cid in col_ids:
        parts = [show(k, v, True) for k, v in zip(across, cid, strict=True)]
        header.append(Text(", ".join(p.tex for p in parts), ", ".join(p.md for p in parts)))
    body = []
    for rid in row_ids:
        line = [show(k, v, False) for k, v in zip(stub_keys, rid, strict=True)]
        for cid in col_ids:
            where = lookup.get((rid, cid))
            if where is None:
                line.append(Text.plain(DASH))
                continue
            t = cell_text(cells[where[0]][where[1]], 100, decimals)
            t.style = styles.get(where, "")
            line.append(t)
        body.append(line)
    recs = [
        _csv_rows(keys, r, lab, cells[r][lab], {"stat": stat, "metric": f"{stat}_acc_pct"}, 100)
        for r, lab in full
    ]
    default = (
        f"Top-1 test accuracy (%, {'best round' if stat == 'best' else 'final round'}), "
        f"mean ± std over seeds; best in bold, second underlined."
    )
    caption, label = _caption(opts, default)
    return TableDoc(caption, label, header, body, len(stub_keys), pd.DataFrame(recs))


def _header_pair(key: str) -> tuple[str, str]:
    h = key_header(key)
    return h.tex, h.md


# --------------------------------------------------------------------------- table5
def table5(df: pd.DataFrame, opts: Options) -> TableDoc:
    keys = opts.str_list("rows", ["participation"])
    check_keys(df, keys, "rows", opts.target)
    labels = _labels_in(df, opts)
    stats = opts.str_list("stats", ["best", "final"])
    bad = [s for s in stats if s not in ("best", "final")]
    if bad:
        raise ReportError(f"option 'stats' of target 'table5' has {bad}; use 'best' and/or 'final'")
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    order = opts.mapping("order")
    ddof, decimals, marks = (
        opts.ddof(),
        opts.integer("decimals", 2, 0, 6),
        opts.boolean("highlight", True),
    )
    per_stat = {}
    rows: list[tuple] = []
    for stat in stats:
        value = _stat_fn(stat)
        per_stat[stat], found = _cells(
            df, keys, labels, lambda runs, v=value: make_cell(runs, v, ddof), "table5", "rows"
        )
        rows = found
    rows = order_rows(keys, rows, order)
    body, recs = [], []
    for row in rows:
        line = [Text.plain(format_key_value(k, v, names)) for k, v in zip(keys, row, strict=True)]
        styles = {
            stat: highlight(list(per_stat[stat][row].items()), 100, decimals) if marks else {}
            for stat in stats
        }
        for label in labels:
            for stat in stats:
                cell = per_stat[stat][row][label]
                t = cell_text(cell, 100, decimals)
                t.style = styles[stat].get(label, "")
                line.append(t)
                recs.append(
                    _csv_rows(
                        keys, row, label, cell, {"stat": stat, "metric": f"{stat}_acc_pct"}, 100
                    )
                )
        body.append(line)
    header = [key_header(k) for k in keys]
    header += [Text.plain(s.capitalize()) for _ in labels for s in stats]
    groups = [(Text("", ""), len(keys))] + [
        (label_text(lab, col_names), len(stats)) for lab in labels
    ]
    default = "Best and final top-1 test accuracy (%), mean ± std over seeds."
    caption, label = _caption(opts, default)
    return TableDoc(caption, label, header, body, len(keys), pd.DataFrame(recs), groups=groups)


# --------------------------------------------------------------------------- table6
def table6(df: pd.DataFrame, opts: Options) -> TableDoc:
    labels = _labels_in(df, opts)
    rounds = opts.num_list("rounds", [10, 20, 50, 100], integer=True)
    keys = opts.str_list("rows", [])
    check_keys(df, keys, "rows", opts.target)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    ddof, decimals, marks = (
        opts.ddof(),
        opts.integer("decimals", 2, 0, 6),
        opts.boolean("highlight", True),
    )

    # accuracy at round r only needs rounds 1..r, so a run that diverged later still counts
    per_round = {}
    rows: list[tuple] = []
    for r in rounds:
        per_round[r], rows = _cells(
            df, keys, labels, lambda runs, r=r: _at_round_cell(runs, r, ddof), "table6", "rows",
        )  # fmt: skip
    rows = order_rows(keys, rows, opts.mapping("order"))
    body, recs = [], []
    styles = {}
    if marks:
        for row in rows:
            for r in rounds:
                for label, s in highlight(list(per_round[r][row].items()), 100, decimals).items():
                    styles[(row, r, label)] = s
    for row in rows:
        for label in labels:
            line = [
                Text.plain(format_key_value(k, v, names)) for k, v in zip(keys, row, strict=True)
            ]
            line.append(label_text(label, col_names))
            for r in rounds:
                cell = per_round[r][row][label]
                t = cell_text(cell, 100, decimals)
                t.style = styles.get((row, r, label), "")
                line.append(t)
                recs.append(
                    _csv_rows(
                        keys, row, label, cell, {"round": r, "metric": "acc_at_round_pct"}, 100
                    )
                )
            body.append(line)
    header = [key_header(k) for k in keys] + [Text("Method", "Method")]
    header += [Text(str(r), str(r)) for r in rounds]
    groups = [(Text("", ""), len(keys) + 1), (Text.plain("Test accuracy at round"), len(rounds))]
    default = "Top-1 test accuracy (%) at given communication rounds, mean ± std over seeds."
    caption, label = _caption(opts, default)
    return TableDoc(caption, label, header, body, len(keys) + 1, pd.DataFrame(recs), groups=groups)


def _at_round_cell(runs: dict | None, r: int, ddof: int) -> Cell:
    if runs and all(int(rows["rounds_planned"].iloc[0]) < r for rows in runs.values()):
        return Cell("missing", ddof=ddof)  # shorter runs: "–" even if one diverged
    return make_cell(runs, _at_round(r), ddof, partial_ok=True)


def _at_round(r: int) -> Callable:
    def value(rows: pd.DataFrame, status: str):
        from fedkd import metrics

        # a run shorter than r has no value there: the cell shows "–"
        if not (rows["round"] == r).any():
            return None
        return metrics.accuracy_at_round(rows, r)

    return value


# --------------------------------------------------------------------------- rounds to target
def rounds_to_target(df: pd.DataFrame, opts: Options) -> TableDoc:
    keys = opts.str_list("rows", ["alpha", "participation", "local_epochs"])
    check_keys(df, keys, "rows", opts.target)
    labels = _labels_in(df, opts)
    targets = _targets(opts)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    ddof, decimals, marks = (
        opts.ddof(),
        opts.integer("decimals", 0, 0, 6),
        opts.boolean("highlight", True),
    )

    def make(runs):
        if not runs:
            return make_cell(runs, None, ddof)
        target = _target_for(next(iter(runs.values())), targets)

        def value(rows, status):
            from fedkd import metrics

            r = metrics.rounds_to_target(rows, target)
            return None if r is None else float(r)

        # reaching the target needs only the rounds up to it: a run that diverged later counts
        return make_cell(runs, value, ddof, partial_ok=True, none_means="not reached")

    cells, rows = _cells(df, keys, labels, make, "rounds_to_target", "rows")
    rows = order_rows(keys, rows, opts.mapping("order"))
    show_target = "alpha" in keys
    body, recs = [], []
    for row in rows:
        line = [Text.plain(format_key_value(k, v, names)) for k, v in zip(keys, row, strict=True)]
        target = None
        if show_target:
            alpha = dict(zip(keys, row, strict=True))["alpha"]
            target = _lookup_target(alpha, targets)
            line.append(Text(f"{target * 100:g}\\%", f"{target * 100:g}%"))
        styles = (
            highlight(list(cells[row].items()), 1, decimals, higher_better=False) if marks else {}
        )
        for label in labels:
            cell = cells[row][label]
            t = cell_text(cell, 1, decimals)
            t.style = styles.get(label, "")
            line.append(t)
            extra = {"metric": "rounds_to_target", "target": target}
            if target is None and cell.runs:
                extra["target"] = _target_for(_first_rows(df, cell.runs[0], label), targets)
            recs.append(_csv_rows(keys, row, label, cell, extra, 1))
        body.append(line)
    header = [key_header(k) for k in keys] + ([Text("$T$", "T")] if show_target else [])
    header += [label_text(lab, col_names) for lab in labels]
    default = (
        "Communication rounds to reach the target top-1 test accuracy T, mean ± std over seeds; "
        "not reached: some seed never reached T."
    )
    caption, label = _caption(opts, default)
    n_stub = len(keys) + int(show_target)
    return TableDoc(caption, label, header, body, n_stub, pd.DataFrame(recs))


def _first_rows(df: pd.DataFrame, run: str, label: str) -> pd.DataFrame:
    return df[(df["run"] == run) & (df["label"] == label)]


def _targets(opts: Options) -> dict[float, float]:
    raw = opts.mapping("targets")
    if not raw:
        raise ReportError(
            "target 'rounds_to_target' needs option 'targets', a mapping from alpha to target "
            'accuracy in 0-1, e.g. {"1.0": 0.8, "0.1": 0.75}'
        )
    out = {}
    for k, v in raw.items():
        try:
            alpha = float(k)
        except ValueError:
            raise ReportError(
                f"option 'targets' has key {k!r}, which is not an alpha value"
            ) from None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise ReportError(
                f"option 'targets' maps alpha {k!r} to {v!r}; targets are accuracies in (0, 1], "
                f"e.g. 0.8 for 80%"
            )
        out[alpha] = float(v)
    return out


def _lookup_target(alpha, targets: dict[float, float]) -> float:
    alpha = key_value(alpha)
    for a, t in targets.items():
        if alpha is not None and abs(a - float(alpha)) < 1e-12:
            return t
    raise ReportError(
        f"option 'targets' has no target for alpha {format_key_value('alpha', alpha, None)}; "
        f"it covers alpha {', '.join(f'{a:g}' for a in targets)}"
    )


def _target_for(rows: pd.DataFrame, targets: dict[float, float]) -> float:
    return _lookup_target(rows["alpha"].iloc[0], targets)


TABLE_BUILDERS = {
    "table2": table2,
    "table3": table_grid,
    "table4": table_grid,
    "table5": table5,
    "table6": table6,
    "table7": table_grid,
    "table8": table_grid,
    "table9": table_grid,
    "rounds_to_target": rounds_to_target,
}

TABLE_OPTIONS = {
    "table1": ("strategies", "names"),
    "table2": ("datasets", "row_names"),
    "grid": (
        "rows", "columns", "stat", "row_names", "column_names", "order", "across", "ddof",
        "decimals", "highlight",
    ),
    "table5": (
        "rows", "columns", "stats", "row_names", "column_names", "order", "ddof", "decimals",
        "highlight",
    ),
    "table6": (
        "columns", "rounds", "rows", "row_names", "column_names", "order", "ddof", "decimals",
        "highlight",
    ),
    "rounds_to_target": (
        "columns", "rows", "targets", "row_names", "column_names", "order", "ddof", "decimals",
        "highlight",
    ),
}  # fmt: skip


def table_options(target: str) -> tuple[str, ...]:
    return TABLE_OPTIONS["grid" if target in GRID_TARGETS else target]
