"""Layout ``claims``: every claim of the registry with its verdict, and the verdict of each of its
settings, from the runs that check it. Drawn from one aggregate of the runs of the configuration's
other tables, each run's label prefixed with its table ("table3/fedgkd"), and from option
``sources`` (per table: its paper key, layout, options and best_of columns), which the workflow
fills in.

A claim reads the settings of every table it selects. The same two sets of runs compared on the
same value (table 3 at α 0.5 and table 5 at C 0.2; a final round and the last of the at-round
columns) are one comparison: a claim keeps it once and names the other tables that share it; a
comparison two claims share is named in both. Runs that diverged, collapsed to chance or report a
non-finite value are named and left out; a setting they leave with too few seeds is "failed".
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import pandas as pd

from fedkd.collapse import MARK
from fedkd.report.aggregate import SETTING_KEYS, ReportError
from fedkd.report.best_of import pick_best_of
from fedkd.report.claims import all_claims
from fedkd.report.claims.claim import Claim, stands_for
from fedkd.report.claims.paper_check import check_on_paper, paper_gaps, trend_ends
from fedkd.report.claims.verdict import (
    LEVEL,
    MAX_SEEDS,
    MIN_SEEDS,
    POWER,
    VERDICTS,
    Hypothesis,
    Sample,
    Verdict,
    family_verdicts,
    sign_test_seeds,
)  # fmt: skip
from fedkd.report.keys import check_same_setting, group_runs, order_rows
from fedkd.report.names import display_name, paper_dataset_name
from fedkd.report.options import Options
from fedkd.report.tables.at_rounds import DEFAULT_ROUNDS
from fedkd.report.tables.common import caption_and_label
from fedkd.report.tables.rounds_to_target import target_accuracies
from fedkd.report.tables.vs_paper import paper_setting_text
from fedkd.report.text import DASH, Text, key_value
from fedkd.report.writers import TableDoc

# the run keys that make a setting: the aggregate's setting keys but those of the method (the
# claims compare methods within a setting); runs of one setting differ only in method and seed
METHOD_KEYS = ("strategy", "params", "variant", "model")
SETTING = [k for k in SETTING_KEYS if k not in METHOD_KEYS]
DECIMALS = {"pp": 2, "rounds": 1, "F": 3}
FAILED_STATUSES = ("diverged", "failed")
CSV_COLUMNS = [
    "claim", "paper", "statement", "source", "quote", "test", "margin", "aggregate",
    "claim_verdict", "claim_summary", "paper_check", "paper_effect", "row", "table",
    "also_in", "setting", "dataset", "stand_in_for", "metric", "unit", "direction", "n",
    "failed", "seeds", "effect", "sd", "ci_low", "ci_high", "p_holm", "verdict",
    "seeds_needed", "paper_gap", "stated_gap", "shared_with", "note",
]  # fmt: skip
# the verdicts' colours in the HTML (text on a light background)
COLOURS = {
    "holds": ("#14532d", "#dcfce7"),
    "contradicted": ("#7f1d1d", "#fee2e2"),
    "inconclusive": ("#713f12", "#fef3c7"),
    "too few seeds": ("#334155", "#e2e8f0"),
    "failed": ("#581c87", "#f3e8ff"),
    "not run": ("#475569", "#f8fafc"),
}

METHOD_NOTE = (
    "How to read it. Each row pairs the claim's two methods by seed within one setting: runs "
    "with the same seed share their data partition, so the per-seed difference (first method − "
    "second) removes what the partition does to both. Effect: the mean of those differences; "
    f"{LEVEL:.0%} interval: the paired t-interval, mean ± t(n−1, 0.975)·sd/√n. A claim with a "
    "margin m (a bound the paper states, 'over 2.7%', or the gap 'comparable' or 'no more "
    "benefit' tolerates) "
    "states that the effect exceeds +m (superiority), exceeds −m (non-inferiority) or lies within "
    "±m (equivalence); each is two one-sided t-tests at 2.5%, whose p-values are corrected by "
    "Holm's method over the claim's settings. holds: the claimed region is shown (with one "
    "setting: the interval lies inside it); contradicted: its complement is; inconclusive: the "
    f"interval spans the margin; too few seeds: fewer than {MIN_SEEDS} paired seeds (no spread "
    "worth the name), or every seed gives the same difference (no spread to estimate: the exact "
    f"sign test decides, p = 0.5^n, and needs {sign_test_seeds()} seeds at 2.5%); failed: runs "
    "that diverged, collapsed to chance or gave a non-finite value left too few seeds; not run: "
    "the configuration has no runs for it, or one method has runs in the setting and the other "
    "none (named in its note). A gap the paper states as its measurement ('by 5.6%', not "
    "'over') is tested as that, not as a bound to clear (stated gap, shown in the Paper column): "
    "holds when the effect is shown above 0 and not shown below the stated gap, contradicted when "
    "it is shown below it. A claim holds when every "
    "setting holds (or, for a claim on the average over settings, when the average does: the "
    "per-seed mean over the settings, tested over the seeds); it is contradicted when any setting "
    "is. A trend row tests the per-seed change of the gap between the two extreme settings "
    "(difference of differences, seeds paired by their index). Seeds for 80% power: how many "
    f"seeds a one-sided t-test at 2.5%/k (k: the claim's settings) needs for {POWER:.0%} power "
    "if the observed effect and spread were the truth (noncentral t), left out where no spread "
    f"is known; above {MAX_SEEDS} it says > {MAX_SEEDS}. Paper: the paper's own gap in the same "
    "setting, where it prints both cells (where two of its tables print the setting, the one "
    "naming more of its keys). Units: pp = percentage points of test accuracy; rounds; "
    "F = forgetting."
)


# --------------------------------------------------------------------------- the layout
def build(df: pd.DataFrame, opts: Options) -> TableDoc:
    sources = opts.mapping("sources")
    stand_ins = {str(k): str(v) for k, v in opts.mapping("stand_ins").items()}
    runs = split_labels(df)
    results = [evaluate(claim, runs, sources, stand_ins) for claim in all_claims()]
    _name_shared(results)
    records = [r for res in results for r in res.records()]
    caption, label = caption_and_label(opts)
    caption = f"{caption.rstrip()} {summary(results)}".strip()
    header = [Text.plain(h) for h in ("Claim / setting", "Verdict", "n", "Effect",
                                      f"{LEVEL:.0%} CI", "Paper", "Seeds for 80% power")]  # fmt: skip
    body = [line for res in results for line in res.lines()]
    notes = [METHOD_NOTE]
    csv = pd.DataFrame(records, columns=CSV_COLUMNS)
    for col in ("seeds_needed", "n", "failed"):
        csv[col] = csv[col].astype("Int64")  # counts: "4", not "4.0"
    # the claims with runs first; those without are one line each, after them
    ran = [res for res in results if res.verdict != "not run" or res.rows]
    idle = [res for res in results if res not in ran]
    page = "\n".join(res.html() for res in ran)
    if idle:
        page += f"\n<h3 class=idle>Not run on this configuration ({len(idle)} claims)</h3>\n"
        page += '<ul class="idle">' + "".join(res.html_line() for res in idle) + "</ul>"
    return TableDoc(caption, label, header, body, 1, csv, blank_repeats=False, notes=notes,
                    html=page)  # fmt: skip


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


# --------------------------------------------------------------------------- one setting's values
@dataclass
class MethodRuns:
    """One method's runs in one setting: per seed its values by sub-setting (a round, a target;
    "" for none), its run, and why a sub-setting it lacks is lost ("failed" or "missing")."""

    values: dict[int, dict[str, float]] = field(default_factory=dict)
    runs: dict[int, str] = field(default_factory=dict)
    lost: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    collapsed: bool = False


@dataclass
class SettingValues:
    table: str
    setting: dict
    treated: MethodRuns
    base: MethodRuns

    def subs(self) -> list[str]:
        found = [s for m in (self.treated, self.base) for v in m.values.values() for s in v]
        return list(dict.fromkeys(found)) or [""]

    def pair(self, sub: str, seed: int) -> tuple[float, float] | str:
        """The two values at ``seed``, or why there are none: "failed" or "missing"."""
        got = []
        for m in (self.treated, self.base):
            if sub in m.values.get(seed, {}):
                got.append(m.values[seed][sub])
            elif m.lost.get(seed) == "failed":
                return "failed"
            else:
                got.append(None)
        if None in got:
            return "missing"
        return got[0], got[1]

    def seeds(self) -> list[int]:
        return sorted(set(self.treated.runs) | set(self.base.runs))

    def without_runs(self, claim: Claim) -> list[str]:
        """The claim's methods that have no run at all in this setting."""
        sides = ((claim.treatment, self.treated), (claim.baseline, self.base))
        return [label for label, m in sides if not m.runs]


