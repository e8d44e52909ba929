"""A configuration's grids: their points, once each and in order, and the runs they ask for,
counted without expanding them, so that a slip of a grid is refused at once."""

from __future__ import annotations

import itertools
import json
import math

# the runs one configuration may ask for (planned_run_count): planning them takes fedkd a while
# (bench/planning.py measures it) and Snakemake's own DAG of them far longer; more is a slip of a
# grid (four keys of 100 values each are 10^8 runs)
MAX_PLANNED_RUNS = 250_000


def grid_points(entry: dict) -> list[dict]:
    """Every combination of a grid's values (a list of grids: their points joined, once each,
    in order). Linear in the points: each is looked up in a set (a list's ``in`` made 27,000
    points take a minute)."""
    grids = entry.get("grid") or []
    grids = grids if isinstance(grids, list) else [grids]
    points, seen = [], set()
    for grid in grids:
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            point = dict(zip(keys, values, strict=True))
            key = _point_key(point)
            if key not in seen:
                seen.add(key)
                points.append(point)
    return points


def grid_size(entry: dict) -> int:
    """The grid points of an entry before duplicates are dropped, counted without making them."""
    grids = entry.get("grid") or []
    grids = grids if isinstance(grids, list) else [grids]
    return sum(
        math.prod(len(v) if isinstance(v, list) else 1 for v in g.values())
        for g in grids
        if isinstance(g, dict)
    )


def planned_run_count(config: dict) -> int:
    """Grid points x column variants x seeds, summed over the tables and figures: the runs the
    configuration asks for (a run two tables share counts twice), counted without expanding a
    grid, so that a grid of 10^12 points is refused at once."""
    total = 0
    default_seeds = config.get("seeds") if isinstance(config.get("seeds"), list) else [0]
    for group in ("tables", "figures"):
        entries = config.get(group)
        for entry in entries.values() if isinstance(entries, dict) else ():
            if not isinstance(entry, dict):
                continue
            columns = entry.get("columns") if isinstance(entry.get("columns"), dict) else {}
            variants = sum(
                len(c["best_of"]) if isinstance(c, dict) and isinstance(c.get("best_of"), list)
                else 1
                for c in columns.values()
            )  # fmt: skip
            seeds = entry.get("seeds") if isinstance(entry.get("seeds"), list) else default_seeds
            total += grid_size(entry) * max(variants, 1) * max(len(seeds), 1)
    return total


class PlanTooLarge(ValueError):
    """A configuration asking for more runs than MAX_PLANNED_RUNS; the message says how many."""


def check_plan_size(config: dict) -> None:
    count = planned_run_count(config)
    if count > MAX_PLANNED_RUNS:
        raise PlanTooLarge(
            f"the tables and figures ask for {count:,} runs (grid points x columns x seeds), "
            f"more than the {MAX_PLANNED_RUNS:,} fedkd plans in one configuration "
            '(config/README.md, "How large a configuration may be"); split the sweep over '
            "several configurations, or take fewer values per grid key"
        )


def _point_key(point: dict):
    """A grid point as a set member, equal where the dicts are equal (1 and 1.0 alike)."""
    try:
        return frozenset(point.items())
    except TypeError:  # a value that is a list or mapping: the schema names it
        return json.dumps(point, sort_keys=True, default=str)
