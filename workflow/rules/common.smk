"""Adapters from the rules' wildcards to the plan of the configuration (fedkd.pipeline.Plan), where
the logic lives and is unit-tested (tests/test_pipeline.py); what Snakemake does not offer is in
fedkd.pipeline.snakefile, with its reason. See docs/pipeline.md."""

import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from fedkd.pipeline import Plan, validate_config
from fedkd.pipeline.validation import reread_config
from fedkd.pipeline.plan import REPORT_CODE
from fedkd.pipeline import snakefile
from fedkd.pipeline.snakefile import names_regex
from fedkd.pipeline.results_links import check_results_links
from fedkd.provenance import package_files_hash
from fedkd.report import sections
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


# ----------------------------------------------------------------------------- partition and train


def partition_args(wc):
    return plan.partition_args(wc.dataset, wc.part, wc.clients, wc.seed)


# the runs still to train: what they read is checked before the first job starts (onstart)
RUNS_TO_TRAIN = set()


def train_partition(wc):
    if snakefile.run_will_train(plan, wc.dataset, wc.variant, wc.setting, wc.seed):
        RUNS_TO_TRAIN.add((wc.dataset, wc.variant, wc.setting, wc.seed))
    if not plan.uses_partition_file(wc.dataset):
        return []
    return [
        plan.run_spec(wc.dataset, wc.variant, wc.setting, wc.seed)["partition_file"]
    ]


# a missing dataset, tokenizer or pretrained model is said once and no job starts; dry runs and
# job steps on a cluster skip it (Snakemake runs onstart in the main process of a real run only)
onstart:
    missing = snakefile.missing_inputs_message(plan, RUNS_TO_TRAIN)
    if missing:
        raise WorkflowError(missing)


def train_args(wc):
    return plan.train_args(wc.dataset, wc.variant, wc.setting, wc.seed)


def train_code_hash(wc):
    return plan.train_code_hash(wc.dataset, wc.variant)


def train_stamp(wc):
    try:
        snakefile.refuse_linked_run_files(wc.dataset, wc.variant, wc.setting, wc.seed)
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
    snakefile.write_runs_list(plan, name, out, log)


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


def unknown_output(wc):
    raise WorkflowError(snakefile.unknown_output_message(plan, wc.folder, wc.file))


# ----------------------------------------------------------------------------- report and rule all
# no file or URL is inserted into the report, whatever its reStructuredText says
sections.restrict_docutils(
    Path(workflow.basedir) / "workflow" / "report" / "docutils.conf"
)

# sys.argv: Snakemake tells the Snakefile nowhere else that a report is built (the reason is
# at fedkd.pipeline.snakefile.report_asked)
REPORT_ASKED, REPORTING = snakefile.report_asked(sys.argv)


def front_page():
    """The report's front page: the fixed text with the configuration's name and description
    (as text, never markup), plus the agreement summary when reporting what exists (after the
    run, the tables read now would be out of date)."""
    template = Path(workflow.basedir) / "workflow" / "report" / "workflow.rst"
    if not (REPORT_ASKED and workflow.is_main_process):
        return str(template)  # no report is built: Snakemake only notes the path
    # here, not at the top: its statistics (scipy) cost every Snakemake start, every job's too,
    # about a second
    from fedkd.report import agreement

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
    return snakefile.default_targets(plan, REPORTING)
