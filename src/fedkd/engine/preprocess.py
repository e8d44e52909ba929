"""On-device batch preprocessing: uint8 images → augmented, normalised floats; text passes through.

Augmentation (random crop with zero padding 4, horizontal flip) is one gather per batch on the
device that holds the data, driven by the caller's generator so every draw is reproducible.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedkd.data.base import FedDataset


def random_crop_flip(x: torch.Tensor, gen: torch.Generator, pad: int = 4) -> torch.Tensor:
    b, _, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad)).permute(0, 2, 3, 1)  # B, H+2p, W+2p, C
    dev = x.device
    off_y = torch.randint(0, 2 * pad + 1, (b, 1), generator=gen, device=dev)
    off_x = torch.randint(0, 2 * pad + 1, (b, 1), generator=gen, device=dev)
    flip = torch.rand(b, 1, generator=gen, device=dev) < 0.5
    rows = off_y + torch.arange(h, device=dev)
    cols = off_x + torch.arange(w, device=dev)
    cols = torch.where(flip, cols.flip(1), cols)  # a flip is a reversed column index
    batch = torch.arange(b, device=dev)[:, None, None]
    return padded[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)


def use_channels_last(spec, device: torch.device, dataset: FedDataset) -> bool:
    """Whether image batches and conv weights are channels_last (spec ``memory_format``).
    "auto": on a CPU with the sequential engine, where it measured faster; elsewhere unmeasured
    (CUDA) or untested (the batched engine's stacked weights), so contiguous."""
    if dataset.kind != "image":
        return False
    wanted = getattr(spec, "memory_format", "auto")
    if wanted == "auto":
        return device.type == "cpu" and getattr(spec, "engine", "auto") != "batched"
    return wanted == "channels_last"


class Preprocessor:
    def __init__(
        self, dataset: FedDataset, augment: str, device: torch.device, channels_last: bool = False
    ):
        self.is_image = dataset.kind == "image"
        self.channels_last = self.is_image and channels_last
        channels = dataset.input_shape[0] if self.is_image else 0
        # crop+flip is the CIFAR/Tiny-ImageNet recipe; flipping digits would change their meaning
        self.crop_flip = self.is_image and (
            augment == "crop-flip" or (augment == "auto" and channels == 3)
        )
        if self.is_image:
            mean = torch.tensor(dataset.mean or (0.5,) * channels, dtype=torch.float32)
            std = torch.tensor(dataset.std or (0.5,) * channels, dtype=torch.float32)
            self.mean = mean.view(1, -1, 1, 1).to(device)
            self.std = std.view(1, -1, 1, 1).to(device)

    def __call__(self, x: torch.Tensor, train: bool, gen: torch.Generator | None = None):
        if not self.is_image:
            return x
        x = x.float().div_(255.0)
        if train and self.crop_flip:
            x = random_crop_flip(x, gen)
        x = (x - self.mean) / self.std
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x
