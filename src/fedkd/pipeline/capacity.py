"""What a dataset's size allows, known at planning without loading it: its training samples
and classes under a run's dataset_options (``train_size``, ``class_count``) and the clients and
shards they can serve (``capacity_errors``)."""

from __future__ import annotations

from fedkd.echo import shown

# training-set sizes (after the 90/10 train/validation split) of the datasets whose size is fixed
# by their files; tests/test_pipeline_values.py loads the offline ones to hold these to the loaders
TRAIN_SIZES = {
    "cifar10": 45_000, "cifar100": 45_000, "tinyimagenet": 90_000, "mnist": 54_000,
    "mnist5k": 3_600, "sst5": 8_544,
}  # fmt: skip


# classes of the datasets whose classes are fixed by their files; synthtext has its option
# num_classes, whose default the loader's is (a test holds both to the loaders)
SYNTHTEXT_CLASSES = 4
CLASSES = {
    "cifar10": 10, "cifar100": 100, "tinyimagenet": 200, "mnist": 10, "mnist5k": 10,
    "agnews": 4, "sst5": 5,
}  # fmt: skip


def class_count(dataset: str, options: dict) -> int | None:
    """The classes ``dataset`` with ``options`` has, known without loading it; None where it
    cannot be known."""
    if dataset == "synthtext":
        from fedkd.pipeline.data_check import option_value_errors

        if option_value_errors(dataset, options):  # named by dataset_option_errors
            return None
        return int(options.get("num_classes", SYNTHTEXT_CLASSES))
    return CLASSES.get(dataset)


def train_size(dataset: str, options: dict) -> int | None:
    """The training samples ``dataset`` with ``options`` gives a run, known without loading it;
    None where it cannot be known (an option this does not model)."""
    from fedkd.data.base import VAL_FRACTION
    from fedkd.pipeline.data_check import option_value_errors

    if option_value_errors(dataset, options):  # named by dataset_option_errors
        return None

    def after_split(n: int) -> int:
        return n - round(VAL_FRACTION * n)

    if dataset == "agnews":
        if set(options) - {"tokenizer", "max_len", "max_vocab", "train_size"}:
            return None
        from fedkd.data.text import AGNEWS_TRAIN_SIZE

        size = options.get("train_size", AGNEWS_TRAIN_SIZE)
        return after_split(120_000) if size is None else min(int(size), after_split(120_000))
    if dataset == "synthtext":
        if set(options) - {
            "num_classes",
            "num_docs",
            "seq_len",
            "vocab",
            "topic_words",
            "topic_rate",
        }:
            return None
        k = int(options.get("num_classes", SYNTHTEXT_CLASSES))
        n = int(options.get("num_docs", 4000))
        per_class = [n // k + (c < n % k) for c in range(k)]
        return after_split(n - sum(m // 5 for m in per_class))  # a fixed 20% test split per class
    if set(options) - {"tokenizer", "max_len", "max_vocab", "check_md5", "cache"}:
        return None
    return TRAIN_SIZES.get(dataset)


def capacity_errors(spec, partition_only: bool = False) -> list[str]:
    """A client count the dataset cannot serve, with the limit that binds: training needs a
    batch per client on average (fedkd.engine.run_setup.check_client_capacity); `fedkd
    partition` needs a sample per client (and 10 for the dirichlet scheme)."""
    n = train_size(spec.dataset, spec.dataset_options)
    if n is None:
        return []
    if not partition_only and n < spec.clients * spec.batch_size:
        from fedkd.engine.run_setup import check_client_capacity

        try:
            check_client_capacity(n, spec.clients, spec.batch_size)
        except ValueError as exc:
            return [str(exc)]
    need = 10 if spec.partition == "dirichlet" else 1
    if spec.partition == "shards" and spec.shards:
        need = spec.shards
        classes = class_count(spec.dataset, spec.dataset_options)
        if classes:
            from fedkd.data.partition import shards_misfit

            problem = shards_misfit(classes, spec.clients, spec.shards)
            if problem:
                return [f"{spec.dataset}: {problem}"]
    if n < spec.clients * need:
        return [
            f"clients={spec.clients} needs {spec.clients * need} training samples for partition "
            f"{shown(spec.partition)} but {spec.dataset} has {n}; use at most {n // need} "
            "clients"
        ]
    return []
