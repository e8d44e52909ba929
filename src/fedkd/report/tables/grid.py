"""Layout ``grid`` (FedGKD Tables 3, 4, 7, 8, 9): one accuracy per (row keys, label)."""

from __future__ import annotations

import pandas as pd

from fedkd.report.aggregate import ReportError
from fedkd.report.cells import cell_text, highlight, make_cell
from fedkd.report.keys import check_keys, order_rows, selected_labels
from fedkd.report.options import Options
from fedkd.report.tables.common import caption_and_label, csv_record, stat_fn, table_cells
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
    keys = opts.str_list("rows", ["dataset", "alpha"])
    check_keys(df, keys, "rows", opts.target)
    labels = selected_labels(df, opts)
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
    value = stat_fn(stat)
    cells, rows = table_cells(
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
        csv_record(keys, r, lab, cells[r][lab], {"stat": stat, "metric": f"{stat}_acc_pct"}, 100)
        for r, lab in full
    ]
    caption, label = caption_and_label(opts)
    return TableDoc(caption, label, header, body, len(stub_keys), pd.DataFrame(recs))


def _header_pair(key: str) -> tuple[str, str]:
    h = key_header(key)
    return h.tex, h.md
