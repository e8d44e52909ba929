"""The workflow's logic as a tested package: run paths (paths), the plan of runs, partitions and
job arguments of a configuration (plan), and the config's validation (validation). The rules in
workflow/rules/*.smk are thin adapters over these."""

from fedkd.pipeline.grid import grid_points
from fedkd.pipeline.plan import Plan
from fedkd.pipeline.validation import ConfigError, validate_config

__all__ = ["ConfigError", "Plan", "grid_points", "validate_config"]
