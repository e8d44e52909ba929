"""A configuration's own claims: its ``claims:`` entries, each turned into the ``Claim`` the
registry would hold for it (one model, two sources), and checked when the workflow plans.

An entry takes the fields of ``Claim`` under their own names (tables, treatment, baseline,
direction, metric, where, test, margin, aggregate, trend, rounds_from, note), its ``statement``
in place of a paper's quote and an optional ``id``; ``treatment`` or ``baseline`` may be
``{each_of: [...]}``, one claim per label (as the registry writes ``_beats(b) for b in ...``).
Kept free of heavy imports: the Snakefile plans with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fedkd.report.claims.claim import DECLARED, Claim, Trend, stands_for
from fedkd.report.names import paper_dataset_name

FIELDS = (
    "statement", "id", "tables", "treatment", "baseline", "direction", "metric", "where",
    "test", "margin", "gap_fraction", "aggregate", "trend", "rounds_from", "note",
)  # fmt: skip
REQUIRED = ("statement", "tables", "treatment", "baseline")
TREND_FIELDS = ("key", "toward", "start", "end")
EACH_OF = "each_of"
# the run keys a setting is told by (fedkd.report.claims.runs.SETTING, which imports pandas)
WHERE_KEYS = (
    "dataset", "partition", "alpha", "shards", "clients", "participation", "local_epochs",
    "rounds_planned",
)  # fmt: skip


class DeclaredClaimError(ValueError):
    """A ``claims:`` entry that makes no claim, named by its index and statement."""


def entry_name(entry, index: int) -> str:
    """How an error names an entry: ``claims[1] ("FedDyn beats FedAvg")``."""
    statement = entry.get("statement") if isinstance(entry, Mapping) else None
    if isinstance(statement, str) and statement.strip():
        short = statement.strip()
        short = short if len(short) <= 60 else short[:57] + "..."
        return f"claims[{index}] ({short!r})"
    return f"claims[{index}]"


def entry_claims(entry, index: int) -> tuple[Claim, ...]:
    """The claims one ``claims:`` entry declares (several with ``each_of``), or
    DeclaredClaimError saying what to change."""
    where = entry_name(entry, index)

    def refuse(problem: str) -> DeclaredClaimError:
        return DeclaredClaimError(f"{where}: {problem}")

    if not isinstance(entry, Mapping):
        raise refuse(f"an entry is a mapping with keys {', '.join(REQUIRED)}; got {entry!r}")
    unknown = sorted(str(k) for k in entry if k not in FIELDS)
    if unknown:
        raise refuse(f"unknown key(s) {', '.join(unknown)}; the keys are: {', '.join(FIELDS)}")
    missing = [k for k in REQUIRED if entry.get(k) in (None, "", [], {})]
    if missing:
        raise refuse(f"missing {', '.join(missing)}")
    statement = entry["statement"]
    if not isinstance(statement, str) or not statement.strip():
        raise refuse("statement is the claim in words (text)")
    tables = entry["tables"]
    tables = tuple(str(t) for t in (tables if isinstance(tables, list) else [tables]))
    treatments = _labels(entry["treatment"], "treatment", refuse)
    baselines = _labels(entry["baseline"], "baseline", refuse)
    pairs = [(t, b) for t in treatments for b in baselines if t != b]
    if not pairs:
        raise refuse("treatment and baseline name the same column; compare two columns")
    own_id = entry.get("id")
    if own_id is not None and not isinstance(own_id, str):
        raise refuse(f"id is text (lower-case words joined by '-'), got {own_id!r}")
    fields = {k: entry[k] for k in ("direction", "metric", "test", "aggregate", "note")
              if k in entry}  # fmt: skip
    for key in ("margin", "gap_fraction", "rounds_from"):
        if key in entry:
            fields[key] = entry[key]
    if isinstance(fields.get("margin"), Mapping):
        fields["margin"] = {str(k): v for k, v in fields["margin"].items()}
    if "where" in entry:
        fields["where"] = _where(entry["where"], refuse)
    if entry.get("trend") is not None:
        fields["trend"] = _trend(entry["trend"], refuse)
    claims = []
    for treatment, baseline in pairs:
        if own_id and len(pairs) == 1:
            claim_id = own_id
        else:
            pair = f"{_slug(treatment)}-vs-{_slug(baseline)}"
            claim_id = f"{own_id}-{pair}" if own_id else pair
        try:
            claims.append(Claim(
                id=claim_id, paper=DECLARED, source=f"claims[{index}]", quote=statement,
                treatment=treatment, baseline=baseline, tables=tables, **fields,
            ))  # fmt: skip
        except (TypeError, ValueError) as exc:
            raise refuse(str(exc)) from None
    return tuple(claims)


def declared_claims(entries) -> tuple[Claim, ...]:
    """Every claim of a configuration's ``claims:`` list, in its order; an id given twice is
    refused (two entries about the same pair need ids of their own)."""
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise DeclaredClaimError(f"claims: a list of claims, got {entries!r}")
    found: list[Claim] = []
    for index, entry in enumerate(entries):
        for claim in entry_claims(entry, index):
            if any(c.id == claim.id for c in found):
                raise DeclaredClaimError(
                    f"{entry_name(entry, index)}: id {claim.id!r} is another claim's too; give "
                    "the entry an id of its own (id: ...)"
                )
            found.append(claim)
    return tuple(found)


def _labels(value, key: str, refuse) -> list[str]:
    if isinstance(value, Mapping):
        if set(value) != {EACH_OF} or not isinstance(value[EACH_OF], list) or not value[EACH_OF]:
            raise refuse(f"{key} is a column label or {{{EACH_OF}: [label, ...]}}, got {value!r}")
        labels = [str(v) for v in value[EACH_OF]]
        if len(set(labels)) != len(labels):
            raise refuse(f"{key}.{EACH_OF} names a label twice: {labels}")
        return labels
    if isinstance(value, (list, tuple)):
        raise refuse(f"{key}: several columns are written {{{EACH_OF}: {list(value)}}}")
    return [str(value)]


def _where(value, refuse) -> dict[str, tuple]:
    if not isinstance(value, Mapping):
        raise refuse(f"where maps a run key to its values ({{alpha: [0.1]}}), got {value!r}")
    unknown = sorted(str(k) for k in value if k not in WHERE_KEYS)
    if unknown:
        raise refuse(f"where: no setting has key(s) {', '.join(unknown)}; the keys are: "
                     f"{', '.join(WHERE_KEYS)}")  # fmt: skip
    return {str(k): tuple(v) if isinstance(v, (list, tuple)) else (v,) for k, v in value.items()}


def _trend(value, refuse) -> Trend:
    if not isinstance(value, Mapping) or not set(value) <= set(TREND_FIELDS):
        raise refuse(
            f"trend is {{key: alpha, toward: low}} (or {{key: dataset, start: ..., end: ...}}), "
            f"got {value!r}"
        )
    try:
        return Trend(**{k: str(v) for k, v in value.items()})
    except (TypeError, ValueError) as exc:
        raise refuse(str(exc)) from None


def _slug(label: str) -> str:
    """A column label as a claim id's part: "M=1" -> "m-1"."""
    return re.sub(r"[^a-z0-9+.]+", "-", label.lower()).strip("-") or "column"


