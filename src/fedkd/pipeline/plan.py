"""The plan of a configuration: its run specs, the runs and partitions each table or figure needs,
and the command-line arguments of every job. workflow/rules/*.smk call these through thin adapters.

The config is fixed for a process, and Snakemake evaluates a job's params many times while planning
(1,488 jobs for config/paper.yaml), so everything derived from it is cached.
"""

from __future__ import annotations

import hashlib
import math
import os
import shlex
from functools import cache, cached_property

from fedkd.config import numbers_as_held
from fedkd.pipeline.grid import check_plan_size, grid_points
from fedkd.provenance import (
    PACKAGE_DIR,
    features_code_hash,
    files_hash,
    package_files_hash,
    partition_code_hash,
    run_code_hash,
)
from fedkd.report.targets import Layout, get_layout
from fedkd.run_paths import (
    cli_value,
    normalise_path_keys,
    num,
    parse_partition,
    parse_run_dir,
    parse_setting,
    partition_file,
    run_dir,
    run_files,
)
from fedkd.runtime.seeding import clients_a_round
from fedkd.setting_match import matches

# the code every rendered output depends on
REPORT_CODE = ("report", "metrics.py", "collapse.py", "files.py", "digests.py")
# the package folder whose data files the renders read too (paper_values.yaml: the papers' numbers)
REPORT_DATA = PACKAGE_DIR / "report"
# a table's companion beside the paper: results/tables/<name>_vs_paper.{tex,md,csv,html}
VS_PAPER = "_vs_paper"


