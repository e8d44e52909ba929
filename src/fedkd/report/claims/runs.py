"""The claims' values from the runs: per claim and setting, each method's value per seed (and
why a seed has none), read from the aggregate of the configuration's other tables' runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from fedkd.collapse import MARK
from fedkd.report.aggregate import SETTING_KEYS, ReportError
from fedkd.report.best_of import best_of_choices
from fedkd.report.claims.claim import Claim
from fedkd.report.claims.residual import Residual, two_way_residual
from fedkd.report.keys import (
    absent_in_row,
    absent_settings,
    check_same_setting,
    group_runs,
    order_rows,
)
from fedkd.report.names import display_name
from fedkd.report.options import Options
from fedkd.report.tables.at_rounds import DEFAULT_ROUNDS
from fedkd.report.tables.rounds_to_target import target_accuracies
from fedkd.report.text import key_value
from fedkd.runtime.seeding import clients_a_round

# the run keys that make a setting: the aggregate's setting keys but those of the method (the
# claims compare methods within a setting); runs of one setting differ only in method and seed
METHOD_KEYS = ("strategy", "params", "variant", "model")
SETTING = [k for k in SETTING_KEYS if k not in METHOD_KEYS]
# a run that diverged ended by the method's own doing: it counts with what it reached; one that
# failed (an error stopped its job) ended by no doing of the method: it has no result yet
DIVERGED = "diverged"
# metrics a run has whatever table lists it (no table option such as rounds or targets): the
# variance of a setting pools every table's methods of that setting on these
POOLED_METRICS = ("best", "final", "drop", "forgetting", "local_final")


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
    collapsed_seeds: set[int] = field(default_factory=set)
    step: float = 0.0  # the measurement's resolution in the claim's unit (0: not known)
    no_value: set[int] = field(default_factory=set)  # seeds whose runs can never give the value


@dataclass
class SettingValues:
    """The claim's two methods in one setting, and every method of the setting (``methods``,
    label -> runs, the two included) for the setting's seed-to-seed variance."""

    table: str
    setting: dict
    treated: MethodRuns
    base: MethodRuns
    methods: dict[str, MethodRuns] = field(default_factory=dict)
    # label -> variants, for a tuned column (best_of) chosen on the test values compared
    tuned: dict[str, int] = field(default_factory=dict)

    def subs(self) -> list[str]:
        found = [s for m in (self.treated, self.base) for v in m.values.values() for s in v]
        return list(dict.fromkeys(found)) or [""]

    def pair(self, sub: str, seed: int) -> tuple[float, float] | str:
        """The two values at ``seed``, or why there are none: "failed", "missing", or "no
        value" where the setting's runs can never give one (their note says why)."""
        sides = (self.treated, self.base)
        if any(seed in m.no_value for m in sides):
            return "no value"
        got = []
        for m in sides:
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

    def residual(self, sub: str, seeds: list[int]) -> Residual:
        """The setting's seed-to-seed variance at ``sub`` on ``seeds``: the two-way residual of
        every method with a value at each of them."""
        methods = self.methods or {"treated": self.treated, "base": self.base}
        values = {
            label: {s: v[sub] for s, v in m.values.items() if sub in v}
            for label, m in methods.items()
        }
        return two_way_residual(values, seeds)


def setting_values(claim: Claim, table: str, info: dict, df: pd.DataFrame, stand_ins,
                   memo: dict | None = None) -> list:  # fmt: skip
    """The claim's methods' values in each accepted setting of ``table`` where either has runs
    and neither is ``absent`` (a setting where only one has them is missing the other's: it
    becomes a "not run" row), with the values of the setting's other methods (``df``: every
    method of the table). ``memo`` keeps what claims reading the same table on the same metric
    share."""
    memo = {} if memo is None else memo
    options = info.get("options") or {}
    absent = absent_settings(Options(table, {"absent": info.get("absent") or {}}, ("absent",)))
    groups = _groups(claim, table, info, df, memo)
    on_test = memo[("on test", table, claim.metric == "rounds_to_target")]
    out = []
    for key in order_rows(SETTING, groups, {}):
        setting = dict(zip(SETTING, key, strict=True))
        by_label = groups[key]
        if not claim.accepts(setting, stand_ins):
            continue
        if not ({claim.treatment, claim.baseline} & set(by_label)):
            continue
        if absent_in_row(absent, (claim.treatment, claim.baseline), SETTING, key, by_label):
            continue  # the table has no cell of the method here: not a setting of the pair
        for label, runs in by_label.items():
            # one run per seed and method: the pairing needs it
            check_same_setting(
                runs, f"claims: {table} {setting_text(setting, {})} {label!r}", "rows"
            )
        methods = {
            label: _memo_runs(memo, claim, label, by_label, table, options, key)
            for label in dict.fromkeys([claim.treatment, claim.baseline, *by_label])
        }
        treated, base = methods[claim.treatment], methods[claim.baseline]
        tuned = {label: k for (row, label), k in on_test.items() if row == key}
        out.append(SettingValues(table, setting, treated, base, methods, tuned))
    return out


