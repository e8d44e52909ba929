"""Reports: collect finished runs into one long table (``aggregate``) and turn it into the papers'
tables and figures (``render``). Every output is deterministic: the same inputs give the same bytes.
"""

from __future__ import annotations

from fedkd.report.aggregate import (
    AGGREGATE_COLUMNS,
    ReportError,
    aggregate_runs,
    parse_run_arg,
    read_aggregate,
    read_runs_file,
    write_aggregate,
)
from fedkd.report.render import FIGURES, TABLES, TARGETS, load_options, render

__all__ = [
    "AGGREGATE_COLUMNS",
    "FIGURES",
    "TABLES",
    "TARGETS",
    "ReportError",
    "aggregate_runs",
    "load_options",
    "parse_run_arg",
    "read_aggregate",
    "read_runs_file",
    "render",
    "write_aggregate",
]
