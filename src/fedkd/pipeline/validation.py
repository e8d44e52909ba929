"""The config's validation: the JSON schema first, then what a schema cannot express (variants,
strategies and layouts exist, grids resolve, every run spec passes RunSpec's own validation),
every problem listed at once with its key."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from fedkd.pipeline.paths import normalise_path_keys
from fedkd.pipeline.plan import Plan, grid_points
from fedkd.report.targets import ALIASES, LAYOUTS


class ConfigError(Exception):
    pass


def validate_config(cfg: dict, schema_path: Path, check_specs: bool = True) -> None:
    """Raise ConfigError listing every problem of ``cfg``. ``check_specs``: also validate every
    distinct run spec (the main process; job steps on a cluster skip it)."""
    errors = schema_errors(cfg, schema_path)
    if not errors:
        errors = semantic_errors(cfg, check_specs)
    if errors:
        listing = "".join(f"\n  - {e}" for e in errors)
        raise ConfigError(f"the configuration has {len(errors)} error(s):{listing}")


def schema_errors(cfg: dict, schema_path: Path) -> list[str]:
    from jsonschema import Draft202012Validator

    schema = yaml.safe_load(schema_path.read_text())
    errors = []
    for err in Draft202012Validator(schema).iter_errors(cfg):
        for e in _leaf_errors(err):
            msg = f"{_key_path(e.absolute_path)}: {e.message}"
            if msg not in errors:
                errors.append(msg)
    return sorted(errors)


def _leaf_errors(err) -> list:
    """For "not valid under any of the given schemas" (oneOf), the reasons from the alternatives
    whose type matched, so the message names the bad key and value, not the whole mapping.
    """
    if err.validator != "oneOf" or not err.context:
        return [err]
    relevant = [c for c in err.context if c.validator != "type" or c.relative_path]
    if not relevant:
        return [err]
    return [leaf for c in relevant for leaf in _leaf_errors(c)]


def _key_path(parts) -> str:
    text = ""
    for p in parts:
        text += f"[{p}]" if isinstance(p, int) else (f".{p}" if text else str(p))
    return text or "(top level)"


def semantic_errors(cfg: dict, check_specs: bool = True) -> list[str]:
    """Cross-references the schema cannot express: variants and strategies exist, each entry has a
    layout of its group, grids resolve to valid runs, names are unique, and (``check_specs``)
    every run spec validates."""
    from fedkd.strategies import strategy_names

    errors = []
    strategies = strategy_names()
    variants = cfg.get("variants") or {}
    for vname, v in variants.items():
        if v["strategy"] not in strategies:
            errors.append(
                f"variants.{vname}.strategy: {v['strategy']!r} is not a registered strategy; "
                f"choose one of: {', '.join(sorted(strategies))}"
            )
    tables, figures = cfg.get("tables") or {}, cfg.get("figures") or {}
    for name in sorted(set(tables) & set(figures)):
        errors.append(f"figures.{name}: a table has the same name; outputs would collide")
    plan = Plan(cfg)
    specs: dict[str, tuple[str, dict, list[str]]] = {}  # key → (what, spec, users)
    for group, entries in (("tables", tables), ("figures", figures)):
        for name, entry in entries.items():
            where = f"{group}.{name}"
            layout = LAYOUTS.get(entry.get("layout", name))
            if layout is None:
                hint = f" (layout {ALIASES[name]!r}?)" if name in ALIASES else ""
                errors.append(
                    f"{where}.layout: missing; {name!r} is not a layout name{hint}; layouts "
                    f"are: {', '.join(LAYOUTS)}"
                )
                continue
            if group != f"{layout.output}s":
                errors.append(f"{where}.layout: {layout.name!r} belongs under {layout.output}s")
            errors += _entry_errors(cfg, plan, where, layout, entry, variants, specs)
    if check_specs:
        errors += _spec_errors(specs)
    return errors


def _entry_errors(cfg, plan, where, layout, entry, variants, specs) -> list[str]:
    errors = []
    columns = entry.get("columns") or {}
    points = grid_points(entry)
    if layout.draws_from:
        errors += [
            f"{where}.{key}: layout {layout.name} takes no {key}; it compares the runs of the "
            "configuration's other tables"
            for key in ("grid", "columns", "seeds", "paper")
            if key in entry
        ]
        if not plan.drawn_from(where.split(".", 1)[1]):
            errors.append(
                f"{where}: layout {layout.name} compares the runs of other tables, and no table "
                "or figure of this configuration has the runs it needs; remove the entry"
            )
    elif layout.input != "none":
        if not points:
            errors.append(f"{where}.grid: layout {layout.name} needs a grid of runs")
        if layout.input in ("aggregate", "run") and not columns:
            errors.append(
                f"{where}.columns: layout {layout.name} needs at least one column (label → variant)"
            )
    for label, column in columns.items():
        if isinstance(column, dict) and "best_of" in column:
            names = list(column["best_of"])
            if "best_of" not in layout.options:
                takes = [n for n, lay in LAYOUTS.items() if "best_of" in lay.options]
                errors.append(
                    f"{where}.columns.{label}: layout {layout.name} cannot show the best of a "
                    f"sweep; best_of columns go in layouts {', '.join(takes)}"
                )
        else:
            names = [column] if isinstance(column, str) else [column["variant"]]
            names += [
                c["variant"] for c in ([] if isinstance(column, str) else column.get("cases", []))
            ]
        errors += [
            f"{where}.columns.{label}: variant {n!r} is not defined under variants"
            for n in names
            if n not in variants
        ]
    if errors:
        return errors
    if layout.input == "partitions":
        for point in points:
            if plan.keys_of(point["dataset"]).get("dataset_options"):
                errors.append(
                    f"{where}.grid: dataset {point['dataset']!r} has dataset_options; "
                    "`fedkd partition` cannot draw its partition"
                )
    check = layout.config_check()
    if check is not None:
        resolved = [normalise_path_keys({**plan.keys_of(p["dataset"]), **p}) for p in points]
        errors += check(where, entry, resolved)
    # the run specs, checked once each in _spec_errors (RunSpec knows what each key needs, e.g.
    # a Dirichlet partition its alpha)
    name = where.split(".", 1)[1]
    for point in points:
        for label, column in columns.items():
            for variant in plan.column_variants(column, point):
                spec = plan.output_point_spec(name, point, variant)
                key = json.dumps([variant, spec], sort_keys=True)
                specs.setdefault(key, (f"variant {variant}", spec, []))[2].append(
                    f"{where}.columns.{label}"
                )
    errors += _paper_errors(plan, where, name, entry, layout)
    if layout.input == "partitions":
        for point in points:
            spec = normalise_path_keys({**plan.keys_of(point["dataset"]), **point})
            spec["dataset"] = point["dataset"]
            key = json.dumps(["partition", spec], sort_keys=True)
            specs.setdefault(key, ("partition", spec, []))[2].append(f"{where}.grid")
    return errors


def _paper_errors(plan, where, name, entry, layout) -> list[str]:
    """``paper:`` names a transcribed paper table, on a table drawn from runs, whose companion
    name is free."""
    from fedkd.pipeline.plan import VS_PAPER
    from fedkd.report.paper_values import load_paper_values

    key = entry.get("paper")
    if key is None:
        return []
    known = load_paper_values()
    if key not in known:
        return [f"{where}.paper: {key!r} is not a paper table; known: {', '.join(known)}"]
    if layout.output != "table" or layout.input != "aggregate":
        return [f"{where}.paper: only tables drawn from runs can be set beside the paper"]
    if f"{name}{VS_PAPER}" in plan.outputs:
        return [f"{where}.paper: its companion {name}{VS_PAPER} collides with an output's name"]
    return []


def _spec_errors(specs: dict) -> list[str]:
    """Every distinct run spec through fedkd's own validation (unknown strategy parameters, a
    partition without its alpha, ...); one message per problem, with the outputs needing it."""
    from fedkd.config import RunSpec, SpecError

    found: dict[str, list[str]] = {}
    for what, spec, wheres in specs.values():
        try:
            RunSpec.from_dict(dict(spec))
        except SpecError as exc:
            for line in str(exc).splitlines()[1:] or [str(exc)]:
                msg = f"{what} on {spec['dataset']}: {line.strip()}"
                users = found.setdefault(msg, [])
                users.extend(w for w in wheres if w not in users)
    return [f"{msg} (needed by {', '.join(users)})" for msg, users in found.items()]
