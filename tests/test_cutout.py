"""Run key ``cutout``: each local training image has a square of side ``cutout`` set to 0 after
normalisation (the mean colour), centred on a pixel drawn uniformly from the image and clipped at
its borders, as FedNTD's loaders apply Cutout(16) after Normalize (FedNTD Appendix B adds Cutout
on MNIST and CIFAR). The centres are drawn with the rest of a client's schedule, so both trainers
cut the same squares; cutout 0 keeps every existing run's draws and hash."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedkd.config import RunSpec
from fedkd.data import DATASETS
from fedkd.engine.run import Run
from fedkd.runtime.preprocess import Preprocessor, TrainInputs
from fedkd.runtime.schedule import client_schedule
from test_trainers import SHAPES, SMALL, data_for, engine_used, train, update_diff


def cut_by_slices(image: np.ndarray, y: int, x: int, side: int) -> np.ndarray:
    """The reference, by slicing: zero rows y - side//2 .. y + side//2 (end excluded) and the same
    columns, each bound clipped to the image, on a normalised (C, H, W) image."""
    h, w = image.shape[-2:]
    out = image.copy()
    top, bottom = np.clip([y - side // 2, y + side // 2], 0, h)
    left, right = np.clip([x - side // 2, x + side // 2], 0, w)
    out[:, top:bottom, left:right] = 0
    return out


@pytest.mark.parametrize("side", [16, 7, 1, 80])
def test_the_square_is_cut_where_the_reference_cuts_it_borders_included(side):
    data = data_for("resnet8-cifar")
    plain = TrainInputs(data.train, Preprocessor(data, "none", torch.device("cpu")))
    cut = TrainInputs(data.train, Preprocessor(data, "none", torch.device("cpu"), cutout=side))
    h, w = data.train.x.shape[-2:]
    assert cut.cutout_hw == (h, w)
    centres = [(0, 0), (h - 1, w - 1), (5, w - 3), (h // 2, w // 2), (h - 2, 1)]
    rows = torch.arange(len(centres))
    start = plain.start(rows, torch.zeros_like(rows), torch.zeros_like(rows))
    flip = torch.zeros_like(rows)
    centre = torch.tensor(centres).T  # (2, S)
    got = cut(start, flip, torch.float64, centre).numpy()
    normalised = plain(start, flip, torch.float64).numpy()
    for i, (y, x) in enumerate(centres):
        want = cut_by_slices(normalised[i], y, x, side)
        np.testing.assert_array_equal(got[i], want)
        blanked = (want == 0).all(0) & (normalised[i] != 0).any(0)
        # the square spans 2 * (side // 2) pixels each way, so side 1 blanks none, as in Cutout
        assert blanked.any() == (side >= 2)


def test_the_centres_are_drawn_after_every_other_draw_of_an_epoch():
    kwargs = dict(n=10, epochs=1, batch_size=4, seed=7, crop_pad=4, flip=True)
    without = client_schedule(**kwargs)
    with_cut = client_schedule(**kwargs, cutout_hw=(32, 28))
    assert without.cut is None
    for field in ("rows", "off_y", "off_x", "flip"):
        assert torch.equal(getattr(without, field), getattr(with_cut, field)), field
    cut = with_cut.cut
    assert cut.shape == (2, *with_cut.rows.shape)
    valid = with_cut.valid()
    assert cut[0][valid].min() >= 0 and cut[0][valid].max() < 32
    assert cut[1][valid].min() >= 0 and cut[1][valid].max() < 28
    assert (cut[:, ~valid] == 0).all(), "padding slots hold no centre"
    # every row and column may be drawn: 2,000 draws over 32 rows miss none
    many = client_schedule(n=2000, epochs=1, batch_size=50, seed=1, cutout_hw=(32, 28)).cut
    assert set(many[0].flatten().tolist()) == set(range(32))
    assert set(many[1].flatten().tolist()) == set(range(28))


def test_cutout_0_keeps_the_hash_and_a_bad_value_is_refused_with_its_fix():
    assert RunSpec(cutout=0).hash() == RunSpec().hash()
    assert RunSpec(cutout=16).hash() != RunSpec().hash()
    assert RunSpec(cutout=16.0).cutout == 16
    for bad in (-1, 1001, 2.5, True):
        with pytest.raises(ValueError, match=r"cutout=.* must be an integer from 0 \(no Cutout\)"):
            RunSpec(cutout=bad)
    with pytest.raises(ValueError, match="holds texts.*leave cutout at 0"):
        RunSpec(dataset="agnews", model="distilbert", cutout=16)


@pytest.mark.parametrize("side", [1, 7, 17])
def test_an_odd_side_is_refused_as_cutout_would_blank_a_square_one_pixel_narrower(side):
    """Cutout blanks side // 2 pixels either side of its centre: side 7 blanks 6 x 6 and side 1
    nothing, so an odd value would run other than the square the key names."""
    data = data_for("cnn-mnist5k")
    inputs = TrainInputs(data.train, Preprocessor(data, "none", torch.device("cpu"), cutout=side))
    blanked = ~inputs.cutout_keep(torch.tensor([[14], [14]]))[0, 0]
    assert int(blanked.any(1).sum()) == int(blanked.any(0).sum()) == side - 1
    with pytest.raises(ValueError, match=rf"cutout={side} is odd: .* a square of {side - 1}; "):
        RunSpec(dataset="mnist5k", cutout=side)
    assert RunSpec(dataset="mnist5k", cutout=side + 1).cutout == side + 1


def test_a_side_that_blanks_every_pixel_of_every_image_is_refused_with_the_largest_that_does_not():
    """Half a side as long as the image's longer side blanks the whole image wherever the
    centre falls: the clients would train on blank images."""
    data = data_for("cnn-mnist5k")
    assert tuple(data.train.x.shape[-2:]) == DATASETS["mnist5k"].image_size == (28, 28)
    inputs = TrainInputs(data.train, Preprocessor(data, "none", torch.device("cpu"), cutout=56))
    centres = torch.cartesian_prod(torch.arange(28), torch.arange(28)).T
    assert not inputs.cutout_keep(centres).any()
    with pytest.raises(ValueError, match=r"cutout=56 blanks every pixel of .*28 x 28.* below 56"):
        RunSpec(dataset="mnist5k", cutout=56)
    assert RunSpec(dataset="mnist5k", cutout=54).cutout == 54
    with pytest.raises(ValueError, match=r"cutout=64 blanks every pixel of .*32 x 32"):
        RunSpec(dataset="cifar10", cutout=64)


CUT = dict(SMALL, **SHAPES["cnn-mnist5k"][0], cutout=8)


def test_both_trainers_cut_alike_and_the_cut_reaches_the_weights(tmp_path):
    data = data_for("cnn-mnist5k")
    seq = train(RunSpec(**CUT, engine="sequential"), tmp_path / "seq", data)
    batched = train(RunSpec(**CUT, engine="batched"), tmp_path / "batched", data)
    assert engine_used(tmp_path / "batched")["used"] == "batched"
    whole = train(RunSpec(**{**CUT, "cutout": 0}, engine="sequential"), tmp_path / "whole", data)
    init = Run(RunSpec(**CUT), tmp_path / "init", log=lambda m: None, dataset=data)
    init.prepare()
    assert update_diff(seq.global_model, batched.global_model, init.global_model) <= 1e-3
    assert update_diff(seq.global_model, whole.global_model, init.global_model) > 1e-2
