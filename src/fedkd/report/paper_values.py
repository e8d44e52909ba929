"""The papers' own numbers (``paper_values.yaml``, packaged next to this module), checked on load.

``load_paper_values()`` returns ``{table key: {source, metric, config_target, notes, cells}}``;
``paper_cells(key)`` one table's cells as a DataFrame, one row per cell. The file's layout is
described in its header comment.
"""

from __future__ import annotations

import copy
import math
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

TABLE_KEYS = {"source": True, "metric": True, "notes": True, "cells": True, "config_target": False}
# a cell: its value, where it is in the paper, which fedkd column / variant it is, and the settings
# the table varies (names as in fedkd's run specs and report CSVs)
CELL_REQUIRED = ("mean", "std", "cell")
CELL_NAMES = ("method", "variant")
SETTINGS = (
    "dataset",
    "alpha",
    "partition",
    "shards",
    "participation",
    "local_epochs",
    "buffer",
    "round",
    "stat",
    "quantity",
    "task",
    "target_accuracy",
)
CELL_EXTRA_VALUES = ("forgetting",)  # a second number printed with the mean (FedNTD Table 1)
CELL_KEYS = (*CELL_REQUIRED, *CELL_NAMES, *SETTINGS, *CELL_EXTRA_VALUES)


class PaperValuesError(ValueError):
    """paper_values.yaml (or the file given) is malformed."""


def _default_path():
    return resources.files("fedkd.report").joinpath("paper_values.yaml")


def load_paper_values(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """All tables, validated; ``path`` reads another file of the same layout."""
    return copy.deepcopy(_load(str(path) if path is not None else None))


@lru_cache(maxsize=8)
def _load(path: str | None) -> dict[str, dict[str, Any]]:
    src = _default_path() if path is None else Path(path)
    try:
        data = yaml.safe_load(src.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise PaperValuesError(f"{src}: not YAML: {e}") from e
    _validate(data, str(src))
    return data


def paper_cells(table_key: str, path: str | Path | None = None) -> pd.DataFrame:
    """One row per cell of ``table_key``: ``table``, the cell's keys (absent ones NaN)."""
    values = _load(str(path) if path is not None else None)
    if table_key not in values:
        raise PaperValuesError(
            f"no table {table_key!r} in the paper values; known: {', '.join(values)}"
        )
    rows = [{"table": table_key, **c} for c in values[table_key]["cells"]]
    cols = ["table"] + [k for k in CELL_KEYS if any(k in c for c in rows)]
    return pd.DataFrame(rows, columns=cols)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _validate(data: Any, src: str) -> None:
    from fedkd.data import dataset_names

    datasets = set(dataset_names())
    if not isinstance(data, dict) or not data:
        raise PaperValuesError(f"{src}: expected a mapping of table keys to tables")
    for key, table in data.items():
        where = f"{src}: table {key!r}"
        if not isinstance(table, dict):
            raise PaperValuesError(f"{where}: expected a mapping")
        unknown = set(table) - set(TABLE_KEYS)
        if unknown:
            raise PaperValuesError(
                f"{where}: unknown keys {sorted(unknown)}; allowed: {', '.join(TABLE_KEYS)}"
            )
        for k, required in TABLE_KEYS.items():
            if required and k not in table:
                raise PaperValuesError(f"{where}: missing {k!r}")
        for k in ("source", "metric"):
            if not isinstance(table[k], str) or not table[k].strip():
                raise PaperValuesError(f"{where}: {k!r} must be a non-empty string")
        if not isinstance(table["notes"], list) or not all(
            isinstance(n, str) for n in table["notes"]
        ):
            raise PaperValuesError(f"{where}: 'notes' must be a list of strings")
        cells = table["cells"]
        if not isinstance(cells, list) or not cells:
            raise PaperValuesError(f"{where}: 'cells' must be a non-empty list")
        seen: dict[tuple, str] = {}
        for i, c in enumerate(cells):
            at = f"{where}, cell {i + 1}"
            if not isinstance(c, dict):
                raise PaperValuesError(f"{at}: expected a mapping")
            at = f"{where}, cell {i + 1} ({c.get('cell', '?')})"
            unknown = set(c) - set(CELL_KEYS)
            if unknown:
                raise PaperValuesError(
                    f"{at}: unknown keys {sorted(unknown)}; allowed: {', '.join(CELL_KEYS)}"
                )
            for k in CELL_REQUIRED:
                if k not in c:
                    raise PaperValuesError(f"{at}: missing {k!r} (write std: null if none)")
            if not _is_number(c["mean"]):
                raise PaperValuesError(f"{at}: 'mean' must be a number, not {c['mean']!r}")
            for k in ("std", *CELL_EXTRA_VALUES):
                if c.get(k) is not None and not (_is_number(c[k]) and c[k] >= 0):
                    raise PaperValuesError(f"{at}: {k!r} must be a number >= 0 or null")
            if not isinstance(c["cell"], str) or not c["cell"].strip():
                raise PaperValuesError(f"{at}: 'cell' must say where the value is printed")
            if "dataset" in c and c["dataset"] not in datasets:
                raise PaperValuesError(
                    f"{at}: unknown dataset {c['dataset']!r}; fedkd's: {', '.join(sorted(datasets))}"
                )
            ident = tuple(
                sorted((k, str(v)) for k, v in c.items() if k in (*CELL_NAMES, *SETTINGS))
            )
            if ident in seen:
                raise PaperValuesError(f"{at}: the same settings twice (also {seen[ident]!r})")
            seen[ident] = c["cell"]