def setting_values(claim: Claim, table: str, info: dict, df: pd.DataFrame, stand_ins) -> list:
    """The claim's methods' values in each accepted setting of ``table`` where either has runs
    (a setting where only one has them is missing the other's: it becomes a "not run" row)."""
    options = info.get("options") or {}
    df = _best_of(claim, table, info, df)
    groups = group_runs(df, SETTING)
    out = []
    for key in order_rows(SETTING, groups, {}):
        setting = dict(zip(SETTING, key, strict=True))
        by_label = groups[key]
        if not claim.accepts(setting, stand_ins):
            continue
        for label, runs in by_label.items():
            # one run per seed and method: the pairing needs it
            check_same_setting(
                runs, f"claims: {table} {setting_text(setting, {})} {label!r}", "rows"
            )
        treated = _method_runs(claim, claim.treatment, by_label, table, options, setting)
        base = _method_runs(claim, claim.baseline, by_label, table, options, setting)
        out.append(SettingValues(table, setting, treated, base))
    return out


def _best_of(claim: Claim, table: str, info: dict, df: pd.DataFrame) -> pd.DataFrame:
    """A tuned column (best_of) keeps per setting the variant its table shows."""
    sweeps = {k: v for k, v in (info.get("best_of") or {}).items() if k in set(df["label"])}
    if not sweeps:
        return df
    opts = Options(table, {"best_of": sweeps}, ("best_of",))
    if claim.metric == "rounds_to_target":
        targets = target_accuracies(table, info.get("options") or {})

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


