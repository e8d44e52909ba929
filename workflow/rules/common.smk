"""Helpers shared by the rules: the config's validation, run identities, and per-target run lists.

A run's identity is its path, results/runs/<dataset>/<variant>/<setting>/seed<seed>, where
<setting> spells out every run key that a table's grid may change (partition, alpha or shards,
clients, participation, local epochs, rounds, eval_local), for example
``dirichlet-equal-a0.1-K10-C0.2-E1-R10``. Everything else in a run's spec is fixed per dataset and
variant by the config, so two different runs never share a path and a run needed by several tables
is trained once. The train job rebuilds the full spec from the path and the config.
"""

import hashlib
import itertools
import json
import math
import re
import shlex
from functools import cache
from pathlib import Path

import yaml

from fedkd.provenance import PACKAGE_DIR, files_hash, run_code_hash

DIRICHLET = ("dirichlet", "dirichlet-equal")
TABLE_TARGETS = {f"table{i}" for i in range(1, 10)} | {"rounds_to_target"}
FIGURE_TARGETS = {
    "fig_partition",
    "fig_curves",
    "fig_tsne",
    "fig_forgetting",
    "fig_fedcad",
}
# targets drawn from something other than an aggregate of runs
NO_AGGREGATE = {"table1", "fig_partition", "fig_tsne"}


class ConfigError(Exception):
    pass


# ----------------------------------------------------------------------------- names in paths


def num(x) -> str:
    """Canonical text of a number in a path: 1.0 → "1", 0.10 → "0.1", never an exponent."""
    x = float(x)
    if x.is_integer():
        return str(int(x))
    text = repr(x)
    return f"{x:.15f}".rstrip("0") if "e" in text else text


def partition_part(spec: dict) -> str:
    scheme = spec["partition"]
    if scheme in DIRICHLET:
        return f"{scheme}-a{num(spec['alpha'])}"
    if scheme == "shards":
        return f"{scheme}-s{int(spec['shards'])}"
    return scheme


def setting_id(spec: dict) -> str:
    parts = [
        partition_part(spec),
        f"K{int(spec['clients'])}",
        f"C{num(spec['participation'])}",
        f"E{int(spec['local_epochs'])}",
        f"R{int(spec['rounds'])}",
    ]
    if spec.get("eval_local"):
        parts.append("local")
    return "-".join(parts)


SETTING_RE = re.compile(
    r"(?P<partition>dirichlet-equal|dirichlet|shards|iid)"
    r"(?:-a(?P<alpha>[0-9.]+))?(?:-s(?P<shards>[0-9]+))?"
    r"-K(?P<clients>[0-9]+)-C(?P<participation>[0-9.]+)"
    r"-E(?P<local_epochs>[0-9]+)-R(?P<rounds>[0-9]+)(?P<local>-local)?"
)


def parse_setting(text: str) -> dict:
    """The path keys spelled by ``text``; only the canonical spelling is accepted, so one run has
    exactly one path."""
    m = SETTING_RE.fullmatch(text)
    if m is None:
        raise ValueError(
            f"{text!r} is not a run setting like 'dirichlet-equal-a0.1-K10-C0.2-E1-R10'"
        )
    spec = {
        "partition": m["partition"],
        "alpha": float(m["alpha"]) if m["alpha"] else None,
        "shards": int(m["shards"]) if m["shards"] else None,
        "clients": int(m["clients"]),
        "participation": float(m["participation"]),
        "local_epochs": int(m["local_epochs"]),
        "rounds": int(m["rounds"]),
        "eval_local": bool(m["local"]),
    }
    needs = "alpha" if spec["partition"] in DIRICHLET else "shards"
    if spec["partition"] != "iid" and spec[needs] is None:
        raise ValueError(
            f"{text!r}: partition {spec['partition']!r} needs its {needs} in the name"
        )
    if setting_id(spec) != text:
        raise ValueError(
            f"{text!r} is not canonical; the run's path is {setting_id(spec)!r}"
        )
    return spec


