"""The config's validation: its size first (YAML aliases cannot blow it up), numbers as meant
(``1e-5``), the JSON schema, then what a schema cannot express (variants, strategies and layouts
exist, grids resolve, every run spec passes RunSpec's own validation, the data holds the clients),
every problem listed at once with its key; a misspelt key first, with the key it resembles."""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path

import yaml

# the configuration's reader, importable from here as before
from fedkd.echo import safe_message, safe_text, shown
from fedkd.pipeline.capacity import capacity_errors
from fedkd.pipeline.column_checks import column_errors
from fedkd.pipeline.config_file import (  # noqa: F401
    MAX_CONFIG_BYTES,
    ConfigError,
    read_config_file,
    read_config_files,
    reread_config,
)
from fedkd.pipeline.config_text import (
    data_root_errors,
    dataset_option_errors,
    label_errors,
    render_option_errors,
    stand_in_errors,
)
from fedkd.pipeline.grid import PlanTooLarge, check_plan_size, grid_points
from fedkd.pipeline.plan import Plan
from fedkd.report.claims.declared import declared_errors, name_entries
from fedkd.report.targets import ALIASES, LAYOUTS
from fedkd.run_paths import normalise_path_keys
from fedkd.values import ValueTooLarge, as_number, check_size

# the run keys every run's path spells; a configuration's `defaults` may leave them out, and they
# then take `fedkd train`'s defaults (RunSpec), like every other run key
PATH_KEYS = ("partition", "alpha", "clients", "participation", "local_epochs", "rounds")
# values that are text even when they spell a number (names, captions, a column's variant)
TEXT_KEYS = {"name", "description", "caption", "paper", "layout", "strategy", "variant"}
TEXT_KEYS |= {"statement", "id", "treatment", "baseline", "note"}  # a claims: entry's
# the sections whose values are run-spec keys, checked by RunSpec's own validation
RUN_SPEC_SECTIONS = ("defaults", "datasets", "variants")
# what an entry of a layout drawn from no runs gives in vain: the plan would train its runs
REGISTRY = "the strategy registry"
UNREAD_KEYS = {
    "none": {"grid": REGISTRY, "columns": REGISTRY, "seeds": REGISTRY},
    "partitions": {"columns": "its grid's partition files"},
}
TEXT_MAPS = {"stand_ins", "row_names", "column_names", "titles", "best_of", "each_of"}


def validate_config(cfg: dict, schema_path: Path, check_specs: bool = True) -> None:
    """Raise ConfigError listing every problem of ``cfg``. ``check_specs``: also validate every
    distinct run spec (the main process; job steps on a cluster skip it).

    ``cfg`` is completed in place first (``normalise_config``): the plan reads the same dict."""
    try:
        check_size(cfg, "the configuration")
    except ValueTooLarge as exc:
        raise ConfigError(f"the configuration is refused: {exc}") from None
    try:  # before any grid is expanded
        check_plan_size(cfg)
    except PlanTooLarge as exc:
        raise ConfigError(f"the configuration is refused: {exc}") from None
    normalise_config(cfg)
    errors = _option_size_errors(cfg, "")
    if errors:  # refused before anything copies or walks them per run
        raise ConfigError("the configuration is refused:" + "".join(f"\n  - {e}" for e in errors))
    errors = [
        e
        for key, value in (cfg.items() if isinstance(cfg, dict) else ())
        if key not in RUN_SPEC_SECTIONS  # RunSpec refuses theirs, naming the run key
        for e in non_finite_errors(value, (key,))
    ]
    errors += name_entries(schema_errors(cfg, schema_path), cfg.get("claims"))
    if not errors:
        errors = semantic_errors(cfg, check_specs)
    if errors:
        listing = "".join(f"\n  - {e}" for e in errors)
        raise ConfigError(f"the configuration has {len(errors)} error(s):{listing}")


def normalise_config(cfg: dict) -> None:
    """In place: text spelling a number becomes the number (Snakemake reads YAML 1.1, where
    ``1e-5`` is text), and ``defaults`` gets the path keys it leaves out from RunSpec."""
    from fedkd.config import RunSpec

    if not isinstance(cfg, dict):
        return  # the schema names it
    _numbers_in_place(cfg, None)
    defaults = cfg.get("defaults")
    if isinstance(defaults, dict):
        spec = RunSpec()
        for key in PATH_KEYS:
            defaults.setdefault(key, getattr(spec, key))


