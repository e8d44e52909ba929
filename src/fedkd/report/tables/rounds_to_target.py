"""Layout ``rounds_to_target``: communication rounds until the target accuracy of the row's alpha."""

from __future__ import annotations

import pandas as pd

from fedkd.report.aggregate import ReportError
from fedkd.report.best_of import MARKS, best_of_option, mark, pick_best_of
from fedkd.report.cells import cell_text, highlight, make_cell
from fedkd.report.keys import check_keys, order_rows, selected_labels
from fedkd.report.options import Options
from fedkd.report.tables.common import (
    caption_and_label,
    csv_record,
    run_variants,
    table_cells,
    with_variant_note,
)
from fedkd.report.text import (
    Text,
    format_key_value,
    key_header,
    key_value,
    label_text,
)
from fedkd.report.writers import TableDoc


def build(df: pd.DataFrame, opts: Options) -> TableDoc:
    keys, targets = checked_options(df, opts)
    labels = selected_labels(df, opts)
    names, col_names = opts.mapping("row_names"), opts.mapping("column_names")
    ddof, decimals, marks = (
        opts.ddof(),
        opts.integer("decimals", 1, 0, 6),
        opts.boolean("highlight", True),
    )

    def rounds_of(rows, status):
        from fedkd import metrics

        r = metrics.rounds_to_target(rows, _target_for(rows, targets))
        return None if r is None else float(r)

    def make(runs):
        if runs:  # an alpha without a target is refused, whether its runs played a round or not
            _target_for(next(iter(runs.values())), targets)
        # reaching the target needs only the rounds up to it: a run that diverged later counts
        return make_cell(runs, rounds_of, ddof, partial_ok=True, none_means="not reached")

    # a tuned column (best_of) keeps per setting the variant that needs the fewest rounds
    df, chosen = pick_best_of(
        df, keys, opts, rounds_of, higher_better=False, partial_ok=True, by_validation=False
    )
    variants = run_variants(df)
    cells, rows = table_cells(df, keys, labels, make, opts, "rows")
    rows = order_rows(keys, rows, opts.mapping("order"))
    show_target = "alpha" in keys
    body, recs = [], []
    missed_any = False
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
            # every cell has each column, so the CSV's header does not depend on its cells
            extra = {"metric": "rounds_to_target", "target": target, "rounds_reached": ""}
            if cell.kind == "not reached":
                # the seeds that did reach T: "not reached (2 of 3)", their rounds in the CSV
                missed_any = True
                reached = [rounds_of(_first_rows(df, run, label), "") for run in cell.runs]
                reached = [int(r) for r in reached if r is not None]
                extra["rounds_reached"] = ";".join(str(r) for r in reached)
                if reached:
                    t = Text.plain(f"not reached ({len(reached)} of {len(cell.runs)})")
            t.style = styles.get(label, "")
            line.append(mark(t, label, chosen.get((row, label)), opts))
            extra["variant"] = chosen.get((row, label), "")
            if target is None and cell.runs:
                extra["target"] = _target_for(_first_rows(df, cell.runs[0], label), targets)
            recs.append(csv_record(keys, row, label, cell, extra, 1, variants))
        body.append(line)
    header = [key_header(k) for k in keys] + ([Text("$T$", "T")] if show_target else [])
    header += [label_text(lab, col_names) for lab in labels]
    caption, label = caption_and_label(opts)
    if best_of_option(opts):
        caption += (
            " Tuned columns show per setting the value of the grid that needs the fewest rounds "
            "("
            + "; ".join(
                f"{lab}: {', '.join(f'{MARKS[i]}: {v}' for i, v in enumerate(vs))}"
                for lab, vs in best_of_option(opts).items()
            )
            + ")."
        )
    if missed_any:
        caption += f" {NOT_REACHED_NOTE}"
    caption = with_variant_note(caption, df, keys, labels, col_names, best_of_option(opts))
    n_stub = len(keys) + int(show_target)
    return TableDoc(caption, label, header, body, n_stub, pd.DataFrame(recs))


NOT_REACHED_NOTE = (
    "Not reached: a seed never reached T in its rounds; (k of n): k of the cell's n seeds did "
    "(the CSV's rounds_reached lists their rounds)."
)


def checked_options(df: pd.DataFrame, opts: Options) -> tuple[list[str], dict[float, float]]:
    """Options ``rows`` (run keys of the aggregate) and ``targets``."""
    keys = opts.str_list("rows", ["alpha", "participation", "local_epochs"])
    check_keys(df, keys, "rows", opts.target)
    return keys, _targets(opts)


