"""What run key ``cutout`` may hold on a dataset, checked when a run spec is read. Cutout's code
(FedNTD's loaders) blanks ``side // 2`` pixels either side of a centre drawn anywhere in the
image, clipped at its borders (fedkd.runtime.preprocess.TrainInputs.cutout_keep does the same):
an odd side would blank a square one pixel narrower than the key names, and half a side as long
as the image's longer side blanks all of the image wherever the centre falls."""

from __future__ import annotations

from fedkd.data import DATASETS
from fedkd.echo import shown


def cutout_errors(side: int, dataset: str) -> list[str]:
    """The errors of a Cutout side in 1..UPPER on ``dataset``."""
    if side % 2:
        return [
            f"cutout={shown(side)} is odd: Cutout blanks side // 2 pixels either side of its "
            f"centre, a square of {side - 1}; give an even side ({side - 1} or {side + 1})"
        ]
    if dataset in DATASETS and DATASETS[dataset].kind != "image":
        return [
            f"cutout={shown(side)}: dataset {dataset!r} holds texts, and Cutout blanks a square "
            "of an image; leave cutout at 0"
        ]
    size = DATASETS[dataset].image_size if dataset in DATASETS else None
    if size and side // 2 >= max(size):
        return [
            f"cutout={shown(side)} blanks every pixel of the {size[0]} x {size[1]} images of "
            f"dataset {dataset!r} wherever its centre falls; give a side below {2 * max(size)} "
            "(FedNTD: 16)"
        ]
    return []
