"""Layout ``vs_paper``: a table's reproduced cells beside the paper's own numbers
(fedkd/report/paper_values.yaml), one row per printed paper cell.

Columns: the paper's value, the reproduced mean ± std over seeds, their difference, the seed range
(min..max) and whether the paper value lies within it. A paper cell is matched to the runs whose
label is its ``method`` and whose run keys equal its settings (dataset through the stand-in
mapping: mnist5k standing in for CIFAR-10 answers for the paper's CIFAR-10 cells); a cell with no
such runs shows "–". The quantity follows the paper table: best or final accuracy (``stat``),
accuracy at a round (``round``), rounds to a target (``target_accuracy``), a dataset count
(``quantity``), else option ``stat``.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from fedkd.collapse import MARK
from fedkd.report.aggregate import ReportError
from fedkd.report.best_of import pick_best_of
from fedkd.report.cells import Cell, make_cell
from fedkd.report.keys import group_runs
from fedkd.report.options import Options
from fedkd.report.tables.common import STATS, caption_and_label, stat_fn
from fedkd.report.text import DASH, Text, key_value
from fedkd.report.writers import TableDoc

# run keys a paper cell may fix, besides dataset and method
MATCH_KEYS = ("alpha", "partition", "shards", "participation", "local_epochs")


def paper_dataset_key(name: str) -> str:
    """The registry's spelling of a paper dataset name: CIFAR-10 → cifar10."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def stand_in_map(stand_ins: dict) -> dict[str, str]:
    """{paper dataset: the dataset standing in for it} from config ``stand_ins`` ({mnist5k:
    "CIFAR-10", synthtext: "AG News and SST-5"})."""
    out = {}
    for dataset, names in stand_ins.items():
        for name in re.split(r",| and | / ", str(names)):
            if name.strip():
                out[paper_dataset_key(name)] = (dataset, name.strip())
    return out


def build(df: pd.DataFrame, opts: Options) -> TableDoc:
    from fedkd.report.paper_values import PaperValuesError, load_paper_values

    key = opts.text("paper", "")
    try:
        table = load_paper_values()[key]
    except KeyError:
        known = ", ".join(load_paper_values())
        raise ReportError(
            f"option 'paper' of target {opts.target!r} is {key!r}; give one of: {known}"
        ) from None
    except PaperValuesError as exc:
        raise ReportError(str(exc)) from exc
    stand_ins = {p: d for p, (d, _) in stand_in_map(opts.mapping("stand_ins")).items()}
    shown = {p: n for p, (_, n) in stand_in_map(opts.mapping("stand_ins")).items()}
    stat = opts.choice("stat", STATS, "best")
    ddof, decimals = opts.ddof(), opts.integer("decimals", 2, 0, 6)

    body, recs = [], []
    for cell in table["cells"]:
        dataset = cell.get("dataset")
        used = stand_ins.get(dataset, dataset)
        runs = _matching_runs(df, cell, used, opts)
        value, scale, partial = _quantity(cell, stat)
        got = make_cell(runs, value, ddof, partial_ok=partial, none_means="not reached")
        rec = _record(cell, used, got, scale)
        recs.append(rec)
        body.append(_line(cell, used, rec, got, decimals))
    n = len(recs)
    reproduced = sum(r["status"] == "ok" for r in recs)
    within = sum(bool(r["within_range"]) for r in recs)
    caption, label = caption_and_label(opts)
    about = (
        f" {reproduced} of {n} paper cells have reproduced runs; {within} of them lie within the "
        "reproduced seed range (min..max over seeds)."
    )
    if stand_ins and any(d != p for p, d in stand_ins.items()):
        pairs = ", ".join(f"{d} for {shown[p]}" for p, d in stand_ins.items())
        about += (
            f" The datasets differ: {pairs}; the differences measure the stand-in set-up, not the "
            "method."
        )
    contradictions = [
        re.sub(r"^\s*contradiction:\s*", "", n, flags=re.I)
        for n in table["notes"]
        if n.lstrip().lower().startswith("contradiction")
    ]
    if contradictions:
        about += " The paper contradicts itself: " + " ".join(contradictions)
    header = [
        Text.plain(h)
        for h in ("Paper cell", "Method", "Run on", "Paper", "Reproduced", "Difference",
                  "Seed range", "Within")
    ]  # fmt: skip
    doc = TableDoc(
        f"{caption} Source: {table['source']}.{about}", label, header, body, 3, pd.DataFrame(recs)
    )
    doc.blank_repeats = False
    return doc


