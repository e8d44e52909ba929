# The console: one line as each job starts, one as it finishes with the step count and an ETA
# (fedkd.pipeline.console); Snakemake's log under .snakemake/log/ keeps its full format.
from fedkd.pipeline import console

if workflow.is_main_process:
    console.install()