def non_finite_errors(node, path: tuple = ()) -> list[str]:
    """Every NaN or infinity, by its key: the schema's bounds cannot refuse NaN (every comparison
    with it is false), and no key of a configuration means either."""
    if isinstance(node, float) and not math.isfinite(node):
        return [f"{_key_path(path)}: {node} must be a finite number (NaN and infinity are refused)"]
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return []
    return [e for k, v in items for e in non_finite_errors(v, (*path, k))]


def _option_size_errors(node, where: str) -> list[str]:
    """Every params / model_options / dataset_options mapping within RunSpec's bound."""
    from fedkd.config import MAX_OPTION_VALUES

    errors = []
    if isinstance(node, dict):
        for k, v in node.items():
            path = f"{where}.{safe_text(k)}" if where else safe_text(k)
            if k in ("params", "model_options", "dataset_options") and isinstance(v, dict):
                try:
                    check_size(v, path, MAX_OPTION_VALUES)
                except ValueTooLarge as exc:
                    errors.append(str(exc))
            else:
                errors += _option_size_errors(v, path)
    return errors


def _config_number(text: str):
    """A number spelt as text, as the config means it: ``4e3`` without a decimal point is the
    count 4000 (resources such as ``mem_mb`` reach Snakemake as they are), ``1.0e3`` a float."""
    value = as_number(text)
    if isinstance(value, float) and value.is_integer() and "." not in text:
        return int(value)
    return value


def _numbers_in_place(node, key) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, str) and k not in TEXT_KEYS and key not in TEXT_MAPS | {"columns"}:
                node[k] = _config_number(v)
            elif k not in TEXT_MAPS:
                _numbers_in_place(v, k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, str) and key not in TEXT_MAPS:
                node[i] = _config_number(v)
            else:
                _numbers_in_place(v, key)


def schema_errors(cfg: dict, schema_path: Path) -> list[str]:
    """The schema's complaints, a misspelt key first with the key it resembles; a required key
    that a misspelling stands in for is not reported again."""
    from jsonschema import Draft202012Validator

    schema = yaml.safe_load(schema_path.read_text())
    unknown, other = [], []
    misspelt: set[tuple[str, str]] = set()  # (path, the key it resembles)
    leaves = [e for err in Draft202012Validator(schema).iter_errors(cfg) for e in _leaf_errors(err)]
    for e in leaves:
        where = _key_path(e.absolute_path)
        if e.validator == "additionalProperties" and isinstance(e.instance, dict):
            known = list((e.schema.get("properties") or {}).keys())
            for extra in sorted(set(e.instance) - set(known), key=str):
                if not isinstance(extra, str) or _matches_pattern(e.schema, extra):
                    continue
                close = difflib.get_close_matches(extra, known, n=1, cutoff=0.6)
                hint = (
                    f"; did you mean {shown(close[0])}?"
                    if close
                    else (f"; the keys here are: {', '.join(known)}" if known else "")
                )
                if close:
                    misspelt.add((where, close[0]))
                msg = f"{where}: {shown(extra)} was unexpected{hint}"
                if msg not in unknown:
                    unknown.append(msg)
            continue
        other.append((where, e))
    errors = []
    for where, e in other:
        if e.validator == "required" and any(
            (where, name) in misspelt
            for name in e.validator_value
            if e.message.startswith(f"{name!r} ")  # the one key this error is about
        ):
            continue
        msg = f"{where}: {_schema_message(e)}"
        if msg not in errors:
            errors.append(msg)
    return unknown + sorted(errors)


def _schema_message(e) -> str:
    """The schema's message, in fedkd's words where it has them: a boolean named as true or
    false, and text that YAML 1.1 read as a number or a boolean (``yes``, ``1:30``) named so."""
    from fedkd.values import yaml11_note

    if e.validator == "type" and e.validator_value == "boolean":
        return f"{shown(e.instance)} must be true or false{yaml11_note(e.instance)}"
    if e.validator == "type":
        return f"{e.message}{yaml11_note(e.instance)}{_quote_note(e)}"
    return e.message


def _quote_note(e) -> str:
    """For a number where text is expected (``--config name=2024``): how to write it as text."""
    wanted = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
    number = isinstance(e.instance, (int, float)) and not isinstance(e.instance, bool)
    if "string" not in wanted or not number:
        return ""
    return (
        f" (to mean the text {shown(e.instance)}, quote it: '{shown(e.instance)}' in YAML, "
        f"--config KEY='\"{shown(e.instance)}\"' on the command line)"
    )


