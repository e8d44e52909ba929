"""Unit tests of the engine's parts: sampling, averaging, preprocessing, evaluation, checkpoints."""

import copy
import json
import os
import re

import numpy as np
import pytest
import torch

from fedkd.data.base import ArraySplit, FedDataset
from fedkd.engine.checkpoint import CheckpointCorruptError, load_checkpoint, save_checkpoint
from fedkd.runtime.evaluate import evaluate
from fedkd.runtime.preprocess import Preprocessor, random_crop_flip, use_channels_last
from fedkd.runtime.seeding import derive_seed, sample_clients
from fedkd.strategies.base import tensor_bytes, weighted_average


def test_client_sampling_depends_only_on_seed_and_round():
    a = sample_clients(0, 3, 20, 0.2)
    assert a == sample_clients(0, 3, 20, 0.2)
    assert len(a) == 4 and len(set(a)) == 4 and all(0 <= c < 20 for c in a)
    rounds = [tuple(sample_clients(0, r, 20, 0.2)) for r in range(10)]
    assert len(set(rounds)) > 1, "different rounds should draw different clients"
    assert sample_clients(1, 3, 20, 0.2) != a or sample_clients(1, 4, 20, 0.2) != sample_clients(
        0, 4, 20, 0.2
    )
    assert len(sample_clients(0, 0, 10, 0.4)) == 4
    assert len(sample_clients(0, 0, 10, 1.0)) == 10
    assert len(sample_clients(0, 0, 10, 0.01)) == 1


SEEDS_OF_A_PROCESS = """
import json
import numpy as np
from fedkd.data.partition import partition_labels
from fedkd.runtime.seeding import derive_seed, sample_clients
labels = np.arange(200) % 10
print(json.dumps([
    derive_seed(0, "client", 1, 2),
    sample_clients(0, 1, 20, 0.2),
    partition_labels(labels, "dirichlet", 10, 0, alpha=0.5).tolist(),
]))
"""


def test_seeds_clients_and_partitions_are_the_same_in_every_process():
    """Every job of a run, and the job resuming it, draws the same seeds, clients and partition:
    nothing may come from Python's per-process string hash. Two processes with different hash
    seeds agree, and derive_seed is its documented digest."""
    import hashlib
    import subprocess
    import sys

    outs = [
        subprocess.run(
            [sys.executable, "-c", SEEDS_OF_A_PROCESS], capture_output=True, text=True,
            check=True, env={**os.environ, "PYTHONHASHSEED": hash_seed},
        ).stdout
        for hash_seed in ("1", "2")
    ]  # fmt: skip
    assert outs[0] == outs[1]
    seed, clients, assignment = json.loads(outs[0])
    digest = hashlib.sha256(repr((0, "client", 1, 2)).encode()).digest()
    assert (
        seed == int.from_bytes(digest[:8], "little") & (2**63 - 1) == derive_seed(0, "client", 1, 2)
    )
    assert clients == sample_clients(0, 1, 20, 0.2) and len(set(assignment)) > 1
    assert derive_seed(0, "client", 1, 2) != derive_seed(0, "client", 2, 1)


def test_weighted_average_by_hand():
    s1 = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    s2 = {"w": torch.tensor([3.0, 6.0]), "n": torch.tensor(5)}
    out = weighted_average([s1, s2], torch.tensor([0.25, 0.75], dtype=torch.float64))
    assert torch.allclose(out["w"], torch.tensor([2.5, 5.0]))
    assert out["n"].item() == 3  # integer buffers are not averaged


def test_tensor_bytes_walks_nested_payloads():
    payload = {
        "a": torch.zeros(10),
        "b": [torch.zeros(3, dtype=torch.float64), {"c": torch.zeros(2, dtype=torch.int8)}],
        "d": 5,
    }
    assert tensor_bytes(payload) == 40 + 24 + 2


def test_random_crop_flip_is_a_shifted_window():
    gen = torch.Generator().manual_seed(0)
    x = torch.arange(2 * 1 * 6 * 6, dtype=torch.float32).view(2, 1, 6, 6) + 1
    out = random_crop_flip(x, gen, pad=2)
    assert out.shape == x.shape
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for b in range(2):
        windows = [padded[b, :, i : i + 6, j : j + 6] for i in range(5) for j in range(5)]
        windows += [w.flip(-1) for w in windows]
        assert any(torch.equal(out[b], w) for w in windows)
    # reproducible from the generator
    again = random_crop_flip(x, torch.Generator().manual_seed(0), pad=2)
    assert torch.equal(out, again)


