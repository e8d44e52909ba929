"""Adapters from the rules' wildcards to the plan of the configuration (fedkd.pipeline.Plan), where
the logic lives and is unit-tested (tests/test_pipeline.py). See docs/pipeline.md."""

import json
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from fedkd.pipeline import Plan, validate_config
from fedkd.pipeline.validation import reread_config, unknown_targets_message
from fedkd.pipeline.plan import FEATURES_CODE, REPORT_CODE
from fedkd.pipeline.results_links import check_results_links
from fedkd.provenance import package_files_hash
from fedkd.report import agreement, sections
from fedkd import files

# Snakemake read the configuration files with its YAML 1.1 loader (010 is 8 there, 1:30 is 90,
# yes is true): they are read again as `fedkd train` reads every value (YAML 1.2, fedkd.values),
# with --config applied over them as Snakemake applies it
reread_config(config, workflow.configfiles, workflow.config_settings.config)
plan = Plan(config)

# no job writes below results/ through a link (fedkd.pipeline.results_links), checked before
# Snakemake removes or writes any file; a results/ that is itself a link is said once
if workflow.is_main_process:
    check_results_links(error=WorkflowError)


def names_regex(names) -> str:
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


# ----------------------------------------------------------------------------- partition and train


def partition_args(wc):
    return plan.partition_args(wc.dataset, wc.part, wc.clients, wc.seed)


def train_partition(wc):
    if not plan.uses_partition_file(wc.dataset):
        return []
    return [
        plan.run_spec(wc.dataset, wc.variant, wc.setting, wc.seed)["partition_file"]
    ]


def train_args(wc):
    return plan.train_args(wc.dataset, wc.variant, wc.setting, wc.seed)


def train_code_hash(wc):
    return plan.train_code_hash(wc.variant)


def train_stamp(wc):
    # The job's shell writes the run's .stamp, may delete its checkpoint.pt and writes its log:
    # a link at any of them, or at a folder above them, is refused here, when the job is
    # planned (a check in the shell would change its text, and Snakemake re-runs every job of
    # a rule whose text changed). fedkd train refuses a linked run folder again as it starts.
    parts = [wc.dataset, wc.variant, wc.setting, f"seed{wc.seed}"]
    try:
        files.refuse_links_below("results/runs", parts, (".stamp", files.CHECKPOINT))
        files.refuse_links_below(
            "results/logs/train", [*parts[:-1], f"{parts[-1]}.log"]
        )
    except files.SymlinkError as exc:
        raise WorkflowError(str(exc)) from None
    return plan.train_stamp(wc.dataset, wc.variant, wc.setting, wc.seed)


def train_resource(key, default):
    """resources.train, overridden per dataset by resources.train_datasets."""

    def get(wc):
        value = plan.train_resources(wc.dataset).get(key)
        return value if value is not None else default

    return get


def train_runtime(wc):
    return plan.train_runtime(wc.dataset, wc.setting)


# ----------------------------------------------------------------------------- tables and figures


def aggregate_inputs(wc):
    return plan.aggregate_inputs(wc.name)


def write_runs_list(name, out, log):
    """The runs of an aggregate, written for its job to read (rule runs_list)."""
    from fedkd.files import atomic_write

    runs = plan.runs_list(name).encode("utf-8")
    atomic_write(Path(out), lambda file: file.write(runs))
    note = f"{out}: {len(plan.target_runs(name))} runs\n".encode("utf-8")
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(Path(log), lambda file: file.write(note))


def features_inputs(wc):
    return plan.features_inputs(wc.name)


# Snakemake shows a report job's params in a <script> element of the report, and its caption
# file reads params.caption as reStructuredText: both carry user text, made inert
# (fedkd.report.sections).
def render_options(wc):
    return sections.script_safe_json(plan.render_options(wc.name))


def vs_paper_options(wc):
    return sections.script_safe_json(plan.vs_paper_options(wc.name))


def report_caption(wc):
    return sections.rst_text(plan.caption(wc.name))


def vs_paper_caption(wc):
    return sections.rst_text(plan.vs_paper_options(wc.name)["caption"])