def _method_runs(claim, label: str, by_label: dict, table: str, options: dict, setting: dict):
    out = MethodRuns()
    name = display_name(label)
    events: list[tuple[str, int, str]] = []  # (what happened, seed, run): one note per what
    for run, rows in sorted(by_label.get(label, {}).items()):
        seed, status = int(rows["seed"].iloc[0]), str(rows["status"].iloc[0])
        out.runs[seed] = run
        played = rows[rows["round"] >= 1].sort_values("round", kind="mergesort")
        # accuracy at a round, or the round a target is reached, needs only the rounds up to it
        partial = claim.metric in ("at_round", "rounds_to_target")
        failed = status in FAILED_STATUSES
        if "collapsed" in rows.columns and bool(rows["collapsed"].iloc[0]):
            out.collapsed = True
            out.lost[seed] = "failed"
            events.append((f" collapsed to chance {MARK}", seed, run))
            continue
        bad = _non_finite(played, claim.metric)
        if bad:
            out.lost[seed] = "failed"
            events.append((f": non-finite {bad}, left out", seed, run))
            continue
        if played.empty or (status != "complete" and not partial):
            out.lost[seed] = "failed" if failed else "missing"
            events.append((f" {status or 'unfinished'}", seed, run))
            continue
        values, note = metric_values(claim.metric, played, status, options, setting, table)
        if claim.metric == "at_round":
            values = {s: v for s, v in values.items() if int(s.split()[1]) >= claim.rounds_from}
        if note:
            events.append((f": {note}", seed, ""))
        if status != "complete":
            # rounds it never reached are lost to its divergence (or missing, if unfinished)
            out.lost[seed] = "failed" if failed else "missing"
            if failed:
                events.append((f" {status}", seed, run))
        elif not values:
            out.lost[seed] = "missing"
        out.values[seed] = values
    out.notes = grouped_notes(name, events)
    return out


def grouped_notes(name: str, events: list[tuple[str, int, str]]) -> list[str]:
    """One note per thing that happened to a method's runs, naming its seeds and runs: "FedAvg
    seeds 0, 1 collapsed to chance † (results/runs/.../seed0, seed1)"."""
    by_what: dict[str, list[tuple[int, str]]] = {}
    for what, seed, run in events:
        by_what.setdefault(what, []).append((seed, run))
    notes = []
    for what, items in by_what.items():
        seeds = ", ".join(str(s) for s, _ in items)
        runs = [r for _, r in items if r]
        where = ""
        if len(runs) == 1:
            where = f" ({runs[0]})"
        elif runs:
            parents = {r.rsplit("/", 1)[0] for r in runs}
            leaves = ", ".join(r.rsplit("/", 1)[-1] for r in runs)
            where = f" ({parents.pop()}/{leaves})" if len(parents) == 1 else f" ({', '.join(runs)})"
        plural = "s" if len(items) > 1 else ""
        notes.append(f"{name} seed{plural} {seeds}{what}{where}")
    return notes


def _non_finite(rows: pd.DataFrame, metric: str) -> str:
    """What a run reports that is not a finite number, among the values ``metric`` reads."""
    column = "local_acc" if metric == "local_final" else "test_acc"
    values = pd.to_numeric(rows[column], errors="coerce")
    if metric == "local_final":
        values = values.dropna()  # rounds without a local evaluation
    bad = values[~values.map(lambda v: math.isfinite(v))]
    if bad.empty:
        return ""
    rounds = rows.loc[bad.index, "round"].astype(int).tolist()
    return f"{column} {bad.iloc[0]} at round(s) {', '.join(map(str, rounds[:5]))}"


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
        target = _target(target_accuracies(table, options), setting["alpha"], table)
        sub = f"T = {target * 100:g}%"
        r = metrics.rounds_to_target(rows, target)
        if r is not None:
            return {sub: float(r)}, ""
        if status != "complete":
            return {}, f"{status} before reaching T"
        # never reached within the planned rounds: counted as one round more (a lower bound)
        return {sub: float(setting["rounds_planned"] + 1)}, "T not reached, counted as R+1"
    raise ValueError(f"unknown metric {metric!r}")


def _target(targets: dict[float, float], alpha, table: str) -> float:
    alpha = key_value(alpha)
    if alpha is None or float(alpha) not in targets:
        raise ReportError(
            f"claims: {table} has no target accuracy for alpha {alpha}; give it one under its "
            "options.targets"
        )
    return targets[float(alpha)]


# --------------------------------------------------------------------------- comparisons
@dataclass
class Comparison:
    """One row of a claim: the per-seed differences in one setting (or, for a trend, the
    per-seed change of the gap between two settings)."""

    table: str
    setting: dict
    text: str
    diffs: dict[int, float]
    failed: int  # seeds lost to failed runs
    notes: list[str]
    key: tuple  # what makes two rows the same comparison: the runs and the value compared
    margin: float = 0.0
    collapsed: bool = False
    also: list[str] = field(default_factory=list)  # the other tables' settings sharing it
    shared_with: list[str] = field(default_factory=list)  # other claims with the same row
    paper_gap: float | None = None
    verdict: Verdict | None = None
    lacking: str = ""  # the method with no runs in this setting (a "not run" row)


def _value_kind(claim: Claim, sub: str, setting: dict):
    """The value compared, named so that the same value read by two metrics is one (the final
    round is the last of the at-round columns)."""
    if claim.metric == "final":
        return ("accuracy at round", int(setting["rounds_planned"]))
    if claim.metric == "at_round" and sub:  # "" : a setting without a value at any round
        return ("accuracy at round", int(sub.split()[1]))
    return (claim.metric, sub)


