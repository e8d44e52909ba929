"""Shared by the image-dataset readers: fetching an official archive where downloads are
allowed (otherwise saying where to place it), and extracting a tar archive safely."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path

from fedkd.data.base import (
    DatasetCorruptError,
    DatasetNotFoundError,
)
from fedkd.data.base import (
    check_md5 as verify_md5,  # the loaders' keyword ``check_md5`` would shadow it
)


def download_file(url: str, dest: Path) -> None:
    """Fetch ``url`` to ``dest`` (through a temporary file, so a broken transfer leaves nothing)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".download-") as tmp:
        part = Path(tmp) / dest.name
        try:
            from torchvision.datasets.utils import download_url
        except Exception:  # torchvision is optional (its wheels are CUDA builds)
            import urllib.request

            with urllib.request.urlopen(url, timeout=60) as r, open(part, "wb") as f:
                shutil.copyfileobj(r, f)
        else:
            download_url(url, str(part.parent), filename=part.name)
        part.replace(dest)


def fetch_or_explain(url: str, dest: Path, download: bool, missing: str) -> None:
    """Download ``url`` to ``dest`` if allowed; otherwise (or on failure) say where to put it.
    ``missing`` says what was looked for, e.g. "cifar10: neither A nor B exists"."""
    if not download:
        raise DatasetNotFoundError(
            f"{missing}; download {url} and place it at {dest}, or set FEDKD_DOWNLOAD=1 where "
            f"the network is reachable"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        download_file(url, dest)
    except Exception as exc:
        raise DatasetNotFoundError(
            f"{missing} and downloading it failed ({exc}); fetch {url} elsewhere and place it "
            f"at {dest}"
        ) from exc


def extract_archive(archive: Path, root: Path, folder: str, md5: str | None) -> None:
    """Extract the tar ``archive`` into ``root/folder`` via a temporary folder: a broken archive leaves
    neither a half-extracted folder nor the temporary one."""
    if md5:
        verify_md5(archive, md5)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".extract-"))
    try:
        try:
            with tarfile.open(archive, "r:*") as tar:
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            raise DatasetCorruptError(
                f"{archive} cannot be extracted ({type(exc).__name__}: {exc}); it is incomplete or "
                f"damaged: delete it and place the official file there again"
            ) from exc
        if not (tmp / folder).is_dir():
            raise DatasetCorruptError(
                f"{archive} does not contain the folder {folder}/; delete it and place the "
                f"official file there again"
            )
        (tmp / folder).rename(root / folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