# ------------------------------------------------------------------------- planning
def declared_errors(config: dict, outputs: dict, plan=None) -> list[str]:
    """What is wrong with a configuration's ``claims:``, each naming its entry and the fix: an
    entry that makes no claim, a table the configuration does not have (or one without runs),
    a column the table does not have, a value its runs never have, ``where`` or a trend that
    no setting of its runs meets, an id the papers' registry already uses, claims with no
    claims table to show them. ``outputs``: the configuration's tables and figures; ``plan``
    (fedkd.pipeline.Plan): their runs' settings, for ``where`` and ``trend``."""
    from fedkd.report.claims import all_claims
    from fedkd.report.targets import get_layout

    entries = config.get("claims")
    if not entries:
        return []
    if not isinstance(entries, list):
        return [f"claims: a list of claims, got {entries!r}"]
    errors = []
    if not any(_layout_of(name, e) == "claims" for name, e in outputs.items()):
        errors.append(
            "claims: a configuration's claims are tested on its claims table; add one under "
            "tables (claims: {layout: claims, caption: ...})"
        )
    registry = {c.id for c in all_claims()}
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        try:
            claims = entry_claims(entry, index)
        except DeclaredClaimError as exc:
            errors.append(str(exc))
            continue
        where = entry_name(entry, index)
        for claim in claims:
            if claim.id in registry or claim.id in seen:
                whose = "a paper's claim" if claim.id in registry else "another claim"
                errors.append(
                    f"{where}: id {claim.id!r} is {whose}'s too; give the entry an id of its own "
                    "(id: ...)"
                )
            seen.add(claim.id)
        claim = claims[0]
        before = len(errors)
        for table in claim.tables:
            entry_out = outputs.get(table)
            try:
                layout = get_layout(_layout_of(table, entry_out or {}))
            except KeyError:
                layout = None
            if entry_out is None or layout is None:
                runs = [n for n, e in outputs.items() if _reads_runs(n, e)]
                errors.append(
                    f"{where}.tables: {table!r} is not a table or figure of this configuration; "
                    f"name one whose runs it compares: {', '.join(runs) or '(none)'}"
                )
                continue
            if layout.input != "aggregate" or layout.draws_from:
                errors.append(
                    f"{where}.tables: {table!r} (layout {layout.name}) has no runs of its own to "
                    "compare; name a table or figure drawn from runs"
                )
                continue
            if claim.metric == "rounds_to_target" and not (entry_out.get("options") or {}).get(
                "targets"
            ):
                errors.append(
                    f"{where}: metric 'rounds_to_target' counts the rounds to a table's target "
                    f"accuracies, and {table!r} (layout {layout.name}) has no options.targets; "
                    "name a table of layout rounds_to_target, or another metric"
                )
                continue
            value_error = _value_the_runs_lack(claim, table, config, entry_out)
            if value_error:
                errors.append(f"{where}: {value_error}")
                continue
            columns = list(entry_out.get("columns") or {})
            lacking = sorted({lab for c in claims for lab in (c.treatment, c.baseline)}
                             - set(columns))  # fmt: skip
            if lacking:
                errors.append(
                    f"{where}: {table!r} has no column {', '.join(map(repr, lacking))}; its "
                    f"columns are {', '.join(columns)} (treatment and baseline are column "
                    f"labels{_variant_hint(entry_out, lacking)})"
                )
        if plan is not None and len(errors) == before:
            # each claim of an each_of entry: its columns may be absent from other settings
            found = (_setting_error(c, plan, config.get("stand_ins") or {}) for c in claims)
            errors += [f"{where}: {e}" for e in dict.fromkeys(found) if e]
    return errors


