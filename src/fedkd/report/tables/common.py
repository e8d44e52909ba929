"""What the table layouts share: cells over (row keys, label), the statistic of a run, and the
long-form CSV record of a cell."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from fedkd.report.aggregate import ReportError
from fedkd.report.cells import Cell, highlight, make_cell, mark_short_cells
from fedkd.report.keys import (
    absent_in_row,
    absent_settings,
    check_same_setting,
    group_runs,
    order_rows,
)
from fedkd.report.options import Options
from fedkd.report.text import format_key_value, key_value


def caption_and_label(opts: Options) -> tuple[str, str]:
    """The caption and label that render() resolved (the registry's default caption unless the
    options give one)."""
    return opts.text("caption", ""), opts.text("label", f"tab:{opts.target}")


# a run's accuracy statistics: the paper's best round (chosen on the test set), the last round,
# and the round best on the validation split (model selection without the test set)
STATS = ("best", "final", "val_selected")
STAT_NAMES = {"best": "best round", "final": "final round", "val_selected": "best on validation"}


def stat_fn(stat: str) -> Callable:
    def value(rows: pd.DataFrame, status: str):
        from fedkd import metrics

        if stat == "val_selected":
            return metrics.val_selected_accuracy(rows)
        return metrics.best_accuracy(rows) if stat == "best" else metrics.final_accuracy(rows)

    return value


def table_cells(
    df: pd.DataFrame,
    keys: list[str],
    labels: list[str],
    make: Callable[[dict | None], Cell],
    opts: Options,
    keys_option: str,
) -> tuple[dict[tuple, dict[str, Cell]], list[tuple]]:
    """{row: {label: Cell}} and the rows; a label without runs in a row its option ``absent``
    names has an "absent" cell (no cell by design, as in the paper), else a "missing" one."""
    groups = group_runs(df[df["label"].isin(labels)], keys)
    absent = absent_settings(opts)
    unknown = [label for label in absent if label not in labels]
    if unknown:
        raise ReportError(
            f"option 'absent' of target {opts.target!r} names label(s) {unknown} that are not "
            f"among its columns: {', '.join(labels)}"
        )
    cells: dict[tuple, dict[str, Cell]] = {}
    for row, by_label in groups.items():
        without = [label for label in labels if not by_label.get(label)]
        gone = absent_in_row(absent, without, keys, row, by_label)
        for label in labels:
            runs = by_label.get(label)
            if runs:
                where = f"{opts.target} cell ({row_desc(keys, row)}, label {label!r})"
                check_same_setting(runs, where, keys_option)
            cell = Cell("absent") if label in gone else make(runs)
            cells.setdefault(row, {})[label] = cell
    mark_short_cells([c for by_label in cells.values() for c in by_label.values()])
    return cells, list(groups)


def row_desc(keys: list[str], row: tuple) -> str:
    return (
        ", ".join(f"{k}={format_key_value(k, v, None)}" for k, v in zip(keys, row, strict=True))
        or "all runs"
    )


def csv_record(
    keys: list[str], row: tuple, label: str, cell: Cell, extra: dict, scale: float,
    variants: dict[str, str] | None = None,
):  # fmt: skip
    """A cell's CSV line; its ``variant`` is the best_of choice in ``extra``, else the variant of
    its runs (from ``variants``, run_variants of the table's rows)."""
    rec = {k: key_value(v) for k, v in zip(keys, row, strict=True)}
    rec["label"] = label
    rec.update(extra)
    if variants is not None and not rec.get("variant"):
        rec["variant"] = cell_variant(cell, variants)
    ok = cell.kind == "value"
    rec.update(
        mean=cell.mean * scale if ok else float("nan"),
        std=cell.std * scale if ok else float("nan"),
        n_seeds=cell.n if ok else 0,
        seeds=";".join(str(s) for s in cell.seeds),
        missing_seeds=";".join(str(s) for s in cell.missing_seeds),
        status="ok" if ok else cell.kind,
        # runs of the cell whose global model stayed at chance (fedkd.collapse)
        collapsed=len(cell.collapsed),
    )
    return rec


def cells_by_stat(
    df: pd.DataFrame, keys: list[str], labels: list[str], stats: list[str], opts: Options,
    order: dict,
) -> tuple[dict, list[tuple], dict]:  # fmt: skip
    """The cells of a table with one or more statistics: ``{stat: {row: {label: Cell}}}``, the
    rows in ``order``, and the style of each ``(row, label, stat)`` cell: bold for the best of its
    row and statistic, underlined for the second (option ``highlight``, on by default)."""
    ddof, decimals = opts.ddof(), opts.integer("decimals", 2, 0, 6)
    cells, rows = {}, []
    for stat in stats:
        value = stat_fn(stat)
        cells[stat], rows = table_cells(
            df, keys, labels, lambda runs, v=value: make_cell(runs, v, ddof), opts, "rows"
        )
    rows = order_rows(keys, rows, order)
    styles = {}
    if opts.boolean("highlight", True):
        for stat in stats:
            for row in rows:
                for label, style in highlight(
                    list(cells[stat][row].items()), 100, decimals
                ).items():
                    styles[(row, label, stat)] = style
    return cells, rows, styles


def run_variants(df: pd.DataFrame) -> dict[str, str]:
    """{run: its variant} (the configuration's name for the set-up a run trained)."""
    if df.empty or not {"run", "variant"} <= set(df.columns):
        return {}
    runs = df.drop_duplicates("run")
    return {r: str(v) for r, v in zip(runs["run"], runs["variant"], strict=True) if key_value(v)}


def cell_variant(cell: Cell, variants: dict[str, str]) -> str:
    """The variant(s) of a cell's runs, joined by ";" ("" for a cell with no runs)."""
    return ";".join(sorted({variants[r] for r in cell.runs if r in variants}))


def with_variant_note(
    caption: str, df: pd.DataFrame, keys: list[str], labels: list[str], names: dict, skip=()
) -> str:
    """The caption, followed by ``variant_note``'s sentence when there is one."""
    note = variant_note(df, keys, labels, names, skip)
    return f"{caption} {note}" if note else caption


def _numbers_first(value) -> tuple:
    """A sort key putting numbers in numeric order (E = 10 after 5, not before it as text)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (number, float(value) if number else str(value))


def variant_note(df: pd.DataFrame, keys: list[str], labels: list[str], names: dict, skip=()) -> str:
    """A caption sentence naming the variant behind each column whose runs are a particular
    set-up of its method, e.g. "FedGKD: FedGKD (M=5) at α=1, 0.1 and FedGKD (M=1) at α=0.5;
    FedGKD-VOTE: FedGKD-VOTE (M=5)." ('' when every column is its method's plain run). Columns in
    ``skip`` (a best_of sweep, which marks its choice per cell) are left out."""
    from fedkd.report.names import display_name
    from fedkd.report.text import KEY_HEADERS, label_text

    if df.empty or "variant" not in df.columns:
        return ""
    runs = df.drop_duplicates("run")
    parts = []
    for label in labels:
        if label in skip:
            continue
        mine = runs[runs["label"] == label]
        variants = list(dict.fromkeys(str(v) for v in mine["variant"] if key_value(v)))
        if not variants or variants == [label]:
            continue
        shown = label_text(label, names).shown
        if len(variants) == 1:
            parts.append(f"{shown}: {display_name(variants[0])}")
            continue
        where = []
        for variant in variants:
            rows = mine[mine["variant"] == variant]
            at = []
            for k in keys:
                values = sorted({key_value(v) for v in rows[k]}, key=_numbers_first, reverse=True)
                if len({key_value(v) for v in mine[k]}) > 1:  # a key that tells them apart
                    name = KEY_HEADERS.get(k, (k, k))[1]
                    at.append(f"{name}={', '.join(format_key_value(k, v, None) for v in values)}")
            where.append(f"{display_name(variant)}" + (f" at {'; '.join(at)}" if at else ""))
        parts.append(f"{shown}: {' and '.join(where)}")
    return ("Variants run: " + "; ".join(parts) + ".") if parts else ""


def variant_mismatch_note(recs: list[dict]) -> str:
    """A caption sentence naming each compared row (a vs_paper record) whose runs are another
    variant than the one the paper's cell was measured with (paper_values' ``variant``, e.g.
    FedGKD's buffer length); '' when none is."""
    from fedkd.report.names import display_name

    parts = [
        f"{r['method_name']} at {r['setting']}: {display_name(r['variant'])} here, "
        f"{display_name(r['paper_variant'])} in the paper"
        for r in recs
        if r["paper_variant"] and r["variant"] and r["variant"] != r["paper_variant"]
    ]
    return ("Set up otherwise than the paper's cell: " + "; ".join(parts) + ".") if parts else ""