def _toy_image_dataset(channels=3):
    x = torch.randint(0, 256, (8, channels, 8, 8), dtype=torch.uint8)
    y = torch.arange(8) % 2
    split = ArraySplit(x, y)
    return FedDataset(
        "toy", "image", 2, split, split, split, mean=(0.5,) * channels, std=(0.25,) * channels
    )


def test_preprocessor_normalises_and_augments_only_colour_training_batches():
    ds = _toy_image_dataset(3)
    pre = Preprocessor(ds, "auto", torch.device("cpu"))
    x = ds.train.x
    plain = pre(x, train=False)
    # x * 1/(255 std) - mean/std: the same map, rounded differently near zero
    assert torch.allclose(plain, (x.float() / 255 - 0.5) / 0.25, rtol=1e-6, atol=1e-6)
    assert pre.crop_flip
    assert not Preprocessor(_toy_image_dataset(1), "auto", torch.device("cpu")).crop_flip
    assert Preprocessor(_toy_image_dataset(1), "crop-flip", torch.device("cpu")).crop_flip


def test_channels_last_batches_hold_the_same_values():
    ds = _toy_image_dataset(3)
    plain = Preprocessor(ds, "auto", torch.device("cpu"))(ds.train.x, train=False)
    nhwc = Preprocessor(ds, "auto", torch.device("cpu"), channels_last=True)(ds.train.x, False)
    assert nhwc.is_contiguous(memory_format=torch.channels_last) and plain.is_contiguous()
    assert torch.equal(plain, nhwc)


def test_memory_format_auto_is_channels_last_for_images_on_a_cpu_with_the_sequential_engine():
    from types import SimpleNamespace as Spec

    cpu, cuda, image = torch.device("cpu"), torch.device("cuda"), _toy_image_dataset(3)
    text = FedDataset("t", "text", 2, image.train, image.val, image.test)
    assert use_channels_last(Spec(memory_format="auto", engine="auto"), cpu, image)
    assert not use_channels_last(Spec(memory_format="auto", engine="batched"), cpu, image)
    assert not use_channels_last(Spec(memory_format="auto", engine="auto"), cuda, image)
    assert not use_channels_last(Spec(memory_format="auto", engine="auto"), cpu, text)
    assert use_channels_last(Spec(memory_format="channels_last", engine="auto"), cuda, image)
    assert not use_channels_last(Spec(memory_format="contiguous", engine="auto"), cpu, image)


@pytest.mark.slow
def test_a_channels_last_run_trains_like_a_contiguous_one(tmp_path):
    from fedkd.config import RunSpec
    from fedkd.engine.run import Run
    from test_trainers import rel_diff, update_diff

    # a small run (one round, 2 clients of 400 images): enough for every layer to be updated
    base = dict(
        dataset="mnist5k", clients=10, participation=0.2, rounds=1, local_epochs=1, seed=0,
        device="cpu", model_options={"channels": [8, 16], "hidden": 32},
    )  # fmt: skip
    runs = {}
    for fmt in ("contiguous", "channels_last"):
        run = Run(RunSpec(memory_format=fmt, **base), tmp_path / fmt, log=lambda m: None)
        run.run()
        runs[fmt] = run
    nhwc = runs["channels_last"].global_model.conv[3].weight
    assert nhwc.is_contiguous(memory_format=torch.channels_last)
    assert runs["contiguous"].global_model.conv[3].weight.is_contiguous()
    init = Run(RunSpec(**base), tmp_path / "init", log=lambda m: None)
    init.prepare()
    plain, nhwc_model = runs["contiguous"].global_model, runs["channels_last"].global_model
    # training moved the weights (two runs that trained nothing would match trivially), and the
    # same model and batches moved them the same way: only the order of floating-point sums
    # differs (seen: 3e-7 of the update; tests/test_trainers.py's bound)
    assert rel_diff(init.global_model, plain) > 1e-2
    assert update_diff(nhwc_model, plain, init.global_model) <= 1e-3
    det = json.loads((tmp_path / "channels_last" / "run.json").read_text())["determinism"]
    assert det["memory_format"] == "channels_last"