def _groups(claim: Claim, table: str, info: dict, df, memo: dict) -> dict:
    """The table's runs by setting and label (``df``: its runs, or a function giving them)."""
    rounds = claim.metric == "rounds_to_target"
    picked = ("groups", table, rounds)
    if picked not in memo:
        df = df() if callable(df) else df
        df, memo[("on test", table, rounds)] = _best_of(claim, table, info, df)
        memo[picked] = group_runs(df, SETTING)
    return memo[picked]


def _memo_runs(memo: dict, claim: Claim, label: str, by_label: dict, table: str, options: dict,
               key: tuple) -> MethodRuns:  # fmt: skip
    done = ("runs", table, claim.metric, claim.rounds_from, key, label)
    if done not in memo:
        setting = dict(zip(SETTING, key, strict=True))
        memo[done] = _method_runs(claim, label, by_label, table, options, setting)
    return memo[done]


def pool_methods(claim: Claim, values: list[SettingValues], sources: dict, runs: pd.DataFrame,
                 memo: dict) -> None:  # fmt: skip
    """Adds to each setting's methods those the other tables of ``sources`` run in the same
    setting (a table's column whose runs are already there counts once), for the metrics whose
    value does not depend on the table (POOLED_METRICS)."""
    if claim.metric not in POOLED_METRICS or not values:
        return
    by_setting: dict[tuple, dict[str, MethodRuns]] = {}
    for name in runs["table"].unique():  # in order of appearance, without a loop over rows
        info = sources.get(name)
        # runs that stop at a target accuracy are another treatment of the setting: left out
        if info is None or info.get("layout") == "rounds_to_target":
            continue
        options = info.get("options") or {}
        groups = _groups(claim, name, info, lambda n=name: runs[runs["table"] == n], memo)
        for key, by_label in groups.items():
            found = by_setting.setdefault(_same_key(key), {})
            for label in by_label:
                m = _memo_runs(memo, claim, label, by_label, name, options, key)
                found[f"{name}/{label}"] = m
    for sv in values:
        seen = {frozenset(m.runs.values()) for m in sv.methods.values()}
        key = _same_key(tuple(sv.setting[k] for k in SETTING))
        for label, m in by_setting.get(key, {}).items():
            ran = frozenset(m.runs.values())
            if label.split("/", 1)[0] != sv.table and m.runs and ran not in seen:
                seen.add(ran)
                sv.methods[label] = m


def _same_key(key: tuple) -> tuple:
    """A setting key that equals another table's for the same setting (NaN included)."""
    return tuple(str(key_value(v)) for v in key)


def _best_of(claim: Claim, table: str, info: dict, df: pd.DataFrame):
    """A tuned column (best_of) keeps per setting the variant its table shows; with
    {(setting, label): variants} for the choices made on the test set."""
    sweeps = {k: v for k, v in (info.get("best_of") or {}).items() if k in set(df["label"])}
    if not sweeps:
        return df, {}
    opts = Options(table, {"best_of": sweeps}, ("best_of",))
    if claim.metric == "rounds_to_target":
        targets = target_accuracies(table, info.get("options") or {})

        def rounds(rows, status):
            from fedkd import metrics

            r = metrics.rounds_to_target(rows, _target(targets, rows["alpha"].iloc[0], table))
            return None if r is None else float(r)

        picked, _, on_test = best_of_choices(
            df, SETTING, opts, rounds, higher_better=False, partial_ok=True, by_validation=False
        )
    else:
        from fedkd.report.tables.common import stat_fn

        picked, _, on_test = best_of_choices(df, SETTING, opts, stat_fn("best"))
    return picked, on_test