def report_section(name):
    """(category, subcategory) of an output in `snakemake --report`: its paper and table."""
    layout = plan.layout(name)
    return sections.report_section(
        plan.outputs[name]["caption"], layout.output, name, layout.section
    )


# ----------------------------------------------------------------------------- rule all
# Each table also as HTML, the form the report shows (asked for by rule all, so that tables built
# before the HTML existed get it on the next run).
def table_html() -> list[str]:
    # read when targets are planned, after validate_config: a bad tables entry is named there
    return [f"results/tables/{name}.html" for name in plan.names(output="table")]


# no file or URL is inserted into the report, whatever its reStructuredText says
sections.restrict_docutils(
    Path(workflow.basedir) / "workflow" / "report" / "docutils.conf"
)


# `snakemake --report` reports the outputs built so far: after a partial build (one table) the
# default target would name every output, and the report would stop at the first missing one.
# A table counts once its HTML exists. (The Snakefile sees the command line only through sys.argv;
# `--report-after-run` builds everything first.)
REPORT_ASKED = any(a == "--report" or a.startswith("--report=") for a in sys.argv)
REPORTING = REPORT_ASKED and not any(a == "--report-after-run" for a in sys.argv)


def front_page():
    """The report's front page: the fixed text with the configuration's name and description
    (as text, never markup), plus the agreement summary when reporting what exists (after the
    run, the tables read now would be out of date)."""
    template = Path(workflow.basedir) / "workflow" / "report" / "workflow.rst"
    if not (REPORT_ASKED and workflow.is_main_process):
        return str(template)  # no report is built: Snakemake only notes the path
    return str(
        agreement.write_front_page(
            template,
            Path("results/tables"),
            Path("results/report/front_page.rst").resolve(),
            stand_in=bool(config.get("stand_ins")),
            name=str(config.get("name", "")),
            description=str(config.get("description", "")),
            summary=REPORTING,
        )
    )


def default_targets():
    wanted = plan.all_outputs() + table_html()
    if not REPORTING:
        return wanted
    return [
        f
        for f in wanted
        if Path(f).exists()
        and (
            not f.startswith("results/tables/") or Path(f).with_suffix(".html").exists()
        )
    ]


# ----------------------------------------------------------------------------- targets
def requested_targets() -> list[str]:
    """The targets on Snakemake's command line, read by Snakemake's own parser (the Snakefile
    sees the command line only through sys.argv; its settings object is built later)."""
    from snakemake.cli import get_argument_parser

    program = Path(sys.argv[0]) if sys.argv else Path()
    if "snakemake" not in (program.name, program.parent.name):
        # the workflow run through Snakemake's Python API: sys.argv is another program's
        return []
    try:
        args, _ = get_argument_parser().parse_known_args(sys.argv[1:])
    except SystemExit:
        # not a snakemake command line (e.g. the Snakefile read by a tool)
        return []
    return [str(t) for t in (getattr(args, "targets", None) or [])]


def check_output_targets() -> None:
    """Refuse a table or figure the configuration does not define, listing the valid ones, at
    once: before the run specs' validation imports torch and long before Snakemake would say
    "No rule to produce" after planning every job."""
    if not workflow.is_main_process:
        return
    wanted = [t for t in requested_targets() if t.startswith(OUTPUT_DIRS)]
    if not wanted:
        return
    try:
        vs_paper = [f"results/tables/{n}_vs_paper.html" for n in plan.paper_tables()]
        valid = set(plan.all_outputs() + table_html() + vs_paper)
    except Exception:
        # a configuration the plan cannot read: its validation names the problem
        return
    unknown = [t for t in wanted if t not in valid]
    if unknown:
        raise WorkflowError(unknown_targets_message(unknown, plan))


def check_targets() -> None:
    """Refuse, before any job is planned, any other target no rule produces (a rule name or
    a file), with the same list."""
    if not workflow.is_main_process:
        return
    rules = list(workflow.rules)
    names = {r.name for r in rules}
    unknown = [
        t for t in requested_targets()
        if t not in names and not any(r.is_producer(t) for r in rules)
    ]  # fmt: skip
    if unknown:
        raise WorkflowError(unknown_targets_message(unknown, plan))


OUTPUT_DIRS = ("results/tables/", "results/figures/")
