"""Layout ``grid`` (FedGKD Tables 3, 4, 7, 8, 9): one accuracy per (row keys, label)."""

from __future__ import annotations

import pandas as pd

from fedkd.report.aggregate import ReportError
from fedkd.report.best_of import best_of_option, caption_note, mark, pick_best_of
from fedkd.report.cells import cell_text
from fedkd.report.keys import check_keys, order_rows, selected_labels
from fedkd.report.options import Options
from fedkd.report.tables.common import (
    STAT_NAMES,
    STATS,
    caption_and_label,
    cells_by_stat,
    csv_record,
    run_variants,
    stat_fn,
    with_variant_note,
)
from fedkd.report.text import (
    DASH,
    Text,
    format_key_value,
    key_header,
    label_text,
    setting_text,
)
from fedkd.report.writers import TableDoc


def build(df: pd.DataFrame, opts: Options) -> TableDoc:
    """Tables 3, 4, 7, 8 and 9: one accuracy per (row keys, label).

    By default the labels are the columns (option ``across``: ["label"]); ``across`` may instead
    name run keys among ``rows`` that become the columns while the labels move into the rows, to
    get the papers' own layouts (table 7: across ["alpha"]; table 9: across ["dataset"]). Bold and
    underline always compare the labels of one setting.
    """
    keys, across = checked_options(df, opts)
    labels = selected_labels(df, opts)
    stat = opts.choice("stat", STATS, "best")
    # model selection without the test set beside the paper's best round: a second row group
    stats = [stat]
    if opts.boolean("val_selected", True) and stat != "val_selected":
        stats.append("val_selected")
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    order = {**opts.mapping("order"), "label": labels, "stat": stats}
    decimals = opts.integer("decimals", 2, 0, 6)
    df, chosen = pick_best_of(df, keys, opts, stat_fn(stat))
    variants = run_variants(df)
    cells, rows, styles = cells_by_stat(df, keys, labels, stats, opts, order)

    full = [(row, label, s) for row in rows for label in labels for s in stats]

    def arrange(across: list[str], stub_keys: list[str]) -> tuple[list[Text], list[list[Text]]]:
        """Header and body with the ``across`` keys as columns, ``stub_keys`` naming the rows:
        every cell has coordinates over keys + ["label"] (+ ["stat"] with two statistics)."""

        def coords(row, label, s, which):
            values = dict(zip(keys, row, strict=True), label=label, stat=s)
            return tuple(values[k] for k in which)

        col_ids = order_rows(across, {coords(*c, across) for c in full}, order)
        row_ids = order_rows(stub_keys, {coords(*c, stub_keys) for c in full}, order)
        lookup = {(coords(*c, stub_keys), coords(*c, across)): c for c in full}

        def show(key, v, header: bool) -> Text:
            if key == "label":
                return label_text(v, col_names)
            if key == "stat":
                return Text.plain(STAT_NAMES[v])
            if header:
                return setting_text(key, v, names)
            return Text.plain(format_key_value(key, v, names))

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
                row, label, s = where
                t = cell_text(cells[s][row][label], 100, decimals)
                t.style = styles.get(where, "")
                line.append(mark(t, label, chosen.get((row, label)), opts))
            body.append(line)
        return header, body

    all_keys = keys + ["label"] + (["stat"] if len(stats) > 1 else [])
    stub_keys = [k for k in all_keys if k not in across]
    header, body = arrange(across, stub_keys)
    screen = None
    if across == ["label"] and len(keys) > 1:
        # on a screen, many methods side by side overflow: the methods as rows (grouped by the
        # first row key and the statistic), the other settings as columns
        screen_stub = keys[:1] + (["stat"] if len(stats) > 1 else []) + ["label"]
        screen = arrange(keys[1:], screen_stub) + (len(screen_stub),)
    recs = []
    for row, label, s in full:
        extra = {"stat": s, "metric": f"{s}_acc_pct", "variant": chosen.get((row, label), "")}
        recs.append(csv_record(keys, row, label, cells[s][row][label], extra, 100, variants))
    caption, label = caption_and_label(opts)
    caption = _caption(caption, stats, opts)
    caption = with_variant_note(caption, df, keys, labels, col_names, best_of_option(opts))
    doc = TableDoc(caption, label, header, body, len(stub_keys), pd.DataFrame(recs))
    if screen is not None:
        doc.screen = TableDoc(caption, label, *screen, doc.csv)
    return doc


def checked_options(df: pd.DataFrame, opts: Options) -> tuple[list[str], list[str]]:
    """Options ``rows`` (run keys of the aggregate) and ``across`` (among them, or "label")."""
    keys = opts.str_list("rows", ["dataset", "alpha"])
    check_keys(df, keys, "rows", opts.target)
    across = opts.str_list("across", ["label"])
    bad = [a for a in across if a != "label" and a not in keys]
    if bad:
        raise ReportError(
            f"option 'across' of target {opts.target!r} names {bad}, which are not in option "
            f"'rows' {keys} (nor 'label')"
        )
    return keys, across


def _caption(caption: str, stats: list[str], opts: Options) -> str:
    """The caption, with what the selection rows and best-of marks mean."""
    extra = []
    if "val_selected" in stats and len(stats) > 1:
        extra.append(
            "Rows 'best on validation': the test accuracy at the round whose validation accuracy "
            "is highest (model selection without the test set)."
        )
    note = caption_note(opts, STAT_NAMES[stats[0]])
    if note:
        extra.append(note[0].upper() + note[1:])
    return " ".join([caption, *extra]) if extra else caption


def _header_pair(key: str) -> tuple[str, str]:
    h = key_header(key)
    return h.tex, h.md
