"""Layout ``grid_by_stat`` (FedGKD Table 5): per setting, one column per statistic (best, final and
validation-selected accuracy). As in the paper, a row per label (method) and a column group per
setting (option ``across``, default the ``rows`` keys: C = 0.1 ... 0.4); ``across: ["label"]``
turns it round (a row per setting, a column group per label)."""

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
    Text,
    format_key_value,
    key_header,
    label_text,
    setting_text,
)
from fedkd.report.writers import TableDoc

SHORT = {"best": "Best", "final": "Final", "val_selected": "Val.-sel."}


def build(df: pd.DataFrame, opts: Options) -> TableDoc:
    keys, stats, across = checked_options(df, opts)
    labels = selected_labels(df, opts)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    order = opts.mapping("order")
    decimals = opts.integer("decimals", 2, 0, 6)
    df, chosen = pick_best_of(df, keys, opts, stat_fn(stats[0]))
    variants = run_variants(df)
    per_stat, rows, styles = cells_by_stat(df, keys, labels, stats, opts, order)

    def cell(row, label, stat) -> Text:
        t = cell_text(per_stat[stat][row][label], 100, decimals)
        t.style = styles.get((row, label, stat), "")
        return mark(t, label, chosen.get((row, label)), opts)

    body = []
    if across == ["label"]:  # a row per setting, a column group per label
        for row in rows:
            line = [
                Text.plain(format_key_value(k, v, names)) for k, v in zip(keys, row, strict=True)
            ]
            line += [cell(row, label, stat) for label in labels for stat in stats]
            body.append(line)
        header = [key_header(k) for k in keys]
        header += [Text.plain(SHORT[s]) for _ in labels for s in stats]
        groups = [(Text("", ""), len(keys))]
        groups += [(label_text(lab, col_names), len(stats)) for lab in labels]
        n_stub = len(keys)
    else:  # the paper's: a row per label (and setting keys not across), a column group per setting
        stub = [k for k in keys if k not in across]
        cols = order_rows(across, {_pick(keys, r, across) for r in rows}, order)
        lines = order_rows(stub, {_pick(keys, r, stub) for r in rows}, order)
        by_parts = {(_pick(keys, r, stub), _pick(keys, r, across)): r for r in rows}
        for part in lines:
            for label in labels:
                line = [
                    Text.plain(format_key_value(k, v, names))
                    for k, v in zip(stub, part, strict=True)
                ]
                line.append(label_text(label, col_names))
                for col in cols:
                    row = by_parts.get((part, col))
                    line += [
                        cell(row, label, s) if row is not None else Text.plain("–") for s in stats
                    ]
                body.append(line)
        header = [key_header(k) for k in stub] + [Text("Method", "Method")]
        header += [Text.plain(SHORT[s]) for _ in cols for s in stats]
        groups = [(Text("", ""), len(stub) + 1)]
        for col in cols:
            parts = [setting_text(k, v, names) for k, v in zip(across, col, strict=True)]
            groups.append(
                (Text(", ".join(p.tex for p in parts), ", ".join(p.md for p in parts)), len(stats))
            )
        n_stub = len(stub) + 1
    recs = []
    for row in rows:
        for label in labels:
            for stat in stats:
                extra = {"stat": stat, "metric": f"{stat}_acc_pct"}
                extra["variant"] = chosen.get((row, label), "")
                cell_ = per_stat[stat][row][label]
                recs.append(csv_record(keys, row, label, cell_, extra, 100, variants))
    caption, label = caption_and_label(opts)
    notes = [f"{SHORT[s]}: {STAT_NAMES[s]}" for s in stats]
    caption = f"{caption} {'; '.join(notes)}."
    note = caption_note(opts, STAT_NAMES[stats[0]])
    if note:
        caption += " " + note[0].upper() + note[1:]
    caption = with_variant_note(caption, df, keys, labels, col_names, best_of_option(opts))
    return TableDoc(caption, label, header, body, n_stub, pd.DataFrame(recs), groups=groups)


def _pick(keys: list[str], row: tuple, which: list[str]) -> tuple:
    values = dict(zip(keys, row, strict=True))
    return tuple(values[k] for k in which)


def checked_options(df: pd.DataFrame, opts: Options) -> tuple[list[str], list[str], list[str]]:
    """Options ``rows`` (run keys of the aggregate), ``stats`` and ``across`` (["label"] or keys
    of ``rows``)."""
    keys = opts.str_list("rows", ["participation"])
    check_keys(df, keys, "rows", opts.target)
    stats = opts.str_list("stats", ["best", "final", "val_selected"])
    bad = [s for s in stats if s not in STATS]
    if bad:
        raise ReportError(
            f"option 'stats' of target {opts.target!r} has {bad}; use {', '.join(STATS)}"
        )
    across = opts.str_list("across", keys)
    if across != ["label"] and not set(across) <= set(keys):
        raise ReportError(
            f"option 'across' of target {opts.target!r} is {across}; give ['label'] or keys of "
            f"option 'rows' {keys}"
        )
    return keys, stats, across
