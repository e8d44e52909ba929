"""What the planning tests share: a small valid configuration to spoil, a configuration's refusal
by ``validate_config`` as one text, and a ``snakemake -n`` of the workflow over a configuration,
as a user starts it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedkd.pipeline import ConfigError, validate_config

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def small_config() -> dict:
    """Two variants of one table over two points, with resources: valid, for a test to spoil."""
    return yaml.safe_load(
        """
name: mine
seeds: [0]
defaults: {partition: dirichlet-equal, alpha: 0.5, clients: 4, participation: 0.5,
           local_epochs: 1, rounds: 2}
variants: {fedavg: {strategy: fedavg}, fedprox: {strategy: fedprox}}
resources:
  train: {threads: 1, gpu: 0, mem_mb: 2000, runtime: 10}
tables:
  table3:
    layout: grid
    caption: x
    grid: {dataset: [mnist5k], alpha: [0.5, 0.1]}
    columns: {FedAvg: fedavg, FedProx: fedprox}
"""
    )


def errors_of(cfg: dict) -> str:
    """The refusal's text; fails the test when ``cfg`` is accepted."""
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, SCHEMA)
    return str(info.value)


def snakemake_dry_run(
    directory: Path, config: dict | str | Path, *targets: str
) -> subprocess.CompletedProcess:
    """``snakemake -n`` of the workflow in ``directory`` (targets: its default when none) with
    ``config`` as its --configfile: a mapping or YAML text is written there first, a path is
    read as it is."""
    if not isinstance(config, Path):
        path = directory / "config.yaml"
        path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
        config = path
    cmd = [
        sys.executable, "-m", "snakemake", "-n", "--cores", "1", *targets,
        "--snakefile", str(REPO / "Snakefile"), "--directory", str(directory),
        "--configfile", str(config),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