def comparisons(claim: Claim, values: list[SettingValues], stand_ins: dict) -> list[Comparison]:
    out = []
    for sv in values:
        if sv.without_runs(claim):
            out.append(_missing_comparison(claim, sv, stand_ins))
            continue
        for sub in sv.subs():
            diffs, failed, missing = {}, 0, []
            for seed in sv.seeds():
                got = sv.pair(sub, seed)
                if got == "failed":
                    failed += 1
                elif got == "missing":
                    missing.append(seed)
                else:
                    diffs[seed] = got[0] - got[1]
            notes = sorted(set(sv.treated.notes) | set(sv.base.notes))
            if missing:
                notes.append(f"seed(s) {', '.join(map(str, missing))} without a pair left out")
            margin, margin_note = claim.margin_for(sv.setting["dataset"], stand_ins)
            if margin_note:
                notes.append(margin_note)
            runs = (frozenset(sv.treated.runs.values()), frozenset(sv.base.runs.values()))
            collapsed = sv.treated.collapsed or sv.base.collapsed
            text = setting_text(sv.setting, stand_ins, sub)
            out.append(Comparison(
                sv.table, {**sv.setting, "sub": sub}, text + (f" {MARK}" if collapsed else ""),
                diffs, failed, notes, (runs, _value_kind(claim, sub, sv.setting)), margin,
                collapsed,
            ))  # fmt: skip
    return out


def _missing_comparison(claim: Claim, sv: SettingValues, stand_ins: dict) -> Comparison:
    """A setting in which one method has runs and the other none: a row with no pairs ("not
    run"), naming the method without runs, so the claim's verdict cannot rest on the settings that
    happen to be there."""
    (absent,) = sv.without_runs(claim)  # a setting is here because one of them has runs
    present = sv.treated if absent == claim.baseline else sv.base
    seeds = ", ".join(map(str, sorted(present.runs)))
    other = claim.treatment if absent == claim.baseline else claim.baseline
    notes = [
        f"no {display_name(absent)} runs in this setting ({display_name(other)} has seed(s) "
        f"{seeds})", *present.notes,
    ]  # fmt: skip
    margin, margin_note = claim.margin_for(sv.setting["dataset"], stand_ins)
    if margin_note:
        notes.append(margin_note)
    runs = frozenset(present.runs.values())
    # the absent method named in the key: the same runs missing another method are another row
    key = (runs, ("no runs", absent)) if absent == claim.baseline else (("no runs", absent), runs)
    text = setting_text(sv.setting, stand_ins)
    return Comparison(sv.table, {**sv.setting, "sub": ""}, text, {}, 0, notes,
                      (key, ("missing", claim.metric)), margin, lacking=absent)  # fmt: skip


def trend_comparisons(claim: Claim, values: list[SettingValues], stand_ins: dict) -> list:
    """Per group of settings that differ only in the trend's key: the change of the gap from
    the trend's start to its end setting, per seed; or a reason row where there are no two."""
    rows = comparisons(claim, values, stand_ins)
    key = claim.trend.key
    groups: dict[tuple, list[Comparison]] = {}
    for c in rows:
        rest = tuple((k, str(v)) for k, v in c.setting.items() if k != key)
        groups.setdefault((c.table, rest), []).append(c)
    out, reasons = [], []
    for (table, _), members in groups.items():
        by_value = {c.setting[key]: c for c in members}

        def stands(v, d):
            return stands_for(v, d, stand_ins)

        ends = trend_ends(claim.trend, list(by_value), stands)
        if ends is None:
            reasons.append(_no_trend_reason(claim, list(by_value), stand_ins, table))
            continue
        start, end = (by_value[e] for e in ends)
        # settings where one method has no runs, named by their own setting text in the notes
        lacking = [c for c in (start, end) if c.lacking]
        between = [c for v, c in by_value.items() if v not in ends and c.lacking]
        seeds = sorted(set(start.diffs) & set(end.diffs))
        diffs = {s: end.diffs[s] - start.diffs[s] for s in seeds}
        lost = set(start.diffs) ^ set(end.diffs)
        failed = max(start.failed, end.failed)
        notes = sorted((set(start.notes) | set(end.notes)) - {c.notes[0] for c in lacking})
        if lost and not lacking:
            notes.append(f"seed(s) {', '.join(map(str, sorted(lost)))} in one setting only")
        notes += [f"{c.text}: {c.notes[0]}" for c in lacking]
        # not needed for the test, but missing all the same
        notes += [f"{c.text}: {c.notes[0]} (a setting between the two compared)" for c in between]
        what = _trend_text(claim, start, end, stand_ins)
        out.append(Comparison(
            table, {**end.setting}, what, diffs, failed, notes,
            ("trend", start.key, end.key), 0.0, start.collapsed or end.collapsed,
        ))  # fmt: skip
    if not out and reasons:
        out.append(Comparison(rows[0].table if rows else "", {}, DASH, {}, 0, reasons[:1],
                              ("none",)))  # fmt: skip
    return out


def _no_trend_reason(claim: Claim, present: list, stand_ins: dict, table: str) -> str:
    trend = claim.trend
    if trend.key == "dataset":
        both = [v for v in present if stands_for(v, trend.start, stand_ins)
                and stands_for(v, trend.end, stand_ins)]  # fmt: skip
        if both:
            return (
                f"{both[0]} stands for both {paper_dataset_name(trend.start)} and "
                f"{paper_dataset_name(trend.end)}: the trend needs two datasets ({table})"
            )
        return (
            f"{table} has no runs on both {paper_dataset_name(trend.start)} and "
            f"{paper_dataset_name(trend.end)} (or stand-ins named for them)"
        )
    return f"{table} runs one value of {trend.key} only: the trend needs two"


