"""The check made before the first job (fedkd.pipeline.data_check): a dataset whose files are absent
is reported in its loader's own words; one whose files are there, in any layout its loader reads,
is left to the jobs without being loaded; downloads allowed, nothing is checked."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

import data_fixtures as fx
from fedkd.data import DATASETS, DatasetCorruptError, DatasetNotFoundError, load_dataset
from fedkd.pipeline import data_check, snakefile
from fedkd.pipeline.plan import Plan


@pytest.fixture(autouse=True)
def _no_download(monkeypatch):
    monkeypatch.delenv("FEDKD_DOWNLOAD", raising=False)


def loader_says(name: str, root: Path) -> str:
    with pytest.raises(DatasetNotFoundError) as caught:
        load_dataset(name, root, download=False)
    return str(caught.value)


@pytest.mark.parametrize("name", sorted(data_check.LOOKED_FOR))
def test_an_absent_dataset_is_reported_in_its_loaders_words(tmp_path, name):
    assert data_check.missing_datasets({name: str(tmp_path)}) == {name: loader_says(name, tmp_path)}


def test_every_dataset_is_either_looked_for_or_needs_no_files(tmp_path):
    needs_nothing = sorted(set(DATASETS) - set(data_check.LOOKED_FOR))
    assert needs_nothing == ["mnist5k", "synthtext"]
    for name in needs_nothing:
        load_dataset(name, tmp_path, download=False)  # an empty root serves
        assert data_check.missing_datasets({name: str(tmp_path)}) == {}
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("name", sorted(data_check.LOOKED_FOR))
def test_each_name_looked_for_is_one_the_loader_reads(tmp_path, name):
    """The loader's own "not found" names where it looks; the Tiny-ImageNet cache it reads first
    is tested by tests/test_tinyimagenet_cache.py::test_tinyimagenet_cache."""
    said = loader_says(name, tmp_path)
    for entry in data_check.LOOKED_FOR[name]:
        if entry == "tiny-imagenet-200.uint8.pt":
            continue
        assert str(tmp_path / entry) in said, (entry, said)


def _cifar_archive(root):
    fx.write_cifar10(root)
    fx.tar_folder(root, "cifar-10-batches-py", "cifar-10-python.tar.gz")


def _tiny_folder(root):
    fx.write_tinyimagenet(root)
    with zipfile.ZipFile(root / "tiny-imagenet-200.zip") as z:
        z.extractall(root)
    (root / "tiny-imagenet-200.zip").unlink()


def _tiny_cache(root):
    fx.write_tinyimagenet(root)
    load_dataset("tinyimagenet", root, check_md5=False)  # writes the decoded cache
    (root / "tiny-imagenet-200.zip").unlink()


def _text(name, fmt):
    splits = ("train", "validation", "test") if name == "sst5" else ("train", "test")
    folder = data_check.LOOKED_FOR[name][0]

    def write(root):
        for split in splits:
            fx.write_text_split(root / folder, split, fx.text_rows(20, 4, 0), fmt)

    return write


LAYOUTS = {
    "cifar10 folder": ("cifar10", fx.write_cifar10),
    "cifar10 archive": ("cifar10", _cifar_archive),
    "cifar100 folder": ("cifar100", fx.write_cifar100),
    "tinyimagenet zip": ("tinyimagenet", fx.write_tinyimagenet),
    "tinyimagenet folder": ("tinyimagenet", _tiny_folder),
    "tinyimagenet cache": ("tinyimagenet", _tiny_cache),
    "mnist gz": ("mnist", fx.write_mnist),
    "mnist raw": ("mnist", lambda root: fx.write_mnist(root, gz=False)),
    "agnews parquet": ("agnews", _text("agnews", "parquet")),
    "sst5 csv": ("sst5", _text("sst5", "csv")),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_dataset_in_the_official_layout_is_found_without_loading_it(
    tmp_path, monkeypatch, layout
):
    name, write = LAYOUTS[layout]
    write(tmp_path)

    def loaded(*args, **kwargs):
        raise AssertionError(f"{name} was loaded although its files are there")

    monkeypatch.setattr(data_check, "not_found", loaded)
    assert data_check.missing_datasets({name: str(tmp_path)}) == {}


def loader_refusal(name: str, root: Path) -> str:
    """What the loader says of ``name``'s files under ``root``: not found, or not as it needs."""
    with pytest.raises((DatasetNotFoundError, DatasetCorruptError)) as caught:
        load_dataset(name, root, download=False)
    return str(caught.value)


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("cifar10", "cifar-10-batches-py"),
        ("cifar100", "cifar-100-python"),
        ("tinyimagenet", "tiny-imagenet-200"),
        ("mnist", "MNIST/raw"),
        ("agnews", "ag_news"),
        ("sst5", "sst5"),
    ],
)
def test_an_empty_folder_of_a_dataset_is_reported_in_its_loaders_words(tmp_path, name, folder):
    """An empty MNIST/raw is what torchvision leaves where its download failed."""
    (tmp_path / folder).mkdir(parents=True)
    assert data_check.missing_datasets({name: str(tmp_path)}) == {
        name: loader_refusal(name, tmp_path)
    }


