"""Layout ``claims``: every claim of the registry with a verdict per setting of the runs that
check it. Drawn from one aggregate of the runs of the configuration's other tables, each run's
label prefixed with its table ("table3/fedgkd"), and from option ``sources`` (per table: its
paper key, layout, options and best_of columns), which the workflow fills in."""

from __future__ import annotations

import math

import pandas as pd

from fedkd.report.aggregate import SETTING_KEYS, ReportError
from fedkd.report.best_of import pick_best_of
from fedkd.report.claims import all_claims
from fedkd.report.claims.claim import Claim
from fedkd.report.claims.verdict import LEVEL, VERDICTS, paired_verdict
from fedkd.report.keys import check_same_setting, group_runs, order_rows
from fedkd.report.names import display_name
from fedkd.report.options import Options
from fedkd.report.tables.at_rounds import DEFAULT_ROUNDS
from fedkd.report.tables.common import caption_and_label
from fedkd.report.text import DASH, Text, key_value
from fedkd.report.writers import TableDoc

# the run keys that make a setting: the aggregate's setting keys but those of the method (the
# claims compare methods within a setting); runs of one setting differ only in method and seed
METHOD_KEYS = ("strategy", "params", "variant", "model")
SETTING = [k for k in SETTING_KEYS if k not in METHOD_KEYS]
DECIMALS = {"pp": 2, "rounds": 1, "F": 3}
CSV_COLUMNS = [
    "claim", "paper", "statement", "source", "quote", "table", "setting", "dataset",
    "stand_in_for", "metric", "unit", "direction", "n", "seeds", "effect", "sd", "ci_low",
    "ci_high", "verdict", "seeds_needed", "note",
]  # fmt: skip

METHOD_NOTE = (
    "Each row pairs the claim's two methods by seed within one setting: runs with the same seed "
    "share their data partition, so the per-seed difference (first method − second) removes what "
    "the partition does to both. Effect: the mean of those differences; 95% interval: the paired "
    "t-interval, mean ± t(n−1, 0.975)·sd/√n, the one interval 2–3 seeds allow (no rank test or "
    "bootstrap reaches 95% with so few) and wide with them. holds: the interval lies entirely on "
    "the claimed side of 0; contradicted: entirely on the other; inconclusive: it contains 0, or "
    "one seed gives no interval; not run: the configuration has no runs for the claim. Seeds to "
    "resolve (inconclusive rows): the smallest n with t(n−1, 0.975)·sd/√n < |effect| at the "
    "observed spread. Units: pp = percentage points of test accuracy; rounds; F = forgetting. "
    "No correction for multiple comparisons: where two methods do not differ, 1 row in 20 "
    "still holds or is contradicted by chance."
)


def build(df: pd.DataFrame, opts: Options) -> TableDoc:
    sources = opts.mapping("sources")
    stand_ins = {str(k): str(v) for k, v in opts.mapping("stand_ins").items()}
    runs = split_labels(df)
    records: list[dict] = []
    for claim in all_claims():
        records += claim_records(claim, runs, sources, stand_ins)
    caption, label = caption_and_label(opts)
    caption = f"{caption.rstrip()} {METHOD_NOTE} {summary(records)}".strip()
    header = [
        Text.plain(h)
        for h in ("Claim", "Source", "Setting", "n", "Effect", f"{LEVEL:.0%} CI", "Verdict",
                  "Seeds to resolve")
    ]  # fmt: skip
    body = [_line(r) for r in records]
    notes = [f"{c.id}: {c.statement}. {c.source}: “{c.quote}”" for c in all_claims()]
    csv = pd.DataFrame(records, columns=CSV_COLUMNS)
    csv["seeds_needed"] = csv["seeds_needed"].astype("Int64")  # a count: "4", not "4.0"
    return TableDoc(caption, label, header, body, 3, csv, blank_repeats=False, notes=notes)