def _matching_runs(df: pd.DataFrame, cell: dict, dataset: str | None, opts: Options):
    """{run: rows} for the paper cell (the chosen variant of a best_of column), or None."""
    method = cell.get("method")
    if method is None or df.empty:
        return None
    rows = df[df["label"] == method]
    if dataset is not None:
        rows = rows[rows["dataset"] == dataset]
    for k in MATCH_KEYS:
        if cell.get(k) is not None and k in rows.columns:
            want = cell[k]
            if isinstance(want, (int, float)):
                rows = rows[rows[k].astype("float64") == float(want)]
            else:
                rows = rows[rows[k] == want]
    if rows.empty:
        return None
    value, _, partial = _quantity(cell, opts.choice("stat", STATS, "best"))
    rows, _ = pick_best_of(rows, [], opts, value, partial_ok=partial)
    groups = group_runs(rows, [])
    return groups.get((), {}).get(method)


def _quantity(cell: dict, stat: str):
    """(value of a run, display scale, whether rounds after it may be missing or diverged)."""
    from fedkd import metrics

    if cell.get("quantity") is not None:
        column = cell["quantity"]

        def count(rows, status):
            v = key_value(rows[column].iloc[0]) if column in rows else None
            return None if v is None else float(v)

        return count, 1.0, True
    if cell.get("round") is not None:
        r = int(cell["round"])

        def at_round(rows, status):
            return metrics.accuracy_at_round(rows, r) if (rows["round"] == r).any() else None

        return at_round, 100.0, True
    if cell.get("target_accuracy") is not None:
        target = float(cell["target_accuracy"])

        def rounds(rows, status):
            found = metrics.rounds_to_target(rows, target)
            return None if found is None else float(found)

        return rounds, 1.0, True
    return stat_fn(cell.get("stat") or stat), 100.0, False


def _record(cell: dict, dataset, got: Cell, scale: float) -> dict:
    ok = got.kind == "value"
    lo = min(got.values) * scale if ok else math.nan
    hi = max(got.values) * scale if ok else math.nan
    paper = float(cell["mean"])
    rec = {
        "cell": cell["cell"],
        "method": cell.get("method", ""),
        "paper_dataset": cell.get("dataset", ""),
        "dataset": dataset or "",
        **{k: cell.get(k) for k in ("alpha", "participation", "local_epochs", "round", "stat")},
        "paper_mean": paper,
        "paper_std": cell.get("std"),
        "mean": got.mean * scale if ok else math.nan,
        "std": got.std * scale if ok else math.nan,
        "min": lo,
        "max": hi,
        "difference": got.mean * scale - paper if ok else math.nan,
        "within_range": bool(ok and lo <= paper <= hi),
        "n_seeds": got.n if ok else 0,
        "seeds": ";".join(str(s) for s in got.seeds),
        "status": "ok" if ok else got.kind,
        "unit": _unit(cell),
        "collapsed": len(got.collapsed),  # runs that stayed at chance (fedkd.collapse)
    }
    return rec


def _unit(cell: dict) -> str:
    """What a cell's numbers count: accuracy points, rounds, or the dataset quantity."""
    if cell.get("quantity") is not None:
        return str(cell["quantity"])
    return "rounds" if cell.get("target_accuracy") is not None else "points"


def _line(cell: dict, dataset, rec: dict, got: Cell, decimals: int) -> list[Text]:
    def num(v: float) -> str:
        return f"{v:.{decimals}f}"

    paper = num(rec["paper_mean"]) + (
        f" ± {num(cell['std'])}" if cell.get("std") is not None else ""
    )
    if rec["status"] != "ok":
        shown = [got.text() if got.kind != "missing" else DASH, DASH, DASH, DASH]
    else:
        # one seed: no spread to show
        std = "" if math.isnan(rec["std"]) or rec["n_seeds"] < 2 else f" ± {num(rec['std'])}"
        shown = [
            num(rec["mean"]) + std + (MARK if got.collapsed else ""),
            f"{rec['difference']:+.{decimals}f}",
            f"{num(rec['min'])}..{num(rec['max'])}",
            "yes" if rec["within_range"] else "no",
        ]
    texts = [cell["cell"], str(cell.get("method", "")), dataset or DASH, paper, *shown]
    return [Text.plain(t) for t in texts]


def check_entry(where: str, entry: dict, points: list[dict]) -> list[str]:
    """Config check: option paper names a transcribed paper table."""
    from fedkd.report.paper_values import load_paper_values

    key = (entry.get("options") or {}).get("paper")
    if key not in load_paper_values():
        return [f"{where}.options.paper: {key!r} is not a paper table of paper_values.yaml"]
    return []
