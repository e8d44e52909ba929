"""ResNets as used by FedDF/FedGKD: a 3x3 stride-1 stem and no max-pool, for small images.

``resnet8`` has one BasicBlock per stage at 16/32/64 channels (78,042 parameters for 10 classes on
32x32x3 with GroupNorm). ``resnet50`` uses Bottleneck blocks (3, 4, 6, 3) at 64..512 channels
(x4 expansion, 2048-d features) with the same stem, sized for 64x64 Tiny-ImageNet inputs.

GroupNorm uses 16 channels per group: it behaves the same whatever a client's batch statistics
are, which is why the FedGKD authors prefer it over BatchNorm under label skew.
"""

from __future__ import annotations

import torch
from torch import nn

from fedkd.models.base import FedModel, image_shape

NORMS = ("group", "batch")
CHANNELS_PER_GROUP = 16


def make_norm(norm: str, channels: int) -> nn.Module:
    if norm == "group":
        return nn.GroupNorm(max(1, channels // CHANNELS_PER_GROUP), channels)
    if norm == "batch":
        return nn.BatchNorm2d(channels)
    raise ValueError(f"unknown norm {norm!r}; valid norms: {', '.join(NORMS)}")


def conv3x3(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=False)


def shortcut(in_ch: int, out_ch: int, stride: int, norm: str) -> nn.Module:
    """Identity when the shape is kept, else a 1x1 strided conv with its own norm."""
    if stride == 1 and in_ch == out_ch:
        return nn.Identity()
    return nn.Sequential(
        nn.Conv2d(in_ch, out_ch, kernel_size=1, stride=stride, bias=False), make_norm(norm, out_ch)
    )


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_ch: int, planes: int, stride: int, norm: str):
        super().__init__()
        out_ch = planes * self.expansion
        self.conv1 = conv3x3(in_ch, planes, stride)
        self.norm1 = make_norm(norm, planes)
        self.conv2 = conv3x3(planes, out_ch)
        self.norm2 = make_norm(norm, out_ch)
        self.shortcut = shortcut(in_ch, out_ch, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_ch: int, planes: int, stride: int, norm: str):
        super().__init__()
        out_ch = planes * self.expansion
        self.conv1 = nn.Conv2d(in_ch, planes, kernel_size=1, bias=False)
        self.norm1 = make_norm(norm, planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.norm2 = make_norm(norm, planes)
        self.conv3 = nn.Conv2d(planes, out_ch, kernel_size=1, bias=False)
        self.norm3 = make_norm(norm, out_ch)
        self.shortcut = shortcut(in_ch, out_ch, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        out = torch.relu(self.norm2(self.conv2(out)))
        out = self.norm3(self.conv3(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(FedModel):
    foldable = True

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        blocks_per_stage: tuple[int, ...],
        stage_planes: tuple[int, ...],
        num_classes: int,
        input_shape: tuple[int, ...],
        *,
        norm: str = "group",
        projection_head: bool = False,
        name: str = "resnet",
    ):
        super().__init__()
        in_ch = image_shape(input_shape, name)[0]
        stem_ch = stage_planes[0]
        self.stem = nn.Sequential(
            conv3x3(in_ch, stem_ch), make_norm(norm, stem_ch), nn.ReLU(inplace=True)
        )
        stages = []
        ch = stem_ch
        for i, (n_blocks, planes) in enumerate(zip(blocks_per_stage, stage_planes, strict=True)):
            stride = 1 if i == 0 else 2
            layers = []
            for b in range(n_blocks):
                layers.append(block(ch, planes, stride if b == 0 else 1, norm))
                ch = planes * block.expansion
            stages.append(nn.Sequential(*layers))
        self.stages = nn.Sequential(*stages)
        self._attach_head(ch, num_classes, projection_head)
        self._init_weights()

    def _init_weights(self) -> None:
        # as the FedGKD release (resnet.py, _weight_initialization): convs N(0, 2 / (k*k*out)),
        # i.e. He-normal fan-out, unit norms; the classifier keeps nn.Linear's own init unless
        # the run's classifier_init says otherwise (fedkd.models.build_model)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.GroupNorm, nn.BatchNorm2d)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def block_norm_parameters(self) -> set[str]:
        """The affine parameters of the stem's norm and of the residual blocks' own norms: the
        layers the FedGKD release names ``bn*`` and spares from weight decay. The shortcut
        norms (its ``downsample.1``) are not among them."""
        norms = {"stem.1": self.stem[1]}
        for name, m in self.stages.named_modules(prefix="stages"):
            if isinstance(m, (BasicBlock, Bottleneck)):
                for attr in ("norm1", "norm2", "norm3"):
                    if hasattr(m, attr):
                        norms[f"{name}.{attr}"] = getattr(m, attr)
        return {f"{prefix}.{p}" for prefix, m in norms.items() for p, _ in m.named_parameters()}

    def backbone_features(self, x: torch.Tensor) -> torch.Tensor:
        # global average pooling as a mean: adaptive_avg_pool2d's CUDA backward has no
        # deterministic kernel, so it would fail a run with deterministic: true
        return self.stages(self.stem(x)).mean(dim=(2, 3))


def resnet8(num_classes: int, input_shape: tuple[int, ...], **kwargs) -> ResNet:
    return ResNet(
        BasicBlock, (1, 1, 1), (16, 32, 64), num_classes, input_shape, name="resnet8", **kwargs
    )


def resnet50(num_classes: int, input_shape: tuple[int, ...], **kwargs) -> ResNet:
    return ResNet(
        Bottleneck,
        (3, 4, 6, 3),
        (64, 128, 256, 512),
        num_classes,
        input_shape,
        name="resnet50",
        **kwargs,
    )
