"""What tables and figures share: options, run grouping, per-cell statistics, text formatting and
deterministic file writing."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedkd.report.aggregate import SETTING_KEYS, ReportError

# Standard deviation over seeds: population (ddof=0), as numpy's default, which is what the FL
# codebases these papers come from print; option "ddof": 1 gives the sample standard deviation.
DEFAULT_DDOF = 0
DASH = "–"  # a cell with no runs

# Row-key columns: how their header reads in LaTeX and Markdown.
KEY_HEADERS = {
    "dataset": ("Dataset", "Dataset"),
    "alpha": (r"$\alpha$", "α"),
    "participation": ("$C$", "C"),
    "local_epochs": ("$E$", "E"),
    "clients": ("Clients", "Clients"),
    "partition": ("Partition", "Partition"),
    "shards": ("$s$", "s"),  # shards per client, fedntd's notation
    "model": ("Model", "Model"),
    "strategy": ("Strategy", "Strategy"),
    "variant": ("Variant", "Variant"),
    "rounds_planned": ("Rounds", "Rounds"),
    "label": ("Method", "Method"),
}

# Default row order of a key: the papers list alpha from mild to strong heterogeneity (1, 0.5,
# 0.1); other numbers ascend; datasets follow the order of fedkd.config.DATASETS.
DESCENDING_KEYS = ("alpha",)


# --------------------------------------------------------------------------- options
def load_options(text: str | None) -> dict:
    """``--options``: a JSON object, or ``@path`` to a file holding one."""
    if text is None or text == "":
        return {}
    source = "--options"
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text()
        except OSError as exc:
            raise ReportError(f"options file {path} cannot be read: {exc}") from exc
        source = f"options file {path}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{source} is not valid JSON ({exc}): {text!r}") from exc
    if not isinstance(value, dict):
        raise ReportError(f"{source} must be a JSON object, got {text!r}")
    return value


class Options:
    """Typed access to one target's options; unknown names and bad values raise ReportError."""

    def __init__(self, target: str, values: dict, allowed: Iterable[str]):
        self.target = target
        self.values = dict(values)
        allowed = set(allowed) | {"caption", "label"}
        unknown = sorted(set(self.values) - allowed)
        if unknown:
            raise ReportError(
                f"unknown option(s) {unknown} for target {target!r}; "
                f"its options are: {', '.join(sorted(allowed))}"
            )

    def _bad(self, name: str, want: str) -> ReportError:
        return ReportError(
            f"option {name!r} of target {self.target!r} must be {want}, got {self.values[name]!r}"
        )

    def has(self, name: str) -> bool:
        return name in self.values and self.values[name] is not None

    def str_list(self, name: str, default: list[str] | None = None) -> list[str] | None:
        if not self.has(name):
            return default
        v = self.values[name]
        if isinstance(v, str) or not isinstance(v, list) or not v:
            raise self._bad(name, "a non-empty list of strings")
        if not all(isinstance(x, str) for x in v):
            raise self._bad(name, "a non-empty list of strings")
        if len(set(v)) != len(v):
            raise self._bad(name, "a list without repeated entries")
        return list(v)

    def num_list(self, name: str, default: list[float] | None = None, integer=False):
        if not self.has(name):
            return default
        v = self.values[name]
        ok = isinstance(v, list) and v and all(_is_number(x) for x in v)
        if ok and integer:
            ok = all(float(x).is_integer() and x >= 1 for x in v)
        if not ok:
            raise self._bad(
                name, "a non-empty list of positive integers" if integer else "a list of numbers"
            )
        return [int(x) for x in v] if integer else [float(x) for x in v]

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        v = self.values.get(name, default)
        if v not in choices:
            raise self._bad(name, "one of " + ", ".join(repr(c) for c in choices))
        return v

    def boolean(self, name: str, default: bool) -> bool:
        v = self.values.get(name, default)
        if not isinstance(v, bool):
            raise self._bad(name, "true or false")
        return v

    def integer(self, name: str, default: int, lo: int = 0, hi: int | None = None) -> int:
        v = self.values.get(name, default)
        if not _is_number(v) or not float(v).is_integer() or v < lo or (hi is not None and v > hi):
            rng = f"an integer >= {lo}" + (f" and <= {hi}" if hi is not None else "")
            raise self._bad(name, rng)
        return int(v)

    def number(self, name: str, default: float, lo: float = 0.0) -> float:
        v = self.values.get(name, default)
        if not _is_number(v) or v <= lo:
            raise self._bad(name, f"a number > {lo}")
        return float(v)

    def mapping(self, name: str) -> dict:
        v = self.values.get(name) or {}
        if not isinstance(v, dict):
            raise self._bad(name, "a JSON object")
        return dict(v)

    def text(self, name: str, default: str) -> str:
        v = self.values.get(name, default)
        if not isinstance(v, str):
            raise self._bad(name, "a string")
        return v

    def ddof(self) -> int:
        return self.integer("ddof", DEFAULT_DDOF, 0, 1)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# --------------------------------------------------------------------------- run keys
