"""Before the first job starts: is what the runs still to train read there? Each dataset where its
loader looks, the Hugging Face tokenizer of a text dataset, and the pretrained DistilBERT a run
asks for. What is missing is said once, in the loader's or the model's words, and no job starts
(rather than every partition job of a dataset failing with the same message, or a run asking for
pretrained weights it cannot find training a small DistilBERT from scratch under their name, as
fedkd.models.text falls back to with a warning in its log only).

The dataset check is cheap and errs towards starting: a dataset is taken as present when any of
the names its loader looks for exists under its data root, a folder with the files its loader
reads first in it (the jobs read them and say what else is wrong); otherwise its loader is asked,
with downloads off, and its "not found", or its refusal of the folder it found, counts. With
``FEDKD_DOWNLOAD=1`` the jobs fetch missing datasets and tokenizers, which are not checked then;
pretrained weights are never downloaded by a run, so they are checked always. A dataset that a
run's strategy reads besides the run's own (FedDF's unlabelled set) is checked like it.
``fedkd train`` makes the weights check too, before a run starts (``refuse_missing_weights``).
Both also check the values of a run's ``dataset_options`` against the types its loader declares
and the ranges it holds them to (``option_value_errors``): text or null where a loader computes
with a count reached it as a TypeError or IndexError traceback, and a count out of its range
failed the train job rather than the plan.

The names live here, not in the loaders (fedkd.data.cifar, .mnist, .tinyimagenet, .text): a
loader's source is part of the code hash of every run on its dataset, so moving them there would
re-train those runs. tests/test_data_check.py holds each entry to its loader."""

from __future__ import annotations

import functools
import inspect
import os
import types
import typing
from pathlib import Path

from fedkd.echo import safe_text, shown
from fedkd.values import is_finite_number, is_int

# dataset → what its loader looks for under the data root, any one of which it reads
LOOKED_FOR: dict[str, tuple[str, ...]] = {
    "cifar10": ("cifar-10-batches-py", "cifar-10-python.tar.gz"),
    "cifar100": ("cifar-100-python", "cifar-100-python.tar.gz"),
    "tinyimagenet": ("tiny-imagenet-200", "tiny-imagenet-200.zip", "tiny-imagenet-200.uint8.pt"),
    "mnist": ("MNIST/raw",),
    "agnews": ("ag_news",),
    "sst5": ("sst5",),
}


def _idx_files() -> tuple[tuple[str, ...], ...]:
    stems = [f"{s}-{k}-ubyte" for s in ("train", "t10k") for k in ("images-idx3", "labels-idx1")]
    return tuple((stem, f"{stem}.gz") for stem in stems)


