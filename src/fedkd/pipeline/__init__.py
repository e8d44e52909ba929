"""The workflow's logic as a tested package (a run's path, its identity, is fedkd.run_paths,
below the reports that read runs back): a configuration's grids and their size (grid), the plan
of runs, partitions and job arguments of a configuration (plan), the configuration files' reader
(config_file), the config's validation (validation, config_text), the check of a command line's
configuration files before Snakemake reads them (precheck), and of the datasets the runs still to
train read before the first job (data_check). The rules in workflow/rules/*.smk are thin
adapters over these and over what they need beyond Snakemake's own mechanisms (snakefile)."""

import importlib

# imported on first use: the console (fedkd.pipeline.console, Snakemake's logger plugin) is
# imported alone, without the planning modules and what they import of Snakemake
_EXPORTS = {
    "ConfigError": "fedkd.pipeline.validation",
    "Plan": "fedkd.pipeline.plan",
    "grid_points": "fedkd.pipeline.grid",
    "validate_config": "fedkd.pipeline.validation",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'fedkd.pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
