# fedkd: partition → train (one job per run) → aggregate (one Parquet per table or figure) →
# render. The rules live in workflow/rules/*.smk, one stage each, as thin adapters over
# fedkd.pipeline; see docs/pipeline.md and config/README.md.
from pathlib import Path

from snakemake.utils import min_version

min_version("9.6")


# The default configuration, unless one is given with --configfile: that one replaces it whole
# (Snakemake would otherwise merge the two, mixing a paper grid with the default's tables).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# Every bad value of the config is reported at once, before any job is planned. Job steps on a
# cluster re-read the Snakefile: the main process has already checked the run specs there.
include: "workflow/rules/common.smk"


validate_config(
    config,
    Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml",
    check_specs=workflow.is_main_process,
)


# the front page of `snakemake --report`, with the claims verdicts and the agreement of the comparison
# tables built so far appended (fedkd.report.agreement); each table and figure brings its caption
report: front_page()


include: "workflow/rules/partition.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/render.smk"


localrules:
    all,


rule all:
    default_target: True
    input:
        default_targets(),