INCOMPLETE = {  # a layout its loader reads, less one file it needs
    "cifar10": (fx.write_cifar10, "cifar-10-batches-py/test_batch"),
    "cifar100": (fx.write_cifar100, "cifar-100-python/test"),
    "mnist": (fx.write_mnist, "MNIST/raw/t10k-labels-idx1-ubyte.gz"),
    "tinyimagenet": (_tiny_folder, "tiny-imagenet-200/wnids.txt"),
    "agnews": (_text("agnews", "parquet"), "ag_news/test.parquet"),
    "sst5": (_text("sst5", "csv"), "sst5/validation.csv"),
}


@pytest.mark.parametrize("name", sorted(INCOMPLETE))
def test_a_folder_lacking_a_file_its_loader_reads_is_reported_naming_the_file(tmp_path, name):
    write, removed = INCOMPLETE[name]
    write(tmp_path)
    (tmp_path / removed).unlink()
    said = loader_refusal(name, tmp_path)
    assert Path(removed).name.split(".")[0] in said
    assert data_check.missing_datasets({name: str(tmp_path)}) == {name: said}


def test_downloads_allowed_nothing_is_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDKD_DOWNLOAD", "1")
    monkeypatch.setattr(data_check, "not_found", lambda *a: pytest.fail("checked"))
    assert data_check.missing_datasets(dict.fromkeys(data_check.LOOKED_FOR, str(tmp_path))) == {}


def test_a_path_that_cannot_be_looked_at_is_left_to_the_jobs(tmp_path, monkeypatch):
    def refused(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "exists", refused)
    monkeypatch.setattr(data_check, "not_found", lambda *a: pytest.fail("loaded"))
    assert data_check.missing_datasets({"cifar10": str(tmp_path)}) == {}


def names_in_place(root: Path, folder: str) -> None:
    """``root / folder`` holding (empty) files of the names the check looks for in it."""
    (root / folder).mkdir(parents=True)
    for group in data_check.FOLDER_FILES[folder]:
        (root / folder / group[0]).touch()


def test_the_check_imports_no_torch_when_nothing_is_absent(tmp_path):
    """The workflow's process does not import torch; the check adds it only to ask a loader."""
    import subprocess
    import sys

    names_in_place(tmp_path, "cifar-10-batches-py")
    code = (
        "import sys; from fedkd.pipeline import data_check; "
        f"r = data_check.missing_datasets({{'mnist5k': None, 'cifar10': {str(tmp_path)!r}}}); "
        "print(r, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["{}", "False"]


def test_the_data_root_is_the_configured_one_else_fedkd_data_else_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FEDKD_DATA", raising=False)
    assert data_check.data_root(None) == tmp_path / "data"
    monkeypatch.setenv("FEDKD_DATA", str(tmp_path / "elsewhere"))
    assert data_check.data_root(None) == tmp_path / "elsewhere"
    assert data_check.data_root("mine") == Path("mine")
    (tmp_path / "elsewhere" / "cifar-10-python.tar.gz").parent.mkdir()
    (tmp_path / "elsewhere" / "cifar-10-python.tar.gz").touch()
    reasons = data_check.missing_datasets({"cifar10": None, "cifar100": None})
    assert list(reasons) == ["cifar100"] and reasons["cifar100"].startswith("cifar100: neither ")


def test_the_message_lists_each_reason_on_its_own_line():
    said = data_check.message(["cifar10: neither a nor b exists", "mnist: c does not exist"])
    lines = said.splitlines()
    assert "no job was started" in lines[0]
    assert lines[1:3] == ["  cifar10: neither a nor b exists", "  mnist: c does not exist"]


# ----------------------------------------------------------------------------- tokenizers, weights


def tokenizer_folder(path: Path) -> Path:
    """A Hugging Face tokenizer made of data files, saved where a run can name it."""
    from transformers import DistilBertTokenizerFast

    vocab = path.with_suffix(".txt")
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "news", "sport"]))
    DistilBertTokenizerFast(vocab_file=str(vocab)).save_pretrained(path)
    return path


