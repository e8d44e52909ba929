"""t-SNE features of a finished run: the penultimate features of its final global model and of one
client's local model trained from it, on a fixed sample of the test set.

``tsne_features(run_dir, out, ...)`` (``fedkd features``) writes them to one ``.npz`` file that the
t-SNE figure only draws; the training a local model needs stays here, in the engine."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from fedkd.files import atomic_write, read_run_record
from fedkd.values import load_json

OBJECTIVES = ("strategy", "fedavg")


class FeaturesError(ValueError):
    """The run cannot give features (not a run, not complete) or an option is out of range."""


def tsne_features(
    run_dir: str | Path,
    out: str | Path,
    *,
    samples: int = 1000,
    client: int = 0,
    device: str = "cpu",
    local_objective: str = "strategy",
) -> Path:
    """Compute the features of ``run_dir`` (see the module doc) and write them to ``out``.

    ``local_objective`` "strategy" trains the local model with the run's own local loss, "fedavg"
    with plain cross-entropy. The local model trains in round ``round_done`` of the checkpoint,
    so its client seeds are the run's own next ones: the file is reproducible."""
    data = _compute(run_dir, samples, client, device, local_objective)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays = {
        "labels": data.pop("labels"),
        "global_features": data["models"][0].pop("features"),
        "local_features": data["models"][1].pop("features"),
    }
    blob = _npz_bytes(arrays, json.dumps(data, sort_keys=True))
    atomic_write(out, lambda file: file.write(blob))
    return out


# what a features file holds: the arrays of its .npz, and the keys of its JSON metadata
FEATURES_ARRAYS = ("meta", "labels", "global_features", "local_features")
FEATURES_META = ("num_classes", "class_names", "strategy", "models")


def read_features(path: str | Path) -> dict:
    """The contents of a features file: labels, class_names, num_classes, client, strategy,
    objective and models, a list of (title, features, test accuracy). A file that does not hold
    what ``tsne_features`` writes is a FeaturesError naming the file and what it lacks."""
    path = Path(path)
    rewrite = "it is written by `fedkd features --run DIR -o FILE`; write it again"
    try:
        with zipfile.ZipFile(path) as z:
            arrays = {name.removesuffix(".npy") for name in z.namelist()}
    except zipfile.BadZipFile:
        raise FeaturesError(f"features file {path} is not an .npz archive; {rewrite}") from None
    except OSError as exc:
        raise FeaturesError(
            f"cannot read features file {path}: {exc.strerror}; give the .npz file that "
            "`fedkd features` wrote"
        ) from None
    missing = [a for a in FEATURES_ARRAYS if a not in arrays]
    if missing:
        raise FeaturesError(
            f"features file {path} has no {', '.join(missing)} (a features file holds "
            f"{', '.join(FEATURES_ARRAYS)}); {rewrite}"
        )
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = load_json(z["meta"].item(), f"features file {path}'s metadata")
            feats = [z["global_features"], z["local_features"]]
            labels = z["labels"]
        missing = [k for k in FEATURES_META if k not in meta]
        if missing:
            raise FeaturesError(
                f"features file {path}'s metadata has no {', '.join(missing)}; {rewrite}"
            )
        meta["labels"] = labels
        meta["models"] = [
            (m["title"], f, m["acc"]) for m, f in zip(meta["models"], feats, strict=True)
        ]
    except json.JSONDecodeError as exc:
        raise FeaturesError(
            f"features file {path}'s metadata is not JSON ({exc}); {rewrite}"
        ) from None
    except (zipfile.BadZipFile, EOFError) as exc:  # a member's CRC-32 or length disagrees
        raise FeaturesError(f"features file {path} is damaged ({exc}); {rewrite}") from None
    except FeaturesError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, ValueError) and str(path) in str(exc):  # named by load_json
            raise FeaturesError(str(exc)) from None
        # numpy's advice for an array of objects (allow_pickle=True) is not the user's to take
        raise FeaturesError(
            f"features file {path} does not hold what `fedkd features` writes (an array of "
            f"pickled objects, metadata of another shape, or damage); {rewrite}"
        ) from None
    return meta


