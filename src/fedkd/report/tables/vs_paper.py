"""Layout ``vs_paper``: a table's reproduced cells beside the paper's own numbers
(fedkd/report/paper_values.yaml), like against like.

A paper cell is matched to the runs whose label is its ``method`` and whose run keys equal its
settings (dataset through the stand-in mapping: mnist5k standing in for CIFAR-10 answers for the
paper's CIFAR-10 cells). Cells with no such runs are left out (the caption counts them). How a row
is compared depends on the data it ran on:

- on the paper's own dataset: the paper's value, the reproduced mean ± std over seeds, their
  difference, the seed range (min..max), and whether the difference is within two of the paper's
  standard deviations (the bar of the reproduction; a cell the paper gives without one is not
  judged); a mean over fewer seeds than the other rows' is marked ‡, as in the table itself;
- on a stand-in: its accuracy is not the paper's, so the row is compared through the methods of
  its setting (the paper table's row): each method's rank among them (1 = best) and its gap to
  FedAvg (else to the setting's first method), beside the paper's rank and gap; the caption counts
  the method pairs ordered as in the paper. A stand-in's dataset counts (Table 2) are not
  compared.

The quantity follows the paper table: best or final accuracy (``stat``), accuracy at a round
(``round``), rounds to a target (``target_accuracy``: fewer is better), a dataset count
(``quantity``), else option ``stat``. On a stand-in, a table that shows other rounds than the
paper's (option ``rounds`` of an ``at_rounds`` table: shorter runs, the paper's rounds scaled by
one factor) answers the paper's rounds in order with its own, and a rounds-to-target table's
``targets`` (scaled to the stand-in) answer the paper's target at each alpha.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from fedkd.collapse import MARK
from fedkd.report.aggregate import ReportError
from fedkd.report.best_of import pick_best_of
from fedkd.report.cells import SHORT_MARK, Cell, make_cell, mark_short_cells
from fedkd.report.keys import group_runs
from fedkd.report.names import display_name, paper_dataset_name
from fedkd.report.options import Options
from fedkd.report.tables import common
from fedkd.report.tables.common import STAT_NAMES, STATS, caption_and_label, stat_fn
from fedkd.report.tables.rounds_to_target import target_accuracies
from fedkd.report.text import DASH, Text, format_key_value, key_value
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
    stat = opts.choice("stat", STATS, "best")
    ddof, decimals = opts.ddof(), opts.integer("decimals", 2, 0, 6)
    rounds_here = round_map(table["cells"], opts.num_list("rounds", [], integer=True))
    targets_here = target_accuracies(opts.target, {"targets": opts.values.get("targets")})

    compared, left_out, not_compared = [], [], 0
    variants = common.run_variants(df)
    for cell in table["cells"]:
        dataset = cell.get("dataset")
        used = stand_ins.get(dataset, dataset)
        relative = used != dataset
        if relative and cell.get("quantity") is not None:
            not_compared += 1  # a stand-in's size or class count says nothing about the paper's
            continue
        if cell.get("round") is not None:  # on the paper's own dataset, its own rounds
            r = int(cell["round"])
            cell = {**cell, "round_here": rounds_here.get(r, r) if relative else r}
        alpha = cell.get("alpha")
        if relative and cell.get("target_accuracy") is not None and alpha is not None:
            cell = {**cell, "target_here": targets_here.get(float(alpha), cell["target_accuracy"])}
        value, scale, partial, none_means = _quantity(cell, stat)
        runs = _matching_runs(df, cell, used, opts, value, partial)
        got = make_cell(runs, value, ddof, partial_ok=partial, none_means=none_means)
        if got.kind == "missing":
            left_out.append(cell)
            continue
        compared.append((cell, used, got, scale, relative, common.cell_variant(got, variants)))
    mark_short_cells([got for _, _, got, *_ in compared])
    recs = [_record(*args) for args in compared]
    _rank_and_gap(recs)
    body = [_line(rec, decimals) for rec in recs]
    header, keep, groups = _columns(recs)
    body = [[line[i] for i in keep] for line in body]

    caption, label = caption_and_label(opts)
    about = [f"Source: {table['source']}."]
    n = len(table["cells"])
    about.append(f"{len(recs)} of the paper's {n} cells have runs here.")
    if left_out:
        about.append(
            f"Left out: the {len(left_out)} cells with no run ({_missing_text(left_out)})."
        )
    if not_compared:
        about.append(f"The stand-ins' {not_compared} dataset counts are not compared.")
    stood_in = {(r["paper_dataset"], r["dataset"]) for r in recs if r["comparison"] == RELATIVE}
    if stood_in:
        pairs = ", ".join(f"{d} for {paper_dataset_name(p)}" for p, d in sorted(stood_in))
        agree = pair_agreement(pd.DataFrame(recs))
        about.append(
            f"Stand-in rows ({pairs}): a stand-in's accuracy is not the paper's, so these rows "
            "compare the methods of each setting: their rank (1 = best) and their gap to "
            f"{_reference_text(recs)}, beside the paper's; "
            f"{agree['concordant']} of {agree['pairs']} method pairs are ordered as in the paper"
            + (
                f", and {agree['same_side']} of {agree['sided']} methods lie on the same side of "
                "the reference as in the paper."
                if agree["sided"] else "."
            )
        )  # fmt: skip
        for dataset in sorted({d for _, d in stood_in}):
            papers = sorted(paper_dataset_name(p) for p, d in stood_in if d == dataset)
            if len(papers) > 1:
                about.append(
                    f"{dataset} stands in for {' and '.join(papers)}: its runs are set beside "
                    "each, so its method pairs count once for each."
                )
    absolute = [r for r in recs if r["comparison"] == ABSOLUTE and r["status"] == "ok"]
    if absolute:
        judged = [r for r in absolute if r["within_2sd"] is not None]
        within = sum(bool(r["within_2sd"]) for r in judged)
        unjudged = len(absolute) - len(judged)
        about.append(
            f"On the paper's own datasets, {within} of {len(judged)} reproduced means lie within "
            "two of the paper's standard deviations of its value (Within 2σ)"
            + (
                f"; {unjudged} paper values given without a deviation are not judged."
                if unjudged else "."
            )
        )  # fmt: skip
    other = common.variant_mismatch_note(recs)
    if other:
        about.append(other)
    contradictions = [
        re.sub(r"^\s*contradiction:\s*", "", n, flags=re.I)
        for n in table["notes"]
        if n.lstrip().lower().startswith("contradiction")
    ]
    if contradictions:
        about.append("The paper contradicts itself: " + " ".join(contradictions))
    csv = pd.DataFrame(recs, columns=CSV_COLUMNS)
    doc = TableDoc(" ".join([caption, *about]), label, header, body, 2, csv, groups=groups)
    doc.blank_repeats = True
    return doc


def round_map(cells: list[dict], rounds: list[int]) -> dict[int, int]:
    """{the paper's round: the table's round answering it}: the paper's rounds in order onto
    ``rounds`` (the table's option), where it names as many, each the paper's scaled by one
    factor (10/20/50/100 onto 1/2/5/10); else each round answers itself."""
    paper = sorted({int(c["round"]) for c in cells if c.get("round") is not None})
    if not rounds or len(rounds) != len(paper):
        return {}
    pairs = list(zip(paper, sorted(rounds), strict=True))
    p0, t0 = pairs[0]
    # one factor for every pair (t / p = t0 / p0, in integers)
    return dict(pairs) if all(t * p0 == t0 * p for p, t in pairs) else {}


RELATIVE, ABSOLUTE = "relative", "absolute"
# the settings that make a paper table's row (the methods of one setting are ranked together; a
# buffer length M is a method of Tables 7 and 8, whose cells name it "M=5", as the claims read it)
SETTING_KEYS = ("dataset", *MATCH_KEYS, "round", "stat", "target_accuracy", "quantity")
CSV_COLUMNS = [
    "setting", "cell", "method", "method_name", "variant", "paper_variant", "paper_dataset",
    "dataset", "comparison", "alpha", "participation", "local_epochs", "round", "round_here",
    "target_accuracy", "target_here", "stat", "paper_mean", "paper_std", "mean", "std", "min",
    "max", "difference", "within_2sd", "reference", "paper_rank", "rank", "paper_gap", "gap",
    "same_side", "n_seeds", "seeds", "missing_seeds", "status", "unit", "collapsed",
]  # fmt: skip


def paper_setting_text(cell: dict, dataset: str | None = None) -> str:
    """The paper table's row of a cell, in the paper's words: "CIFAR-10, α=1 (run on mnist5k)"."""
    parts = []
    if cell.get("dataset") is not None:
        parts.append(paper_dataset_name(cell["dataset"]))
    names = {"alpha": "α", "participation": "C", "local_epochs": "E"}
    for k in SETTING_KEYS[1:]:
        v = cell.get(k)
        if v is None:
            continue
        if k in names:
            parts.append(f"{names[k]}={format_key_value(k, v, None)}")
        elif k == "round":
            parts.append(f"round {v}")
        elif k == "target_accuracy":
            parts.append(f"rounds to {float(v) * 100:g}%")
        elif k == "stat":
            parts.append(STAT_NAMES.get(v, str(v)))
        elif k == "quantity":
            parts.append(str(v).replace("_", " "))
        else:
            parts.append(format_key_value(k, v, {}))
    text = ", ".join(parts) or "–"
    here = []
    if dataset and dataset != cell.get("dataset"):
        here.append(f"run on {dataset}")
    if cell.get("round_here") not in (None, cell.get("round")):
        here.append(f"at its round {cell['round_here']}")
    if cell.get("target_here") not in (None, cell.get("target_accuracy")):
        here.append(f"to its {float(cell['target_here']) * 100:g}%")
    return f"{text} ({', '.join(here)})" if here else text


def _missing_text(cells: list[dict]) -> str:
    """The paper's settings of the cells left out (their datasets, where they are many), and
    their methods where they are few."""
    settings = list(dict.fromkeys(paper_setting_text(c) for c in cells))
    where = "; ".join(settings)
    if len(settings) > 4:
        where = ", ".join(dict.fromkeys(paper_dataset_name(c.get("dataset")) for c in cells))
    methods = list(dict.fromkeys(display_name(str(c["method"])) for c in cells if c.get("method")))
    return f"{where}; {', '.join(methods)}" if methods and len(methods) < 4 else where


def _record(cell: dict, dataset, got: Cell, scale: float, relative: bool, variant: str) -> dict:
    ok = got.kind == "value"
    lo = min(got.values) * scale if ok else math.nan
    hi = max(got.values) * scale if ok else math.nan
    paper = float(cell["mean"])
    absolute = ok and not relative
    paper_std = cell.get("std")
    difference = got.mean * scale - paper if absolute else math.nan
    return {
        "setting": paper_setting_text(cell, dataset),
        "cell": cell["cell"],
        "method": cell.get("method", ""),
        "method_name": display_name(str(cell.get("method", ""))) if cell.get("method") else "",
        # the variant the runs are, and the one the paper's cell was measured with
        "variant": variant,
        "paper_variant": cell.get("variant", ""),
        "paper_dataset": cell.get("dataset", ""),
        "dataset": dataset or "",
        "comparison": RELATIVE if relative else ABSOLUTE,
        **{k: cell.get(k) for k in ("alpha", "participation", "local_epochs", "round", "stat")},
        "round_here": cell.get("round_here"),
        "target_accuracy": cell.get("target_accuracy"),
        "target_here": cell.get("target_here"),
        "paper_mean": paper,
        "paper_std": cell.get("std"),
        "mean": got.mean * scale if ok else math.nan,
        "std": got.std * scale if ok else math.nan,
        "min": lo,
        "max": hi,
        # absolute numbers are compared only on the paper's own dataset
        "difference": difference,
        # None: not judged (a stand-in's row, or a paper cell given without a deviation)
        "within_2sd": None
        if not absolute or paper_std is None
        else bool(abs(difference) <= 2 * float(paper_std)),
        "reference": "",
        "paper_rank": math.nan,
        "rank": math.nan,
        "paper_gap": math.nan,
        "gap": math.nan,
        "same_side": math.nan,
        "n_seeds": got.n if ok else 0,
        "seeds": ";".join(str(s) for s in got.seeds),
        "missing_seeds": ";".join(str(s) for s in got.missing_seeds),
        "status": "ok" if ok else got.kind,
        "unit": _unit(cell),
        "_shown": got.text() if not ok else "",
        "collapsed": len(got.collapsed),  # runs that stayed at chance (fedkd.collapse)
    }


def _higher_is_better(unit: str) -> bool:
    return unit == "points"


def _rank_and_gap(recs: list[dict]) -> None:
    """Rank the methods of each setting (those with a value, 1 = best) in the paper and here, and
    give each its gap to the reference method: FedAvg where the setting has it, else its first."""
    for members in _by_setting(recs).values():
        valued = [r for r in members if r["status"] == "ok" and r["method"]]
        if len(valued) < 2 or valued[0]["unit"] not in ("points", "rounds"):
            continue
        sign = 1.0 if _higher_is_better(valued[0]["unit"]) else -1.0
        for key, rank_key in (("paper_mean", "paper_rank"), ("mean", "rank")):
            for r in valued:
                r[rank_key] = 1 + sum(sign * (o[key] - r[key]) > 0 for o in valued)
        ref = next((r for r in valued if r["method"] == "fedavg"), valued[0])
        for r in valued:
            r["reference"] = ref["method"]
            r["paper_gap"] = r["paper_mean"] - ref["paper_mean"]
            r["gap"] = r["mean"] - ref["mean"]
            if r is not ref and r["paper_gap"] != 0:
                r["same_side"] = bool(r["gap"] * r["paper_gap"] > 0)


def _by_setting(recs) -> dict[str, list]:
    groups: dict[str, list] = {}
    for r in recs:
        groups.setdefault(r["setting"], []).append(r)
    return groups


def pair_agreement(df: pd.DataFrame) -> dict[str, int]:
    """Over the stand-in rows of a comparison (its records or CSV): method pairs of a setting
    ordered as in the paper (``concordant`` of ``pairs``; pairs the paper ties are not counted),
    and methods on the same side of the reference as in the paper (``same_side`` of
    ``sided``)."""
    out = {"concordant": 0, "pairs": 0, "same_side": 0, "sided": 0}
    if df.empty or "comparison" not in df.columns:
        return out
    rows = df[(df["comparison"] == RELATIVE) & (df["status"] == "ok")]
    rows = rows[rows["paper_rank"].notna()]
    for _, group in rows.groupby("setting", sort=False):
        paper, here = group["paper_mean"].to_numpy(float), group["mean"].to_numpy(float)
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                if paper[i] == paper[j]:
                    continue
                out["pairs"] += 1
                out["concordant"] += int((paper[i] - paper[j]) * (here[i] - here[j]) > 0)
        sided = group["same_side"].dropna()
        out["sided"] += len(sided)
        out["same_side"] += int(sided.astype(bool).sum())
    return out


def _reference_text(recs: list[dict]) -> str:
    refs = {r["reference"] for r in recs if r["reference"]}
    return display_name(refs.pop()) if len(refs) == 1 else "the setting's first method"


def _matching_runs(df: pd.DataFrame, cell: dict, dataset: str | None, opts: Options, value,
                   partial: bool):  # fmt: skip
    """{run: rows} for the paper cell (the chosen variant of a best_of column, tuned on
    ``value``, the cell's quantity of a run; ``partial``: as _quantity says), or None."""
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
    # as the paper's table tunes: accuracy on validation, rounds to a target by the fewest rounds
    accuracy = _unit(cell) == "points"
    rows, _ = pick_best_of(
        rows, [], opts, value, higher_better=accuracy, partial_ok=partial, by_validation=accuracy
    )
    groups = group_runs(rows, [])
    return groups.get((), {}).get(method)


def _quantity(cell: dict, stat: str):
    """(value of a run, display scale, whether rounds after it may be missing or diverged, what a
    run without a value shows)."""
    from fedkd import metrics

    if cell.get("quantity") is not None:
        column = cell["quantity"]

        def count(rows, status):
            v = key_value(rows[column].iloc[0]) if column in rows else None
            return None if v is None else float(v)

        return count, 1.0, True, "not recorded"
    if cell.get("round") is not None:
        r = int(cell.get("round_here", cell["round"]))

        def at_round(rows, status):
            return metrics.accuracy_at_round(rows, r) if (rows["round"] == r).any() else None

        return at_round, 100.0, True, f"no round {r}"
    if cell.get("target_accuracy") is not None:
        target = float(cell.get("target_here", cell["target_accuracy"]))

        def rounds(rows, status):
            found = metrics.rounds_to_target(rows, target)
            return None if found is None else float(found)

        return rounds, 1.0, True, "not reached"
    return stat_fn(cell.get("stat") or stat), 100.0, False, "missing"


def _unit(cell: dict) -> str:
    """What a cell's numbers count: accuracy points, rounds, or the dataset quantity."""
    if cell.get("quantity") is not None:
        return str(cell["quantity"])
    return "rounds" if cell.get("target_accuracy") is not None else "points"


# the table's columns: (header, when shown, the upper header over it); a "when" is shown when any
# row fills it
COLUMNS = (
    ("Setting", "key", ""), ("Method", "key", ""),
    ("paper", "rank", "Rank"), ("here", "rank", "Rank"),
    ("paper", "rank", "Gap to {ref}"), ("here", "rank", "Gap to {ref}"),
    ("Paper", "value", "{value}"), ("Reproduced", "value", "{value}"),
    ("Difference", "absolute", ""), ("Seed range", "absolute", ""), ("Within 2σ", "absolute", ""),
)  # fmt: skip


def _columns(recs: list[dict]) -> tuple[list[Text], list[int], list[tuple[Text, int]]]:
    """The headers of the columns shown, their indices in COLUMNS, and the upper header row."""
    shown = {"key", "value"}
    if any(not math.isnan(r["paper_rank"]) for r in recs):
        shown.add("rank")
    if any(r["comparison"] == ABSOLUTE and r["status"] == "ok" for r in recs):
        shown.add("absolute")
    keep = [i for i, (_, when, _) in enumerate(COLUMNS) if when in shown]
    ref = _reference_text(recs)
    groups: list[tuple[Text, int]] = []
    for i in keep:
        text = COLUMNS[i][2].format(ref=ref, value=_value_header(recs))
        if groups and groups[-1][0].md == text and text:
            groups[-1] = (groups[-1][0], groups[-1][1] + 1)
        else:
            groups.append((Text.plain(text), 1))
    return [Text.plain(COLUMNS[i][0]) for i in keep], keep, groups


def _value_header(recs: list[dict]) -> str:
    """What the value columns hold: accuracy, rounds to a target, or (mixed) values."""
    units = {r["unit"] for r in recs}
    if units == {"points"}:
        return "Accuracy (%)"
    return "Rounds to target" if units == {"rounds"} else "Value"


def _line(rec: dict, decimals: int) -> list[Text]:
    def num(v: float) -> str:
        return f"{v:.{decimals}f}"

    def opt(v: float, fmt) -> str:
        return DASH if isinstance(v, float) and math.isnan(v) else fmt(v)

    paper_std = rec["paper_std"]
    paper = num(rec["paper_mean"]) + (f" ± {num(paper_std)}" if paper_std is not None else "")
    ok = rec["status"] == "ok"
    # one seed: no spread to show
    std = "" if not ok or math.isnan(rec["std"]) or rec["n_seeds"] < 2 else f" ± {num(rec['std'])}"
    mark = (MARK if rec["collapsed"] else "") + (SHORT_MARK if rec["missing_seeds"] else "")
    reproduced = num(rec["mean"]) + std + mark if ok else rec["_shown"]
    reference = rec["method"] == rec["reference"]
    absolute = ok and rec["comparison"] == ABSOLUTE
    texts = [
        rec["setting"],
        rec["method_name"] or DASH,
        opt(rec["paper_rank"], lambda v: f"{v:g}"),
        opt(rec["rank"], lambda v: f"{v:g}"),
        "reference" if reference else opt(rec["paper_gap"], lambda v: f"{v:+.{decimals}f}"),
        "reference" if reference else opt(rec["gap"], lambda v: f"{v:+.{decimals}f}"),
        paper,
        reproduced,
        f"{rec['difference']:+.{decimals}f}" if absolute else DASH,
        f"{num(rec['min'])}..{num(rec['max'])}" if absolute else DASH,
        DASH if not absolute or rec["within_2sd"] is None else "yes" if rec["within_2sd"] else "no",
    ]
    return [Text.plain(t) for t in texts]


def check_entry(where: str, entry: dict, points: list[dict]) -> list[str]:
    """Config check: option paper names a transcribed paper table."""
    from fedkd.report.paper_values import load_paper_values

    key = (entry.get("options") or {}).get("paper")
    if key not in load_paper_values():
        return [f"{where}.options.paper: {key!r} is not a paper table of paper_values.yaml"]
    return []
