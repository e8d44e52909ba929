"""The two-convolution CNN of FedAvg (McMahan et al., 2017).

With 5x5 "same" convolutions (padding 2) it has 1,663,370 parameters on 28x28x1 MNIST, the count
the FedAvg paper reports. The flatten size follows from the input shape, so 32x32x3 works too.
``channels`` and ``hidden`` narrow it (a cheaper stand-in model for CPU-scale configurations);
the defaults are FedAvg's.
"""

from __future__ import annotations

import torch
from torch import nn

from fedkd.models.base import FedModel, image_shape


class FedAvgCNN(FedModel):
    foldable = True

    def __init__(
        self,
        num_classes: int,
        input_shape: tuple[int, ...],
        projection_head: bool = False,
        channels: tuple[int, int] = (32, 64),
        hidden: int = 512,
    ):
        super().__init__()
        in_channels, height, width = image_shape(input_shape, "cnn")
        c1, c2 = (int(c) for c in channels)
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, c1, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        # "same" convolutions keep the size; each 2x2 pool floors it by half
        flat = c2 * (height // 4) * (width // 4)
        if flat == 0:
            raise ValueError(
                f"input_shape={tuple(input_shape)} is too small for the cnn; use >= 4x4"
            )
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(flat, hidden), nn.ReLU(inplace=True))
        self._attach_head(hidden, num_classes, projection_head)

    def backbone_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x))