def _npz_bytes(arrays: dict[str, np.ndarray], meta: str) -> bytes:
    """An ``.npz`` (what np.load reads) with a fixed timestamp, so equal features give equal
    bytes (np.savez stamps the current time)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, arr in {**arrays, "meta": np.array(meta)}.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arr), allow_pickle=False)
            z.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)),
                       member.getvalue())  # fmt: skip
    return buf.getvalue()


def _compute(run_dir, samples: int, client: int, device: str, objective: str) -> dict:
    import torch

    from fedkd.config import RunSpec
    from fedkd.engine.checkpoint import load_checkpoint
    from fedkd.engine.client import train_clients
    from fedkd.engine.run import Run
    from fedkd.runtime.evaluate import evaluate
    from fedkd.strategies.base import Strategy

    path = Path(run_dir)
    rec_path, ckpt_path = path / "run.json", path / "checkpoint.pt"
    if not rec_path.exists() or not ckpt_path.exists():
        raise FeaturesError(
            f"run directory {run_dir} has no run.json and checkpoint.pt; is it a fedkd run?"
        )
    rec = read_run_record(rec_path)  # bounded: a damaged record is a RunRecordError naming it
    if rec.get("status") != "complete":
        raise FeaturesError(
            f"run {run_dir} is {rec.get('status')!r}; t-SNE features need a complete run"
        )
    _check_int("samples", samples, 10, 5000)
    if objective not in OBJECTIVES:
        raise FeaturesError(f"local_objective must be one of {OBJECTIVES}, got {objective!r}")
    if device not in ("cpu", "cuda", "auto"):
        raise FeaturesError(f"device must be 'cpu', 'cuda' or 'auto', got {device!r}")
    spec_dict = dict(rec["spec"])
    spec_dict["device"] = device
    spec = RunSpec.from_dict(spec_dict)
    _check_int("client", client, 0, spec.clients - 1)

    run = Run(spec, path, log=lambda msg: None)
    run.prepare()
    state = load_checkpoint(ckpt_path)
    if state.get("spec_hash") != rec.get("spec_hash"):
        raise FeaturesError(
            f"{ckpt_path} is another run's (spec hash {state.get('spec_hash')}, its run.json "
            f"{rec.get('spec_hash')}); delete the run's folder and train it again"
        )
    run.global_model.load_state_dict(state["global"])
    run.strategy.load_state_dict(state["strategy"])
    r = int(state["round_done"])  # the next round (0-based): fresh, reproducible client seeds
    strategy = run.strategy if objective == "strategy" else Strategy(None, run.strategy.ctx)
    payload = strategy.payload(r, run.global_model)
    updates, _ = train_clients(r, [client], run.global_model, payload, strategy, run.env)
    local = run.build_model()
    local.load_state_dict(updates[0].state)

    test = run.dataset.test
    n = len(test)
    pick = np.sort(np.random.RandomState(0).choice(n, min(samples, n), replace=False))
    idx = torch.as_tensor(pick, device=run.device)
    sub = test.subset(idx)

    @torch.no_grad()
    def feats(model):
        model.eval()
        out = [
            model.features(run.preprocess(sub.x[i : i + 500], train=False)).float().cpu()
            for i in range(0, len(sub), 500)
        ]
        return torch.cat(out).numpy()

    ds = run.dataset
    models = []
    for title, model in (
        ("Global model", run.global_model),
        (f"Local model (client {client})", local),
    ):
        features = feats(model)
        acc = float(evaluate(model, test, run.preprocess, ds.num_classes)["acc"])
        models.append({"title": title, "features": features, "acc": acc})
    return {
        "labels": sub.y.cpu().numpy(),
        "class_names": list(ds.class_names),
        "num_classes": ds.num_classes,
        "client": client,
        "strategy": spec.strategy,
        "objective": objective,
        "models": models,
    }


def _check_int(name: str, value, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise FeaturesError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