def parse_partition(part: str, clients: str) -> dict:
    return parse_setting(f"{part}-K{clients}-C1-E1-R1")


def partition_file(dataset: str, spec: dict, seed) -> str:
    part = f"{partition_part(spec)}-K{int(spec['clients'])}"
    return f"results/partitions/{dataset}/{part}/seed{int(seed)}.parquet"


# ----------------------------------------------------------------------------- run specs


def base_spec(dataset: str, variant: str) -> dict:
    """defaults < datasets[dataset] < variant.spec < variant.datasets[dataset].spec."""
    if variant not in config["variants"]:
        raise ValueError(
            f"variant {variant!r} is not defined under variants in the config"
        )
    v = config["variants"][variant]
    v_ds = v.get("datasets", {}).get(dataset, {})
    spec = dict(config["defaults"])
    spec.update(config.get("datasets", {}).get(dataset, {}))
    spec.update(v.get("spec", {}))
    spec.update(v_ds.get("spec", {}))
    spec["params"] = {**v.get("params", {}), **v_ds.get("params", {})}
    spec["strategy"] = v["strategy"]
    spec["dataset"] = dataset
    return spec


def normalise_path_keys(spec: dict) -> dict:
    """Drop the partition parameter the scheme does not use, so it cannot split identical runs."""
    spec = dict(spec)
    if spec["partition"] not in DIRICHLET:
        spec["alpha"] = None
    if spec["partition"] != "shards":
        spec["shards"] = None
    spec["eval_local"] = bool(spec.get("eval_local", False))
    return spec


def point_spec(point: dict, variant: str) -> dict:
    spec = base_spec(point["dataset"], variant)
    spec.update({k: v for k, v in point.items() if k != "dataset"})
    return normalise_path_keys(spec)


def run_dir(spec: dict, variant: str, seed) -> str:
    return (
        f"results/runs/{spec['dataset']}/{variant}/{setting_id(spec)}/seed{int(seed)}"
    )


def uses_partition_file(dataset: str) -> bool:
    # `fedkd partition` reads a dataset with its default options; a dataset with options
    # partitions inside its runs instead (same scheme, same seed)
    return not config.get("datasets", {}).get(dataset, {}).get("dataset_options")


def run_spec_from_path(wc) -> dict:
    """The full run spec of the train job at results/runs/{dataset}/{variant}/{setting}/seed{seed}."""
    return dict(_run_spec(wc.dataset, wc.variant, wc.setting, wc.seed))


# the job's params are evaluated many times while planning (600 jobs for config/paper.yaml):
# everything derived from wildcards is cached, the config being fixed for the process
@cache
def _run_spec(dataset: str, variant: str, setting: str, seed: str) -> dict:
    spec = base_spec(dataset, variant)
    spec.update(parse_setting(setting))
    spec = normalise_path_keys(spec)
    spec["seed"] = int(seed)
    if uses_partition_file(dataset):
        spec["partition_file"] = partition_file(dataset, spec, seed)
    return spec


PLAIN_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_./+-]*")
YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def cli_value(value) -> str:
    """A flag value that `fedkd train` reads back unchanged (it parses values as YAML 1.1, where
    "1e-05" is a string: floats keep a decimal point)."""
    if isinstance(value, str):
        plain = PLAIN_WORD.fullmatch(value) and value.lower() not in YAML_WORDS
        return value if plain else json.dumps(value)
    if isinstance(value, float):
        mantissa, _, exponent = repr(value).partition("e")
        if exponent and "." not in mantissa:
            mantissa += ".0"
        return f"{mantissa}e{exponent}" if exponent else mantissa
    if isinstance(value, (dict, list)):
        return yaml.safe_dump(
            value, default_flow_style=True, width=10**6, sort_keys=True
        ).strip()
    return json.dumps(value)  # int, bool, None