def split_labels(df: pd.DataFrame) -> pd.DataFrame:
    """The aggregate with its "table/label" labels split into columns ``table`` and ``label``."""
    bad = sorted({lab for lab in df["label"].unique() if "/" not in str(lab)})
    if bad:
        raise ReportError(
            f"the claims aggregate has labels {bad} without their table ('table3/fedgkd'); build "
            "it through the workflow (the entry's runs are its sources' runs)"
        )
    parts = df["label"].astype(str).str.split("/", n=1, expand=True)
    return df.assign(table=parts[0], label=parts[1])


# --------------------------------------------------------------------------- one claim
def claim_records(claim: Claim, df: pd.DataFrame, sources: dict, stand_ins: dict) -> list[dict]:
    """The claim's rows: one per setting (and round or target) of every table that holds both of
    its methods' runs; one "not run" row when none does."""
    out: list[dict] = []
    tables = [
        name for name, info in sources.items()
        if claim.selects(name, info.get("paper"), str(info.get("layout", "")))
    ]  # fmt: skip
    for name in tables:
        rows = df[(df["table"] == name) & df["label"].isin([claim.treatment, claim.baseline])]
        if set(rows["label"]) == {claim.treatment, claim.baseline}:
            out += _table_records(claim, name, sources[name], rows, stand_ins)
    if out:
        return out
    if tables and any(
        set(df.loc[df["table"] == t, "label"]) >= {claim.treatment, claim.baseline} for t in tables
    ):
        where = ", ".join(f"{k} in {list(v)}" for k, v in claim.where.items())
        why = f"no setting of {', '.join(tables)} has both methods' runs with {where}"
    else:
        why = (
            f"no table of this configuration has runs of both {claim.treatment!r} and "
            f"{claim.baseline!r} (tables the claim reads: {', '.join(claim.tables)})"
        )
    return [_record(claim, ", ".join(tables), DASH, None, None, paired_verdict([], "higher"), why)]


def _table_records(claim: Claim, table: str, info: dict, df: pd.DataFrame, stand_ins) -> list:
    options = info.get("options") or {}
    df = _best_of(claim, table, info, df)
    groups = group_runs(df, SETTING)
    out = []
    for key in order_rows(SETTING, groups, {}):
        setting = dict(zip(SETTING, key, strict=True))
        by_label = groups[key]
        if not claim.accepts(setting, stand_ins) or len(by_label) < 2:
            continue
        for label, runs in by_label.items():
            # one run per seed and method: the pairing needs it
            check_same_setting(
                runs, f"claims: {table} {setting_text(setting, {})} {label!r}", "rows"
            )
        treated, t_notes = _values(claim, claim.treatment, by_label, table, options, setting)
        base, b_notes = _values(claim, claim.baseline, by_label, table, options, setting)
        subs = list(dict.fromkeys([s for v in treated.values() for s in v] +
                                  [s for v in base.values() for s in v]))  # fmt: skip
        # a setting whose runs give no values at all (every one diverged) still gets its row
        for sub in subs or [""]:
            seeds = sorted(s for s in treated if s in base and sub in treated[s] and sub in base[s])
            diffs = [treated[s][sub] - base[s][sub] for s in seeds]
            unpaired = sorted(
                {s for s in treated if sub in treated[s]} ^ {s for s in base if sub in base[s]}
            )
            notes = sorted(set(t_notes) | set(b_notes))
            if unpaired:
                notes.append(f"seed(s) {', '.join(map(str, unpaired))} without a pair left out")
            verdict = paired_verdict(diffs, claim.direction)
            out.append(
                _record(claim, table, setting_text(setting, stand_ins, sub), setting, stand_ins,
                        verdict, "; ".join(notes), seeds)
            )  # fmt: skip
    return out