def _table_settings(plan, table: str, claim: Claim) -> list[dict] | None:
    """The settings (run keys, as the claims table tells them) of the runs of ``table``'s
    treatment and baseline columns where both have a cell (the claims compare no setting where
    either is ``absent``); None where the plan cannot make them (another message says why)."""
    columns = plan.outputs[table].get("columns") or {}
    settings = []
    try:
        for point in plan.grid_points(table):
            pair = [plan.column_variants(columns[lab], point)
                    for lab in (claim.treatment, claim.baseline)]  # fmt: skip
            if not all(pair):
                continue
            for variant in (v for variants in pair for v in variants):
                spec = plan.output_point_spec(table, point, variant)
                keys = {k: spec.get(k) for k in WHERE_KEYS if k != "rounds_planned"}
                settings.append({**keys, "rounds_planned": spec.get("rounds")})
    except (KeyError, ValueError, TypeError):
        return None
    return settings


def _pair_absent(plan, claim: Claim) -> bool:
    """Whether a column of the claim's pair is ``absent`` from some setting of its tables."""
    return any(
        label in plan.absent(table)
        for table in claim.tables
        for label in (claim.treatment, claim.baseline)
    )


def _setting_error(claim: Claim, plan, stand_ins: dict) -> str | None:
    """Why no setting of the claim's tables can be compared, or None: ``where`` (or a margin
    per dataset) selects none of them, or a trend finds no two settings, alike but in its key,
    with its two ends (the claims table would say "not run" after every run is trained)."""
    from fedkd.report.claims.paper_check import trend_ends

    tables = ", ".join(map(repr, claim.tables))
    found_by = {t: _table_settings(plan, t, claim) for t in claim.tables}
    by_table = {t: found for t, found in found_by.items() if found is not None}
    settings = [s for found in by_table.values() for s in found]
    # the settings are those where both columns have a cell: say so where that leaves some out
    both = (
        f" of both {claim.treatment} and {claim.baseline} (absent from some)"
        if _pair_absent(plan, claim) else ""
    )  # fmt: skip
    if not settings:
        if not both or not by_table:
            return None
        return (
            f"the runs{both} of {tables} share no setting: the claim compares none; name "
            "columns that have cells in one setting"
        )
    accepted = [(t, s) for t, found in by_table.items() for s in found
                if claim.accepts(s, stand_ins)]  # fmt: skip
    if not accepted:
        keys = list(claim.where) or ["dataset"]
        have = "; ".join(f"{k} {_values_text(settings, k, stand_ins)}" for k in keys)
        what = f"where {_flow(claim.where)}" if claim.where else "margin per dataset"
        return (
            f"{what} selects no setting of {tables}, whose runs{both} have {have}; give values they "
            "have, or another table"
        )
    if claim.trend is None:
        return None
    key = claim.trend.key
    groups: dict[tuple, list] = {}
    for table, s in accepted:
        rest = tuple(str(s.get(k)) for k in WHERE_KEYS if k != key)
        groups.setdefault((table, rest), []).append(s.get(key))

    def stands(value, paper_dataset):
        return stands_for(value, paper_dataset, stand_ins)

    if any(trend_ends(claim.trend, values, stands) for values in groups.values()):
        return None
    have = _values_text([s for _, s in accepted], key, stand_ins)
    many = len({str(s.get(key)) for _, s in accepted}) > 1
    have += " in no two settings otherwise alike" if many else " only"
    if key == "dataset":
        what = (
            f"trend from {paper_dataset_name(claim.trend.start)} to "
            f"{paper_dataset_name(claim.trend.end)} compares a dataset standing for each"
        )
    else:
        what = f"trend along {key} compares two of its values"
    return (
        f"{what}, and the runs{both} of {tables} have {key} {have}; name a table whose runs have "
        "both, or drop the trend"
    )