def train_args(wc) -> str:
    return _train_args(wc.dataset, wc.variant, wc.setting, wc.seed)


@cache
def _train_args(dataset: str, variant: str, setting: str, seed: str) -> str:
    spec = _run_spec(dataset, variant, setting, seed)
    args = []
    for key in sorted(spec):
        args += [f"--{key.replace('_', '-')}", cli_value(spec[key])]
    args += ["--label", f"variant={variant}"]
    return shlex.join(args)


@cache
def strategy_code_hash(strategy: str) -> str:
    return run_code_hash(strategy)


def train_code_hash(wc) -> str:
    return strategy_code_hash(config["variants"][wc.variant]["strategy"])


def train_stamp(wc) -> str:
    """Changes whenever the run's flags or code do: a checkpoint is resumed only under the same."""
    blob = f"{train_args(wc)}\0{train_code_hash(wc)}".encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@cache
def package_files_hash(*parts: str) -> str:
    files = []
    for part in parts:
        path = PACKAGE_DIR / part
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files_hash([f for f in files if f.exists()])


def partition_code_hash() -> str:
    return package_files_hash("data", "config.py")


def partition_args(wc) -> str:
    spec = parse_partition(wc.part, wc.clients)
    args = ["--dataset", wc.dataset, "--scheme", spec["partition"]]
    if spec["alpha"] is not None:
        args += ["--alpha", num(spec["alpha"])]
    if spec["shards"] is not None:
        args += ["--shards", str(spec["shards"])]
    args += ["--clients", str(spec["clients"]), "--seed", str(int(wc.seed))]
    data_root = {
        **config["defaults"],
        **config.get("datasets", {}).get(wc.dataset, {}),
    }.get("data_root")
    if data_root:
        args += ["--data-root", data_root]
    return shlex.join(args)


# ----------------------------------------------------------------------------- targets


@cache
def targets() -> dict:
    """Name → (kind "table" | "figure", entry) for every table and figure of the config."""
    out = {}
    for kind in ("tables", "figures"):
        for name, entry in (config.get(kind) or {}).items():
            out[name] = (kind[:-1], entry)
    return out


def target_kind(name: str) -> str:
    """The `fedkd render` TARGET of a configured table or figure."""
    return targets()[name][1].get("target", name)


def entry(name: str) -> dict:
    return targets()[name][1]


def grid_points(t: dict) -> list[dict]:
    grids = t.get("grid") or []
    grids = grids if isinstance(grids, list) else [grids]
    points = []
    for grid in grids:
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            point = dict(zip(keys, values))
            if point not in points:
                points.append(point)
    return points


def column_variant(column, point: dict) -> str:
    """The variant of a column at a grid point: the first case whose keys all match the point's
    run keys (its grid values over the dataset's and the defaults'), else the column's default.
    """
    if isinstance(column, str):
        return column
    keys = {
        **config["defaults"],
        **config.get("datasets", {}).get(point["dataset"], {}),
        **point,
    }
    for case in column.get("cases", []):
        if all(
            k in keys and _same(keys[k], v) for k, v in case.items() if k != "variant"
        ):
            return case["variant"]
    return column["variant"]


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def target_seeds(name: str) -> list[int]:
    t = entry(name)
    if "seeds" in t:
        return t["seeds"]
    # one seed suffices for a picture of one run or of a partition
    if target_kind(name) in ("fig_tsne", "fig_partition", "table2"):
        return config["seeds"][:1]
    return config["seeds"]


@cache
def target_runs(name: str) -> tuple[tuple[str, str], ...]:
    """(label, run directory) of every run the target needs, in grid × column × seed order."""
    t = entry(name)
    out = []
    for point in grid_points(t):
        for label, column in (t.get("columns") or {}).items():
            variant = column_variant(column, point)
            spec = point_spec(point, variant)
            for seed in target_seeds(name):
                out.append((label, run_dir(spec, variant, seed)))
    return tuple(out)