def _matches_pattern(schema: dict, key: str) -> bool:
    import re

    return any(re.search(p, key) for p in (schema.get("patternProperties") or {}))


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
        key = safe_text(p)  # a key of the user's, echoed: no escape sequence reaches a terminal
        text += f"[{p}]" if isinstance(p, int) else (f".{key}" if text else key)
    return text or "(top level)"


def semantic_errors(cfg: dict, check_specs: bool = True) -> list[str]:
    """Cross-references the schema cannot express: variants and strategies exist, each entry has a
    layout of its group, grids resolve to valid runs, names are unique, and (``check_specs``)
    every run spec validates."""
    from fedkd.strategies import choose_a_strategy, strategy_names

    errors = []
    strategies = strategy_names()
    variants = cfg.get("variants") or {}
    for vname, v in variants.items():
        if v["strategy"] not in strategies:
            errors.append(
                f"variants.{safe_text(vname)}.strategy: {shown(v['strategy'])} is not a "
                "registered strategy; " + choose_a_strategy()
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
                hint = f" (layout {shown(ALIASES[name])}?)" if name in ALIASES else ""
                errors.append(
                    f"{where}.layout: missing; {shown(name)} is not a layout name{hint}; layouts "
                    f"are: {', '.join(LAYOUTS)}"
                )
                continue
            if group != f"{layout.output}s":
                errors.append(
                    f"{where}.layout: {shown(layout.name)} belongs under {layout.output}s"
                )
            errors += _entry_errors(cfg, plan, where, layout, entry, variants, specs)
    errors += label_errors(cfg) + data_root_errors(cfg)
    errors += stand_in_errors(cfg.get("stand_ins") or {})
    errors += declared_errors(cfg, {**tables, **figures}, plan)
    if check_specs:  # the loaders' options: imports each dataset's loader
        used = {p["dataset"] for name in plan.outputs for p in plan.grid_points(name)}
        errors += dataset_option_errors(cfg, used)
        errors += _spec_errors(specs)
    if not errors:  # the options are built from a configuration that holds together
        errors += render_option_errors(plan)
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
        # with claims of its own, a valid one always draws runs: each bad one is named with its
        # fix (declared_errors), and removing the claims table would be the wrong one
        if not plan.drawn_from(where.split(".", 1)[1]) and not cfg.get("claims"):
            errors.append(
                f"{where}: layout {layout.name} compares the runs of other tables, and no table "
                "or figure of this configuration has the runs it needs; remove the entry"
            )
    elif layout.input in UNREAD_KEYS:
        errors += [
            f"{where}.{key}: layout {layout.name} takes no {key}; it is drawn from {source}"
            for key, source in UNREAD_KEYS[layout.input].items()
            if key in entry
        ]
    if layout.input != "none" and not layout.draws_from:
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
                    f"{where}.columns.{safe_text(label)}: layout {layout.name} cannot show the best of a "
                    f"sweep; best_of columns go in layouts {', '.join(takes)}"
                )
        else:
            names = [column] if isinstance(column, str) else [column["variant"]]
            names += [
                c["variant"] for c in ([] if isinstance(column, str) else column.get("cases", []))
            ]
        for n in (n for n in names if n not in variants):
            close = difflib.get_close_matches(str(n), [str(v) for v in variants], n=1)
            hint = f"; did you mean {shown(close[0])}?" if close else ""
            errors.append(
                f"{where}.columns.{safe_text(label)}: variant {shown(n)} is not defined under "
                f"variants{hint}"
            )
    if errors:
        return errors
    errors += column_errors(plan, where, layout, columns, points)
    if layout.input == "partitions":
        for point in points:
            if plan.keys_of(point["dataset"]).get("dataset_options"):
                errors.append(
                    f"{where}.grid: dataset {shown(point['dataset'])} has dataset_options; "
                    "`fedkd partition` cannot draw its partition"
                )
    check = layout.config_check()
    if check is not None:
        resolved = [normalise_path_keys({**plan.keys_of(p["dataset"]), **p}) for p in points]
        refused = check(where, entry, resolved)
        if refused:  # its runs are planned from what the check refused (a table's targets)
            return errors + refused
    # the run specs, checked once each in _spec_errors (RunSpec knows what each key needs, e.g.
    # a Dirichlet partition its alpha)
    name = where.split(".", 1)[1]
    point_of_run: dict[str, dict] = {}  # a column's run → the first grid point giving it
    same_runs: dict[tuple[int, int], tuple[dict, dict]] = {}
    for point in points:
        for label, column in columns.items():
            for variant in plan.column_variants(column, point):
                spec = plan.output_point_spec(name, point, variant)
                key = json.dumps([variant, spec], sort_keys=True)
                specs.setdefault(key, (f"variant {variant}", spec, []))[2].append(
                    f"{where}.columns.{safe_text(label)}"
                )
                first = point_of_run.setdefault(json.dumps([label, key]), point)
                if first is not point:
                    same_runs.setdefault((id(first), id(point)), (first, point))
    errors += [
        f"{where}.grid: the points {_point_text(a)} and {_point_text(b)} are the same runs: a "
        "key the partition does not use (alpha for iid and shards, shards for the dirichlet "
        "schemes) or one at its default spells no run of its own; write a list of grids that "
        "gives each run once, e.g. [{partition: [iid]}, {partition: [dirichlet], alpha: "
        "[0.5, 0.1]}]"
        for a, b in same_runs.values()
    ]
    errors += _paper_errors(plan, where, name, entry, layout)
    if layout.input == "partitions":
        for point in points:
            spec = normalise_path_keys({**plan.keys_of(point["dataset"]), **point})
            spec["dataset"] = point["dataset"]
            key = json.dumps(["partition", spec], sort_keys=True)
            specs.setdefault(key, ("partition", spec, []))[2].append(f"{where}.grid")
    return errors