def _first_rows(df: pd.DataFrame, run: str, label: str) -> pd.DataFrame:
    return df[(df["run"] == run) & (df["label"] == label)]


def _targets(opts: Options) -> dict[float, float]:
    """Option ``targets``: alpha → target accuracy. Given as the config writes it, a list of
    {"alpha": a, "accuracy": t}, or as a mapping {"1.0": 0.8} (the command line's short form)."""
    raw = opts.values.get("targets")
    if not raw:
        raise ReportError(
            f"target {opts.target!r} needs option 'targets': a list of "
            '{"alpha": a, "accuracy": t} (t in 0-1), or a mapping such as {"1.0": 0.8, "0.1": 0.75}'
        )
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list) and all(
        isinstance(x, dict) and set(x) == {"alpha", "accuracy"} for x in raw
    ):
        pairs = [(x["alpha"], x["accuracy"]) for x in raw]
    else:
        raise ReportError(
            f"option 'targets' of target {opts.target!r} must be a list of "
            f'{{"alpha": a, "accuracy": t}} or a mapping alpha → t, got {raw!r}'
        )
    out = {}
    for k, v in pairs:
        try:
            alpha = float(k)
        except (TypeError, ValueError):
            raise ReportError(f"option 'targets' has alpha {k!r}, which is not a number") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise ReportError(
                f"option 'targets' maps alpha {k!r} to {v!r}; targets are accuracies in (0, 1], "
                f"e.g. 0.8 for 80%"
            )
        if alpha in out and out[alpha] != float(v):
            raise ReportError(
                f"option 'targets' gives alpha {alpha:g} two targets ({out[alpha]:g} and {v!r}); "
                "keep one"
            )
        out[alpha] = float(v)
    return out


def target_accuracies(target: str, options: dict) -> dict[float, float]:
    """alpha → target accuracy of output ``target``'s ``options`` ({} when it gives none), for
    the workflow's stop and the claims that read this table."""
    if not options.get("targets"):
        return {}
    return _targets(Options(target, {"targets": options["targets"]}, ("targets",)))


def _lookup_target(alpha, targets: dict[float, float]) -> float:
    # run keys and targets are both floats parsed from the same decimal text: equal exactly
    alpha = key_value(alpha)
    if alpha is not None and float(alpha) in targets:
        return targets[float(alpha)]
    raise ReportError(
        f"option 'targets' has no target for alpha {format_key_value('alpha', alpha, None)}; "
        f"it covers alpha {', '.join(f'{a:g}' for a in targets)}"
    )


def check_entry(where: str, entry: dict, points: list[dict]) -> list[str]:
    """Config check: a target accuracy for the alpha of every grid point (``points`` hold each
    point's resolved run keys), and no stop_at_acc of the configuration's that ends its runs
    before that target (a run's own stop_at_acc is kept over the table's)."""
    given: dict[float, float] = {}
    for x in (entry.get("options") or {}).get("targets", []):
        alpha = float(x["alpha"])
        if given.setdefault(alpha, x["accuracy"]) != x["accuracy"]:
            return [
                f"{where}.options.targets: alpha {alpha:g} is given two targets "
                f"({given[alpha]:g} and {x['accuracy']:g}); keep one"
            ]
    for point in points:
        alpha = point.get("alpha")
        if alpha is not None and float(alpha) not in given:
            return [f"{where}.options.targets: no target accuracy for alpha {alpha} of the grid"]
    errors = []
    for point in points:
        alpha, stop = point.get("alpha"), point.get("stop_at_acc")
        target = given[float(alpha)] if alpha is not None else max(given.values(), default=None)
        if stop is None or target is None or stop >= target:
            continue
        dataset = point["dataset"]
        of_alpha = "" if alpha is None else f" for alpha {alpha:g}"
        error = (
            f"{where}: its runs on {dataset} stop at stop_at_acc={stop:g} (defaults or "
            f"datasets.{dataset}), below the target accuracy {target:g}{of_alpha}; remove "
            f"stop_at_acc or raise it to at least {target:g}"
        )
        if error not in errors:
            errors.append(error)
    return errors


def _target_for(rows: pd.DataFrame, targets: dict[float, float]) -> float:
    return _lookup_target(rows["alpha"].iloc[0], targets)
