"""What the workflow's rules need beyond Snakemake's own mechanisms, each with its reason; the
rules (workflow/rules/*.smk) reach these through the thin adapters of common.smk.

Snakemake decides everything else itself: a target no rule makes is refused by its own target
resolution (the render rules' wildcards admit only the configuration's names, and rule
unknown_output, matching the rest of results/tables/ and results/figures/, names the valid ones),
and the report reports the default target's outputs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from fedkd import files
from fedkd.files import atomic_write
from fedkd.pipeline.plan import VS_PAPER, Plan
from fedkd.pipeline.validation import unknown_targets_message
from fedkd.run_paths import parse_run_dir, run_files

TABLE_FILES = ("tex", "md", "csv", "html")
FIGURE_FILES = ("pdf", "png")


def names_regex(names) -> str:
    """A wildcard constraint admitting exactly ``names`` (none: nothing)."""
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


def table_html(plan: Plan) -> list[str]:
    """Each table also as HTML, the form the report shows (asked for by rule all, so that tables
    built before the HTML existed get it on the next run)."""
    return [f"results/tables/{name}.html" for name in plan.names(output="table")]


def default_targets(plan: Plan, reporting: bool) -> list[str]:
    """Rule all's inputs: every output; when only reporting, those built so far (a table once
    its HTML exists), since Snakemake's report stops at the first output that does not exist."""
    wanted = plan.all_outputs() + table_html(plan)
    if not reporting:
        return wanted + made_from(plan)
    return [
        f
        for f in wanted
        if Path(f).exists()
        and (not f.startswith("results/tables/") or Path(f).with_suffix(".html").exists())
    ]


def made_from(plan: Plan) -> list[str]:
    """Every file the outputs are made from: runs, partitions, runs lists, aggregates, features.
    Asked for by rule all because Snakemake (since 7.7, snakemake/snakemake#1978) remakes no
    missing file whose consumers are present and up to date: a file deleted as a refusal says
    (a damaged metrics.parquet, partition or runs list), or removed with a failed job, would
    otherwise stay missing, and a plain ``snakemake`` say there is nothing to be done."""
    wanted = {}  # a dict: once each, in order
    for name in plan.outputs:
        wanted.update(dict.fromkeys(plan.render_inputs(name)))
    for name in plan.names(input="aggregate"):
        wanted[f"results/aggregate/{name}.runs"] = None
    for name in plan.names(input="run"):
        wanted.update(dict.fromkeys(plan.features_inputs(name)))
    for run in sorted(plan.all_runs()):
        wanted.update(dict.fromkeys(run_files(run)))
        keys = parse_run_dir(run)
        if plan.uses_partition_file(keys["dataset"]):
            spec = plan.run_spec(keys["dataset"], keys["variant"], keys["setting"], keys["seed"])
            wanted[spec["partition_file"]] = None
    return list(wanted)


def made_files(plan: Plan) -> list[str]:
    """The file names (in results/tables/ or results/figures/) the render rules make."""
    tables = plan.names(output="table") + [f"{n}{VS_PAPER}" for n in plan.paper_tables()]
    return [f"{n}.{e}" for n in tables for e in TABLE_FILES] + [
        f"{n}.{e}" for n in plan.names(output="figure") for e in FIGURE_FILES
    ]


def unknown_output_regex(plan: Plan) -> str:
    """Rule unknown_output's wildcard: a file name in results/tables/ or results/figures/ that no
    render rule makes (Snakemake asks every rule that matches a target for its inputs, so the
    refusing rule must not match a valid one)."""
    made = "|".join(re.escape(f) for f in sorted(made_files(plan)))
    return f"(?!(?:{made})$)[^/]+" if made else "[^/]+"


def unknown_output_message(plan: Plan, folder: str, file: str) -> str:
    """Rule unknown_output's refusal: the closest valid output and every one, by path."""
    return unknown_targets_message([f"results/{folder}/{file}"], plan)


def refuse_linked_run_files(dataset: str, variant: str, setting: str, seed: str) -> None:
    """The train job's shell writes the run's .stamp, may delete its checkpoint.pt and writes
    its log: a link at any of them, or at a folder above them, is refused when the job is planned
    (a check in the shell would change its text, and Snakemake re-runs every job of a rule whose
    text changed). Raises files.SymlinkError."""
    parts = [dataset, variant, setting, f"seed{seed}"]
    files.refuse_links_below("results/runs", parts, (".stamp", files.CHECKPOINT))
    files.refuse_links_below("results/logs/train", [*parts[:-1], f"{parts[-1]}.log"])


def run_will_train(plan: Plan, dataset: str, variant: str, setting: str, seed: str) -> bool:
    """Whether this run's train job (and the partition job before it) is sure to run: one of their
    outputs is missing. A run re-trained for another reason (its code changed) is not counted; its
    jobs say what is missing, as they read it."""
    run = Path("results/runs", dataset, variant, setting, f"seed{seed}")
    made = [run / "run.json", run / "metrics.parquet"]
    if plan.uses_partition_file(dataset):
        made.append(Path(plan.run_spec(dataset, variant, setting, seed)["partition_file"]))
    return not all(path.exists() for path in made)


def missing_inputs_message(plan: Plan, runs) -> str | None:
    """Before the first job: what is missing of what ``runs`` (dataset, variant, setting, seed)
    read, datasets, tokenizers and pretrained weights (fedkd.pipeline.data_check), or None."""
    from fedkd.pipeline import data_check

    reasons = data_check.missing_inputs(plan.run_spec(*run) for run in sorted(runs))
    return data_check.message(reasons) if reasons else None


def write_runs_list(plan: Plan, name: str, out: str, log: str) -> None:
    """The runs of an aggregate, written for its job to read (rule runs_list)."""
    runs = plan.runs_list(name).encode("utf-8")
    atomic_write(Path(out), lambda file: file.write(runs))
    note = f"{out}: {len(plan.target_runs(name))} runs\n".encode()
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(Path(log), lambda file: file.write(note))


def report_asked(argv: Sequence[str]) -> tuple[bool, bool]:
    """(a report is asked for, it reports what exists now rather than after a run).

    Read from the command line because Snakemake tells a Snakefile nothing else about it:
    report settings go to the report's own call, after the Snakefile is read, and no workflow
    attribute says a report is wanted; ``--report-after-run`` builds everything first."""
    asked = any(a == "--report" or a.startswith("--report=") for a in argv)
    return asked, asked and "--report-after-run" not in argv
