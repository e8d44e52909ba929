"""The Snakemake workflow: the schema, dry-runs of the default and the paper configuration, the
tiny configuration end to end, re-runs after a source edit, a killed pipeline and the report
(around the jobs: test_workflow_console).

Snakemake runs in a scratch directory (``--directory``) against a frozen copy of src/fedkd (see
``freeze_sources``), so the repository's results/ and sources are never touched."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "Snakefile"
DEFAULT = REPO / "config" / "config.yaml"
PAPER = REPO / "config" / "paper.yaml"
TINY = REPO / "config" / "tiny.yaml"


# ----------------------------------------------------------------------------- helpers


def freeze_sources(dest: Path) -> Path:
    """Copy src/fedkd to ``dest``/fedkd. The workflow hashes the sources each run depends on, and
    this tree may be edited while the tests run; the copy keeps those hashes fixed, and a test may
    edit the copy without touching the repository."""
    shutil.copytree(
        REPO / "src" / "fedkd", dest / "fedkd", ignore=shutil.ignore_patterns("__pycache__")
    )
    return dest


def env_for(src: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH", "")) if p)
    return env


def snakemake_cmd(workdir: Path, configfile: Path, *args: str) -> list[str]:
    # targets first: --configfile takes every following word as another config file
    return [
        sys.executable,
        "-m",
        "snakemake",
        *args,
        "--snakefile",
        str(SNAKEFILE),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
    ]


def snakemake(
    workdir: Path, configfile: Path, *args: str, src: Path, timeout: float = 900, check=True
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        snakemake_cmd(workdir, configfile, *args),
        env=env_for(src),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({proc.returncode}):\n"
            f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        )
    return proc


def plan(workdir: Path, configfile: Path, *targets: str, src: Path) -> list[dict]:
    """The jobs a dry-run plans, one dict per job: rule, output (list), reason.

    (Not ``--summary``: it reports the outputs of an interrupted job as "ok", although
    --rerun-incomplete re-runs that job.)"""
    proc = snakemake(workdir, configfile, *targets, "-n", src=src, timeout=300)
    jobs = []
    for line in proc.stdout.splitlines():
        head = re.fullmatch(r"(?:local)?rule (\w+):", line.strip())
        message = MESSAGE.fullmatch(line.strip())
        if message:
            jobs.append({**job_of_message(message[1], message[2]), "reason": ""})
        elif head and not line.startswith(" "):
            jobs.append({"rule": head[1], "output": [], "reason": ""})
        elif jobs and line.startswith("    output: "):
            jobs[-1]["output"] = line.removeprefix("    output: ").split(", ")
        elif jobs and line.startswith("    reason: "):
            jobs[-1]["reason"] = line.removeprefix("    reason: ")
    return jobs


# the rules' messages (one short line a job): "train results/runs/...", "render
# results/tables/table3.{tex,md,csv,html}"; the rule `all` has none and prints its block
MESSAGE = re.compile(r"Job \d+: (partition|train|aggregate|features|render) (\S+)")


def job_of_message(word: str, path: str) -> dict:
    if word == "train":
        return {"rule": "train", "output": [f"{path}/run.json", f"{path}/metrics.parquet"]}
    if word == "render":
        stem, exts = re.fullmatch(r"(.*)\.\{(.*)\}", path).groups()
        rule = "render_table" if stem.startswith("results/tables/") else "render_figure"
        rule = "render_vs_paper" if stem.endswith("_vs_paper") else rule
        return {"rule": rule, "output": [f"{stem}.{e}" for e in exts.split(",")]}
    return {"rule": word, "output": [path]}


def planned_runs(jobs: list[dict]) -> set[str]:
    """Run directories whose train job is planned."""
    return {str(Path(j["output"][0]).parent) for j in jobs if j["rule"] == "train"}


def planned_outputs(jobs: list[dict]) -> set[str]:
    return {f for j in jobs for f in j["output"]}


def planned_rules(jobs: list[dict]) -> set[str]:
    return {j["rule"] for j in jobs}


def nothing_to_do(workdir: Path, configfile: Path, src: Path) -> bool:
    proc = snakemake(workdir, configfile, "-n", src=src)
    return "Nothing to be done" in proc.stdout + proc.stderr


def read_config(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def all_runs(config: dict) -> set[str]:
    from fedkd.pipeline import Plan

    return Plan(config).all_runs()


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    return freeze_sources(tmp_path_factory.mktemp("frozen-src"))


# ----------------------------------------------------------------------------- schema


def test_the_schema_knows_every_run_spec_key():
    """A key fedkd's RunSpec gains must be settable from the config (or be one the workflow
    sets itself), so the schema cannot silently fall behind the engine."""
    import dataclasses

    from fedkd.config import RunSpec

    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    settable = set(schema["$defs"]["runKeys"]["properties"])
    set_by_workflow = {"dataset", "strategy", "params", "seed", "partition_file"}
    fields = {f.name for f in dataclasses.fields(RunSpec)}
    assert fields - set_by_workflow == settable


# ----------------------------------------------------------------------------- dry-runs


def expected_outputs(config: dict) -> set[str]:
    out = {f"results/tables/{n}.{e}" for n in config["tables"] for e in ("tex", "md", "csv")}
    # a table with a paper key also gets its companion beside the paper
    out |= {
        f"results/tables/{n}_vs_paper.{e}"
        for n, entry in config["tables"].items()
        if entry.get("paper")
        for e in ("tex", "md", "csv", "html")
    }
    return out | {f"results/figures/{n}.{e}" for n in config["figures"] for e in ("pdf", "png")}


@pytest.mark.slow
def test_dry_run_of_the_default_config_resolves_every_target(tmp_path, src):
    config = read_config(DEFAULT)
    rows = plan(tmp_path, DEFAULT, src=src)
    assert expected_outputs(config) <= planned_outputs(rows)
    assert len(config["tables"]) == 11 and len(config["figures"]) >= 5
    runs = planned_runs(rows)
    assert runs == all_runs(config), "each needed run is one train job"
    assert {Path(r).parts[2] for r in runs} == {"mnist5k", "synthtext"}, "offline data only"
    # table 3 alone: 8 strategies x 3 alphas x 3 seeds, fedgkd's runs shared with table 7
    table3 = plan(tmp_path, DEFAULT, "results/tables/table3.tex", src=src)
    assert len(planned_runs(table3)) == 8 * 3 * 3
    # every run of the default configuration has the 3 seeds a claim's paired interval needs,
    # the rounds-to-target table's included; only the t-SNE figures read seed 0 alone
    by_setting = {}
    for run in runs:
        *setting, seed = Path(run).parts
        by_setting.setdefault(tuple(setting), set()).add(seed)
    assert {frozenset(s) for s in by_setting.values()} == {frozenset({"seed0", "seed1", "seed2"})}
    # the table's command brings its comparison with the paper along
    assert "results/tables/table3_vs_paper.html" in planned_outputs(table3)


@pytest.mark.slow
def test_dry_run_of_the_paper_config_lists_the_full_grid(tmp_path, src):
    config = read_config(PAPER)
    proc = snakemake(tmp_path, PAPER, "-n", "--quiet", "rules", src=src)
    counts = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    from fedkd.pipeline import Plan

    plan_ = Plan(config)
    runs = plan_.all_runs()
    assert counts["train"] == len(runs)
    assert counts["render_table"] == len(config["tables"]) == 12  # 10 + the FedGen sweep + claims
    assert counts["render_figure"] == len(config["figures"])
    assert counts["render_vs_paper"] == 9  # tables 2-9 and FedDF Table 1 beside the paper
    # the papers' grids (SPEC): table 3 is 3 CV datasets x 3 alphas x 8 strategies x 3 seeds,
    # FedGen as the best of its 3 coefficients (2 more runs per cell); rounds-to-target 2 alphas
    # x 3 C x 3 seeds with FedDF's recipe and tuning grids: 6 FedAvg learning rates at 1, 20
    # and 40 local epochs; 4 FedProx mu, 4 FedAvgM beta, FedDF, and FedGKD (the FedGKD
    # abstract's claim) at 20 and 40, as FedDF's Table 1 has no 1-epoch cell of theirs
    assert len(plan_.target_runs("table3")) == 3 * 3 * (8 + 2) * 3
    rtt = 2 * 3 * (3 * 6 + 2 * (4 + 4 + 1 + 1)) * 3
    assert len(plan_.target_runs("rounds_to_target")) == rtt
    assert {r.split("/")[2] for r in runs} == {
        "cifar10",
        "cifar100",
        "tinyimagenet",
        "agnews",
        "sst5",
    }
    # FedGen's coefficient sweep {0.1, 1, 10}: 2 more coefficients on table 3's 9 settings and
    # table 4's 2, 3 seeds each
    assert len({r for _, r in plan_.target_runs("fedgen_sweep")}) == 3 * (9 + 2) * 3
    # 666 runs of the papers' main grids, + the FedGen sweep (2 more coefficients on 9 + 2
    # settings), + table 5's FedGen best of 3 at C = 0.1, 0.3, 0.4 (2 x 3), - a 4-strategy
    # rounds-to-target grid, + its FedDF-recipe grid, + FedGKD on that recipe, + Fig. 3 bottom's
    # C = 0.1, 0.3, 0.4 at alpha 1 and 0.1 (FedAvg and FedGKD M = 1); 3 seeds each
    old_rtt = 2 * 3 * 3 * 4 * 3
    fig3 = 2 * 3 * 2 * 3
    expected = 666 + 2 * (9 + 2) * 3 + 2 * 3 * 3 - old_rtt + rtt + fig3
    assert counts["train"] == expected == 1254, "the full grid, each run once"


# ----------------------------------------------------------------------------- end to end


def run_status(run: Path) -> str | None:
    try:
        return json.loads((run / "run.json").read_text())["status"]
    except (OSError, ValueError, KeyError):
        return None


def sigint_as_at_a_terminal() -> None:
    """In the child before exec: SIGINT at its default, as a program in a terminal's foreground
    has it. Started from a shell's background (`pytest &`, nohup) the suite ignores SIGINT, and
    so would Snakemake: the Ctrl-C pressed below would reach only the running job."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_midway(workdir: Path, configfile: Path, runs: list[str], src: Path, log: Path):
    """Start the pipeline on one core and press Ctrl-C (SIGINT to Snakemake and its job) once a
    run has finished and the next one is between two rounds. Returns (finished, interrupted)."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            snakemake_cmd(workdir, configfile, "--cores", "1"),
            env=env_for(src), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=sigint_as_at_a_terminal,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 900
            while True:
                status = {r: run_status(workdir / r) for r in runs}
                done = [r for r in runs if status[r] == "complete"]
                partial = [
                    r for r in runs
                    if status[r] == "running" and (workdir / r / "checkpoint.pt").exists()
                ]  # fmt: skip
                if done and partial:
                    break
                assert proc.poll() is None, "the pipeline ended before it could be interrupted"
                assert time.monotonic() < deadline, "no run finished in time"
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return done, partial


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, src) -> dict:
    """The tiny configuration built end to end, the way an unlucky user builds it: the first
    attempt is interrupted while one run is half-trained (one core, so the running job is the
    only one in flight), the second attempt finishes everything."""
    workdir = tmp_path_factory.mktemp("tiny")
    runs = sorted(all_runs(read_config(TINY)))
    done, partial = interrupt_midway(workdir, TINY, runs, src, workdir / "first-attempt.log")
    finished = {r: (workdir / r / "metrics.parquet").stat().st_mtime_ns for r in done}
    replan = plan(workdir, TINY, src=src)
    second = snakemake(workdir, TINY, "--cores", "2", src=src, timeout=1200)
    return {"workdir": workdir, "runs": runs, "finished": finished, "partial": partial,
            "replan": replan, "console": second.stderr}  # fmt: skip


@pytest.mark.slow
def test_tiny_config_end_to_end(tiny, src):
    config = read_config(TINY)
    workdir = tiny["workdir"]
    for out in expected_outputs(config):
        assert (workdir / out).stat().st_size > 0, out
    tex = (workdir / "results/tables/table3.tex").read_text()
    assert "\\toprule" in tex and "\\bottomrule" in tex
    md = (workdir / "results/tables/table3.md").read_text()
    assert "Produced by configuration tiny" in md and "mnist5k (for CIFAR-10)" in md
    agg = pd.read_parquet(workdir / "results/aggregate/table3.parquet")
    assert set(agg["label"]) == {"fedavg", "fedgkd"}
    assert set(agg["alpha"]) == {1.0, 0.1} and set(agg["round"]) == {1, 2, 3}
    assert (agg["status"] == "complete").all()
    run = "results/runs/mnist5k/fedgkd-M1/dirichlet-equal-a0.1-K10-C0.2-E1-R3/seed0"
    record = json.loads((workdir / run / "run.json").read_text())
    assert record["labels"]["variant"] == "fedgkd-M1"
    assert record["spec"]["params"] == {"buffer": 1} and record["spec"]["alpha"] == 0.1
    # the partition file the run was given is the one drawn in the partition figure
    partition = "results/partitions/mnist5k/dirichlet-equal-a0.1-K10/seed0.parquet"
    assert record["spec"]["partition_file"] == partition
    fedcad = pd.read_parquet(workdir / "results/aggregate/fedcad.parquet")
    assert fedcad["eval_local"].all() and fedcad["local_acc"].notna().all()
    assert nothing_to_do(workdir, TINY, src)


@pytest.mark.slow
def test_the_tiny_build_has_the_claims_table(tiny):
    """results/tables/claims.* of the tiny build: every registered claim, 1 seed, 3 rounds."""
    from fedkd.report.claims import all_claims

    claims = all_claims()
    tables = tiny["workdir"] / "results" / "tables"
    with open(tables / "claims.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["claim"] for r in rows} == {c.id for c in claims}
    ran = [r for r in rows if r["verdict"] != "not run" and r["row"] != "average"]
    assert ran and all("stand-in for CIFAR-10" in r["setting"] for r in ran)
    # one seed: an effect but no interval, and no verdict; at alpha 0.1 the 3 rounds leave the
    # runs at chance: named, and counted with what they reached
    for r in ran:
        assert (r["verdict"], r["n"], r["ci_low"]) == ("too few seeds", "1", ""), r
    assert any("collapsed to chance" in r["note"] for r in ran)
    assert {"claim", "source", "setting", "effect", "ci_low", "ci_high", "verdict"} <= set(rows[0])
    assert {r["claim_verdict"] for r in rows} <= {"too few seeds", "failed", "not run"}
    html = (tables / "claims.html").read_text()
    assert "residual mean square" in html and '<table class="index">' in html
    assert html.count('<section class="claim"') + html.count("<li id=") == len(claims)


@pytest.mark.slow
def test_the_console_shows_a_line_as_each_job_starts_and_one_as_it_finishes(tiny):
    lines = tiny["console"].splitlines()
    starts = [ln for ln in lines if re.fullmatch(r"\[\d\d:\d\d:\d\d\] start  \S.*", ln)]
    done = [ln for ln in lines if re.fullmatch(r"\[\d\d:\d\d:\d\d\] done   \S.*", ln)]
    total = int(re.search(r"\(\d+ of (\d+) steps", done[0])[1])
    assert len(starts) == len(done) == total > 10
    assert "ETA ~" in done[0] and done[-1].endswith(f"({total} of {total} steps, 100%)")
    assert not [ln for ln in lines if "Select jobs" in ln or "Execute " in ln or "Finished" in ln]
    # the header (Snakemake's banner and job stats) and the closing lines aside: two a job
    assert len(lines) < 2 * total + 45, "\n".join(lines)


@pytest.mark.slow
def test_a_killed_pipeline_trains_only_what_is_missing(tiny):
    workdir = tiny["workdir"]
    # the plan after the interruption: every run but the finished ones (the interrupted one too)
    assert planned_runs(tiny["replan"]) == set(tiny["runs"]) - set(tiny["finished"])
    for run, mtime in tiny["finished"].items():
        assert (workdir / run / "metrics.parquet").stat().st_mtime_ns == mtime, f"{run} retrained"
    for run in tiny["partial"]:
        log = workdir / "results/logs/train" / (run.removeprefix("results/runs/") + ".log")
        assert "resuming" in log.read_text(), f"{run} did not resume from its checkpoint"
    for run in tiny["runs"]:
        assert list(pd.read_parquet(workdir / run / "metrics.parquet")["round"]) == [1, 2, 3]


@pytest.mark.slow
def test_rendering_is_deterministic(tiny, src):
    workdir = tiny["workdir"]
    outputs = ["results/tables/table3.tex", "results/tables/table3.md", "results/tables/table3.csv",
               "results/figures/curves.pdf", "results/figures/curves.png"]  # fmt: skip
    before = {o: (workdir / o).read_bytes() for o in outputs}
    snakemake(workdir, TINY, "results/tables/table3.tex", "results/figures/curves.pdf",
              "--cores", "2", "--force", src=src)  # fmt: skip
    for o in outputs:
        assert (workdir / o).read_bytes() == before[o], f"{o} changed between two renders"


def strategy_depends_on(src: Path, module: str) -> dict[str, bool]:
    """strategy → whether its runs' code on mnist5k (the tiny configuration's dataset) includes
    ``module`` (per fedkd.provenance, in ``src``)."""
    code = (
        "import json, sys; from fedkd.provenance import PACKAGE_DIR, run_code_files, "
        "strategy_module_files; m = PACKAGE_DIR / sys.argv[1]; "
        "print(json.dumps({s: m in run_code_files(s, 'mnist5k') for s in strategy_module_files()}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, module],
        env=env_for(src),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.mark.slow
def test_editing_one_strategy_reruns_exactly_its_runs_and_a_revert_nothing(tiny, src):
    workdir = tiny["workdir"]
    assert nothing_to_do(workdir, TINY, src)
    config = read_config(TINY)
    module = src / "fedkd" / "strategies" / "fedgkd.py"
    depends = strategy_depends_on(src, "strategies/fedgkd.py")
    expected = {
        run for run in all_runs(config)
        if depends[config["variants"][run.split("/")[3]]["strategy"]]
    }  # fmt: skip
    others = all_runs(config) - expected
    assert expected and others and not depends["fedavg"]
    original = module.read_text()
    try:
        # a comment is no code (fedkd.provenance.code_text): nothing re-runs
        module.write_text(original + "\n# a note on the method\n")
        assert nothing_to_do(workdir, TINY, src), "a comment re-ran something"
        module.write_text(original + "\n_AN_EDIT = 1\n")
        rows = plan(workdir, TINY, src=src)
        assert planned_runs(rows) == expected
        assert "partition" not in planned_rules(rows)
    finally:
        module.write_text(original)
    assert nothing_to_do(workdir, TINY, src), "reverting the edit restores the previous state"


@pytest.mark.slow
def test_a_loader_edit_reruns_the_partitions_and_runs_of_its_datasets_only(tiny, src):
    """The tiny configuration trains on mnist5k alone: an edit of the text or the CIFAR loaders
    plans nothing, one of the MNIST loaders every partition and run."""
    workdir = tiny["workdir"]
    config = read_config(TINY)
    for name, touches_tiny in (("text.py", False), ("cifar.py", False), ("mnist.py", True)):
        module = src / "fedkd" / "data" / name
        original = module.read_text()
        try:
            module.write_text(original + "\n_AN_EDIT = 1\n")
            rows = plan(workdir, TINY, src=src)
            assert planned_runs(rows) == (all_runs(config) if touches_tiny else set()), name
            assert ("partition" in planned_rules(rows)) is touches_tiny, name
        finally:
            module.write_text(original)
    assert nothing_to_do(workdir, TINY, src), "reverting the edits restores the previous state"


@pytest.mark.slow
def test_report_bundles_tables_and_figures_with_captions(tiny, src):
    workdir = tiny["workdir"]
    snakemake(workdir, TINY, "--report", "results/report.html", src=src, timeout=600)
    html = (workdir / "results/report.html").read_text(errors="replace")
    assert "table3.csv" in html and "curves.png" in html
    assert "Produced by configuration tiny" in html
    # the front page, workflow/report/workflow.rst
    assert "regenerated by" in html and "<strong>tiny</strong>" in html
    # the claims are a section of their own
    from fedkd.report.targets import CLAIMS_SECTION

    assert json.dumps(CLAIMS_SECTION)[1:-1] in html or CLAIMS_SECTION in html
