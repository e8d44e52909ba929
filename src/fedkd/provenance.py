"""Provenance: which source files a run depends on, their hash, and the library versions.

The dependency set of a run is the static closure of the ``fedkd`` modules imported by the engine
entry point, by the run's own strategy module (found through the strategy registry) and by its
dataset's loader module (found through the dataset registry, which imports it by name when the
data are loaded); other strategies' and loaders' modules are not in it, so editing one strategy's
module re-runs only the runs of the strategies that import it (fedgkd.py: fedgkd and fedgkd+),
and editing the text loaders re-runs no run on images. A partition depends on the partitioners
and its dataset's loader alike. What is hashed is each file's code: its comments, docstrings and
blank lines are left out (``fedkd.code_text``), so rewording them re-runs nothing.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import platform
import re
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

from fedkd.code_text import code_text, statements

PACKAGE_DIR = Path(__file__).resolve().parent
ENGINE_ENTRY = PACKAGE_DIR / "engine" / "run.py"
PARTITION_ENTRY = PACKAGE_DIR / "data" / "partition.py"
FEATURES_ENTRY = PACKAGE_DIR / "engine" / "features.py"


def _module_file(module: str) -> Path | None:
    if not module.startswith("fedkd"):
        return None
    parts = module.split(".")[1:]
    base = PACKAGE_DIR.joinpath(*parts)
    if base.with_suffix(".py").exists():
        return base.with_suffix(".py")
    if (base / "__init__.py").exists():
        return base / "__init__.py"
    return None


# a file's contents → the package files it imports and the digest of its code text: planning
# hashes the closure of every variant of a configuration (41 in config/paper.yaml), the closures
# share most of their files, and one parse serves both
_SOURCES: dict[bytes, tuple[frozenset[Path], bytes, tuple[str, ...]]] = {}


def _read_source(path: Path) -> tuple[frozenset[Path], bytes, tuple[str, ...]]:
    raw = path.read_bytes()
    key = hashlib.sha256(raw).digest()
    if key not in _SOURCES:
        # as Python reads a module: its coding declaration or byte-order mark, newlines as "\n"
        source = importlib.util.decode_source(raw)
        tree = ast.parse(source)
        digest = hashlib.sha256(code_text(source, tree).encode()).digest()
        names = _imported_names(tree)
        _SOURCES[key] = (_package_files(names), digest, names)
    return _SOURCES[key]


def _imports(path: Path) -> frozenset[Path]:
    """The package files ``path`` imports; for a module of one's own (a strategy named in
    FEDKD_STRATEGY_MODULES), also the files of one's own it imports."""
    package, _, names = _read_source(path)
    if path.is_relative_to(PACKAGE_DIR):
        return package
    return package | _own_files(names)


@cache
def _library_roots() -> tuple[Path, ...]:
    import site
    import sysconfig

    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= {*site.getsitepackages(), site.getusersitepackages()}
    return tuple(Path(p).resolve() for p in paths if p)


@cache
def _distributed_modules(path: tuple[str, ...]) -> frozenset[str]:
    """The top-level modules of the libraries installed on ``path`` (sys.path), wherever they
    lie: a folder on PYTHONPATH holds libraries too (`pip install --target`, a cluster's
    modules), each with its metadata. A package installed editable (`pip install -e`) is code
    of one's own, edited where it lies, and no library."""
    from importlib.metadata import packages_distributions

    return frozenset(
        top
        for top, dists in packages_distributions().items()
        if not any(_editable(d) for d in dists)
    )