def _method_runs(claim, label: str, by_label: dict, table: str, options: dict, setting: dict):
    out = MethodRuns()
    name = display_name(label)
    events: list[tuple[str, int, str]] = []  # (what happened, seed, run): one note per what
    never = _never_played(claim, options, setting)
    for run, rows in sorted(by_label.get(label, {}).items()):
        seed, status = int(rows["seed"].iloc[0]), str(rows["status"].iloc[0])
        out.runs[seed] = run
        if never:  # no run of the setting has the value, whatever it does: none is lost
            out.no_value.add(seed)
            events.append((f": {never}", seed, ""))
            continue
        out.step = max(out.step, measurement_step(claim.metric, rows))
        played = rows[rows["round"] >= 1].sort_values("round", kind="mergesort")
        # accuracy at a round, or the round a target is reached, needs only the rounds up to it
        partial = claim.metric in ("at_round", "rounds_to_target")
        # a run that diverged ended there: it counts with what it reached (intention to treat);
        # one still running, or stopped by an error, is missing
        stopped = status == DIVERGED
        if "collapsed" in rows.columns and bool(rows["collapsed"].iloc[0]):
            out.collapsed = True
            out.collapsed_seeds.add(seed)
            events.append((f" collapsed to chance {MARK}, counted as it is", seed, run))
        compared = played
        if claim.metric == "at_round":  # rounds the claim leaves out are never compared
            compared = played[played["round"] >= claim.rounds_from]
        bad = _non_finite(compared, claim.metric)
        if bad:
            out.lost[seed] = "failed"
            events.append((f": non-finite {bad}, no value to compare", seed, run))
            continue
        if played.empty:
            out.lost[seed] = "failed" if stopped else "missing"
            events.append((f" {status or 'unfinished'} before its first round", seed, run))
            continue
        if status != "complete" and not stopped and not partial:
            out.lost[seed] = "missing"
            what = (
                "failed (an error stopped it, not the method: re-run to resume it)"
                if status == "failed"
                else status
            )
            events.append((f" {what or 'unfinished'}", seed, run))
            continue
        values, note = metric_values(
            claim.metric, played, "complete" if stopped else status, options, setting, table
        )
        if claim.metric == "at_round":
            values = {s: v for s, v in values.items() if int(s.split()[1]) >= claim.rounds_from}
        if note:
            events.append((f": {note}", seed, ""))
        if stopped:
            last = int(played["round"].iloc[-1])
            events.append((f" {status} after round {last}, counted with what it reached", seed,
                           run))  # fmt: skip
        elif status != "complete":
            out.lost[seed] = "missing"  # rounds it has not reached yet
        elif not values:
            out.lost[seed] = "missing"
        out.values[seed] = values
    out.notes = grouped_notes(name, events)
    return out


def _never_played(claim, options: dict, setting: dict) -> str:
    """Why the runs of ``setting`` can never give the value of an at-round ``claim``: none of
    the table's rounds from the claim's first on is one they play; "" where some is."""
    if claim.metric != "at_round":
        return ""
    shown = [int(r) for r in options.get("rounds") or DEFAULT_ROUNDS]
    planned = int(setting["rounds_planned"])
    if any(claim.rounds_from <= r <= planned for r in shown):
        return ""
    return (
        f"no value: the claim compares the table's rounds {', '.join(map(str, shown))} from "
        f"round {claim.rounds_from} on, and the runs end at round {planned}"
    )


def measurement_step(metric: str, rows: pd.DataFrame) -> float:
    """The smallest change of ``metric`` a run can show, in the claim's unit: one test example
    of an accuracy (100/test-set size pp), one of the forgetting F (a mean over classes of
    accuracy drops: 1/test-set size), one round; the clients' local accuracy is the mean over
    the round's m clients of their models' accuracies on the test set, so one example of one
    client, 100/(m · test-set size) pp. 0 where it is not known (the test-set size not
    recorded)."""
    if metric == "rounds_to_target":
        return 1.0
    size = pd.to_numeric(rows.get("test_size"), errors="coerce") if "test_size" in rows else None
    if size is None or size.isna().all() or not float(size.max()) > 0:
        return 0.0
    if metric == "local_final":
        first = rows.iloc[0]
        return 100.0 / (
            float(size.max())
            * clients_a_round(int(first["clients"]), float(first["participation"]))
        )
    return (1.0 if metric == "forgetting" else 100.0) / float(size.max())


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
        last = int(rows["round"].iloc[-1])
        if status == "complete":  # a run that stopped early keeps its last accuracy after it
            planned = int(setting["rounds_planned"])
            have.update({int(r): acc.iloc[-1] for r in rounds if last < int(r) <= planned})
        return {f"round {int(r)}": 100 * float(have[int(r)]) for r in rounds if int(r) in have}, ""
    if metric == "rounds_to_target":
        target = _target(target_accuracies(table, options), setting["alpha"], table)
        sub = f"T = {target * 100:g}%"
        r = metrics.rounds_to_target(rows, target)
        if r is not None:
            return {sub: float(r)}, ""
        if status != "complete":
            return {}, f"{status} before reaching T"
        return {sub: not_reached(setting)}, "T not reached, counted as R+1"
    raise ValueError(f"unknown metric {metric!r}")


def not_reached(setting: dict) -> float:
    """The rounds a target never reached within the planned R counts as: R + 1, the fewest it
    could need (a lower bound; fedkd.report.claims.compare tells it by this value)."""
    return float(setting["rounds_planned"] + 1)


def _target(targets: dict[float, float], alpha, table: str) -> float:
    alpha = key_value(alpha)
    if alpha is None or float(alpha) not in targets:
        raise ReportError(
            f"claims: {table} has no target accuracy for alpha {alpha}; give it one under its "
            "options.targets"
        )
    return targets[float(alpha)]


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