def _trend_text(claim: Claim, start: Comparison, end: Comparison, stand_ins: dict) -> str:
    key = claim.trend.key
    if key == "dataset":
        return f"{end.text} against {start.text}"
    symbol = {"alpha": "α", "participation": "C"}[key]
    base = {k: v for k, v in end.setting.items() if k not in (key, "sub")}
    sub = end.setting.get("sub", "")
    return (
        f"{setting_text({**base, key: None}, stand_ins, sub)}: "
        f"{symbol}={end.setting[key]:g} against {symbol}={start.setting[key]:g}"
    )


def _dedup(rows: list[Comparison]) -> list[Comparison]:
    """One row per comparison; the others that share it are named in its ``also``."""
    kept: dict[tuple, Comparison] = {}
    for c in rows:
        if c.key in kept and c.key != ("none",):
            first = kept[c.key]
            if c.table != first.table or c.text != first.text:
                first.also.append(f"{c.table}: {c.text}")
            continue
        kept.setdefault(c.key, c)
    return list(kept.values())


# --------------------------------------------------------------------------- one claim
@dataclass
class ClaimResult:
    claim: Claim
    rows: list[Comparison]
    verdict: str
    summary: str  # the sign count, e.g. "ahead in 7 of 9 settings"
    average: Comparison | None = None  # the mean over settings (aggregate "mean")
    reason: str = ""  # why there is no row
    paper: str = ""  # the paper's own gap, as text
    paper_status: str = ""
    paper_effect: float = math.nan

    # ------------------------------------------------------------------ output
    def records(self) -> list[dict]:
        rows = [("setting" if self.claim.trend is None else "trend", r) for r in self.rows]
        if self.average is not None:
            rows.append(("average", self.average))
        if not rows:
            return [self._record("none", None)]
        return [self._record(kind, r) for kind, r in rows]

    def _record(self, kind: str, r: Comparison | None) -> dict:
        c = self.claim
        v = r.verdict if r is not None else None
        ds = None if r is None or not r.setting else str(r.setting.get("dataset"))
        nan = math.nan
        p_holm = nan if v is None else v.p_holds
        return {
            "claim": c.id, "paper": c.paper, "statement": c.statement, "source": c.source,
            "quote": c.quote, "test": c.test, "margin": c.margin_text(),
            "aggregate": c.aggregate, "claim_verdict": self.verdict,
            "claim_summary": self.summary, "paper_check": self.paper_status,
            "paper_effect": self.paper_effect, "row": kind,
            "table": "" if r is None else r.table,
            "also_in": "" if r is None else "; ".join(r.also),
            "setting": DASH if r is None else r.text, "dataset": ds,
            "stand_in_for": "" if r is None else self._stand_in(ds),
            "metric": c.metric, "unit": c.unit, "direction": c.direction,
            "n": 0 if v is None else v.n, "failed": 0 if r is None else r.failed,
            "seeds": "" if r is None else ";".join(map(str, sorted(r.diffs))),
            "effect": nan if v is None else v.effect, "sd": nan if v is None else v.sd,
            "ci_low": nan if v is None else v.ci_low, "ci_high": nan if v is None else v.ci_high,
            "p_holm": p_holm, "verdict": "not run" if v is None else v.verdict,
            "seeds_needed": None if v is None else v.seeds_needed,
            "paper_gap": nan if r is None or r.paper_gap is None else r.paper_gap,
            "stated_gap": r.margin if r is not None and c.test == "stated-gap" else nan,
            "shared_with": "" if r is None else "; ".join(r.shared_with),
            "note": self.reason if r is None else "; ".join(r.notes),
        }  # fmt: skip

    _stand_ins: dict = field(default_factory=dict)

    def _stand_in(self, ds) -> str:
        return self._stand_ins.get(ds, "") if ds else ""

    def lines(self) -> list[list[Text]]:
        """The Markdown and LaTeX rows: the claim, then its settings (indented)."""
        c = self.claim
        head = [f"{c.statement} [{c.id}]", self.verdict.upper(), "", "", "", self.paper, ""]
        out = [[Text.plain(t) for t in head]]
        rows = list(self.rows) + ([self.average] if self.average else [])
        for r in rows:
            v = r.verdict
            out.append([Text.plain(t) for t in (
                f"  {r.text}" + (f" [{r.table}]" if r.table else ""), v.verdict, str(v.n),
                self._effect(v.effect), self._interval(v), self._paper_cell(r),
                _seeds_text(v),
            )])  # fmt: skip
        if not rows:
            out.append([Text.plain(t) for t in (f"  ({self.reason})", "not run", "0", DASH,
                                                DASH, "", "")])  # fmt: skip
        return out

    def _num(self, x, signed=True) -> str:
        return _num(x, self.claim.unit, signed)

    def _paper_cell(self, r: Comparison) -> str:
        """The paper's gap in the row's setting and, for a stated gap, the gap tested: "+5.62
        (stated 5.6)"."""
        text = self._num(r.paper_gap)
        if self.claim.test != "stated-gap":
            return text
        return f"{text} (stated {r.margin})" if text != DASH else f"stated {r.margin}"

    def _effect(self, x) -> str:
        text = self._num(x)
        return text if text == DASH else f"{text} {self.claim.unit}"

    def _interval(self, v: Verdict) -> str:
        if math.isnan(v.ci_low):
            return DASH
        return f"[{self._num(v.ci_low)}, {self._num(v.ci_high)}]"

    def html(self) -> str:
        """One block: the verdict and statement, the paper's gap beside ours, then a table of the
        settings (verdict, n, effect, interval first; the setting last, wrapping), and notes."""
        c, esc = self.claim, html.escape
        out = [f'<section class="claim" id="{esc(c.id)}">',
               f"<h3>{_badge(self.verdict)} {esc(c.statement)}</h3>"]  # fmt: skip
        meta = [f"<code>{esc(c.id)}</code>", esc(f"{display_name(c.paper)} {c.source}")]
        if self.summary:
            meta.append(esc(self.summary))
        out.append(f'<p class="meta">{" · ".join(meta)}</p>')
        ours = self._ours()
        out.append(f'<p class="gap"><b>Paper:</b> {esc(self.paper or DASH)} &nbsp; '
                   f"<b>Ours:</b> {esc(ours)}</p>")  # fmt: skip
        rows = list(self.rows) + ([self.average] if self.average else [])
        notes: list[str] = []
        if rows:
            out.append("<table><thead><tr><th>Verdict</th><th>n</th><th>Effect</th>"
                       f"<th>{LEVEL:.0%} CI</th><th>Paper</th><th>p (Holm)</th>"
                       "<th>Seeds for 80% power</th><th class=stub>Setting</th></tr></thead>"
                       "<tbody>")  # fmt: skip
            for r in rows:
                v = r.verdict
                refs = []
                row_notes = list(r.notes)
                if r.also:
                    row_notes.insert(0, "same runs also in " + "; ".join(r.also))
                if r.shared_with:
                    row_notes.insert(0, "the same comparison is a row of " +
                                     ", ".join(r.shared_with))  # fmt: skip
                for note in row_notes:
                    notes.append(note)
                    refs.append(str(len(notes)))
                mark = f" <sup>{','.join(refs)}</sup>" if refs else ""
                where = f"{esc(r.text)} <span class=table>[{esc(r.table)}]</span>" if r.table \
                    else esc(r.text)  # fmt: skip
                if r is self.average:
                    where = f"<b>{where}</b>"
                out.append(
                    f"<tr><td>{_badge(v.verdict)}</td><td>{v.n}</td>"
                    f"<td>{esc(self._effect(v.effect))}</td><td>{esc(self._interval(v))}</td>"
                    f"<td>{esc(self._paper_cell(r))}</td><td>{_p_text(v.p_holds)}</td>"
                    f"<td>{esc(_seeds_text(v))}</td><td class=stub>{where}{mark}</td></tr>"
                )
            out.append("</tbody></table>")
        else:
            notes.append(self.reason)
        quote = f"“{esc(c.quote)}”"
        out.append(f'<p class="quote">{quote}</p>')
        if c.note:
            out.append(f'<p class="note">Formalised so: {esc(c.note)}.</p>')
        if self.paper_status and self.paper_status != "holds":
            out.append(f'<p class="note">On the paper\'s own cells: {esc(self.paper_status)}.</p>')
        if notes:
            out.append('<ol class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes)
                       + "</ol>")  # fmt: skip
        out.append("</section>")
        return "\n".join(out)

    def html_line(self) -> str:
        """A claim without runs: its statement and why, on one line."""
        c, esc = self.claim, html.escape
        return (f'<li id="{esc(c.id)}">{esc(c.statement)} <code>{esc(c.id)}</code>: '
                f"{esc(self.reason)}</li>")  # fmt: skip

    def _ours(self) -> str:
        row = self.average or (self.rows[0] if len(self.rows) == 1 else None)
        if row is not None and row.verdict and row.verdict.n:
            v = row.verdict
            text = self._effect(v.effect)
            if not math.isnan(v.ci_low):
                text += f" {self._interval(v)}"
            return text + (" (average over settings)" if row is self.average else "")
        effects = [r.verdict.effect for r in self.rows if r.verdict and r.verdict.n]
        if not effects:
            return "no runs" if not self.rows else "no valid pairs"
        return f"from {self._num(min(effects))} to {self._num(max(effects))} {self.claim.unit}"