def test_evaluate_accuracy_loss_and_per_class():
    class Fixed(torch.nn.Module):
        def forward(self, x):  # predicts class 0 for every sample
            return torch.tensor([[2.0, 0.0]]).repeat(x.shape[0], 1)

    x = torch.zeros(4, 1)
    y = torch.tensor([0, 0, 0, 1])
    stats = evaluate(Fixed(), ArraySplit(x, y), lambda v, train: v, num_classes=3)
    assert stats["acc"] == pytest.approx(0.75)
    assert stats["class_acc"][:2] == [1.0, 0.0]
    assert np.isnan(stats["class_acc"][2])  # no test sample of class 2
    p0 = torch.softmax(torch.tensor([2.0, 0.0]), 0)
    expected = float(-(3 * torch.log(p0[0]) + torch.log(p0[1])) / 4)
    assert stats["loss"] == pytest.approx(expected, rel=1e-6)


def test_checkpoint_roundtrip_and_corruption_detected(tmp_path):
    path = tmp_path / "ck.pt"
    save_checkpoint(path, {"a": torch.arange(5), "round": 2})
    assert load_checkpoint(path)["round"] == 2
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointCorruptError, match=str(path)):
        load_checkpoint(path)
    assert path.read_bytes() == bytes(raw), "a corrupt checkpoint must be left as it is"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointCorruptError):
        load_checkpoint(path)
    # a FIFO in its place is refused unread (reading it would wait for a writer forever)
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    with pytest.raises(CheckpointCorruptError, match=f"{re.escape(str(fifo))} is a FIFO"):
        load_checkpoint(fifo)


@pytest.mark.parametrize("momentum, weight_decay", [(0.9, 1e-5), (0.0, 0.0), (0.5, 1e-3)])
def test_foreach_sgd_is_bit_identical_to_torch_sgd(momentum, weight_decay):
    from fedkd.engine.optim import ForeachSGD

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    ours = copy.deepcopy(ref)
    opts = (
        torch.optim.SGD(ref.parameters(), lr=0.05, momentum=momentum, weight_decay=weight_decay, foreach=True),
        ForeachSGD(ours.parameters(), lr=0.05, momentum=momentum, weight_decay=weight_decay),
    )  # fmt: skip
    for step in range(6):
        x, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
        for model, opt in zip((ref, ours), opts, strict=True):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if step in (1, 2):  # a parameter without a gradient is left alone that step
                model[2].bias.grad = None
            opt.step()
        for a, b in zip(ref.parameters(), ours.parameters(), strict=True):
            assert torch.equal(a, b), f"step {step}"


def test_every_engine_module_a_run_imports_is_in_the_train_code_hash():
    """The train rule's code hash (fedkd.provenance) follows the engine's imports: a module split
    off run.py or client.py must still be reached from the engine entry point, or editing it
    would not re-run anything. features.py is the one engine module a run does not import (the
    features rule hashes the whole engine package)."""
    from fedkd.provenance import PACKAGE_DIR, run_code_files

    engine = {p for p in (PACKAGE_DIR / "engine").glob("*.py") if p.name != "features.py"}
    engine |= set((PACKAGE_DIR / "runtime").glob("*.py"))
    for strategy in ("fedavg", "fedgkd"):
        missing = engine - set(run_code_files(strategy, "mnist5k"))
        assert not missing, f"{strategy}: {sorted(p.name for p in missing)}"


def test_a_file_edited_in_the_same_process_has_its_imports_read_again(tmp_path):
    """The import graph is kept per file between a planning process's hashes, keyed by the
    file's modification time and size: an edit that adds an import is followed."""
    from fedkd.provenance import PACKAGE_DIR, _closure

    module = tmp_path / "my_strategy.py"
    module.write_text("import fedkd.losses\n")
    assert PACKAGE_DIR / "metrics.py" not in _closure([module])
    module.write_text("import fedkd.losses\nimport fedkd.metrics\n")
    after = _closure([module])
    assert PACKAGE_DIR / "metrics.py" in after and PACKAGE_DIR / "losses.py" in after


def test_the_first_log_line_says_how_the_data_is_split():
    """A shards or iid run's first line read "alpha None": the key it does not use."""
    from fedkd.config import RunSpec
    from fedkd.engine.run import _partition_text

    assert _partition_text(RunSpec(partition="dirichlet", alpha=0.1)) == "dirichlet alpha 0.1"
    assert _partition_text(RunSpec(partition="shards", shards=2)) == "shards 2 a client"
    assert _partition_text(RunSpec(partition="iid")) == "iid"