def _point_text(point: dict) -> str:
    """A grid point as YAML's flow style writes it, its text made safe to echo."""
    return "{" + ", ".join(f"{safe_text(k)}: {safe_text(str(v))}" for k, v in point.items()) + "}"


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
        return [f"{where}.paper: {shown(key)} is not a paper table; known: {', '.join(known)}"]
    if layout.output != "table" or layout.input != "aggregate":
        return [f"{where}.paper: only tables drawn from runs can be set beside the paper"]
    if f"{name}{VS_PAPER}" in plan.outputs:
        return [f"{where}.paper: its companion {name}{VS_PAPER} collides with an output's name"]
    return []


def _spec_errors(specs: dict) -> list[str]:
    """Every distinct run spec through fedkd's own validation (unknown strategy parameters, a
    partition without its alpha, ...); one message per problem, with the outputs needing it."""
    from fedkd.config import RunSpec, SpecError
    from fedkd.strategies import strategy_names

    found: dict[str, list[str]] = {}
    for what, spec, wheres in specs.values():
        if "strategy" in spec and spec["strategy"] not in strategy_names():
            continue  # named once, with the fix, at the variant's strategy key
        try:
            problems = capacity_errors(RunSpec.from_dict(dict(spec)), what == "partition")
        except SpecError as exc:
            problems = [line.strip() for line in str(exc).splitlines()[1:] or [str(exc)]]
        for problem in problems:
            msg = f"{what} on {spec['dataset']}: {problem}"
            users = found.setdefault(msg, [])
            users.extend(w for w in wheres if w not in users)
    return [f"{msg} (needed by {', '.join(users)})" for msg, users in found.items()]


def unknown_targets_message(unknown: list[str], plan: Plan) -> str:
    """What to say for targets no rule produces: the closest valid output, and every table and
    figure the configuration defines, by path."""
    from fedkd.pipeline.plan import VS_PAPER

    tables = plan.names(output="table") + [f"{n}{VS_PAPER}" for n in plan.paper_tables()]
    figures = plan.names(output="figure")
    valid = plan.all_outputs() + [f"results/tables/{n}.html" for n in tables]
    lines = []
    by_name = {Path(f).stem: f for f in reversed(valid)}  # a bare name: its .tex or .pdf
    for target in unknown:
        close = difflib.get_close_matches(target, valid, n=1, cutoff=0.8) or [
            by_name[n] for n in difflib.get_close_matches(Path(target).stem, by_name, n=1)
        ]
        hint = f"; did you mean {close[0]}?" if close else ""
        lines.append(f"no rule makes {shown(target)}{hint}")
    lines.append(
        "targets of this configuration: results/tables/NAME.tex (also .md, .csv, .html) for "
        f"NAME in: {', '.join(tables) or '(none)'}"
    )
    if figures:
        lines.append(f"and results/figures/NAME.pdf (also .png) for NAME in: {', '.join(figures)}")
    lines.append(
        "or no target (every table and figure); a target goes before --configfile, which takes "
        "every following word as a file"
    )
    # each target quoted short and safe above; the whole made safe for the terminal, every line
    # kept whole (the outputs' listing)
    return safe_message("\n".join(lines), line_limit=100_000)