def evaluate(claim: Claim, runs: pd.DataFrame, sources: dict, stand_ins: dict) -> ClaimResult:
    tables = [
        name for name, info in sources.items()
        if claim.selects(name, info.get("paper"), str(info.get("layout", "")))
    ]  # fmt: skip
    values: list[SettingValues] = []
    for name in tables:
        rows = runs[(runs["table"] == name) & runs["label"].isin([claim.treatment,
                                                                  claim.baseline])]  # fmt: skip
        if {claim.treatment, claim.baseline} <= held_labels(sources[name], runs, name):
            values += setting_values(claim, name, sources[name], rows, stand_ins)
    if claim.trend is not None:
        rows = trend_comparisons(claim, values, stand_ins)
    else:
        rows = comparisons(claim, values, stand_ins)
    rows = _dedup(rows)
    result = ClaimResult(claim, [], "not run", "", _stand_ins=stand_ins)
    _paper(result, stand_ins)
    if len(rows) == 1 and rows[0].key == ("none",):
        result.reason = rows[0].notes[0]
        return result
    if not rows:
        result.reason = _not_run_reason(claim, tables, runs)
        return result
    gaps, _ = paper_gaps(claim)
    for r in rows:
        r.paper_gap, disagreement = _row_paper_gap(claim, r, stand_ins, gaps)
        if disagreement:
            r.notes.append(disagreement)
    hyps = [Hypothesis(claim.test, claim.direction, r.margin) for r in rows]
    for r, h, v in zip(rows, hyps, family_verdicts([_sample(r) for r in rows], hyps), strict=True):
        r.verdict = v
        _note_no_spread(r, h)
    result.rows = rows
    if claim.aggregate == "mean":
        result.average = _average(claim, rows)
        result.verdict = result.average.verdict.verdict
        left_out = [r.verdict.verdict for r in rows if not r.diffs]
        if left_out:
            # an average over fewer settings than the claim's is not the claim's average
            result.verdict = claim_verdict(left_out)
    else:
        result.verdict = claim_verdict([r.verdict.verdict for r in rows])
    result.summary = sign_count(claim, rows, hyps)
    return result