def _split_files(*splits: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Each text split (its file names) as parquet or csv, one group of names a split; the
    Hugging Face cache serves any split the files lack."""
    return tuple(
        (*(f"{name}{suffix}" for name in names for suffix in (".parquet", ".csv")), "hf_cache")
        for names in splits
    )


# a folder of LOOKED_FOR → the files its loader needs in it, each one of a group of names; an
# empty folder (an MNIST/raw a failed torchvision download leaves) is no dataset. Only files the
# loader reads before any large one, or the batches themselves, so asking it fails fast.
FOLDER_FILES: dict[str, tuple[tuple[str, ...], ...]] = {
    "cifar-10-batches-py": tuple(
        (name,) for name in (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
    ),
    "cifar-100-python": (("train",), ("test",)),
    "tiny-imagenet-200": (("wnids.txt",), ("words.txt",)),
    "MNIST/raw": _idx_files(),
    "ag_news": _split_files(("train",), ("test",)),
    "sst5": _split_files(("train",), ("test",), ("validation", "dev")),
}


def data_root(configured: str | None) -> Path:
    """Where a job looks: the configuration's data_root, else ``$FEDKD_DATA``, else ``./data``
    (fedkd.data.base.default_root, without importing torch)."""
    if configured:
        return Path(configured)
    return Path(os.environ.get("FEDKD_DATA") or "data").expanduser().resolve()


def missing_datasets(roots: dict[str, str | None]) -> dict[str, str]:
    """Each dataset (of ``roots``: name → its configured data_root, or None) whose files are
    absent → its loader's message saying what to place where; in the order of the names."""
    absent = {}
    for name in sorted(roots):
        looked_for = LOOKED_FOR.get(name)
        if looked_for is None:  # mnist5k, synthtext: no files
            continue
        root = data_root(roots[name])
        if not any(_complete(root, entry) for entry in looked_for):
            absent[name] = root
    if not absent:
        return {}  # without importing torch (fedkd.data.base), a second and more
    from fedkd.data.base import download_allowed

    if download_allowed(None):
        return {}
    reasons = {name: not_found(name, root) for name, root in absent.items()}
    return {name: reason for name, reason in reasons.items() if reason}


def _there(path: Path) -> bool:
    """Whether ``path`` exists; one that cannot be looked at (no permission) counts, for its job
    to say what is wrong."""
    try:
        return path.exists()
    except OSError:
        return True


def _complete(root: Path, entry: str) -> bool:
    """Whether ``root / entry`` is there, a folder of FOLDER_FILES with one name of each group."""
    if not _there(root / entry):
        return False
    groups = FOLDER_FILES.get(entry, ())
    return all(any(_there(root / entry / name) for name in group) for group in groups)


def not_found(name: str, root: Path) -> str | None:
    """The loader's own message when it finds nothing of ``name`` under ``root`` (downloads off),
    or refuses a folder lacking a file it needs, else None: whatever else it finds wrong is for
    the jobs to say, as they read the data."""
    from fedkd.data import DatasetCorruptError, DatasetNotFoundError, load_dataset

    try:
        load_dataset(name, root, download=False)
    except (DatasetNotFoundError, DatasetCorruptError) as exc:
        return str(exc)
    except Exception:
        return None
    return None


def missing_tokenizers(names) -> list[str]:
    """For each Hugging Face tokenizer in ``names`` that cannot be read from the local cache, what
    a text loader says (fedkd.data.text.HFTokenizer); none is checked where downloads are allowed."""
    from fedkd.data.base import DatasetNotFoundError, download_allowed
    from fedkd.data.text import HFTokenizer

    if download_allowed(None):
        return []
    reasons = []
    for name in sorted(names):
        try:
            HFTokenizer(name, download=False)
        except DatasetNotFoundError as exc:
            reasons.append(str(exc))
    return reasons


def missing_weights(names) -> list[str]:
    """For each pretrained DistilBERT in ``names`` that the model cannot load from local files
    (fedkd.models.text.load_pretrained, which would fall back to a small encoder), what to do."""
    import warnings

    from fedkd.models.text import load_pretrained

    reasons = []
    for name in sorted(names):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its warning is for a run's log; this says it here
            found = load_pretrained(name) is not None
        if not found:
            reasons.append(
                f"pretrained DistilBERT {name!r} is not in the local Hugging Face cache "
                "(HF_HOME) nor a folder of that name, and its runs would train a small "
                "DistilBERT from scratch under its name; download it into the cache where the "
                "network is reachable, or set model_options {pretrained: null} to train the small "
                "encoder on purpose"
            )
    return reasons


def pretrained_asked(dataset: str, model: str, model_options: dict | None) -> str | None:
    """The pretrained DistilBERT a run asks for, or None (model "auto" is its dataset's model)."""
    from fedkd.data import default_model

    if (default_model(dataset) if model == "auto" else model) != "distilbert":
        return None
    return (model_options or {}).get("pretrained") or None


def refuse_missing_weights(spec, out: Path) -> None:
    """``fedkd train``'s check: a run (a RunSpec, writing to ``out``) asking for pretrained weights
    that are not on disk does not start. A run resuming from its checkpoint is left alone: it
    rebuilds the model it saved, and a model of another size fails to load that checkpoint."""
    from fedkd.files import CHECKPOINT

    pretrained = pretrained_asked(spec.dataset, spec.model, spec.model_options)
    if not pretrained or (out / CHECKPOINT).exists():
        return
    reasons = missing_weights([pretrained])
    if reasons:
        raise ValueError(reasons[0])


# the text datasets whose loader tokenises with a Hugging Face tokenizer unless told otherwise
TOKENIZED = ("agnews", "sst5")


def other_datasets(spec) -> set[str]:
    """The datasets a run reads besides its own: each parameter of its strategy (its dataset's
    defaults included) whose value is a dataset's name, as FedDF's ``unlabeled`` set is."""
    from dataclasses import fields, is_dataclass

    from fedkd.data import dataset_names, default_model
    from fedkd.strategies import get_strategy_class

    if not spec.get("strategy"):
        return set()
    dataset, model = spec["dataset"], spec.get("model", "auto")
    model = default_model(dataset) if model == "auto" else model
    params = get_strategy_class(spec["strategy"]).make_params(
        dict(spec.get("params") or {}), dataset, model
    )
    if not is_dataclass(params):
        return set()
    values = [getattr(params, field.name) for field in fields(params)]
    return {v for v in values if isinstance(v, str) and v in dataset_names()} - {dataset}


def missing_inputs(specs) -> list[str]:
    """What the runs of ``specs`` (run specs as the plan gives them: dataset, data_root, strategy,
    params, model, model_options, dataset_options) read that is not there, one reason each:
    datasets (the other datasets their strategies read included), then tokenizers (of datasets
    that are there), then pretrained weights."""
    specs = list(specs)
    roots = {spec["dataset"]: spec.get("data_root") for spec in specs}
    trained_on = set(roots)
    readers: dict[str, set[str]] = {}  # a dataset no run trains on → the runs that read it
    for spec in specs:
        for name in other_datasets(spec) - trained_on:
            roots.setdefault(name, spec.get("data_root"))
            readers.setdefault(name, set()).add(f"{spec['strategy']} on {spec['dataset']}")
    absent = missing_datasets(roots)
    reasons = [
        f"{reason} (read by the runs of {', '.join(sorted(readers[name]))})"
        if name in readers
        else reason
        for name, reason in absent.items()
    ]
    text = [s for s in specs if s["dataset"] in TOKENIZED and s["dataset"] not in absent]
    if text:
        from fedkd.data.text import DEFAULT_TOKENIZER

        tokenizers = {
            (s.get("dataset_options") or {}).get("tokenizer", DEFAULT_TOKENIZER) for s in text
        }
        reasons += missing_tokenizers(tokenizers - {"word"})
    weights = {
        pretrained_asked(s["dataset"], s.get("model", "auto"), s.get("model_options"))
        for s in specs
    }
    reasons += missing_weights(weights - {None})
    return reasons


def message(reasons: list[str]) -> str:
    """What the workflow prints, before any job, when something the runs read is missing."""
    lines = "\n".join(f"  {r}" for r in reasons)
    return (
        f"fedkd: the runs to train read what is not there, so no job was started:\n{lines}\n"
        "docs/datasets.md lists each dataset's files. Snakemake's --no-hooks skips this check\n"
        "(docs/pipeline.md says what the jobs then do)."
    )


# what a value of each declared type must be, in the words of the configuration's refusals
_KINDS = {
    bool: ("true or false", lambda v: isinstance(v, bool)),
    int: ("an integer", is_int),
    float: ("a number", is_finite_number),
    str: ("text", lambda v: isinstance(v, str)),
}


@functools.cache
def _declared_options(dataset: str) -> dict[str, tuple[tuple, object]]:
    """Each option dataset ``dataset``'s loader takes → (the types its annotation allows, its
    default): read once a process, as planning asks it of every run spec."""
    from fedkd.data import _loader, loader_options

    loader = _loader(dataset)
    hints = typing.get_type_hints(loader)
    params = inspect.signature(loader).parameters
    declared = {}
    for name in loader_options(dataset):
        hint = hints.get(name)
        union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
        declared[name] = (typing.get_args(hint) if union else (hint,), params[name].default)
    return declared


def option_value_errors(dataset: str, options: dict) -> list[str]:
    """One message per option of ``options`` that dataset ``dataset``'s loader takes whose value
    is not of the type the loader declares for it, naming its default."""
    if not options:
        return []
    key = str(dataset).lower()
    declared = _declared_options(key)
    errors = []
    for name in (n for n in options if n in declared):
        value = options[name]
        allowed, default = declared[name]
        if value is None and type(None) in allowed:
            continue
        kinds = [_KINDS[t] for t in allowed if t in _KINDS]
        if not kinds or any(ok(value) for _, ok in kinds):
            continue  # a type this does not model is left to the loader
        wanted = " or ".join(words for words, _ in kinds)
        if type(None) in allowed:
            wanted += ", or null"
        errors.append(
            f"dataset_options.{safe_text(name)}={shown(value)} must be {wanted} (dataset "
            f"{key!r}; its default: {shown(default)})"
        )
    return errors or _range_errors(key, options, declared)


# the lowest value of each count a loader takes (fedkd.data.text), and why; besides the loader's
# own checks, topic_words and corpus_seed (which it leaves to numpy's errors) and max_vocab (below
# 4 the vocabulary holds its reserved ids only)
_MAX_LEN = (2, " ([CLS] and one token)")
_MAX_VOCAB = (4, " (3 reserved ids and one word), or null for all words")
_LOWEST: dict[str, dict[str, tuple[int, str]]] = {
    "synthtext": {
        "num_classes": (2, ""), "seq_len": (8, ""), "topic_words": (1, ""),
        "corpus_seed": (0, ""), "num_docs": (1, ""), "vocab": (1, ""),
    },
    "agnews": {"max_len": _MAX_LEN, "max_vocab": _MAX_VOCAB, "train_size": (1, ", or null for all")},
    "sst5": {"max_len": _MAX_LEN, "max_vocab": _MAX_VOCAB},
}  # fmt: skip


def _range_errors(dataset: str, options: dict, declared: dict) -> list[str]:
    """The ranges dataset ``dataset``'s loader holds its options to, checked here rather than
    once a job has started; tests/test_data_check.py holds them to the loaders."""
    value = {name: default for name, (_, default) in declared.items()} | options
    suffix = f" (dataset {dataset!r})"
    errors = [
        f"dataset_options.{name}={shown(value[name])} must be at least {lowest}{why}{suffix}"
        for name, (lowest, why) in _LOWEST.get(dataset, {}).items()
        if name in options and value[name] is not None and value[name] < lowest
    ]
    if "topic_rate" in options and not 0 <= value["topic_rate"] <= 1:
        errors.append(
            f"dataset_options.topic_rate={shown(value['topic_rate'])} must lie in [0, 1] (the "
            f"share of a document's words drawn from its topic){suffix}"
        )
    tokenizer = value.get("tokenizer")
    if options.get("max_vocab") is not None and tokenizer != "word":
        errors.append(
            f"dataset_options.max_vocab={shown(options['max_vocab'])} is read by tokenizer "
            f"'word' only, and the tokenizer is {shown(tokenizer)}; set tokenizer: word, or "
            f"remove max_vocab{suffix}"
        )
    if errors or dataset != "synthtext":
        return errors
    classes, topic_words = value["num_classes"], value["topic_words"]
    if value["num_docs"] < 10 * classes:
        errors.append(
            f"dataset_options.num_docs={shown(value['num_docs'])} must be at least "
            f"{10 * classes}: 10 per class of {classes}{suffix}"
        )
    need = (topic_words - topic_words // 4) * classes + topic_words  # topics overlap by 1/4
    if value["vocab"] < need:
        errors.append(
            f"dataset_options.vocab={shown(value['vocab'])} is too small for {classes} topics "
            f"of {topic_words} words; use vocab >= {need}{suffix}"
        )
    return errors


def refuse_dataset_option_values(spec) -> None:
    """``fedkd train``'s check of ``option_value_errors``, before any output."""
    from fedkd.config import SpecError

    problems = option_value_errors(spec.dataset, spec.dataset_options)
    if problems:
        raise SpecError("invalid run spec:" + "".join(f"\n  {p}" for p in problems))


def refuse_missing_partition_file(spec) -> None:
    """``fedkd train``'s check of its ``partition_file``, before the dataset is loaded."""
    from fedkd.config import SpecError

    path = spec.partition_file
    if path is None or Path(path).is_file():
        return
    what = "is a directory, not a file" if Path(path).is_dir() else "does not exist"
    raise SpecError(
        f"partition file {path} (--partition-file) {what}; write it with `fedkd partition`, or "
        "leave partition_file out to draw the partition in the run"
    )


def refuse_before_training(spec, out: Path) -> None:
    """``fedkd train``'s checks of what a run (writing to ``out``) reads, before any output."""
    refuse_missing_partition_file(spec)
    refuse_dataset_option_values(spec)
    refuse_missing_weights(spec, out)
