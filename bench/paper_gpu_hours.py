"""Project the GPU-hours of a workflow configuration from measured training rates.

Every run the configuration's tables and figures need (the workflow's plan, read as
``snakemake --configfile FILE`` reads it) is costed in images trained:

    rounds x clients a round x local epochs x training examples per client

with the clients a round as the engine draws them (fedkd.runtime.seeding.clients_a_round) and the
training examples as the loaders give them after their validation hold-out
(fedkd.pipeline.capacity.train_size: code constants, no dataset is read), split over the clients
as the partition scheme does. A run's GPU time is its images over the rate given for its model
(``--rate resnet8=70019``) or for its strategy on that model (``--rate fedavg:resnet8=90008``,
which wins over the model's). A model with options of its own is another model
(``--rate 'resnet8[norm=batch]=12690'``): BatchNorm, for one, takes a few kernels more per layer
than GroupNorm in the batched trainer. A run with no rate is listed as unmeasured with its images, never
given another model's rate. A run that stops at its target accuracy (stop_at_acc) is counted at
its full rounds, an upper bound, and in a note at the rounds its paper reports for its cell.

    python bench/paper_gpu_hours.py --rate resnet8=70019
    python bench/paper_gpu_hours.py --rate fedavg:resnet8=90008 --rate resnet8=70019
    python bench/paper_gpu_hours.py --configfile config/config.yaml --rate cnn=20000

Runs offline in a few seconds (most of it importing torch through fedkd's validation).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

# bench/gpu_rates.py, beside this script
from gpu_rates import (
    RateError,
    RateKey,
    check_rate_names,
    key_text,
    match_rate,
    parse_rate_texts,
)

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT_CONFIG = ROOT / "config" / "paper.yaml"
# strategies whose server update trains a network every round, a cost outside the images counted
SERVER_TRAINING = {"feddf": "distillation", "fedgen": "its generator"}


# ----------------------------------------------------------------------------- runs
@dataclass(frozen=True)
class RunCost:
    dataset: str
    variant: str
    strategy: str
    model: str  # as the run spec resolves it (RunSpec.resolved_model)
    model_options: str  # "k=v ..." ("" when none)
    seed: int
    partition: str
    rounds: int
    clients_per_round: int
    local_epochs: int
    train_examples: int | None  # the dataset's training set (None: not known without it)
    per_client: float | None  # training examples per client (expected, for "dirichlet")
    batch_size: int
    stop_at_acc: float | None
    eval_local: bool
    alpha: float | None = None
    participation: float | None = None

    @property
    def rate_model(self) -> str:
        """The model a rate is keyed on: its name, with its options where it has any
        (``resnet8[norm=batch]``): a rate measured on the default model holds for it only."""
        return (
            f"{self.model}[{self.model_options.replace(' ', ',')}]"
            if self.model_options
            else self.model
        )

    @property
    def exact(self) -> bool:
        """False where clients' sizes differ (dirichlet): ``per_client`` is their mean."""
        return self.partition != "dirichlet"

    @property
    def images_per_round(self) -> float | None:
        if self.per_client is None:
            return None
        return self.clients_per_round * self.local_epochs * self.per_client

    @property
    def images(self) -> float | None:
        per_round = self.images_per_round
        return None if per_round is None else self.rounds * per_round


def load_plan(paths: list[Path]):
    """The workflow's plan of ``paths``, read as the Snakefile reads ``--configfile`` (which
    replaces config/config.yaml): fedkd.pipeline.config_file's reader, then validate_config
    (which completes the config in place), then Plan."""
    from fedkd.pipeline import Plan, validate_config
    from fedkd.pipeline.config_file import read_config_files

    config = read_config_files([str(p) for p in paths])
    validate_config(config, SCHEMA, check_specs=True)
    return Plan(config)