def distilbert_folder(path: Path) -> Path:
    from transformers import DistilBertModel

    from fedkd.models.text import small_config

    DistilBertModel(small_config(20, 0, 8, {"n_layers": 1})).save_pretrained(path)
    return path


def text_spec(root, **keys) -> dict:
    return {"dataset": "agnews", "data_root": str(root), "model": "auto", **keys}


def test_a_text_datasets_tokenizer_and_pretrained_model_are_checked_when_its_data_is_there(
    tmp_path,
):
    _text("agnews", "csv")(tmp_path)
    tokenizer, no_tokenizer = tokenizer_folder(tmp_path / "tok"), str(tmp_path / "no-tok")
    weights, no_weights = distilbert_folder(tmp_path / "bert"), str(tmp_path / "no-bert")
    there = text_spec(
        tmp_path, dataset_options={"tokenizer": str(tokenizer)},
        model_options={"pretrained": str(weights)},
    )  # fmt: skip
    assert data_check.missing_inputs([there]) == []
    missing = text_spec(
        tmp_path, dataset_options={"tokenizer": no_tokenizer},
        model_options={"pretrained": no_weights},
    )  # fmt: skip
    reasons = data_check.missing_inputs([there, missing])
    assert len(reasons) == 2
    assert reasons[0].startswith(f"tokenizer {no_tokenizer!r} is not available")
    assert reasons[1].startswith(f"pretrained DistilBERT {no_weights!r} is not in the local")
    assert "model_options {pretrained: null}" in reasons[1]
    # a word vocabulary needs no tokenizer; no pretrained weights asked, none checked
    words = text_spec(tmp_path, dataset_options={"tokenizer": "word"}, model_options={})
    assert data_check.missing_inputs([words]) == []


def test_without_the_data_only_the_data_is_named(tmp_path):
    spec = text_spec(tmp_path, dataset_options={"tokenizer": str(tmp_path / "no-tok")})
    assert data_check.missing_inputs([spec]) == [loader_says("agnews", tmp_path)]