@cache
def target_partitions(name: str) -> tuple[str, ...]:
    files = []
    for point in grid_points(entry(name)):
        spec = dict(config["defaults"])
        spec.update(config.get("datasets", {}).get(point["dataset"], {}))
        spec.update(point)
        spec = normalise_path_keys(spec)
        for seed in target_seeds(name):
            f = partition_file(point["dataset"], spec, seed)
            if f not in files:
                files.append(f)
    return tuple(files)


def run_files(run: str) -> list[str]:
    return [f"{run}/run.json", f"{run}/metrics.parquet"]


def aggregate_inputs(wc) -> list[str]:
    return [f for _, run in target_runs(wc.name) for f in run_files(run)]


def aggregate_args(wc) -> str:
    args = []
    for label, run in target_runs(wc.name):
        args += ["--run", f"{label}={run}"]
    return shlex.join(args)


def aggregate_targets() -> list[str]:
    return [n for n in targets() if target_kind(n) not in NO_AGGREGATE]


def render_inputs(wc) -> list[str]:
    kind = target_kind(wc.name)
    if kind == "table1":
        return []
    if kind == "fig_partition":
        return list(target_partitions(wc.name))
    if kind == "fig_tsne":
        return run_files(target_runs(wc.name)[0][1])
    return [f"results/aggregate/{wc.name}.parquet"]


def render_args(wc) -> str:
    kind = target_kind(wc.name)
    args = [kind]
    if kind == "fig_partition":
        args += ["--partitions", *target_partitions(wc.name)]
    elif kind == "fig_tsne":
        args += ["--run", target_runs(wc.name)[0][1]]
    elif kind != "table1":
        args += ["--aggregate", f"results/aggregate/{wc.name}.parquet"]
    return shlex.join(args)


def datasets_of(name: str) -> list[str]:
    out = []
    for point in grid_points(entry(name)):
        if point["dataset"] not in out:
            out.append(point["dataset"])
    return out


def stand_in_name(dataset: str) -> str:
    stand_in = (config.get("stand_ins") or {}).get(dataset)
    return f"{dataset} (for {stand_in})" if stand_in else dataset


def caption(name: str) -> str:
    """The configured caption plus which configuration and which (stand-in) datasets made it."""
    text = entry(name)["caption"].strip().rstrip(".")
    about = [f"configuration {config['name']}"]
    datasets = datasets_of(name)
    if datasets:
        about.append(f"datasets {', '.join(stand_in_name(d) for d in datasets)}")
    seeds = target_seeds(name)
    if target_kind(name) not in ("table1", "fig_partition", "fig_tsne"):
        about.append(f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}")
    return f"{text}. Produced by {'; '.join(about)}."


def render_options(name: str) -> dict:
    t = entry(name)
    kind = target_kind(name)
    options = json.loads(json.dumps(t.get("options") or {}))  # a deep copy
    if t.get("columns") and kind not in ("table2", "fig_tsne"):
        # the order of the labels; table2 and fig_tsne take no columns
        options.setdefault("columns", list(t["columns"]))
    if kind == "rounds_to_target" and isinstance(options.get("targets"), list):
        # the renderer keys targets by alpha written as a float ("1.0", "0.1")
        options["targets"] = {
            str(float(x["alpha"])): x["accuracy"] for x in options["targets"]
        }
    if kind == "table2":
        options.setdefault("datasets", datasets_of(name))
    rows = options.get("rows") or options.get("panels") or []
    if (kind == "table2" or "dataset" in rows) and config.get("stand_ins"):
        names = {d: stand_in_name(d) for d in datasets_of(name)}
        options["row_names"] = {**names, **options.get("row_names", {})}
    options["caption"] = caption(name)
    options["label"] = f"{'tab' if targets()[name][0] == 'table' else 'fig'}:{name}"
    return options