def held_labels(info: dict, runs: pd.DataFrame, table: str) -> set[str]:
    """The column labels a table holds: those its source lists (``labels``: the table's columns,
    which the workflow passes, so a column whose runs are all missing still counts), else those
    with runs. A claim reads a table that holds both its methods; one that holds one of them is
    a table the configuration did not give the other (tiny's Table 3 has no FedProx column)."""
    listed = info.get("labels")
    if listed:
        return {str(label) for label in listed}
    return set(runs.loc[runs["table"] == table, "label"])


def _note_no_spread(r: Comparison, hyp: Hypothesis) -> None:
    v = r.verdict
    if v is None or v.n < MIN_SEEDS or v.sd != 0:
        return
    if hyp.distance(v.effect) == 0:
        # a tie with the bound: neither side has a seed beyond it, so the sign test counts none
        r.notes.append(
            f"all {v.n} seeds give the same difference, which lies on the claim's bound: no "
            "spread to estimate, and the exact sign test finds no seed on either side (p = 1)"
        )
        return
    r.notes.append(
        f"all {v.n} seeds give the same difference: no spread to estimate, so the exact sign "
        f"test decides (one-sided p = 0.5^{v.n} = {0.5**v.n:.3g} before Holm's correction)"
    )


def _sample(r: Comparison) -> Sample:
    return Sample(tuple(r.diffs[s] for s in sorted(r.diffs)), r.failed)


def _average(claim: Claim, rows: list[Comparison]) -> Comparison:
    """The per-seed mean over the settings with valid pairs, tested over the seeds."""
    used = [r for r in rows if r.diffs]
    seeds = sorted(set.intersection(*(set(r.diffs) for r in used))) if used else []
    diffs = {s: math.fsum(r.diffs[s] for r in used) / len(used) for s in seeds}
    notes = []
    left = [r.text for r in rows if not r.diffs]
    if left:
        notes.append(
            f"left out of the average (no valid pair): {'; '.join(left)}; the claim's verdict "
            "is theirs, as this is not the average over all its settings"
        )
    dropped = sorted(set().union(*(set(r.diffs) for r in used)) - set(seeds)) if used else []
    if dropped:
        notes.append(f"seed(s) {', '.join(map(str, dropped))} lack a setting: left out")
    failed = max((r.failed for r in rows), default=0)
    text = f"average over {len(used)} setting{'' if len(used) == 1 else 's'}"
    avg = Comparison("", {}, text, diffs, failed, notes, ("average",), float(claim.margin))
    hyp = Hypothesis(claim.test, claim.direction, float(claim.margin))
    avg.verdict = family_verdicts([_sample(avg)], hyp)[0]
    _note_no_spread(avg, hyp)
    paper = [r.paper_gap for r in used if r.paper_gap is not None]
    avg.paper_gap = math.fsum(paper) / len(paper) if paper and len(paper) == len(used) else None
    return avg


def claim_verdict(verdicts: list[str]) -> str:
    """contradicted if any setting is; holds if every one does; else the first of inconclusive,
    too few seeds, failed, not run that some setting has."""
    if not verdicts:
        return "not run"
    if "contradicted" in verdicts:
        return "contradicted"
    if all(v == "holds" for v in verdicts):
        return "holds"
    return next(v for v in VERDICTS[2:] if v in verdicts)


def sign_count(claim: Claim, rows: list[Comparison], hyps: list[Hypothesis]) -> str:
    """E.g. "ahead in 7 of 9 settings": the settings whose effect lies on the claimed side."""
    seen = [(r, h) for r, h in zip(rows, hyps, strict=True) if r.verdict and r.verdict.n]
    if not seen:
        return ""
    k = sum(h.on_claimed_side(r.verdict.effect) for r, h in seen)
    n = len(seen)
    unit = "setting" if n == 1 else "settings"
    if claim.trend is not None:
        return f"the gap grows in {k} of {n} {'comparison' if n == 1 else 'comparisons'}"
    if claim.test == "equivalence":
        return f"within the margin in {k} of {n} {unit}"
    if claim.test == "stated-gap":
        return f"at or above the stated gap in {k} of {n} {unit}"
    return f"ahead in {k} of {n} {unit}"


def _not_run_reason(claim: Claim, tables: list[str], runs: pd.DataFrame) -> str:
    if tables and any(
        set(runs.loc[runs["table"] == t, "label"]) >= {claim.treatment, claim.baseline}
        for t in tables
    ):
        where = ", ".join(f"{k} in {list(v)}" for k, v in claim.where.items())
        if not where and isinstance(claim.margin, dict):
            where = "a dataset the paper states a gap for"
        return f"no setting of {', '.join(tables)} has both methods' runs with {where}"
    return (
        f"no table of this configuration has runs of both {claim.treatment!r} and "
        f"{claim.baseline!r} (tables the claim reads: {', '.join(claim.tables)})"
    )