def _values_text(settings: list[dict], key: str, stand_ins: dict) -> str:
    """The values of ``key`` over ``settings``, once each, a stand-in dataset with its paper's."""
    values = list(dict.fromkeys(s.get(key) for s in settings if s.get(key) is not None))
    if key == "dataset":
        return ", ".join(f"{v} (stand-in for {stand_ins[v]})" if v in stand_ins else str(v)
                         for v in values)  # fmt: skip
    return ", ".join(map(str, values)) or "none"


def _flow(where: Mapping) -> str:
    """``where`` as it is written: {alpha: [0.1]}."""
    return "{" + ", ".join(f"{k}: [{', '.join(map(str, v))}]" for k, v in where.items()) + "}"


def _run_values(config: dict, entry: dict, key: str) -> list:
    """The values of run key ``key`` over a table's grid points (its grid's, else the
    configuration's defaults'); [] where neither says."""
    grids = entry.get("grid") or {}
    default = (config.get("defaults") or {}).get(key)
    values = []
    for grid in grids if isinstance(grids, list) else [grids]:
        value = grid.get(key, default) if isinstance(grid, dict) else default
        values += value if isinstance(value, list) else [value]
    return [v for v in values if v is not None]


def _value_the_runs_lack(claim, table: str, config: dict, entry: dict) -> str | None:
    """Why the runs of ``table`` cannot give the value ``claim`` compares, or None: a round past
    their last (``rounds_from``), the clients' local accuracy of runs that do not evaluate it.
    Left to render (a "not run" row) where the configuration does not say."""
    rounds = [r for r in _run_values(config, entry, "rounds") if isinstance(r, int)]
    if claim.metric == "at_round" and rounds and claim.rounds_from > max(rounds):
        return (
            f"rounds_from {claim.rounds_from} is past the last round of the runs of {table!r} "
            f"({max(rounds)}); give a round they play, or more rounds"
        )
    if claim.metric == "at_round" and rounds:
        from fedkd.report.tables.at_rounds import DEFAULT_ROUNDS

        shown = (entry.get("options") or {}).get("rounds") or DEFAULT_ROUNDS
        if not any(claim.rounds_from <= int(r) <= max(rounds) for r in shown):
            return (
                f"metric 'at_round' compares the rounds {', '.join(map(str, shown))} of "
                f"{table!r} (its options.rounds, else these) from round {claim.rounds_from} on, "
                f"and its runs play {max(rounds)} rounds; give it options.rounds its runs play, "
                "or more rounds"
            )
    local = _run_values(config, entry, "eval_local") or [False]  # fedkd train's default
    if claim.metric == "local_final" and not any(local):
        return (
            f"metric 'local_final' compares the clients' local accuracy, which the runs of "
            f"{table!r} do not evaluate (eval_local false); set eval_local: true in its grid, or "
            "another metric"
        )
    return None


def name_entries(errors: list[str], entries) -> list[str]:
    """The schema's messages about a ``claims:`` entry ("claims[1].test: ...") with the entry's
    statement beside its index, as every other message names it."""
    if not isinstance(entries, list):
        return errors
    out = []
    for error in errors:
        found = re.match(r"claims\[(\d+)\]", error)
        if found and int(found[1]) < len(entries):
            named = entry_name(entries[int(found[1])], int(found[1]))
            error = named + error[found.end() :]
        out.append(error)
    return out


def _layout_of(name: str, entry: dict) -> str:
    return str((entry or {}).get("layout", name))


def _reads_runs(name: str, entry: dict) -> bool:
    from fedkd.report.targets import get_layout

    try:
        layout = get_layout(_layout_of(name, entry))
    except KeyError:
        return False
    return layout.input == "aggregate" and not layout.draws_from


def _variant_hint(entry: dict, lacking: list[str]) -> str:
    """Where a missing label is a column's variant: which column runs it."""
    hints = []
    for label, column in (entry.get("columns") or {}).items():
        variant = column if isinstance(column, str) else (column or {}).get("variant")
        if variant in lacking and variant != label:
            hints.append(f"variant {variant!r} is column {label!r}")
    return f"; {', '.join(hints)}" if hints else ""
