"""The stand-in setting of the default and tiny configurations: the strategies that add MOON's
projection head learn (at PyTorch's default head init they sat at chance for many rounds)."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedkd.config import RunSpec
from fedkd.engine.run import Run

ROOT = Path(__file__).resolve().parents[1]


def _tiny_mnist5k_spec(**overrides) -> RunSpec:
    config = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    keys = {**config["defaults"], **config["datasets"]["mnist5k"], "dataset": "mnist5k"}
    return RunSpec(**{**keys, **overrides})


def test_default_and_tiny_configs_share_the_stand_in_model():
    default = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    tiny = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    assert (
        default["datasets"]["mnist5k"]["model_options"]
        == tiny["datasets"]["mnist5k"]["model_options"]
    )


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["moon", "fedgkd+"])
def test_head_using_strategies_learn_on_the_tiny_config(tmp_path, strategy):
    spec = _tiny_mnist5k_spec(strategy=strategy, rounds=2, local_epochs=2)
    Run(spec, tmp_path / strategy, log=lambda m: None).run()
    acc = pd.read_parquet(tmp_path / strategy / "metrics.parquet")["test_acc"]
    # chance is 0.10 on 10 classes; with the head at PyTorch's default init both strategies
    # measured 0.16-0.21 after these two rounds, with the stand-in's He init about 0.57
    assert acc.iloc[-1] >= 0.40, f"{strategy} is still near chance: {acc.tolist()}"