def examples_per_client(spec, n: int | None) -> float | None:
    """A client's training examples under the partition (fedkd.data.partition): equal slices of
    floor(n / K) for dirichlet-equal and iid; floor(n / (K s)) samples per shard, s shards each;
    n / K on average for dirichlet (every sample assigned, sizes differ)."""
    if n is None:
        return None
    k = spec.clients
    if spec.partition in ("dirichlet-equal", "iid"):
        return float(n // k)
    if spec.partition == "shards":
        return float(n // (k * spec.shards) * spec.shards)
    if spec.partition == "dirichlet":
        return n / k
    raise ValueError(f"partition {spec.partition!r} is not costed by this script")


def plan_runs(plan) -> list[RunCost]:
    """Every run of the plan (the runs its tables and figures need), costed."""
    from fedkd.config import RunSpec
    from fedkd.pipeline.capacity import train_size
    from fedkd.run_paths import parse_run_dir

    runs = []
    for run in sorted(plan.all_runs()):
        wc = parse_run_dir(run)
        spec = RunSpec.from_dict(
            dict(plan.run_spec(wc["dataset"], wc["variant"], wc["setting"], wc["seed"]))
        )
        n = train_size(spec.dataset, spec.dataset_options)
        options = " ".join(f"{k}={v}" for k, v in sorted(spec.model_options.items()))
        runs.append(
            RunCost(
                dataset=spec.dataset, variant=wc["variant"], strategy=spec.strategy,
                model=spec.resolved_model, model_options=options, seed=spec.seed,
                partition=spec.partition, rounds=spec.rounds,
                clients_per_round=spec.clients_per_round, local_epochs=spec.local_epochs,
                train_examples=n, per_client=examples_per_client(spec, n),
                batch_size=spec.batch_size, stop_at_acc=spec.stop_at_acc,
                eval_local=spec.eval_local, alpha=spec.alpha, participation=spec.participation,
            )
        )  # fmt: skip
    return runs


def paper_rounds(plan, runs: list[RunCost]) -> dict[RunCost, tuple[int, str]]:
    """The rounds a run that stops at its target (stop_at_acc) is estimated to train: the mean
    rounds its paper reports for its table cell (the cell of the run's dataset, alpha,
    participation and local epochs in the column that names its variant), at most its rounds;
    with the paper's source. Runs of cells the paper does not report are left out."""
    from fedkd.report.paper_values import load_paper_values

    keys = ("method", "dataset", "alpha", "participation", "local_epochs")  # of a paper cell
    values, estimates = load_paper_values(), {}
    for table in (plan.config.get("tables") or {}).values():
        paper = values.get(table.get("paper"))
        if not paper or not any("target_accuracy" in c for c in paper["cells"]):
            continue
        method_of = {}
        for column, chosen in (table.get("columns") or {}).items():
            if isinstance(chosen, str):
                chosen = {"variant": chosen}
            for variant in chosen.get("best_of") or [chosen.get("variant")]:
                method_of[variant] = column
        for r in runs:
            if r.stop_at_acc is None or r.variant not in method_of:
                continue
            wanted = (method_of[r.variant], r.dataset, r.alpha, r.participation, r.local_epochs)
            for cell in paper["cells"]:
                if tuple(cell.get(k) for k in keys) == wanted:
                    estimates[r] = (min(round(cell["mean"]), r.rounds), paper["source"])
    return estimates


# ----------------------------------------------------------------------------- the report
@dataclass
class Row:
    dataset: str
    model: str
    strategies: str
    key: RateKey | None
    runs: int = 0
    images: float = 0.0
    unknown: int = 0  # runs whose images cannot be known
    approximate: bool = False

    def rate_text(self, rates) -> str:
        if self.key is None:
            return "unmeasured"
        return f"{rates[self.key]:,.0f} ({key_text(self.key)})"

    def hours(self, rates) -> float | None:
        return None if self.key is None else self.images / rates[self.key] / 3600


def dataset_order(name: str) -> int:
    from fedkd.data import DATASETS

    names = list(DATASETS)
    return names.index(name) if name in names else len(names)


def build_rows(runs: list[RunCost], rates: dict[RateKey, float]) -> list[Row]:
    """One row per dataset x model, split by strategy where a strategy's own rate applies."""
    keys = {r: match_rate(rates, r.strategy, r.rate_model) for r in runs}

    def model_label(r: RunCost) -> str:
        return f"{r.model} ({r.model_options})" if r.model_options else r.model

    split = {(r.dataset, model_label(r)) for r in runs if keys[r] and keys[r][0] is not None}
    rows: dict[tuple, Row] = {}
    strategies: dict[tuple, set] = defaultdict(set)
    for r in runs:
        key, label = keys[r], model_label(r)
        if key is not None and key[0] is not None:
            who = key[0]
        else:
            who = "others" if (r.dataset, label) in split else "all"
        row_key = (r.dataset, label, who, key)
        row = rows.setdefault(row_key, Row(r.dataset, label, who, key))
        strategies[row_key].add(r.strategy)
        row.runs += 1
        if r.images is None:
            row.unknown += 1
        else:
            row.images += r.images
            row.approximate |= not r.exact
    for row_key, row in rows.items():
        if row.strategies == "others":
            row.strategies = f"others ({len(strategies[row_key])})"

    def order(row: Row):
        return (
            dataset_order(row.dataset), row.dataset, row.model, row.strategies.startswith("others"),
            row.strategies,
        )  # fmt: skip

    return sorted(rows.values(), key=order)


def measured_runs(runs: list[RunCost], rates: dict[RateKey, float]) -> list[RunCost]:
    """The runs with a rate and a known image count."""
    return [r for r in runs if match_rate(rates, r.strategy, r.rate_model) and r.images is not None]


def gpu_hours(runs: list[RunCost], rates: dict[RateKey, float]) -> float:
    return sum(r.images / rates[match_rate(rates, r.strategy, r.rate_model)] for r in runs) / 3600


def millions(x: float) -> str:
    return f"{x / 1e6:,.1f}"


def format_table(rows: list[Row], rates) -> list[str]:
    header = ("dataset", "model", "strategies", "runs", "images (M)", "rate img/s (key)", "GPU-h")
    body = []
    for row in rows:
        images = millions(row.images) if row.runs > row.unknown else ""
        if row.approximate:
            images = "~" + images
        if row.unknown:
            images = f"{images} + {row.unknown} runs unknown".lstrip(" +")
        hours = row.hours(rates)
        body.append(
            (
                row.dataset, row.model, row.strategies, f"{row.runs:,}", images,
                row.rate_text(rates),
                "-" if hours is None else f"{hours:,.1f}" + ("+?" if row.unknown else ""),
            )
        )  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    right = {3, 4, 6}

    def line(cells) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return [line(header), rule, *(line(b) for b in body), rule]


def report(
    runs: list[RunCost],
    rates: dict[RateKey, float],
    command: str,
    config_text: str,
    estimates: dict | None = None,
) -> str:
    rows = build_rows(runs, rates)
    out = [
        "GPU-hours of a configuration, projected from measured training rates",
        f"command: {command}",
        f"config:  {config_text}; read as `snakemake --configfile` reads it "
        f"(fedkd.pipeline.config_file.read_config_files, fedkd.pipeline.validate_config), its "
        f"runs from "
        f"fedkd.pipeline.Plan.all_runs: {len(runs):,} runs",
        "rates:   "
        + (", ".join(f"{key_text(k)}={v:,.0f} img/s" for k, v in rates.items()) or "none given"),
    ]
    sizes = {}
    for r in runs:
        sizes.setdefault(r.dataset, r.train_examples)
    known = ", ".join(
        f"{d} {'unknown' if n is None else f'{n:,}'}"
        for d, n in sorted(sizes.items(), key=lambda x: dataset_order(x[0]))
    )
    out += [
        "images of a run = rounds x clients a round x local epochs x training examples per client",
        "  clients a round: as the engine draws them (fedkd.runtime.seeding.clients_a_round: "
        "max(1, C x K rounded half up))",
        f"  training examples (code constants, no dataset read: fedkd.pipeline.capacity."
        f"train_size, the loaders' training sets after their validation hold-out): {known}",
        "  per client: floor(n/K) (dirichlet-equal, iid), floor(n/(K s)) x s (shards), n/K on "
        "average (dirichlet, marked ~)",
        "",
        *format_table(rows, rates),
    ]
    measured = measured_runs(runs, rates)
    hours = gpu_hours(measured, rates)
    out.append(
        f"measured:   {len(measured):,} runs, {millions(sum(r.images for r in measured))} M "
        f"images, {hours:,.1f} GPU-hours ({hours / 24:,.1f} GPU-days) at the rates given"
    )
    unmeasured = [r for r in runs if not match_rate(rates, r.strategy, r.rate_model)]
    if unmeasured:
        by_model: dict[str, list[RunCost]] = defaultdict(list)
        for r in unmeasured:
            by_model[r.rate_model].append(r)
        parts = []
        for model, rs in sorted(by_model.items()):
            datasets = sorted({r.dataset for r in rs}, key=dataset_order)
            images = sum(r.images for r in rs if r.images is not None)
            parts.append(
                f"{model} on {', '.join(datasets)}: {len(rs):,} runs, {millions(images)} M"
            )
        images = sum(r.images for r in unmeasured if r.images is not None)
        out.append(
            f"unmeasured: {len(unmeasured):,} runs, {millions(images)} M images, no rate given "
            f"({'; '.join(parts)}); add --rate MODEL=IMG_PER_S to cost them"
        )
    else:
        out.append("unmeasured: none")
    unknown = [r for r in runs if r.images is None]
    if unknown:
        datasets = sorted({r.dataset for r in unknown}, key=dataset_order)
        out.append(
            f"unknown:    {len(unknown):,} runs on {', '.join(datasets)}: their training-set size "
            "depends on dataset_options this script cannot size without the data; not counted"
        )
    out += notes(runs, rates, estimates or {})
    return "\n".join(out)


def stopping_estimate(costed, rest, estimates, rates) -> str:
    """The measured stopping runs at the rounds their paper reports (``paper_rounds``)."""
    known = [r for r in costed if r in estimates]
    unknown = [r for r in costed if r not in estimates]
    hours = sum(
        r.images * estimates[r][0] / r.rounds / rates[match_rate(rates, r.strategy, r.rate_model)]
        for r in known
    ) / 3600 + gpu_hours(unknown, rates)
    sources = ", ".join(sorted({estimates[r][1] for r in known}))
    variants = ", ".join(sorted({r.variant for r in unknown})) or "none"
    return (
        f"estimated at the rounds {sources} reports for their cell (its mean, for every run of "
        f"the cell's column, the members of a tuning grid alike): the measured stopping runs "
        f"take {hours:,.1f} GPU-hours, the whole measured part {hours + gpu_hours(rest, rates):,.1f}; "
        f"{len(known):,} runs at the paper's rounds, {len(unknown):,} whose cell the paper does "
        f"not report at their full rounds ({variants}). The paper's figure is its tuned setting's: "
        f"a grid member that learns slower stops later, or runs its full rounds"
    )


def notes(
    runs: list[RunCost], rates: dict[RateKey, float], estimates: dict | None = None
) -> list[str]:
    out = []
    used = {match_rate(rates, r.strategy, r.rate_model) for r in runs}
    for key in rates:
        if key not in used:
            out.append(f"rate {key_text(key)} matched no run of this configuration")
    measured = measured_runs(runs, rates)
    if measured:
        per_round = [r.images_per_round for r in measured]
        batches = sorted({r.batch_size for r in measured})
        out.append(
            f"a rate is applied to every run it matches as given: the measured runs train "
            f"{min(per_round):,.0f} to {max(per_round):,.0f} images a round at batch size "
            f"{', '.join(map(str, batches))}; a rate measured on other rounds (fixed cost per "
            f"round, engine, precision) holds for them only as far as their cost scales with images"
        )
    stopping = [r for r in runs if r.stop_at_acc is not None]
    if stopping:
        costed = [r for r in measured if r.stop_at_acc is not None]
        rest = [r for r in measured if r.stop_at_acc is None]
        rounds = ", ".join(map(str, sorted({r.rounds for r in stopping})))
        out.append(
            f"{len(stopping):,} runs stop once they reach their target accuracy (stop_at_acc), "
            f"within {rounds} rounds: counted at their full rounds, an upper bound; of the "
            f"measured part they are {len(costed):,} runs, "
            f"{millions(sum(r.images for r in costed))} M images, {gpu_hours(costed, rates):,.1f} GPU-hours "
            f"(the other measured runs: {gpu_hours(rest, rates):,.1f} GPU-hours)"
        )
        if estimates:
            out.append(stopping_estimate(costed, rest, estimates, rates))
    server = [r for r in runs if r.strategy in SERVER_TRAINING]
    if server:
        which = ", ".join(
            f"{name} ({what}: {sum(r.strategy == name for r in server):,} runs)"
            for name, what in SERVER_TRAINING.items()
            if any(r.strategy == name for r in server)
        )
        out.append(
            f"not counted: what the server trains each round, {which}; their GPU-hours are "
            "local training only, a lower bound (feddf's distillation can cost more than it)"
        )
    dirichlet = [r for r in runs if not r.exact]
    if dirichlet:
        out.append(
            f"{len(dirichlet):,} runs (~) have clients of unequal sizes (dirichlet): counted at "
            "their mean size, while the batched trainer steps every client of a round as long "
            "as its largest (padded batches), so their figure is low"
        )
    local = [r for r in runs if r.eval_local]
    if local:
        out.append(
            f"{len(local):,} runs also evaluate each client's local model (eval_local), a cost "
            "outside the images trained"
        )
    return ["", "notes:", *(f"- {n}" for n in out)] if out else []


# ----------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--configfile", nargs="+", type=Path, default=[DEFAULT_CONFIG], metavar="FILE",
        help="the workflow configuration(s), merged in order as snakemake --configfile merges "
        "them (default: config/paper.yaml)",
    )  # fmt: skip
    parser.add_argument(
        "--rate", action="append", default=[], metavar="[STRATEGY:]MODEL=IMG_PER_S",
        help="measured images per second of MODEL's runs (a model as `model: auto` resolves: "
        "resnet8, resnet50, cnn, distilbert), or of STRATEGY's runs on MODEL, which wins; repeat "
        "for several",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        rates = parse_rate_texts(args.rate)  # a malformed one is refused before the config is read
    except RateError as exc:
        parser.error(str(exc))

    from fedkd.pipeline import ConfigError

    try:
        plan = load_plan(args.configfile)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        check_rate_names(rates, plan.config.get("variants"))
    except RateError as exc:
        parser.error(str(exc))
    runs = plan_runs(plan)
    shown = [_shown(p) for p in args.configfile]
    command = shlex.join(["python", _shown(Path(sys.argv[0])), *argv])
    config_text = f"{' '.join(shown)} (name {plan.config.get('name')!r})"
    print(report(runs, rates, command, config_text, paper_rounds(plan, runs)))
    return 0


def _shown(path: Path) -> str:
    """``path`` relative to the working directory where it lies under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