def render_code_hash(wc) -> str:
    """The report code, plus what else the target's picture depends on."""
    kind = target_kind(wc.name)
    parts = ["report", "metrics.py"]
    if kind == "table1":
        parts.append("strategies")  # its rows are the strategies' traits
    if kind == "fig_tsne":
        parts += ["engine", "models", "data", "strategies"]  # it trains a local model
    return package_files_hash(*parts)


def names_regex(names) -> str:
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


def all_outputs() -> list[str]:
    out = []
    for name, (kind, _) in targets().items():
        if kind == "table":
            out += [f"results/tables/{name}.{ext}" for ext in ("tex", "md", "csv")]
        else:
            out += [f"results/figures/{name}.{ext}" for ext in ("pdf", "png")]
    return out


# ----------------------------------------------------------------------------- resources


def rule_resources(rule: str, key: str, default):
    return (config.get("resources") or {}).get(rule, {}).get(key, default)


def train_resource(key: str, default):
    """resources.train, overridden per dataset by resources.train_datasets."""

    def get(wc):
        value = _train_resources(wc.dataset).get(key)
        return value if value is not None else default

    return get


def _train_resources(dataset: str) -> dict:
    res = config.get("resources") or {}
    return {**res.get("train", {}), **res.get("train_datasets", {}).get(dataset, {})}


def train_runtime(wc) -> int:
    """Minutes: the configured runtime, or more when `client_epoch_seconds` says the run needs
    more (rounds × clients a round × local epochs, with 50% to spare)."""
    res = _train_resources(wc.dataset)
    minutes = int(res.get("runtime", 60))
    per_epoch = res.get("client_epoch_seconds")
    if per_epoch:
        s = parse_setting(wc.setting)
        per_round = max(1, round(s["participation"] * s["clients"]))
        seconds = 1.5 * s["rounds"] * per_round * s["local_epochs"] * per_epoch
        minutes = max(minutes, math.ceil(seconds / 60))
    return minutes


# ----------------------------------------------------------------------------- validation


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


def semantic_errors(cfg: dict, check_specs: bool) -> list[str]:
    """Cross-references the schema cannot express: variants and strategies exist, grids resolve
    to valid runs, names are unique, and (in the main process) every run spec validates.
    """
    from fedkd.provenance import strategy_module_files

    errors = []
    strategies = strategy_module_files()
    variants = cfg.get("variants") or {}
    for vname, v in variants.items():
        if v["strategy"] not in strategies:
            errors.append(
                f"variants.{vname}.strategy: {v['strategy']!r} is not a registered strategy; "
                f"choose one of: {', '.join(sorted(strategies))}"
            )
    tables, figures = cfg.get("tables") or {}, cfg.get("figures") or {}
    for name in sorted(set(tables) & set(figures)):
        errors.append(
            f"figures.{name}: a table has the same name; outputs would collide"
        )
    specs = {}
    for group, entries in (("tables", tables), ("figures", figures)):
        for name, t in entries.items():
            where = f"{group}.{name}"
            kind = t.get("target", name)
            if kind not in TABLE_TARGETS | FIGURE_TARGETS:
                errors.append(
                    f"{where}.target: missing; {name!r} is not a render target name"
                )
                continue
            expect = "tables" if kind in TABLE_TARGETS else "figures"
            if group != expect:
                errors.append(f"{where}.target: {kind!r} belongs under {expect}")
            errors += _target_errors(cfg, where, kind, t, variants, strategies, specs)
    if check_specs:
        known = {k: v for k, v in specs.items() if v[0]["strategy"] in strategies}
        errors += _spec_errors(known)
    return errors