def test_downloads_allowed_the_tokenizer_is_left_to_the_jobs_but_not_the_weights(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("FEDKD_DOWNLOAD", "1")
    no_weights = str(tmp_path / "no-bert")
    spec = text_spec(
        tmp_path, dataset_options={"tokenizer": str(tmp_path / "no-tok")},
        model_options={"pretrained": no_weights},
    )  # fmt: skip
    reasons = data_check.missing_inputs([spec])
    assert len(reasons) == 1 and no_weights in reasons[0]


def test_pretrained_weights_are_checked_for_distilbert_runs_only(tmp_path):
    no_weights = str(tmp_path / "no-bert")
    # synthtext trains distilbert ("auto") and needs no files
    spec = {"dataset": "synthtext", "model": "auto", "model_options": {"pretrained": no_weights}}
    assert len(data_check.missing_inputs([spec])) == 1
    cnn = {"dataset": "mnist5k", "model": "cnn", "model_options": {"pretrained": no_weights}}
    assert data_check.missing_inputs([cnn]) == []


def test_a_dataset_a_strategy_reads_besides_its_own_is_checked_like_it(tmp_path):
    """FedDF on CIFAR-10 distils on CIFAR-100 (its default there): with CIFAR-10 in place and
    CIFAR-100 absent, CIFAR-100 is named in its loader's words; a FedDF that distils on a slice of
    its own data or on noise, and a strategy naming no dataset, read CIFAR-10 only."""
    names_in_place(tmp_path, "cifar-10-batches-py")
    feddf = {"dataset": "cifar10", "data_root": str(tmp_path), "strategy": "feddf", "params": {}}
    assert data_check.other_datasets(feddf) == {"cifar100"}
    said = f"{loader_says('cifar100', tmp_path)} (read by the runs of feddf on cifar10)"
    assert data_check.missing_inputs([feddf]) == [said]
    # a dataset that runs train on too is named as such alone
    cifar100_run = {"dataset": "cifar100", "data_root": str(tmp_path)}
    assert data_check.missing_inputs([feddf, cifar100_run]) == [loader_says("cifar100", tmp_path)]
    for unlabeled in ("train-slice", "noise"):
        own = dict(feddf, params={"unlabeled": unlabeled})
        assert data_check.other_datasets(own) == set()
        assert data_check.missing_inputs([own]) == []
    assert data_check.missing_inputs([dict(feddf, strategy="fedavg")]) == []
    names_in_place(tmp_path, "cifar-100-python")
    assert data_check.missing_inputs([feddf]) == []


def test_the_paper_grids_feddf_runs_on_cifar10_read_cifar100():
    import yaml

    plan = Plan(yaml.safe_load((REPO / "config" / "paper.yaml").read_text()))
    others = {}
    for run in plan.all_runs():
        dataset, variant, setting, seed = Path(run).relative_to("results/runs").parts
        spec = plan.run_spec(dataset, variant, setting, seed.removeprefix("seed"))
        others.setdefault((spec["strategy"], dataset), data_check.other_datasets(spec))
    assert others[("feddf", "cifar10")] == {"cifar100"}
    assert all(not found for (strategy, _), found in others.items() if strategy != "feddf")


# ----------------------------------------------------------------------------- which runs count


REPO = Path(__file__).resolve().parents[1]


def test_a_run_counts_while_a_file_of_its_train_or_partition_job_is_missing(tmp_path, monkeypatch):
    import yaml

    plan = Plan(yaml.safe_load((REPO / "config" / "paper.yaml").read_text()))
    run = next(r for r in sorted(plan.all_runs()) if r.startswith("results/runs/cifar10/"))
    dataset, variant, setting, seed = Path(run).relative_to("results/runs").parts
    seed = seed.removeprefix("seed")
    monkeypatch.chdir(tmp_path)
    made = [Path(run, "run.json"), Path(run, "metrics.parquet")]
    made.append(Path(plan.run_spec(dataset, variant, setting, seed)["partition_file"]))
    for path in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    assert not snakefile.run_will_train(plan, dataset, variant, setting, seed)
    for path in made:
        path.unlink()
        assert snakefile.run_will_train(plan, dataset, variant, setting, seed), path
        path.touch()


# (dataset, other options, option, its lowest value the loader takes, the value below it): the
# other options make the bound one the loader checks on its own (num_docs: 10 per class)
LOADER_BOUNDS = [
    ("synthtext", {}, "num_classes", 2, 1),
    ("synthtext", {}, "seq_len", 8, 7),
    ("synthtext", {"num_classes": 3}, "num_docs", 30, 29),
    ("synthtext", {"topic_words": 8}, "vocab", 32, 31),  # 4 topics, 6 words apart, + 8
    ("agnews", {}, "max_len", 2, 1),
    ("agnews", {}, "train_size", 1, 0),
    ("sst5", {}, "max_len", 2, 1),
]


@pytest.mark.parametrize(("dataset", "others", "name", "lowest", "below"), LOADER_BOUNDS)
def test_planning_refuses_a_dataset_option_exactly_where_its_loader_does(
    tmp_path, dataset, others, name, lowest, below
):
    """Planning's ranges (option_value_errors, also `fedkd train`'s) are copies of the loaders'
    checks, held to them here: the loaders' sources are in their runs' code hash."""
    accepted = {**others, name: lowest}
    assert data_check.option_value_errors(dataset, accepted) == []
    try:
        load_dataset(dataset, tmp_path, download=False, **accepted)
    except DatasetNotFoundError:
        pass  # past the loader's checks of its options, at its files
    refused = {**others, name: below}
    assert data_check.option_value_errors(dataset, refused)[0].startswith(
        f"dataset_options.{name}={below} "
    )
    with pytest.raises(ValueError, match=f"{name}={below}|got {below}"):
        load_dataset(dataset, tmp_path, download=False, **refused)
