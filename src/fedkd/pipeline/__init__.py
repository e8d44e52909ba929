"""The workflow's logic as a tested package (a run's path, its identity, is fedkd.run_paths,
below the reports that read runs back): a configuration's grids and their size (grid), the plan of runs, partitions and job arguments of a configuration (plan), the
configuration files' reader (config_file), the config's validation (validation, config_text),
and the check of a command line's configuration files before Snakemake reads them (precheck).
The rules in workflow/rules/*.smk are thin adapters over these."""

from fedkd.pipeline.grid import grid_points
from fedkd.pipeline.plan import Plan
from fedkd.pipeline.validation import ConfigError, validate_config

__all__ = ["ConfigError", "Plan", "grid_points", "validate_config"]