def _target_errors(cfg, where, kind, t, variants, strategies, specs) -> list[str]:
    errors = []
    columns = t.get("columns") or {}
    if kind == "table1":
        if not (t.get("options") or {}).get("strategies"):
            errors.append(
                f"{where}.options.strategies: table1 needs the list of strategies"
            )
        for s in (t.get("options") or {}).get("strategies", []):
            if s not in strategies:
                errors.append(
                    f"{where}.options.strategies: {s!r} is not a registered strategy"
                )
        return errors
    if not t.get("grid"):
        errors.append(f"{where}.grid: {kind} needs a grid of runs")
        return errors
    if kind != "fig_partition" and not columns:
        errors.append(
            f"{where}.columns: {kind} needs at least one column (label → variant)"
        )
    for label, column in columns.items():
        names = [column] if isinstance(column, str) else [column["variant"]]
        names += [
            c["variant"]
            for c in ([] if isinstance(column, str) else column.get("cases", []))
        ]
        for n in names:
            if n not in variants:
                errors.append(
                    f"{where}.columns.{label}: variant {n!r} is not defined under variants"
                )
    if errors:
        return errors
    defaults = cfg["defaults"]
    points = grid_points(t)
    for point in points:
        ds_keys = {
            **defaults,
            **(cfg.get("datasets") or {}).get(point["dataset"], {}),
            **point,
        }
        scheme = ds_keys["partition"]
        if scheme == "shards" and not ds_keys.get("shards"):
            errors.append(
                f"{where}.grid: partition 'shards' needs a 'shards' value ({point})"
            )
        if scheme in DIRICHLET and not ds_keys.get("alpha"):
            errors.append(
                f"{where}.grid: partition {scheme!r} needs an 'alpha' value ({point})"
            )
        if kind == "fig_partition" and (cfg.get("datasets") or {}).get(
            point["dataset"], {}
        ).get("dataset_options"):
            errors.append(
                f"{where}.grid: dataset {point['dataset']!r} has dataset_options; "
                "`fedkd partition` cannot draw its partition"
            )
    if errors:
        return errors
    if kind == "fig_tsne":
        n_seeds = len(t.get("seeds", cfg["seeds"][:1]))
        if len(points) != 1 or len(columns) != 1 or n_seeds != 1:
            errors.append(
                f"{where}: fig_tsne draws exactly one run: give one grid point, one column and "
                f"one seed (it has {len(points)} points, {len(columns)} columns, {n_seeds} seeds)"
            )
    if kind == "rounds_to_target":
        targets_given = {
            float(x["alpha"]) for x in (t.get("options") or {}).get("targets", [])
        }
        for point in points:
            alpha = point.get("alpha", defaults.get("alpha"))
            if alpha is not None and float(alpha) not in targets_given:
                errors.append(
                    f"{where}.options.targets: no target accuracy for alpha {alpha} of the grid"
                )
                break
    for point in points:
        for label, column in columns.items():
            variant = column_variant(column, point)
            spec = point_spec(point, variant)
            key = (spec["dataset"], variant, setting_id(spec))
            users = specs.setdefault(key, (spec, []))[1]
            if f"{where}.columns.{label}" not in users:
                users.append(f"{where}.columns.{label}")
    return errors


def _spec_errors(specs: dict) -> list[str]:
    """Every distinct run spec through fedkd's own validation (unknown strategy parameters, ...);
    one message per problem, with the tables and figures that need such runs."""
    from fedkd.config import RunSpec, SpecError

    found: dict[str, list[str]] = {}
    for (dataset, variant, _setting), (spec, wheres) in specs.items():
        try:
            RunSpec.from_dict(dict(spec))
        except SpecError as exc:
            for line in str(exc).splitlines()[1:]:
                msg = f"variant {variant} on {dataset}: {line.strip()}"
                users = found.setdefault(msg, [])
                users.extend(w for w in wheres if w not in users)
    return [f"{msg} (needed by {', '.join(users)})" for msg, users in found.items()]


def validate_config(cfg: dict, schema_path: Path, check_specs: bool) -> None:
    errors = schema_errors(cfg, schema_path)
    if not errors:
        errors = semantic_errors(cfg, check_specs)
    if errors:
        listing = "".join(f"\n  - {e}" for e in errors)
        raise ConfigError(f"the configuration has {len(errors)} error(s):{listing}")
