"""A client's local training of one round, drawn up front: which samples each local step uses, in
which order, and their augmentation.

Everything comes from one CPU generator seeded by (run seed, round, client), so the draws are the
same on every device, for either trainer (one client at a time or K side by side), and after a
resume. Per epoch: a permutation of the client's samples, then (with crop-flip) a crop offset pair
and a flip bit per sample, then (with Cutout) the centre of each sample's cut-out square. Step s of
the round is row s: ``batch_size`` slots, of which the first ``count[s]`` are samples and the rest
padding (a client's last batch of an epoch is smaller).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class ClientSchedule:
    rows: torch.Tensor  # (S, B) int64: positions in the client's data (0 in padding slots)
    off_y: torch.Tensor  # (S, B) int64 crop offsets (0 without cropping)
    off_x: torch.Tensor
    flip: torch.Tensor  # (S, B) int64, 1 = flip horizontally
    count: list[int]  # samples in each step
    cut: torch.Tensor | None = None  # (2, S, B) int64 Cutout centres (row, column); None: no Cutout

    @property
    def num_steps(self) -> int:
        return len(self.count)

    def valid(self) -> torch.Tensor:
        """(S, B) bool: which slots hold a sample."""
        b = self.rows.shape[1] if self.rows.dim() == 2 else 0
        return torch.arange(b) < torch.tensor(self.count).unsqueeze(1)


def steps_per_round(n: int, epochs: int, batch_size: int) -> int:
    return epochs * math.ceil(n / batch_size)


def client_schedule(
    n: int,
    epochs: int,
    batch_size: int,
    seed: int,
    crop_pad: int = 0,
    flip: bool = False,
    cutout_hw: tuple[int, int] | None = None,
) -> ClientSchedule:
    """``cutout_hw``: the image's (height, width) when Cutout is on: each sample's square is
    centred on a pixel drawn uniformly from the whole image, as Cutout's code draws it."""
    gen = torch.Generator().manual_seed(seed)
    per_epoch = math.ceil(n / batch_size)
    slots = per_epoch * batch_size
    rows, oy, ox, fl, cut = [], [], [], [], []
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        if crop_pad:
            offsets = torch.randint(0, 2 * crop_pad + 1, (2, n), generator=gen)
        else:
            offsets = torch.zeros(2, n, dtype=torch.long)
        flips = (
            torch.randint(0, 2, (n,), generator=gen) if flip else torch.zeros(n, dtype=torch.long)
        )
        pad = slots - n
        rows.append(torch.cat([order, order.new_zeros(pad)]))
        # the draws belong to the sample's position in the epoch's order
        oy.append(torch.cat([offsets[0], offsets.new_zeros(pad)]))
        ox.append(torch.cat([offsets[1], offsets.new_zeros(pad)]))
        fl.append(torch.cat([flips, flips.new_zeros(pad)]))
        if cutout_hw:  # drawn last, so a run without Cutout draws what it always drew
            centres = torch.stack(
                [torch.randint(0, side, (n,), generator=gen) for side in cutout_hw]
            )
            cut.append(torch.cat([centres, centres.new_zeros(2, pad)], 1))
    shape = (epochs * per_epoch, batch_size)
    count = [min(batch_size, n - i * batch_size) for i in range(per_epoch)] * epochs
    return ClientSchedule(
        torch.cat(rows).view(shape), torch.cat(oy).view(shape), torch.cat(ox).view(shape),
        torch.cat(fl).view(shape), count,
        torch.cat(cut, 1).view(2, *shape) if cutout_hw else None,
    )  # fmt: skip