def _best_of(claim: Claim, table: str, info: dict, df: pd.DataFrame) -> pd.DataFrame:
    """A tuned column (best_of) keeps per setting the variant its table shows."""
    sweeps = {k: v for k, v in (info.get("best_of") or {}).items() if k in set(df["label"])}
    if not sweeps:
        return df
    opts = Options(table, {"best_of": sweeps}, ("best_of",))
    if claim.metric == "rounds_to_target":
        targets = _targets(table, info.get("options") or {})

        def rounds(rows, status):
            from fedkd import metrics

            r = metrics.rounds_to_target(rows, _target(targets, rows["alpha"].iloc[0], table))
            return None if r is None else float(r)

        picked, _ = pick_best_of(
            df, SETTING, opts, rounds, higher_better=False, partial_ok=True, by_validation=False
        )
    else:
        from fedkd.report.tables.common import stat_fn

        picked, _ = pick_best_of(df, SETTING, opts, stat_fn("best"))
    return picked


# --------------------------------------------------------------------------- a run's values
def _values(claim: Claim, label: str, by_label: dict, table: str, options: dict, setting: dict):
    """{seed: {sub-setting: value}} of one method's runs, and notes on runs left out."""
    out: dict[int, dict[str, float]] = {}
    notes = []
    for _, rows in sorted(by_label[label].items()):
        seed, status = int(rows["seed"].iloc[0]), str(rows["status"].iloc[0])
        played = rows[rows["round"] >= 1].sort_values("round", kind="mergesort")
        # accuracy at a round, or the round a target is reached, needs only the rounds up to it
        partial = claim.metric in ("at_round", "rounds_to_target")
        if played.empty or (status != "complete" and not partial):
            notes.append(f"{display_name(label)} seed {seed} {status or 'unfinished'}")
            continue
        values, note = metric_values(claim.metric, played, status, options, setting, table)
        if note:
            notes.append(f"{display_name(label)} seed {seed}: {note}")
        if values:
            out[seed] = values
    return out, notes


def metric_values(
    metric: str, rows: pd.DataFrame, status: str, options: dict, setting: dict, table: str = ""
):
    """{sub-setting: value} of one run (its played rounds in order) and a note, or ({}, why)."""
    from fedkd import metrics

    acc = rows["test_acc"]
    if metric == "best":
        return {"": 100 * float(acc.max())}, ""
    if metric == "final":
        return {"": 100 * float(acc.iloc[-1])}, ""
    if metric == "drop":
        return {"": 100 * float(acc.max() - acc.iloc[-1])}, ""
    if metric == "local_final":
        local = rows["local_acc"].dropna()
        if local.empty:
            return {}, "no local accuracy (eval_local off)"
        return {"": 100 * float(local.iloc[-1])}, ""
    if metric == "forgetting":
        if any(v is None for v in rows["class_acc"]):
            return {}, "no per-class accuracy"
        f = metrics.forgetting_from_rows(rows)
        return ({}, "fewer than 2 rounds") if math.isnan(f) else ({"": f}, "")
    if metric == "at_round":
        rounds = options.get("rounds") or DEFAULT_ROUNDS
        have = dict(zip(rows["round"].astype(int), acc, strict=True))
        return {f"round {int(r)}": 100 * float(have[int(r)]) for r in rounds if int(r) in have}, ""
    if metric == "rounds_to_target":
        target = _target(_targets(table, options), setting["alpha"], table)
        sub = f"T = {target * 100:g}%"
        r = metrics.rounds_to_target(rows, target)
        if r is not None:
            return {sub: float(r)}, ""
        if status != "complete":
            return {}, f"{status} before reaching T"
        # never reached within the planned rounds: counted as one round more (a lower bound)
        return {sub: float(setting["rounds_planned"] + 1)}, "T not reached, counted as R+1"
    raise ValueError(f"unknown metric {metric!r}")


def _targets(table: str, options: dict) -> dict[float, float]:
    from fedkd.report.tables.rounds_to_target import _targets as parse

    if not options.get("targets"):
        return {}
    return parse(Options(table, {"targets": options["targets"]}, ("targets",)))


def _target(targets: dict[float, float], alpha, table: str) -> float:
    alpha = key_value(alpha)
    if alpha is None or float(alpha) not in targets:
        raise ReportError(
            f"claims: {table} has no target accuracy for alpha {alpha}; give it one under its "
            "options.targets"
        )
    return targets[float(alpha)]