def _editable(distribution: str) -> bool:
    """Whether ``distribution`` is installed editable, as its direct_url.json (PEP 610) says."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import distribution as find

    try:
        text = find(distribution).read_text("direct_url.json")
        return bool(json.loads(text or "{}").get("dir_info", {}).get("editable"))
    except (PackageNotFoundError, ValueError, AttributeError):
        return False


def _own_files(names: tuple[str, ...]) -> frozenset[Path]:
    """The files of the modules ``names`` as this process loaded them (a strategy module of
    one's own is imported before it is hashed) that are neither fedkd's, the standard library's
    nor an installed library's: code of one's own, whose edits change what a run computes."""
    found = set()
    libraries = _distributed_modules(tuple(sys.path))
    for name in names:
        if name.partition(".")[0] in libraries:
            continue
        file = getattr(sys.modules.get(name), "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        path = Path(file).resolve()
        if not any(path.is_relative_to(root) for root in (PACKAGE_DIR, *_library_roots())):
            found.add(path)
    return frozenset(found)


def _code_digest(path: Path) -> bytes:
    return _read_source(path)[1]


def _imported_names(tree: ast.Module) -> tuple[str, ...]:
    """Every module an import statement of ``tree`` names, with the packages above it (a module
    imports its package's __init__ too); ``from m import x`` names m.x as well, x being a
    module or not."""
    names: list[str] = []
    for node in statements(tree.body):
        if isinstance(node, ast.Import):
            written = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            written = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in written:
            parts = name.split(".")
            names += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return tuple(dict.fromkeys(names))


def _package_files(names: tuple[str, ...]) -> frozenset[Path]:
    return frozenset(f for f in map(_module_file, names) if f is not None)


def _closure(roots: list[Path]) -> list[Path]:
    seen: set[Path] = set()
    todo = list(roots)
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo.extend(_imports(f) - seen)
    return sorted(seen)


def strategy_module_files() -> dict[str, Path]:
    """Strategy name → its module, from the strategy registry (fedkd.strategies; a module of
    one's own in FEDKD_STRATEGY_MODULES included)."""
    import inspect

    from fedkd.strategies import get_strategy_class, strategy_names

    return {
        name: Path(inspect.getfile(get_strategy_class(name))).resolve() for name in strategy_names()
    }


def dataset_module_files(dataset: str) -> list[Path]:
    """The dataset registry (fedkd.data) and the module of ``dataset``'s loader, which the
    registry imports by name, out of the static closure's sight."""
    from fedkd.data import loader_module

    module = loader_module(dataset)  # an unknown dataset is refused there, naming the choices
    return [PACKAGE_DIR / "data" / "__init__.py", PACKAGE_DIR / "data" / f"{module}.py"]


def run_code_files(strategy: str, dataset: str, entry: Path = ENGINE_ENTRY) -> list[Path]:
    """The source files a run of ``strategy`` on ``dataset`` imports from ``entry`` (the round
    loop; for a run's t-SNE features, ``FEATURES_ENTRY``)."""
    modules = strategy_module_files()
    if strategy not in modules:
        raise ValueError(
            f"unknown strategy {strategy!r}; choose one of: {', '.join(sorted(modules))}"
        )
    return _closure([entry, modules[strategy], *dataset_module_files(dataset)])


def files_hash(files: list[Path]) -> str:
    """Hash of the code of ``files`` (``code_text``: no comment, docstring or blank line), each
    under its name."""
    return _named_hash(files, _code_digest)


def _named_hash(files: list[Path], content: Callable[[Path], bytes]) -> str:
    h = hashlib.sha256()
    for f in files:
        # a strategy module of one's own, outside the package, by its file's name: moving it
        # to another folder changes nothing it computes
        name = f.relative_to(PACKAGE_DIR) if f.is_relative_to(PACKAGE_DIR) else f.name
        h.update(str(name).encode() + b"\0" + content(f) + b"\0")
    return h.hexdigest()[:16]


def run_code_hash(strategy: str, dataset: str) -> str:
    """Hash of exactly the source files a run of ``strategy`` on ``dataset`` depends on."""
    return files_hash(run_code_files(strategy, dataset))


def features_code_hash(strategy: str, dataset: str) -> str:
    """Hash of exactly the source files the t-SNE features of such a run depend on (they train a
    local model from the run's checkpoint)."""
    return files_hash(run_code_files(strategy, dataset, FEATURES_ENTRY))


def partition_code_files(dataset: str) -> list[Path]:
    """The source files a partition of ``dataset`` imports: the partitioners (``fedkd partition``
    only calls ``draw_partition`` and writes its result) and the dataset's loader."""
    return _closure([PARTITION_ENTRY, *dataset_module_files(dataset)])


def partition_code_hash(dataset: str) -> str:
    """Hash of exactly the source files a partition of ``dataset`` depends on."""
    return files_hash(partition_code_files(dataset))


@cache
def package_files_hash(*parts: str) -> str:
    """Hash of the package's sources under ``parts`` (folders or files, relative to the package)."""
    files: list[Path] = []
    for part in parts:
        path = PACKAGE_DIR / part
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files_hash([f for f in files if f.exists()])


def package_hash() -> str:
    """Hash of every source file of the package, byte for byte (comments included): which
    sources a run had, for its record; the code hashes above decide what re-runs."""
    return _named_hash(sorted(PACKAGE_DIR.rglob("*.py")), Path.read_bytes)


# environment variables that choose the CPU kernels torch runs or their arithmetic, read by the
# libraries themselves: ATen's instruction set, oneDNN's (convolutions) and its float32 math mode,
# MKL's code path: set, each may give other float32 numbers on the same machine
KERNEL_VARIABLES = (
    "ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "DNNL_DEFAULT_FPMATH_MODE",
    "ONEDNN_DEFAULT_FPMATH_MODE", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS",
)  # fmt: skip


def kernel_environment() -> dict[str, str]:
    """The ``KERNEL_VARIABLES`` this process was started with (none set: empty)."""
    return {name: os.environ[name] for name in KERNEL_VARIABLES if name in os.environ}


@cache
def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what ``platform`` knows of it: two
    models of one architecture give other float32 numbers for the same code."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


NVIDIA_DRIVER_FILE = Path("/proc/driver/nvidia/version")


def nvidia_driver(path: Path = NVIDIA_DRIVER_FILE) -> str:
    """The NVIDIA kernel driver's version ("none" without one): it compiles the kernels
    shipped as PTX, so it is part of what a GPU run computed with. Read from the file the
    driver keeps, as torch does not report it."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "none"
    found = re.search(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    return found.group(1) if found else "unknown"


def library_versions() -> dict[str, str]:
    """Installed versions from package metadata: importing transformers and datasets only to
    read their versions would cost every run over a second."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    # torch's own string names its build (2.3.0+cu121), which the metadata of a PyPI wheel
    # leaves out; a run has imported torch already
    out = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": str(torch.__version__),
        # the CUDA runtime and cuDNN torch was built with and loads: their kernels decide a GPU
        # run's numbers ("none": a CPU build)
        "cuda": torch.version.cuda or "none",
        "cudnn": str(torch.backends.cudnn.version() or "none"),
        "nvidia_driver": nvidia_driver(),
    }
    for name in ("numpy", "pandas", "pyarrow", "transformers", "datasets"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:  # an absent optional library is recorded, not fatal
            out[name] = "unavailable"
    return out