class Plan:
    def __init__(self, config: dict):
        self.config = config
        # per-instance caches (functools.cache on methods would keep every Plan alive)
        self.run_spec = cache(self._run_spec)
        self.train_args = cache(self._train_args)
        self.target_runs = cache(self._target_runs)
        self.target_partitions = cache(self._target_partitions)
        self.train_code_hash = cache(self._train_code_hash)
        self.partition_code_hash = cache(partition_code_hash)
        self._grid_points = cache(self._checked_grid_points)
        self._size_checked = False

    # ------------------------------------------------------------------ run specs
    def keys_of(self, dataset: str) -> dict:
        """The run keys every run on ``dataset`` starts from: defaults < datasets[dataset]."""
        keys = {**self.config["defaults"], **(self.config.get("datasets") or {}).get(dataset, {})}
        if isinstance(keys.get("data_root"), str):
            # `~` as a shell reads it, as in $FEDKD_DATA: the jobs get the path itself
            keys["data_root"] = os.path.expanduser(keys["data_root"])
        return keys

    def variant(self, variant: str) -> dict:
        if variant not in self.config["variants"]:
            raise ValueError(f"variant {variant!r} is not defined under variants in the config")
        return self.config["variants"][variant]

    def strategy_of(self, variant: str) -> str:
        return self.variant(variant)["strategy"]

    def base_spec(self, dataset: str, variant: str) -> dict:
        """defaults < datasets[dataset] < variant.spec < variant.datasets[dataset].spec."""
        v = self.variant(variant)
        v_ds = v.get("datasets", {}).get(dataset, {})
        spec = self.keys_of(dataset)
        spec.update(v.get("spec", {}))
        spec.update(v_ds.get("spec", {}))
        spec["params"] = {**v.get("params", {}), **v_ds.get("params", {})}
        spec["strategy"] = v["strategy"]
        spec["dataset"] = dataset
        return spec

    def point_spec(self, point: dict, variant: str) -> dict:
        """The spec of ``variant`` at a grid point (its keys override the dataset's)."""
        spec = self.base_spec(point["dataset"], variant)
        spec.update({k: v for k, v in point.items() if k != "dataset"})
        return normalise_path_keys(spec)

    def uses_partition_file(self, dataset: str) -> bool:
        # `fedkd partition` reads a dataset with its default options; a dataset with options
        # partitions inside its runs instead (same scheme, same seed)
        return not self.keys_of(dataset).get("dataset_options")

    def _run_spec(self, dataset: str, variant: str, setting: str, seed: str) -> dict:
        """The full spec of the run at results/runs/{dataset}/{variant}/{setting}/seed{seed}."""
        spec = self.base_spec(dataset, variant)
        spec.update(parse_setting(setting))
        # numbers as the run holds them: each spelling of one run gives the same flags
        spec = numbers_as_held(normalise_path_keys(spec))
        spec["seed"] = int(seed)
        if self.uses_partition_file(dataset):
            spec["partition_file"] = partition_file(dataset, spec, seed)
        return spec

    def _train_args(self, dataset: str, variant: str, setting: str, seed: str) -> str:
        spec = self.run_spec(dataset, variant, setting, seed)
        args = []
        for key in sorted(spec):
            args += [f"--{key.replace('_', '-')}", cli_value(spec[key])]
        args += ["--label", f"variant={variant}"]
        return shlex.join(args)

    def _train_code_hash(self, dataset: str, variant: str) -> str:
        """Exactly the sources a run of this variant's strategy on ``dataset`` depends on."""
        return run_code_hash(self.strategy_of(variant), dataset)

    def train_stamp(self, dataset: str, variant: str, setting: str, seed: str) -> str:
        """Changes whenever the run's flags or code do: a checkpoint is resumed only under the same."""
        args = self.train_args(dataset, variant, setting, seed)
        blob = f"{args}\0{self.train_code_hash(dataset, variant)}".encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def partition_args(self, dataset: str, part: str, clients: str, seed: str) -> str:
        spec = parse_partition(part, clients)
        args = ["--dataset", dataset, "--scheme", spec["partition"]]
        if spec["alpha"] is not None:
            args += ["--alpha", num(spec["alpha"])]
        if spec["shards"] is not None:
            args += ["--shards", str(spec["shards"])]
        args += ["--clients", str(spec["clients"]), "--seed", str(int(seed))]
        data_root = self.keys_of(dataset).get("data_root")
        if data_root:
            args += ["--data-root", data_root]
        return shlex.join(args)

    # ------------------------------------------------------------------ tables and figures
    @cached_property
    def outputs(self) -> dict[str, dict]:
        """Entry name → its config entry, for every table and figure."""
        return {
            name: entry
            for group in ("tables", "figures")
            for name, entry in (self.config.get(group) or {}).items()
        }

    def layout(self, name: str) -> Layout:
        entry = self.outputs[name]
        return get_layout(entry.get("layout", name))

    def names(self, input: str | None = None, output: str | None = None) -> list[str]:
        """Entry names whose layout takes ``input`` and makes ``output`` (None: any)."""
        return [
            n
            for n in self.outputs
            if input in (None, self.layout(n).input) and output in (None, self.layout(n).output)
        ]

    def grid_points(self, name: str) -> list[dict]:
        return self._grid_points(name)

    def _checked_grid_points(self, name: str) -> list[dict]:
        if not self._size_checked:  # once: it counts every entry's grid
            check_plan_size(self.config)
            self._size_checked = True
        return grid_points(self.outputs[name])

    def column_variants(self, column, point: dict) -> list[str]:
        """Every variant a column needs at a grid point: one, each of a ``best_of`` sweep (the
        table shows the best per setting, fedkd.report.best_of), or none where the column is
        ``absent`` (the table has no cell for it there, as in the paper)."""
        if isinstance(column, dict) and any(
            self.case_matches(s, point) for s in column.get("absent", [])
        ):
            return []
        if isinstance(column, dict) and "best_of" in column:
            return list(column["best_of"])
        return [self.column_variant(column, point)]

    def column_variant(self, column, point: dict) -> str:
        """The variant of a column at a grid point: the first case whose keys all match the
        point's run keys (its grid values over the dataset's and the defaults'), else the
        column's default."""
        if isinstance(column, str):
            return column
        for case in column.get("cases", []):
            if self.case_matches(case, point):
                return case["variant"]
        return column["variant"]

    def case_matches(self, case: dict, point: dict) -> bool:
        """Whether a column's case picks its variant at a grid point: each of its keys but
        ``variant`` equals the point's run key (its grid value over the dataset's and the
        defaults')."""
        keys = {**self.keys_of(point["dataset"]), **point}
        return matches(keys, case)

    def seeds(self, name: str) -> list[int]:
        entry = self.outputs[name]
        if "seeds" in entry:
            return entry["seeds"]
        first = self.layout(name).seeds == "first"
        return self.config["seeds"][:1] if first else self.config["seeds"]

    def output_point_spec(self, name: str, point: dict, variant: str) -> dict:
        """The spec of a run output ``name`` needs: rounds-to-target runs stop once they reach
        the target accuracy the table asks of their alpha (the rounds after it cannot change
        the rounds to reach it)."""
        spec = self.point_spec(point, variant)
        stop = self.stop_at_acc(name, spec.get("alpha"))
        if stop is not None and spec.get("stop_at_acc") is None:
            spec["stop_at_acc"] = stop
        return spec

    def stop_at_acc(self, name: str, alpha) -> float | None:
        """The target of ``alpha`` in a rounds-to-target output (the configuration check gives
        every alpha of its grid one); the highest target for an alpha it does not list."""
        if self.layout(name).name != "rounds_to_target":
            return None
        from fedkd.report.tables.rounds_to_target import target_accuracies

        targets = target_accuracies(name, self.outputs[name].get("options") or {})
        if alpha is not None and float(alpha) in targets:
            return targets[float(alpha)]
        return max(targets.values(), default=None)

    def drawn_from(self, name: str) -> dict[str, list[str]]:
        """{entry: [labels]} whose runs an output of a layout with ``draws_from`` (claims)
        compares; {} for every other output."""
        sources = self.layout(name).sources()
        if sources is None:
            return {}
        others = {n: e for n, e in self.outputs.items() if n != name}
        return sources(others, self.config.get("claims") or ())

    def _target_runs(self, name: str) -> tuple[tuple[str, str], ...]:
        """(label, run directory) of every run the output needs, in grid × column × seed order;
        for a layout drawn from other entries, theirs, labelled "entry/label"."""
        drawn = self.drawn_from(name)
        if drawn:
            return tuple(
                (f"{src}/{label}", run)
                for src, labels in drawn.items()
                for label, run in self.target_runs(src)
                if label in labels
            )
        out = []
        for point in self.grid_points(name):
            for label, column in (self.outputs[name].get("columns") or {}).items():
                for variant in self.column_variants(column, point):
                    spec = self.output_point_spec(name, point, variant)
                    for seed in self.seeds(name):
                        out.append((label, run_dir(spec, variant, seed)))
        return tuple(out)

    def _target_partitions(self, name: str) -> tuple[str, ...]:
        files = {}  # a dict: once each, in order
        for point in self.grid_points(name):
            spec = normalise_path_keys({**self.keys_of(point["dataset"]), **point})
            for seed in self.seeds(name):
                files[partition_file(point["dataset"], spec, seed)] = None
        return tuple(files)

    def all_runs(self) -> set[str]:
        return {run for name in self.outputs for _, run in self.target_runs(name)}

    def aggregate_inputs(self, name: str) -> list[str]:
        return [f for _, run in self.target_runs(name) for f in run_files(run)]

    def runs_list(self, name: str) -> str:
        """The runs an aggregate reads, one ``LABEL<TAB>RUN_DIR`` a line (`fedkd aggregate
        --runs-file`; validation keeps tabs and newlines out of labels): a file, not the job's
        command line, which a table of ~23,000 runs outgrew."""
        return "".join(f"{label}\t{run}\n" for label, run in self.target_runs(name))

    def runs_list_sha256(self, name: str) -> str:
        """The SHA-256 of the runs list: the aggregate job refuses a list file of another (an
        edited or damaged one), so it reads exactly the runs the plan names."""
        return hashlib.sha256(self.runs_list(name).encode()).hexdigest()

    def runs_list_digest(self, name: str) -> str:
        """Changes whenever the runs list does: the list is written again, and the aggregate
        made again."""
        return self.runs_list_sha256(name)[:16]

    def features_run(self, name: str) -> str:
        """The one run a layout of input "run" draws (validation ensures there is one)."""
        return self.target_runs(name)[0][1]

    def features_inputs(self, name: str) -> list[str]:
        return run_files(self.features_run(name))

    def features_code_hash(self, name: str) -> str:
        """Exactly the sources the t-SNE features of the output's run depend on."""
        run = parse_run_dir(self.features_run(name))
        return features_code_hash(self.strategy_of(run["variant"]), run["dataset"])

    def features_args(self, name: str) -> str:
        options = self.outputs[name].get("options") or {}
        args = ["--run", self.features_run(name)]
        for key in self.layout(name).run_options:
            if key in options:
                args += [f"--{key.replace('_', '-')}", str(options[key])]
        return shlex.join(args)

    def render_inputs(self, name: str) -> list[str]:
        return {
            "none": lambda: [],
            "partitions": lambda: list(self.target_partitions(name)),
            "run": lambda: [f"results/features/{name}.npz"],
            "aggregate": lambda: [f"results/aggregate/{name}.parquet"],
        }[self.layout(name).input]()

    def render_args(self, name: str) -> str:
        layout = self.layout(name)
        args = [layout.name, "--name", name]
        flag = {"partitions": "--partitions", "run": "--features", "aggregate": "--aggregate"}
        if layout.input in flag:
            args += [flag[layout.input], *self.render_inputs(name)]
        return shlex.join(args)

    def datasets_of(self, name: str) -> list[str]:
        points = [p for n in self.drawn_from(name) or [name] for p in self.grid_points(n)]
        return list(dict.fromkeys(p["dataset"] for p in points))

    def stand_in_name(self, dataset: str) -> str:
        stand_in = (self.config.get("stand_ins") or {}).get(dataset)
        return f"{dataset} (for {stand_in})" if stand_in else dataset

    def caption(self, name: str, text: str | None = None) -> str:
        """The configured caption (or ``text``, another output's) plus which configuration and
        (stand-in) datasets made it; the entry's own also says where a column is absent."""
        notes = "".join(f" {n}." for n in self.strategy_notes(name, own=text is None))
        text = (text or self.outputs[name]["caption"]).strip().rstrip(".")
        about = [f"configuration {self.config['name']}"]
        datasets = self.datasets_of(name)
        if datasets:
            about.append(f"datasets {', '.join(self.stand_in_name(d) for d in datasets)}")
        # the seeds: in the run setting the rendered caption ends with (fedkd.report.setting);
        # a figure of partition files or of one run has no such sentence, so they are named here
        if self.layout(name).input in ("partitions", "run"):
            seeds = self.seeds(name)
            about.append(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}")
        return f"{text}.{notes} Produced by {'; '.join(about)}."

    def best_of(self, name: str) -> dict[str, list[str]]:
        """{label: its variants} of the output's best_of columns."""
        return self._columns_giving(name, "best_of")

    def absent(self, name: str) -> dict[str, list[dict]]:
        """{label: the settings where it has no cell} of the output's columns with ``absent``."""
        return self._columns_giving(name, "absent")

    def _columns_giving(self, name: str, key: str) -> dict[str, list]:
        cols = (self.outputs[name].get("columns") or {}).items()
        return {lab: list(c[key]) for lab, c in cols if isinstance(c, dict) and c.get(key)}

    def strategy_notes(self, name: str, own: bool = True) -> list[str]:
        """Caption sentences on how a column's method was run (fedkd.pipeline.notes)."""
        from fedkd.pipeline.notes import strategy_notes

        return strategy_notes(self, name, own)

    def render_options(self, name: str) -> dict:
        entry, layout = self.outputs[name], self.layout(name)
        options = {
            k: v for k, v in (entry.get("options") or {}).items() if k not in layout.run_options
        }
        if entry.get("columns") and layout.label_order:
            options.setdefault("columns", list(entry["columns"]))
        if layout.lists_datasets:
            options.setdefault("datasets", self.datasets_of(name))
        rows = options.get("rows") or options.get("panels") or []
        if (layout.lists_datasets or "dataset" in rows) and self.config.get("stand_ins"):
            names = {d: self.stand_in_name(d) for d in self.datasets_of(name)}
            options["row_names"] = {**names, **options.get("row_names", {})}
        if self.best_of(name):
            options["best_of"] = self.best_of(name)
        if self.absent(name):
            options["absent"] = self.absent(name)
        drawn = self.drawn_from(name)
        if drawn:
            options["sources"] = {
                src: {
                    "paper": self.outputs[src].get("paper"),
                    "layout": self.layout(src).name,
                    "options": self.outputs[src].get("options") or {},
                    "best_of": self.best_of(src),
                    "absent": self.absent(src),
                    # its columns, so a claim tells a column whose runs are all missing from one
                    # the table does not have
                    "labels": list(self.outputs[src].get("columns") or {}),
                }
                for src in drawn
            }
            options["stand_ins"] = self.config.get("stand_ins") or {}
            if self.config.get("claims"):  # the configuration's own (claims/declared.py)
                options["claims"] = self.config["claims"]
        options["caption"] = self.caption(name)
        options["label"] = f"{layout.label_prefix}:{name}"
        return options

    # ------------------------------------------------------------------ beside the paper
    def paper_tables(self) -> list[str]:
        """Tables whose entry names a paper table (``paper: fedgkd_table3``): each gets a
        companion ``<name>_vs_paper`` drawn from the same aggregate."""
        return [
            n for n in self.names(output="table")
            if self.outputs[n].get("paper") and self.layout(n).input == "aggregate"
        ]  # fmt: skip

    def vs_paper_args(self, name: str) -> str:
        return shlex.join(
            ["vs_paper", "--name", f"{name}{VS_PAPER}", "--aggregate", *self.render_inputs(name)]
        )

    def vs_paper_options(self, name: str) -> dict:
        entry = self.outputs[name]
        options = {"paper": entry["paper"], "stand_ins": self.config.get("stand_ins") or {}}
        # the table's rounds and targets answer the paper's (shorter runs, a stand-in's targets)
        for key in ("stat", "ddof", "rounds", "targets"):
            if key in (entry.get("options") or {}):
                options[key] = entry["options"][key]
        if self.best_of(name):
            options["best_of"] = self.best_of(name)
        from fedkd.report.names import display_name

        paper, _, number = entry["paper"].partition("_table")
        text = (
            f"The {display_name(paper)} paper's Table {number} beside the reproduced {name}, "
            "like against like (the paper's numbers per cell, the reproduced mean ± std over seeds)"
        )
        options["caption"] = self.caption(name, text)
        options["label"] = f"tab:{name}{VS_PAPER}"
        return options

    def render_code_hash(self, name: str) -> str:
        code = self.layout(name).code
        parts = [package_files_hash(*REPORT_CODE, *code), report_data_hash()]
        if "strategies" in code:
            # the strategies it lists may be modules of one's own (FEDKD_STRATEGY_MODULES)
            from fedkd.strategies import external_module_files

            outside = external_module_files()
            if outside:
                parts.append(files_hash(outside))
        return hashlib.sha256(" ".join(parts).encode()).hexdigest()[:16]

    def all_outputs(self) -> list[str]:
        out = []
        for name in self.outputs:
            if self.layout(name).output == "table":
                out += [f"results/tables/{name}.{ext}" for ext in ("tex", "md", "csv")]
            else:
                out += [f"results/figures/{name}.{ext}" for ext in ("pdf", "png")]
        for name in self.paper_tables():
            out += [f"results/tables/{name}{VS_PAPER}.{ext}" for ext in ("tex", "md", "csv")]
        return out

    # ------------------------------------------------------------------ resources
    def rule_resource(self, rule: str, key: str, default):
        return (self.config.get("resources") or {}).get(rule, {}).get(key, default)

    def train_resources(self, dataset: str) -> dict:
        """resources.train, overridden per dataset by resources.train_datasets."""
        res = self.config.get("resources") or {}
        return {**res.get("train", {}), **res.get("train_datasets", {}).get(dataset, {})}

    def train_runtime(self, dataset: str, setting: str) -> int:
        """Minutes: the configured runtime, or more when `client_epoch_seconds` says the run needs
        more (rounds × clients a round × local epochs, with 50% to spare), at most `max_runtime`:
        a job the limit stops resumes from its checkpoint when it runs again."""
        res = self.train_resources(dataset)
        minutes = int(res.get("runtime", 60))
        per_epoch = res.get("client_epoch_seconds")
        if per_epoch:
            s = parse_setting(setting)
            per_round = clients_a_round(s["clients"], s["participation"])
            seconds = 1.5 * s["rounds"] * per_round * s["local_epochs"] * per_epoch
            minutes = max(minutes, math.ceil(seconds / 60))
        return min(minutes, int(res.get("max_runtime", minutes)))


@cache
def report_data_hash() -> str:
    """Hash of the report's data files, byte for byte: the package's code hashes cover its Python
    sources only, and a render reads the papers' numbers (paper_values.yaml) as data."""
    h = hashlib.sha256()
    for path in sorted(REPORT_DATA.rglob("*")):
        if path.is_file() and path.suffix not in (".py", ".pyc"):
            h.update(f"{path.relative_to(REPORT_DATA)}\0".encode() + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]
