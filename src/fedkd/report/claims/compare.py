"""The rows of a claim: per setting the per-seed differences treatment − baseline (or, for a
trend, the per-seed change of the gap between two settings), one row per comparison."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedkd.collapse import MARK
from fedkd.report.claims.claim import Claim, stands_for
from fedkd.report.claims.paper_check import trend_ends
from fedkd.report.claims.residual import Residual
from fedkd.report.claims.runs import SettingValues, not_reached, setting_text
from fedkd.report.claims.verdict import Verdict
from fedkd.report.names import display_name, paper_dataset_name
from fedkd.report.text import DASH


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
    missing: int = 0  # seeds of the setting without a pair (a run not there yet)
    residual: Residual | None = None  # the setting's seed-to-seed variance (a diagnostic)
    step: float = 0.0  # the measurement's resolution in the claim's unit (0: not known)
    parts: tuple = ()  # a trend: its (start, end) rows, whose per-seed gaps it differences
    neither_reached: bool = False  # rounds to target: neither method reached it on any seed
    # some true difference may lie above / below the one counted, and why (verdict.Hypothesis
    # .withheld says which verdicts that rules out)
    open_above: bool = False
    open_below: bool = False
    open_why: list[str] = field(default_factory=list)
    collapsed_seeds: frozenset = frozenset()  # seeds where a run of the pair collapsed
    failed_seeds: frozenset = frozenset()  # the seeds ``failed`` counts


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
            diffs, failed, missing = {}, [], []
            for seed in sv.seeds():
                got = sv.pair(sub, seed)
                if got == "failed":
                    failed.append(seed)
                elif got == "missing":
                    missing.append(seed)
                elif got == "no value":
                    continue  # the runs ended without one: nothing to wait for (a note says why)
                else:
                    diffs[seed] = got[0] - got[1]
            notes = sorted(set(sv.treated.notes) | set(sv.base.notes))
            if missing:
                notes.append(
                    f"seed(s) {', '.join(map(str, missing))} without a pair: no verdict on the "
                    "other seeds alone"
                )
            margin, margin_note = claim.margin_for(sv.setting["dataset"], stand_ins)
            if margin_note:
                notes.append(margin_note)
            runs = (frozenset(sv.treated.runs.values()), frozenset(sv.base.runs.values()))
            collapsed = sv.treated.collapsed or sv.base.collapsed
            text = setting_text(sv.setting, stand_ins, sub)
            row = Comparison(
                sv.table, {**sv.setting, "sub": sub}, text + (f" {MARK}" if collapsed else ""),
                diffs, len(failed), notes, (runs, _value_kind(claim, sub, sv.setting)), margin,
                collapsed, missing=len(missing), residual=sv.residual(sub, sorted(diffs)),
                step=max(sv.treated.step, sv.base.step), failed_seeds=frozenset(failed),
            )  # fmt: skip
            if claim.metric == "rounds_to_target" and diffs and not failed and not missing:
                never = not_reached(sv.setting)
                row.neither_reached = all(sv.pair(sub, s) == (never, never) for s in diffs)
            row.open_above, row.open_below, row.open_why = _bounds(claim, sv, sub, sorted(diffs))
            row.collapsed_seeds = frozenset(sv.treated.collapsed_seeds | sv.base.collapsed_seeds)
            out.append(row)
    return out


# the statistic a tuned column is chosen on where it reads the test set, and the direction in
# which the chosen variant is the best: a claim on that statistic knows which way it flatters
CHOSEN_ON = {"rounds_to_target": "lower", "best": "higher"}


def _bounds(claim: Claim, sv: SettingValues, sub: str, seeds: list[int]):
    """Whether the true per-seed differences may lie above or below those counted, and why: a
    target a run did not reach is counted as R + 1, the fewest rounds it could need; a column
    tuned on the test values compared shows its variant better than it is (on the claim's own
    statistic, in a known direction; on another, either way)."""
    above = below = False
    why = []
    if claim.metric == "rounds_to_target":
        never = not_reached(sv.setting)
        pairs = [sv.pair(sub, s) for s in seeds]
        if any(t == never for t, _ in pairs):  # the treatment needs more rounds than counted
            above = True
        if any(b == never for _, b in pairs):
            below = True
        if above or below:
            why.append("a target not reached counts as R + 1 rounds, the fewest it could need")
    good = CHOSEN_ON.get(claim.metric)
    for label, sign in ((claim.treatment, 1), (claim.baseline, -1)):
        if label not in sv.tuned:
            continue
        # the chosen variant looks better than it is: its true value lies on the worse side
        if good is None:
            above = below = True
        elif (good == "higher") == (sign > 0):
            below = True
        else:
            above = True
        why.append(
            f"{display_name(label)} is the best of {sv.tuned[label]} variants chosen on these "
            "test values, so it looks better than it is"
        )
    return above, below, why


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
        # a seed whose run failed in either setting, counted once (the others lost are missing)
        failed_seeds = start.failed_seeds | end.failed_seeds
        notes = sorted((set(start.notes) | set(end.notes)) - {c.notes[0] for c in lacking})
        if lost and not lacking:
            notes.append(f"seed(s) {', '.join(map(str, sorted(lost)))} in one setting only")
        notes += [f"{c.text}: {c.notes[0]}" for c in lacking]
        # not needed for the test, but missing all the same
        notes += [f"{c.text}: {c.notes[0]} (a setting between the two compared)" for c in between]
        what = _trend_text(claim, start, end, stand_ins)
        out.append(Comparison(
            table, {**end.setting}, what, diffs, len(failed_seeds), notes,
            ("trend", start.key, end.key), 0.0, start.collapsed or end.collapsed,
            # seeds one setting ran and the other did not (a setting without one method's runs
            # at all is "not run", said in the notes)
            missing=start.missing + end.missing + (0 if lacking else len(lost - failed_seeds)),
            parts=(start, end),
            step=max(start.step, end.step),
            # the change end − start: the start's bounds point the other way
            open_above=end.open_above or start.open_below,
            open_below=end.open_below or start.open_above,
            open_why=list(dict.fromkeys(start.open_why + end.open_why)),
            collapsed_seeds=start.collapsed_seeds | end.collapsed_seeds, failed_seeds=failed_seeds,
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


def dedup(rows: list[Comparison]) -> list[Comparison]:
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