def check_keys(df: pd.DataFrame, keys: list[str], option: str, target: str) -> None:
    bad = [k for k in keys if k not in df.columns]
    if bad:
        cols = [c for c in df.columns if c not in ("class_acc",)]
        raise ReportError(
            f"option {option!r} of target {target!r} names column(s) {bad} that the aggregate "
            f"does not have; run keys are: {', '.join(cols)}"
        )


def key_value(v: Any) -> Any:
    """A hashable, NaN-safe form of a run-key value (NaN and None become None)."""
    if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    return v


# Partition schemes as the papers name them (fedntd: "Sharding" and "LDA"); option row_names
# overrides these like any other value.
DEFAULT_VALUE_NAMES = {
    "partition": {
        "dirichlet-equal": "Dirichlet (equal sizes)",
        "dirichlet": "LDA",
        "shards": "Sharding",
        "iid": "IID",
    }
}


def format_key_value(key: str, v: Any, names: dict | None) -> str:
    """Display text of a run-key value, through the ``row_names`` option when it maps it
    (``names`` None: the raw value, for machine-readable output and comparisons)."""
    v = key_value(v)
    text = DASH if v is None else (f"{v:g}" if isinstance(v, float) else str(v))
    if names is None:
        return text
    per_key = names.get(key)
    if isinstance(per_key, dict) and text in per_key:
        return str(per_key[text])
    if text in names and not isinstance(names[text], dict):
        return str(names[text])
    return DEFAULT_VALUE_NAMES.get(key, {}).get(text, text)


def order_rows(keys: list[str], tuples: Iterable[tuple], order: dict) -> list[tuple]:
    """Sort row-key tuples: values listed in option ``order`` (per key) first, in that order;
    then datasets in fedkd.config order, alpha descending, everything else ascending."""
    from fedkd.config import DATASETS

    def rank(key: str, v: Any):
        listed = order.get(key)
        if listed is not None:
            texts = [_order_text(x) for x in listed]
            t = _order_text(v)
            if t in texts:
                return (0, texts.index(t), 0.0, "")
        if v is None:
            return (3, 0, 0.0, "")
        if key == "dataset" and v in DATASETS:
            return (1, DATASETS.index(v), 0.0, "")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (1, 0, -float(v) if key in DESCENDING_KEYS else float(v), "")
        return (2, 0, 0.0, str(v))

    return sorted(
        set(tuples), key=lambda t: tuple(rank(k, v) for k, v in zip(keys, t, strict=True))
    )