def _name_shared(results: list[ClaimResult]) -> None:
    """A comparison that rows of several claims make is named in each (so two claims resting on
    the same runs are not read as two pieces of evidence)."""
    owners: dict[tuple, list[str]] = {}
    for res in results:
        for r in res.rows:
            if r.key[0] not in ("trend", "none"):
                owners.setdefault(r.key, []).append(res.claim.id)
    for res in results:
        for r in res.rows:
            others = [c for c in owners.get(r.key, []) if c != res.claim.id]
            r.shared_with = list(dict.fromkeys(others))


# --------------------------------------------------------------------------- the paper's gaps
def _paper(result: ClaimResult, stand_ins: dict) -> None:
    claim = result.claim
    check = check_on_paper(claim)
    result.paper_status = check.status if check.status != "fails" else f"fails: {check.reason}"
    result.paper_effect = check.effect
    if check.status == "uncheckable":
        result.paper = f"no cells to compare ({check.reason})"
        return
    unit = claim.unit
    stated = claim.margin_text()
    n = len(check.gaps)
    if claim.trend is not None:
        text = f"the gap changes by {_num(check.effect, unit)} {unit} (mean over its settings)"
    elif claim.aggregate == "mean" or n == 1:
        text = f"{_num(check.effect, unit)} {unit}" + (f" (mean of {n} settings)" if n > 1 else "")
    else:
        gaps = [g.gap for g in check.gaps]
        text = f"from {_num(min(gaps), unit)} to {_num(max(gaps), unit)} {unit} ({n} settings)"
    if stated and claim.test == "superiority":
        text += f"; stated: {stated}"
    elif claim.test == "stated-gap":
        text += f"; stated gap: {stated}"
    result.paper = text


def _row_paper_gap(
    claim: Claim, row: Comparison, stand_ins: dict, gaps: list
) -> tuple[float | None, str]:
    """The paper's gap (of ``gaps``, the claim's) in the setting a row stands for, and a note
    where the paper's cells disagree. A paper setting matches when all its keys match the row's
    (its dataset through the stand-ins); of several, the most specific (the most keys: Table 5's
    CIFAR-10, α 0.5, C 0.1 over Table 3's CIFAR-10, α 0.5, which names no C). Equally specific
    matches with one gap give it; with different gaps (a stand-in for two paper datasets) none,
    and the note gives them."""
    if claim.trend is not None or not row.setting:
        return None, ""
    sub = row.setting.get("sub", "")
    matches = []
    for g in gaps:
        ok = True
        for key, value in g.setting:
            if key == "dataset":
                ok = stands_for(row.setting.get("dataset"), value, stand_ins)
            elif key == "round":
                ok = sub == f"round {value}"
            elif key == "target_accuracy":
                ok = sub == f"T = {value * 100:g}%"
            else:
                mine = key_value(row.setting.get(key))
                ok = mine is not None and _equal(mine, value)
            if not ok:
                break
        if ok:
            matches.append(g)
    if not matches:
        return None, ""
    most = max(len(g.setting) for g in matches)
    best = [g for g in matches if len(g.setting) == most]
    found = {round(g.gap, 9) for g in best}  # the same cell read through two tables: one gap
    if len(found) == 1:
        return best[0].gap, ""
    cells = "; ".join(
        f"{paper_setting_text(dict(g.setting))}: {_num(g.gap, claim.unit)}" for g in best
    )
    return None, f"the paper's gap differs between the settings this row stands for ({cells})"


def _equal(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return str(a) == str(b)


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
    if key_value(setting.get("participation")) is not None:
        parts.append(f"C={setting['participation']:g}")
    parts += [f"E={int(setting['local_epochs'])}", f"R={int(setting['rounds_planned'])}"]
    return ", ".join(parts + ([sub] if sub else []))


def _num(x, unit: str, signed: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    text = f"{x:+.{DECIMALS[unit]}f}" if signed else f"{x:.{DECIMALS[unit]}f}"
    return text.replace("-", "−")


def _seeds_text(v: Verdict) -> str:
    if v.seeds_needed is None:
        return ""
    return f"> {MAX_SEEDS}" if v.seeds_needed > MAX_SEEDS else str(v.seeds_needed)


def _p_text(p: float) -> str:
    if p is None or math.isnan(p):
        return DASH
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _badge(verdict: str) -> str:
    fg, bg = COLOURS[verdict]
    return (f'<span class="verdict" style="color:{fg};background:{bg};border:1px solid {fg}">'
            f"{html.escape(verdict)}</span>")  # fmt: skip


def summary(results: list[ClaimResult]) -> str:
    """E.g. "Of 36 claims: 12 hold, 2 contradicted, ...; 3 comparisons are rows of several
    claims." (per claim, not per row)."""
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
    text = f"Of {len(results)} claims: " + ", ".join(f"{counts[v]} {_plural(v, counts[v])}"
                                                     for v in VERDICTS)  # fmt: skip
    shared = {r.key for res in results for r in res.rows if r.shared_with}
    if shared:
        text += (f"; {len(shared)} comparison{'s are rows' if len(shared) > 1 else ' is a row'} "
                 "of more than one claim (named in its notes)")  # fmt: skip
    return text + "."


def _plural(verdict: str, n: int) -> str:
    return "hold" if verdict == "holds" and n != 1 else verdict
