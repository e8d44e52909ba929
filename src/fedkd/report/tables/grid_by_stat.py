"""Layout ``grid_by_stat`` (FedGKD Table 5): per label, one column per statistic (best and final
accuracy)."""

from __future__ import annotations

import pandas as pd

from fedkd.report.aggregate import ReportError
from fedkd.report.cells import cell_text, highlight, make_cell
from fedkd.report.keys import check_keys, order_rows, selected_labels
from fedkd.report.options import Options
from fedkd.report.tables.common import caption_and_label, csv_record, stat_fn, table_cells
from fedkd.report.text import (
    Text,
    format_key_value,
    key_header,
    label_text,
)
from fedkd.report.writers import TableDoc


def build(df: pd.DataFrame, opts: Options) -> TableDoc:
    keys = opts.str_list("rows", ["participation"])
    check_keys(df, keys, "rows", opts.target)
    labels = selected_labels(df, opts)
    stats = opts.str_list("stats", ["best", "final"])
    bad = [s for s in stats if s not in ("best", "final")]
    if bad:
        raise ReportError(
            f"option 'stats' of target {opts.target!r} has {bad}; use 'best' and/or 'final'"
        )
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
        value = stat_fn(stat)
        per_stat[stat], found = table_cells(
            df, keys, labels, lambda runs, v=value: make_cell(runs, v, ddof), opts.target, "rows"
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
                    csv_record(
                        keys, row, label, cell, {"stat": stat, "metric": f"{stat}_acc_pct"}, 100
                    )
                )
        body.append(line)
    header = [key_header(k) for k in keys]
    header += [Text.plain(s.capitalize()) for _ in labels for s in stats]
    groups = [(Text("", ""), len(keys))] + [
        (label_text(lab, col_names), len(stats)) for lab in labels
    ]
    caption, label = caption_and_label(opts)
    return TableDoc(caption, label, header, body, len(keys), pd.DataFrame(recs), groups=groups)
