"""Layout ``at_rounds`` (FedGKD Table 6): the accuracy at given communication rounds, one row per
label."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pandas as pd

from fedkd.report.best_of import best_of_option, caption_note, mark, pick_best_of
from fedkd.report.cells import Cell, cell_text, highlight, make_cell
from fedkd.report.keys import check_keys, order_rows, selected_labels
from fedkd.report.options import Options
from fedkd.report.tables.common import (
    caption_and_label,
    csv_record,
    run_variants,
    stat_fn,
    table_cells,
    with_variant_note,
)
from fedkd.report.text import (
    Text,
    format_key_value,
    key_header,
    label_text,
)
from fedkd.report.writers import TableDoc

DEFAULT_ROUNDS = [10, 20, 50, 100]  # the rounds shown unless option rounds names others


def build(df: pd.DataFrame, opts: Options) -> TableDoc:
    rounds, keys = checked_options(df, opts)
    labels = selected_labels(df, opts)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    ddof, decimals, marks = (
        opts.ddof(),
        opts.integer("decimals", 2, 0, 6),
        opts.boolean("highlight", True),
    )

    # a sweep's variant is chosen once for every round shown (fallback: the best round)
    df, chosen = pick_best_of(df, keys, opts, stat_fn("best"))
    variants = run_variants(df)
    # accuracy at round r only needs rounds 1..r, so a run that diverged later still counts
    per_round = {}
    rows: list[tuple] = []
    for r in rounds:
        per_round[r], rows = table_cells(
            df, keys, labels, lambda runs, r=r: _at_round_cell(runs, r, ddof), opts, "rows",
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
                last = r == rounds[-1]  # one mark per line
                line.append(mark(t, label, chosen.get((row, label)), opts) if last else t)
                extra = {"round": r, "metric": "acc_at_round_pct"}
                extra["variant"] = chosen.get((row, label), "")
                recs.append(csv_record(keys, row, label, cell, extra, 100, variants))
            body.append(line)
    header = [key_header(k) for k in keys] + [Text("Method", "Method")]
    header += [Text(str(r), str(r)) for r in rounds]
    groups = [(Text("", ""), len(keys) + 1), (Text.plain("Test accuracy at round"), len(rounds))]
    caption, label = caption_and_label(opts)
    note = caption_note(opts, "the best round")
    caption = f"{caption} {note[0].upper() + note[1:]}" if note else caption
    caption = with_variant_note(caption, df, keys, labels, col_names, best_of_option(opts))
    return TableDoc(caption, label, header, body, len(keys) + 1, pd.DataFrame(recs), groups=groups)


def checked_options(df: pd.DataFrame, opts: Options) -> tuple[list[int], list[str]]:
    """Options ``rounds`` and ``rows`` (run keys of the aggregate)."""
    rounds = opts.num_list("rounds", DEFAULT_ROUNDS, integer=True)
    keys = opts.str_list("rows", [])
    check_keys(df, keys, "rows", opts.target)
    return rounds, keys


def shorter_than(planned_rounds: Iterable[int], r: int) -> bool:
    """Runs of these planned rounds have no round ``r``: their cell at ``r`` shows "–"."""
    return all(int(p) < r for p in planned_rounds)


def check_entry(where: str, entry: dict, points: list[dict]) -> list[str]:
    """Config check: each round shown is one some run of the table reaches (``points`` hold each
    point's resolved run keys); a round past every run's last would be "–" in every row."""
    rounds = (entry.get("options") or {}).get("rounds", DEFAULT_ROUNDS)
    planned = [int(p["rounds"]) for p in points]
    past = [r for r in rounds if planned and shorter_than(planned, r)]
    if not past:
        return []
    what = f"round {past[0]} is" if len(past) == 1 else f"rounds {', '.join(map(str, past))} are"
    last = max(planned)
    return [
        f"{where}.options.rounds: {what} past the last round of every run of the table "
        f"({last}); give rounds up to {last}, or runs of more rounds in its grid"
    ]


def _at_round_cell(runs: dict | None, r: int, ddof: int) -> Cell:
    if runs and shorter_than((rows["rounds_planned"].iloc[0] for rows in runs.values()), r):
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
