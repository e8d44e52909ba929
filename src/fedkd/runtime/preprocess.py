"""On-device batch preprocessing: uint8 images → augmented, normalised floats; text passes through.

Two ways in, one arithmetic:
- ``Preprocessor(x, train=False)`` normalises a slice of a split (evaluation, strategies' own
  passes over a client's data);
- ``TrainInputs`` serves local training: the training split is padded once per run, and a batch,
  with its random crop (zero padding 4) and horizontal flip, is one gather from precomputed offsets
  (``fedkd.runtime.schedule`` draws the crops and flips up front), then one normalisation, then
  (with ``cutout``) each sample's Cutout square set to 0. The same call serves one client's batch
  (B,) or K clients' batches side by side (B, K).

Normalisation is ``x * scale + shift`` with scale = 1 / (255 std), shift = -mean / std, in both.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedkd.data.base import ArraySplit, FedDataset

CROP_PAD = 4  # the CIFAR / Tiny-ImageNet recipe: random crop with zero padding 4


def random_crop_flip(x: torch.Tensor, gen: torch.Generator, pad: int = CROP_PAD) -> torch.Tensor:
    """Random crop with zero padding and horizontal flip of a uint8 or float batch (B, C, H, W)
    in one gather, driven by ``gen`` (for code outside local training, e.g. FedDF's unlabeled
    batches)."""
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
    return padded[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2).contiguous()


def use_channels_last(spec, device: torch.device, dataset: FedDataset) -> bool:
    """Whether image batches and conv weights are channels_last (spec ``memory_format``).
    "auto": on a CPU with the sequential engine, where it measured faster; elsewhere contiguous.
    The batched trainer folds the clients into the channels of contiguous tensors: an explicit
    channels_last runs the sequential trainer instead (``fedkd.engine.choice``)."""
    if dataset.kind != "image":
        return False
    wanted = getattr(spec, "memory_format", "auto")
    if wanted == "auto":
        return device.type == "cpu" and getattr(spec, "engine", "auto") in ("auto", "sequential")
    return wanted == "channels_last"


class Preprocessor:
    def __init__(
        self,
        dataset: FedDataset,
        augment: str,
        device: torch.device,
        channels_last: bool = False,
        cutout: int = 0,
    ):
        self.is_image = dataset.kind == "image"
        # Cutout's side in pixels, on local training's batches only (FedNTD's recipe: 16)
        self.cutout = cutout if self.is_image else 0
        self.channels_last = self.is_image and channels_last
        channels = dataset.input_shape[0] if self.is_image else 0
        # crop+flip is the CIFAR/Tiny-ImageNet recipe; flipping digits would change their meaning
        self.crop_flip = self.is_image and (
            augment == "crop-flip" or (augment == "auto" and channels == 3)
        )
        if self.is_image:
            mean = torch.tensor(dataset.mean or (0.5,) * channels, dtype=torch.float64)
            std = torch.tensor(dataset.std or (0.5,) * channels, dtype=torch.float64)
            self.scale = (1.0 / (255.0 * std)).float().view(1, -1, 1, 1).to(device)
            self.shift = (-mean / std).float().view(1, -1, 1, 1).to(device)

    def normalise(self, x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """uint8 pixels (any leading dims, then C, H, W) → normalised ``dtype``."""
        scale, shift = self.scale.to(dtype).squeeze(0), self.shift.to(dtype).squeeze(0)
        return torch.addcmul(shift, x.to(dtype), scale)

    def __call__(
        self, x: torch.Tensor, train: bool = False, gen: torch.Generator | None = None
    ) -> torch.Tensor:
        if not self.is_image:
            return x
        if train and self.crop_flip:
            x = random_crop_flip(x, gen)
        x = self.normalise(x, torch.get_default_dtype())
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x


class TrainInputs:
    """A run's training split laid out for one-gather batches.

    Images are zero-padded once (when cropping); a sample's crop is then a start offset into the
    flat padded array, and ``table[flip]`` the offsets of its C x H x W pixels from there, so a
    batch, cropped and flipped, is ``flat.take(table[flip] + start)``. Texts use the same gather
    with a table of one row. ``start``/``flip`` come from the clients' schedules."""

    def __init__(self, split: ArraySplit, pre: Preprocessor):
        self.pre = pre
        self.pad = CROP_PAD if pre.crop_flip else 0
        x = split.x
        if self.pad:
            x = F.pad(x, (self.pad,) * 4)
        self.flat = x.reshape(-1)
        self.item_size = x[0].numel() if len(x) else 0
        self.labels = split.y
        dev = x.device
        if pre.is_image:
            c, hp, wp = x.shape[1:]
            h, w = hp - 2 * self.pad, wp - 2 * self.pad
            self.row_stride = wp
            ci = torch.arange(c, device=dev).view(c, 1, 1) * (hp * wp)
            hi = torch.arange(h, device=dev).view(1, h, 1) * wp
            wi = torch.arange(w, device=dev).view(1, 1, w)
            self.table = torch.stack([ci + hi + wi, ci + hi + (w - 1 - wi)])  # (2, C, H, W)
            self.cutout_hw = (h, w) if pre.cutout else None
            self.pixel_rows, self.pixel_cols = (
                torch.arange(h, device=dev),
                torch.arange(w, device=dev),
            )
        else:
            self.row_stride = 0
            self.table = torch.arange(self.item_size, device=dev).unsqueeze(0)  # (1, L)
            self.cutout_hw = None

    def start(self, rows: torch.Tensor, off_y: torch.Tensor, off_x: torch.Tensor) -> torch.Tensor:
        """Flat start offsets of samples ``rows`` of the split cropped at (off_y, off_x)."""
        return rows * self.item_size + off_y * self.row_stride + off_x

    def __call__(
        self,
        start: torch.Tensor,
        flip: torch.Tensor,
        dtype: torch.dtype = torch.float32,
        cut: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The batch whose samples start at ``start`` (any shape S), flipped where ``flip`` is 1:
        (*S, C, H, W) normalised ``dtype`` for images, (*S, L) token ids for texts. With Cutout,
        ``cut`` (2, *S) holds each sample's square's centre (the schedule's ``cut``)."""
        trail = (None,) * (self.table.dim() - 1)
        index = self.table[flip] + start[(..., *trail)]
        x = self.flat.take(index)
        if not self.pre.is_image:
            return x
        x = self.pre.normalise(x, dtype)
        return x * self.cutout_keep(cut).to(dtype) if self.cutout_hw else x

    def cutout_keep(self, cut: torch.Tensor) -> torch.Tensor:
        """(*S, 1, H, W) bool, False inside each sample's square: rows and columns from centre -
        side // 2 to centre + side // 2, clipped to the image, as Cutout's code masks the
        normalised image (so the square reads 0, the mean colour)."""
        half = self.pre.cutout // 2
        h, w = self.cutout_hw

        def inside(centre: torch.Tensor, pixels: torch.Tensor, size: int) -> torch.Tensor:
            lo, hi = (centre - half).clamp(0, size), (centre + half).clamp(0, size)
            return (pixels >= lo.unsqueeze(-1)) & (pixels < hi.unsqueeze(-1))

        rows = inside(cut[0], self.pixel_rows, h)  # (*S, H)
        cols = inside(cut[1], self.pixel_cols, w)  # (*S, W)
        return ~(rows.unsqueeze(-1) & cols.unsqueeze(-2)).unsqueeze(-3)
