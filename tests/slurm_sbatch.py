"""The sbatch line snakemake-executor-plugin-slurm would submit for each job of a dry run, built by
the plugin's own functions from the jobs Snakemake plans, without a cluster.

    python tests/slurm_sbatch.py OUT.json SNAKEMAKE_ARGS...   (the arguments include -n)

Snakemake parses the arguments and profiles as `snakemake` does and plans the jobs with the SLURM
executor's settings (a dry run validates against the named executor); each planned job's sbatch
line comes from the plugin's get_submit_command, partition argument and set_gres_string, and its
job step's GPU flag from the jobstep plugin. OUT.json gets the parsed options that matter here and
one entry per job. Run in its own process: Snakemake's API keeps global state.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace


def main(out: str, argv: list[str]) -> None:
    import snakemake
    import snakemake.api as api
    from snakemake import cli
    from snakemake_executor_plugin_slurm import Executor
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string
    from snakemake_executor_plugin_slurm_jobstep import get_gpu_setting
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    seen = {}
    execute = api.DAGApi.execute_workflow

    def capture(self, *args, **kwargs):
        seen["workflow"] = self.workflow_api._workflow
        return execute(self, *args, **kwargs)

    api.DAGApi.execute_workflow = capture
    parser, args = cli.parse_args(argv)
    # read before the dry run: Snakemake up to 9.26 renames a dry run's executor "dryrun"
    # and hands the workflow that executor's settings, not the SLURM plugin's
    options = {
        key: getattr(args, key)
        for key in ("executor", "jobs", "retries", "latency_wait", "keep_going",
                    "rerun_incomplete", "max_status_checks_per_second")
    }  # fmt: skip
    settings = ExecutorPluginRegistry().get_plugin("slurm").get_settings(args)
    options["pass_command_as_script"] = settings.pass_command_as_script
    if not cli.args_to_api(args, parser):
        raise SystemExit("the dry run failed")

    # the plugin's partition choice, without an executor: no partition file, no fallback lookup
    # (every job here names its partition)
    plugin = SimpleNamespace(_partitions=None, _fallback_partition=None, logger=None)
    workflow = seen["workflow"]
    jobs = []
    for job in workflow.dag.jobs:
        params = {
            "run_uuid": "RUN",
            "slurm_logfile": "LOG",
            "comment_str": "COMMENT",
            "account": "",
            "partition": Executor.get_partition_arg(plugin, job),
            "workdir": "WORKDIR",
        }
        sbatch = get_submit_command(job, params, settings=settings)
        sbatch += set_gres_string(job)
        resources = {k: v for k, v in job.resources.items() if isinstance(v, (int, float, str))}
        jobs.append(
            {
                "rule": job.rule.name,
                # run by the main Snakemake process, never submitted (a dry run plans every
                # job as local, so the rule's own flag is read)
                "local": job.rule.name in workflow._localrules,
                "wildcards": dict(job.wildcards_dict),
                "threads": job.threads,
                "resources": resources,
                "sbatch": sbatch,
                "srun_gpus": get_gpu_setting(job),
            }
        )
    with open(out, "w") as f:
        json.dump(
            {"snakemake": snakemake.__version__, "options": options, "jobs": jobs},
            f,
            indent=1,
            default=str,
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
