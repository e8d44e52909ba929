"""Reports: collect finished runs into one long table (``aggregate``) and turn it into the papers'
tables and figures (``render``). Every output is deterministic: the same inputs give the same bytes.

Modules: aggregate (runs → Parquet), run_list (the runs it is given), targets (the registry of
layouts), render (dispatch), tables/ and figures/ (one layout each), writers (files), cells, keys,
options, text (shared).
"""

from __future__ import annotations

from fedkd.report.aggregate import (
    AGGREGATE_COLUMNS,
    ReportError,
    aggregate_runs,
    read_aggregate,
    write_aggregate,
)
from fedkd.report.options import load_options
from fedkd.report.render import TARGETS, render
from fedkd.report.run_list import parse_run_arg, read_runs_file
from fedkd.report.targets import LAYOUTS, layout_names

TABLES = tuple(layout_names("table"))
FIGURES = tuple(layout_names("figure"))

__all__ = [
    "AGGREGATE_COLUMNS",
    "FIGURES",
    "LAYOUTS",
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
