"""What profiles/slurm makes each job ask SLURM for, without a cluster: the sbatch lines
snakemake-executor-plugin-slurm builds (its own functions, tests/slurm_sbatch.py) for the jobs of
a dry run through the profile, with the default workflow profile read as `snakemake` reads it.

Training jobs ask for the GPU partition, their GPUs, the configured threads as CPUs, runtime and
memory; every other job asks for the CPU partition and no GPU, with the configuration's memory and
runtime; the profile's documented GPU alternatives (gpu_model; gres with gpu: 0) give the flags
its comments say. tests/test_slurm.py submits for real on a local cluster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("snakemake_executor_plugin_slurm")
try:  # the plugins' inner functions the helper calls (plugin 2.8, jobstep 0.6)
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command  # noqa: F401
    from snakemake_executor_plugin_slurm.utils import set_gres_string  # noqa: F401
    from snakemake_executor_plugin_slurm_jobstep import get_gpu_setting  # noqa: F401
except ImportError as exc:
    pytest.skip(
        f"this snakemake-executor-plugin-slurm lacks a function the check calls ({exc}): "
        "pip install -U snakemake-executor-plugin-slurm",
        allow_module_level=True,
    )

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
TINY = REPO / "config" / "tiny.yaml"
HELPER = Path(__file__).with_name("slurm_sbatch.py")

pytestmark = pytest.mark.slow  # a Snakemake dry run each (a few seconds)

# resources of the test's own: every value differs from the profile's defaults and from the
# rules' fallbacks, so each flag below can only come from the configuration
RESOURCES = {
    "train": {"threads": 3, "gpu": 1, "mem_mb": 2500, "runtime": 7},
    "train_datasets": {"mnist5k": {"mem_mb": 3100, "threads": 5}},
    "partition": {"mem_mb": 1500, "runtime": 4},
    "aggregate": {"mem_mb": 1600, "runtime": 6},
    "render": {"mem_mb": 1700, "runtime": 8},
}
CONFIG_KEY = {  # rule → its entry of `resources`
    "partition": "partition",
    "aggregate": "aggregate",
    "render_table": "render",
    "render_vs_paper": "render",
    "render_figure": "render",
    "features": "render",
}
# train, partition, aggregate, every render rule and features (the t-SNE figure)
TARGETS = ["results/tables/table3.tex", "results/figures/tsne.pdf"]


def sbatch_lines(tmp_path: Path, name: str, profile: dict, resources: dict) -> dict:
    profile_dir = tmp_path / name / "profile"
    profile_dir.mkdir(parents=True)
    (profile_dir / "config.yaml").write_text(yaml.safe_dump(profile))
    extra = tmp_path / name / "resources.yaml"
    extra.write_text(yaml.safe_dump({"resources": resources}))
    out = tmp_path / name / "jobs.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), env.get("PYTHONPATH", "")) if p
    )
    cmd = [
        sys.executable, str(HELPER), str(out), *TARGETS, "-n", "--quiet", "all",
        # a dry run caps each job's threads at --cores (1 unless given); a run through SLURM,
        # without --cores, does not
        "--cores", "1024",
        "--profile", str(profile_dir), "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(tmp_path / name / "work"), "--configfile", str(TINY), str(extra),
    ]  # fmt: skip
    # run from elsewhere: the default workflow profile is found next to the Snakefile
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    result = json.loads(out.read_text())
    if any(job["resources"].get("slurm_partition") == "<TBD>" for job in result["jobs"]):
        pytest.skip(
            f"Snakemake {result['snakemake']} leaves the profile's string resources unevaluated "
            "in a dry run (before 9.16.3), so the sbatch lines cannot be read from one; "
            "tests/test_slurm.py checks each job's partition on a real cluster"
        )
    return result


def flags(line: str) -> list[str]:
    return line.split()


def value(line: str, flag: str) -> str | None:
    words = flags(line)
    return words[words.index(flag) + 1] if flag in words else None


def shipped_profile() -> dict:
    return yaml.safe_load(PROFILE.read_text())


def test_the_profile_gives_gpus_to_training_only(tmp_path):
    result = sbatch_lines(tmp_path, "shipped", shipped_profile(), RESOURCES)
    # the SLURM profile and the default workflow profile, combined as docs/running.md says
    options = result["options"]
    assert options["executor"] == "slurm" and options["retries"] == 1, options
    assert options["keep_going"] is True and options["rerun_incomplete"] is True, options
    # the job's command reaches sbatch as a script, not through a shell's --wrap="..."
    assert options["pass_command_as_script"] is True, options

    submitted = [j for j in result["jobs"] if not j["local"]]
    rules = {j["rule"] for j in submitted}
    assert {"train", *CONFIG_KEY} <= rules, rules
    for job in submitted:
        line = job["sbatch"]
        if job["rule"] == "train":
            assert value(line, "-p") == "gpu", line
            assert "--gpus=1" in flags(line) and "--gres" not in line, line
            assert "--cpus-per-task=5" in flags(line), line  # train_datasets.mnist5k
            assert value(line, "-t") == "7", line  # minutes
            assert value(line, "--mem") == "3100", line  # train_datasets.mnist5k
            assert job["srun_gpus"] == "--gpus=1", job  # the job step sees its GPU
        else:
            res = RESOURCES[CONFIG_KEY[job["rule"]]]
            assert value(line, "-p") == "cpu", line
            assert "--gpus" not in line and "--gres" not in line, line
            assert job["srun_gpus"] == "", job
            assert "--cpus-per-task=1" in flags(line) and "--ntasks=1" in flags(line), line
            assert value(line, "-t") == str(res["runtime"]), line
            assert value(line, "--mem") == str(res["mem_mb"]), line


def test_the_profiles_gpu_alternatives(tmp_path):
    """The two GPU requests the profile's comments offer for clusters that want them."""
    text = PROFILE.read_text()
    for line in ("# gpu_model: a100", '# gres: "gpu:a100:1"', "# gpu: 0"):
        assert line in text, f"the profile no longer offers {line!r}"

    model = shipped_profile()
    model["set-resources"]["train"]["gpu_model"] = "a100"
    line = next(
        j["sbatch"]
        for j in sbatch_lines(tmp_path, "model", model, RESOURCES)["jobs"]
        if j["rule"] == "train"
    )
    assert "--gpus=a100:1" in flags(line) and "--gres" not in line, line

    gres = shipped_profile()
    gres["set-resources"]["train"].update({"gres": "gpu:a100:1", "gpu": 0})
    result = sbatch_lines(tmp_path, "gres", gres, RESOURCES)
    for job in result["jobs"]:
        if job["rule"] == "train":
            assert "--gres=gpu:a100:1" in flags(job["sbatch"]), job["sbatch"]
            assert "--gpus" not in job["sbatch"], job["sbatch"]
        elif not job["local"]:
            assert "--gres" not in job["sbatch"], job["sbatch"]


def test_a_configuration_without_gpus_asks_for_none(tmp_path):
    resources = {**RESOURCES, "train": {**RESOURCES["train"], "gpu": 0}}
    result = sbatch_lines(tmp_path, "cpu-only", shipped_profile(), resources)
    trains = [j for j in result["jobs"] if j["rule"] == "train"]
    assert trains
    for job in trains:
        assert "--gpus" not in job["sbatch"] and "--gres" not in job["sbatch"], job["sbatch"]
        assert job["srun_gpus"] == "", job


def test_each_change_mark_says_what_to_put_there():
    marks = [ln for ln in PROFILE.read_text().splitlines() if re.search(r"#.*\bCHANGE\b", ln)]
    assert marks
    for line in marks:
        if "WHAT TO CHANGE" in line:
            continue
        assert re.search(r"\bCHANGE\b[^:]*:\s*\S", line), f"a CHANGE mark without its what: {line}"