# --------------------------------------------------------------------------- text
def setting_text(setting: dict, stand_ins: dict, sub: str = "") -> str:
    """E.g. "mnist5k (stand-in for CIFAR-10), α=0.1, C=0.2, E=2, R=12, round 6"."""
    ds = str(setting["dataset"])
    parts = [f"{ds} (stand-in for {stand_ins[ds]})" if ds in stand_ins else ds]
    partition, alpha, shards = (key_value(setting.get(k)) for k in ("partition", "alpha", "shards"))
    if alpha is not None:
        parts.append(("LDA " if partition == "dirichlet" else "") + f"α={alpha:g}")
    elif shards is not None:
        parts.append(f"sharding s={int(shards)}")
    elif partition:
        parts.append(str(partition))
    parts += [
        f"C={setting['participation']:g}",
        f"E={int(setting['local_epochs'])}",
        f"R={int(setting['rounds_planned'])}",
    ]
    return ", ".join(parts + ([sub] if sub else []))


def _record(claim, table, setting_txt, setting, stand_ins, v, note, seeds=()) -> dict:
    ds = None if setting is None else str(setting["dataset"])
    return {
        "claim": claim.id,
        "paper": claim.paper,
        "statement": claim.statement,
        "source": claim.source,
        "quote": claim.quote,
        "table": table,
        "setting": setting_txt,
        "dataset": ds,
        "stand_in_for": (stand_ins or {}).get(ds, "") if ds else "",
        "metric": claim.metric,
        "unit": claim.unit,
        "direction": claim.direction,
        "n": v.n,
        "seeds": ";".join(map(str, seeds)),
        "effect": v.effect,
        "sd": v.sd,
        "ci_low": v.ci_low,
        "ci_high": v.ci_high,
        "verdict": v.verdict,
        "seeds_needed": v.seeds_needed,
        "note": note,
    }


def _num(x: float, unit: str, signed: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    text = f"{x:+.{DECIMALS[unit]}f}" if signed else f"{x:.{DECIMALS[unit]}f}"
    return text.replace("-", "−")


def _line(r: dict) -> list[Text]:
    unit = r["unit"]
    effect = _num(r["effect"], unit)
    if effect != DASH:
        effect += f" {unit}"
    ci = DASH
    if not math.isnan(r["ci_low"]):
        ci = f"[{_num(r['ci_low'], unit)}, {_num(r['ci_high'], unit)}]"
    resolve = ""
    if r["verdict"] == "inconclusive":
        if r["n"] < 2:
            resolve = "≥ 2 (one seed: no spread)"
        elif r["seeds_needed"] is None:
            resolve = "none (zero effect)" if r["effect"] == 0 else "> 10⁶"
        else:
            resolve = str(int(r["seeds_needed"]))
    source = f"{display_name(r['paper'])} {r['source']}"
    setting = r["setting"]
    if setting != DASH and r["table"]:
        setting += f" [{r['table']}]"
    if r["verdict"] == "not run":
        setting += f" ({r['note']})"
    return [Text.plain(t) for t in (
        r["statement"], source, setting, str(r["n"]), effect, ci, r["verdict"], resolve
    )]  # fmt: skip


def summary(records: list[dict]) -> str:
    """E.g. "Of 40 rows: 12 hold, 2 contradicted, 24 inconclusive, 2 not run; 30 rows rest on 3
    seeds or fewer, whose intervals are wide."""
    counts = {v: sum(r["verdict"] == v for r in records) for v in VERDICTS}
    words = {"holds": "hold", "contradicted": "contradicted", "inconclusive": "inconclusive",
             "not run": "not run"}  # fmt: skip
    text = f"Of {len(records)} rows: " + ", ".join(f"{counts[v]} {words[v]}" for v in VERDICTS)
    few = sum(1 for r in records if 0 < r["n"] <= 3)
    if few:
        text += f"; {few} rest on 3 seeds or fewer, whose intervals are wide"
    return text + "."