def _order_text(v: Any) -> str:
    """Values in option ``order`` may be given as numbers or strings ("1.0", 1, 1.0 all match)."""
    v = key_value(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{float(v):g}"
    if isinstance(v, str):
        try:
            return f"{float(v):g}"
        except ValueError:
            return v
    return str(v)


def group_runs(
    df: pd.DataFrame, keys: list[str]
) -> dict[tuple, dict[str, dict[str, pd.DataFrame]]]:
    """{row-key tuple: {label: {run dir: that run's rows sorted by round}}}."""
    out: dict[tuple, dict[str, dict[str, pd.DataFrame]]] = {}
    if df.empty:
        return out
    key_tuples = list(zip(*(df[k].map(key_value) for k in keys), strict=True)) if keys else None
    work = df.assign(_row=key_tuples if keys else [()] * len(df))
    for (row, label, run), rows in work.groupby(["_row", "label", "run"], sort=False, dropna=False):
        rows = rows.drop(columns="_row").sort_values("round", kind="mergesort")
        out.setdefault(row, {}).setdefault(label, {})[run] = rows.reset_index(drop=True)
    return out


def check_same_setting(runs: dict[str, pd.DataFrame], where: str, keys_hint: str) -> None:
    """Runs averaged together must differ only in their seed (and be distinct seeds)."""
    if len(runs) < 2:
        return
    first = {run: rows.iloc[0] for run, rows in runs.items()}
    for key in SETTING_KEYS:
        values = {format_key_value(key, r[key], None) for r in first.values()}
        if len(values) > 1:
            raise ReportError(
                f"{where} averages runs whose {key!r} differ ({sorted(values)}): "
                f"{', '.join(sorted(runs))}; add {key!r} to option {keys_hint!r} or give the runs "
                f"different labels"
            )
    seeds = [int(r["seed"]) for r in first.values()]
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise ReportError(
            f"{where} has several runs with seed(s) {dup}: {', '.join(sorted(runs))}; "
            f"each seed must appear once per cell"
        )


# --------------------------------------------------------------------------- cells
@dataclass
class Cell:
    """One table cell: a mean over seeds, or why there is none."""

    kind: str  # "value", "missing", "diverged", "incomplete", "not reached"
    values: list[float] = field(default_factory=list)  # one per run
    seeds: list[int] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    ddof: int = DEFAULT_DDOF

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values else float("nan")

    @property
    def std(self) -> float:
        # undefined for one seed with ddof=1: NaN, and the cell shows the mean alone
        if len(self.values) <= self.ddof:
            return float("nan")
        return float(np.std(self.values, ddof=self.ddof))

    def text(self) -> str:
        """Display text of a non-value cell."""
        return DASH if self.kind == "missing" else self.kind


def make_cell(
    runs: dict[str, pd.DataFrame] | None,
    value_of: Callable[[pd.DataFrame, str], float | None],
    ddof: int,
    *,
    partial_ok: bool = False,
    none_means: str = "missing",
) -> Cell:
    """Evaluate ``value_of(rows, status)`` on every run of a cell.

    A diverged or unfinished run makes the cell "diverged" / "incomplete", unless ``partial_ok``
    (the quantity only needs rounds the run did complete, e.g. accuracy at round 10 of a run that
    diverged in round 60); then only a missing value turns the cell into that status. A run whose
    value is None makes the cell ``none_means`` ("missing" or "not reached").
    """
    if not runs:
        return Cell("missing", ddof=ddof)
    values, seeds, names = [], [], []
    failed: set[str] = set()
    for run in sorted(runs, key=lambda r: (int(runs[r]["seed"].iloc[0]), r)):
        rows = runs[run]
        status = str(rows["status"].iloc[0])
        bad = None if status == "complete" else "diverged" if status == "diverged" else "incomplete"
        if bad and not partial_ok:
            failed.add(bad)
            continue
        played = rows[rows["round"] >= 1]
        v = value_of(played, status) if len(played) else None
        if v is None or (isinstance(v, float) and math.isnan(v)):
            failed.add(bad or none_means)
            continue
        values.append(float(v))
        seeds.append(int(rows["seed"].iloc[0]))
        names.append(run)
    for kind in ("diverged", "incomplete", none_means):
        if kind in failed:
            return Cell(kind, ddof=ddof, runs=sorted(runs))
    return Cell("value", values, seeds, names, ddof)


# --------------------------------------------------------------------------- text
_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "–": "--",
    "α": r"$\alpha$",
    "±": r"$\pm$",
    "✓": r"$\checkmark$",
    "✗": r"$\times$",
}


def tex_escape(text: str) -> str:
    """Plain text -> LaTeX (captions, names and labels given in options are plain text)."""
    return "".join(_TEX_SPECIAL.get(ch, ch) for ch in str(text))


def md_escape(text: str) -> str:
    return str(text).replace("|", r"\|")


@dataclass
class Text:
    """One rendered table entry in both output languages, with its highlight."""

    tex: str
    md: str
    style: str = ""  # "", "best", "second"

    @classmethod
    def plain(cls, text: str) -> Text:
        return cls(tex_escape(text), md_escape(text))


def fmt_mean_std(mean: float, std: float, decimals: int) -> tuple[str, str]:
    m, s = f"{mean:.{decimals}f}", f"{std:.{decimals}f}"
    return f"{m}$\\pm${s}", f"{m} ± {s}"


def cell_text(cell: Cell, scale: float, decimals: int) -> Text:
    if cell.kind != "value":
        return Text.plain(cell.text())
    if math.isnan(cell.std):
        return Text.plain(f"{cell.mean * scale:.{decimals}f}")
    tex, md = fmt_mean_std(cell.mean * scale, cell.std * scale, decimals)
    return Text(tex, md)


def highlight(cells: list[tuple[Any, Cell]], scale: float, decimals: int, higher_better=True):
    """{key: "best" | "second"} among value cells, ranked by the mean as displayed (so equal
    shown values share a rank); nothing is marked when fewer than two cells have values."""
    shown = {k: round(c.mean * scale, decimals) for k, c in cells if c.kind == "value"}
    if len(shown) < 2:
        return {}
    ranks = sorted(set(shown.values()), reverse=higher_better)
    out = {k: "best" for k, v in shown.items() if v == ranks[0]}
    if len(ranks) > 1:
        out.update({k: "second" for k, v in shown.items() if v == ranks[1]})
    return out


# --------------------------------------------------------------------------- files
def write_atomic(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(data, str):
        data = data.encode()
    tmp.write_bytes(data)
    os.replace(tmp, path)


def output_path(prefix: str | Path, suffix: str) -> Path:
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + suffix)
