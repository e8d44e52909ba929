"""``fedkd bench``'s local-training figure is computed under the precision it is labelled with,
through the set-up a run gets (``Run.prepare``): torch's own default (TF32 convolutions on CUDA)
is not what an "fp32" figure measures. On a CPU the flags are set and read back all the same."""

from types import SimpleNamespace

import pytest
import torch

from fedkd.engine.reproducibility import configure_precision
from fedkd.tools.bench.local_training import bench_local_training


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_the_local_training_figure_is_computed_under_its_precision(precision, tf32_flags):
    # the flags another precision (or torch's default: cuDNN TF32 on) left in the process
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = precision == "fp32"
    args = SimpleNamespace(model="cnn", batch_size=8, steps=2, repeats=1, precision=precision)
    result = bench_local_training(args, torch.device("cpu"))
    assert result["precision"] == configure_precision(precision)
    assert torch.backends.cudnn.allow_tf32 is (precision == "tf32")
    assert torch.backends.cuda.matmul.allow_tf32 is (precision == "tf32")
    # the same batches and step: the engine and the bare loop end on the same weights
    assert result["max_abs_diff"] < 1e-5
    assert result["engine_img_s"] > 0 and result["bare_img_s"] > 0
