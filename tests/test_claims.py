"""The papers' claims: the registry (one entry per claim, its quote verbatim in the paper), the
paired verdict statistics, the claims table on constructed runs (each of the four verdicts), its
place in the plan, the config validation and the report, and the tiny configuration end to end."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedkd.pipeline import Plan
from fedkd.pipeline.validation import semantic_errors
from fedkd.report import aggregate_runs, render, write_aggregate
from fedkd.report.claims import Claim, all_claims, sources
from fedkd.report.claims.claim import METRICS, stands_for
from fedkd.report.claims.table import setting_text
from fedkd.report.claims.verdict import paired_verdict, seeds_needed, t_abs_cdf, t_quantile
from fedkd.report.paper_values import load_paper_values
from fedkd.report.sections import PAPERS as PAPER_SECTIONS
from fedkd.report.sections import report_section
from fedkd.report.targets import CLAIMS_SECTION, LAYOUTS, get_layout

REPO = Path(__file__).resolve().parents[1]
PAPERS = Path("/work/shared/papers")
CONFIGS = {name: REPO / "config" / f"{name}.yaml" for name in ("config", "tiny", "paper")}
CLAIMS = all_claims()


def config(name: str) -> dict:
    return yaml.safe_load(CONFIGS[name].read_text())


# --------------------------------------------------------------------------- the registry
def test_enough_claims_of_each_paper():
    by_paper = {
        p: sum(c.paper == p for c in CLAIMS) for p in ("fedgkd", "feddf", "fedntd", "fedcad")
    }
    assert by_paper["fedgkd"] >= 10
    assert sum(v for p, v in by_paper.items() if p != "fedgkd") >= 3
    assert all(by_paper.values()), by_paper
    # FedGKD's claims come first (the table's order)
    assert [c.paper for c in CLAIMS[: by_paper["fedgkd"]]] == ["fedgkd"] * by_paper["fedgkd"]


def _paper_text(paper: str) -> list[str]:
    """The paper's text, whitespace collapsed, FedGKD's small caps ("F ED GKD") joined, as is
    and with line-break hyphens removed."""
    raw = re.sub(r"F\s?ED\s?GKD", "FedGKD", (PAPERS / f"{paper}.txt").read_text())
    return [re.sub(r"\s+", " ", raw), re.sub(r"\s+", " ", re.sub(r"-\n", "", raw))]


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_each_claim_cites_the_paper_and_finds_its_runs(claim: Claim):
    # the quote is the paper's own words
    if (PAPERS / f"{claim.paper}.txt").exists():
        quote = re.sub(r"\s+", " ", claim.quote)
        assert any(quote in text for text in _paper_text(claim.paper)), claim.quote
    # the source names a place in the paper
    assert re.search(r"\b(Tables?|Fig\.|Sec\.|Abstract)(?!\w)", claim.source), claim.source
    # every selector is a paper table key, a layout or a table entry name
    papers = set(load_paper_values())
    for sel in claim.tables:
        assert sel in papers or sel in LAYOUTS or re.fullmatch(r"table\d", sel), sel
    assert claim.metric in METRICS and claim.direction in ("higher", "lower")
    # some shipped configuration has both methods' runs in a table the claim reads
    found = [
        name for name in CONFIGS
        if any({claim.treatment, claim.baseline} <= set(labels) and claim.selects(
            t, _outputs(name)[t].get("paper"), _layout(name, t)) for t, labels in _sources(name).items())
    ]  # fmt: skip
    assert found, f"{claim.id}: no shipped configuration has its runs"


@cache
def _plan(name: str) -> Plan:
    return Plan(config(name))


def _outputs(name: str) -> dict:
    return _plan(name).outputs


def _layout(name: str, entry: str) -> str:
    return _plan(name).layout(entry).name


@cache
def _sources(name: str) -> dict:
    return sources({n: e for n, e in _outputs(name).items() if n != "claims"})


def test_a_claim_module_is_found_without_being_listed(tmp_path, monkeypatch):
    """Adding a claim is one registry entry (here a new module) plus its test: nothing else."""
    from fedkd.report.claims import papers

    pkg = tmp_path / "extra"
    pkg.mkdir()
    (pkg / "zz_new_paper.py").write_text(
        "from fedkd.report.claims.claim import Claim\n"
        "CLAIMS = (Claim(id='fedgkd-new', paper='fedgkd', source='Table 3', quote='q',\n"
        "                treatment='fedgkd', baseline='fedavg', tables=('table3',)),)\n"
    )
    monkeypatch.setattr(papers, "__path__", [*papers.__path__, str(pkg)])
    all_claims.cache_clear()
    try:
        ids = [c.id for c in all_claims()]
        assert "fedgkd-new" in ids and len(ids) == len(CLAIMS) + 1
        # ordered by paper: FedGKD's new claim joins FedGKD's, before the companions'
        assert ids.index("fedgkd-new") < ids.index("fedntd-beats-fedavg")
    finally:
        all_claims.cache_clear()


def test_bad_claims_are_refused_naming_the_problem():
    good = dict(id="x-y", paper="fedgkd", source="Table 3", quote="q", treatment="a",
                baseline="b", tables=("table3",))  # fmt: skip
    for change, message in (
        ({"direction": "up"}, "direction"),
        ({"metric": "auc"}, "metric"),
        ({"paper": "fedxyz"}, "paper"),
        ({"tables": "table3"}, "tables"),
        ({"baseline": "a"}, "differ"),
        ({"id": "Bad Id"}, "id"),
    ):
        with pytest.raises(ValueError, match=message):
            Claim(**{**good, **change})


def test_stand_ins_match_their_paper_dataset_only():
    stand_ins = {"mnist5k": "CIFAR-10", "synthtext": "AG News and SST-5", "x": "CIFAR-100"}
    assert stands_for("mnist5k", "cifar10", stand_ins)
    assert not stands_for("mnist5k", "cifar100", stand_ins)
    assert not stands_for("x", "cifar10", stand_ins) and stands_for("x", "cifar100", stand_ins)
    assert stands_for("synthtext", "sst5", stand_ins) and stands_for("cifar10", "cifar10", {})
    text = setting_text(
        {"dataset": "mnist5k", "partition": "dirichlet-equal", "alpha": 0.1, "shards": None,
         "participation": 0.2, "local_epochs": 2, "rounds_planned": 12}, stand_ins, "round 6",
    )  # fmt: skip
    assert text == "mnist5k (stand-in for CIFAR-10), α=0.1, C=0.2, E=2, R=12, round 6"


# --------------------------------------------------------------------------- the statistics
@pytest.mark.parametrize(
    "df, q",  # Student's t 0.975 quantiles as printed in the standard tables
    [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262), (29, 2.045), (120, 1.980)],
)
def test_t_quantile_matches_the_printed_table(df, q):
    assert t_quantile(0.975, df) == pytest.approx(q, abs=6e-4)
    assert t_abs_cdf(t_quantile(0.975, df), df) == pytest.approx(0.95, rel=1e-12)


def test_t_quantile_matches_scipy_where_present():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 5, 10, 50, 1999, 2001, 10**5):
        for p in (0.9, 0.975, 0.995):
            assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9), (df, p)


def test_the_four_verdicts_and_the_direction():
    # differences of 3 seeds: mean 2, sd 0.2 -> interval [1.50, 2.50]
    holds = paired_verdict([2.0, 2.2, 1.8], "higher")
    assert holds.verdict == "holds" and holds.n == 3
    half = 4.302652729749462 * 0.2 / math.sqrt(3)
    assert (holds.effect, holds.ci_low, holds.ci_high) == pytest.approx((2, 2 - half, 2 + half))
    assert paired_verdict([2.0, 2.2, 1.8], "lower").verdict == "contradicted"
    assert paired_verdict([-2.0, -2.2, -1.8], "higher").verdict == "contradicted"
    assert paired_verdict([-2.0, -2.2, -1.8], "lower").verdict == "holds"
    wide = paired_verdict([3.0, -3.0, 1.0], "higher")
    assert wide.verdict == "inconclusive" and wide.ci_low < 0 < wide.ci_high
    none = paired_verdict([], "higher")
    assert none.verdict == "not run" and none.n == 0 and math.isnan(none.effect)
    one = paired_verdict([5.0], "higher")  # one seed: an effect, but no interval
    assert one.verdict == "inconclusive" and one.effect == 5 and math.isnan(one.ci_low)
    with pytest.raises(ValueError, match="direction"):
        paired_verdict([1.0, 2.0], "up")


def test_seeds_needed_is_the_smallest_n_that_resolves():
    effect, sd = 1.0, 2.0
    n = seeds_needed(effect, sd)
    resolves = lambda k: t_quantile(0.975, k - 1) * sd / math.sqrt(k) < effect  # noqa: E731
    assert resolves(n) and not resolves(n - 1)
    assert paired_verdict([3.0, -1.0, 1.0], "higher").seeds_needed == n  # mean 1, sd 2
    assert seeds_needed(0.0, 1.0) is None and seeds_needed(1.0, 0.0) == 2


# --------------------------------------------------------------------------- constructed runs
def make_run(root: Path, name: str, accs, *, strategy="fedavg", alpha=1.0, seed=0,
             status="complete", dataset="mnist5k", rounds=None, variant=None) -> str:  # fmt: skip
    """A run directory as the engine writes it, with made-up accuracies (fractions)."""
    d = root / name
    d.mkdir(parents=True)
    spec = {
        "dataset": dataset, "strategy": strategy, "params": {}, "clients": 10, "alpha": alpha,
        "partition": "dirichlet-equal", "shards": None, "participation": 0.2, "seed": seed,
        "rounds": rounds or len(accs), "local_epochs": 2, "model": "cnn",
    }  # fmt: skip
    rec = {"status": status, "labels": {"variant": variant or strategy}, "spec": spec, "model": "cnn",
           "dataset": {"name": dataset, "kind": "image", "num_classes": 10, "train": 3600,
                       "val": 400, "test": 1000}}  # fmt: skip
    (d / "run.json").write_text(json.dumps(rec))
    pd.DataFrame(
        [{"round": i + 1, "test_acc": a, "val_acc": a, "class_acc": [a] * 10}
         for i, a in enumerate(accs)]
    ).to_parquet(d / "metrics.parquet", index=False)  # fmt: skip
    return str(d)


def render_claims(tmp_path: Path, runs: list[tuple[str, str]], sources_opt: dict) -> pd.DataFrame:
    agg = tmp_path / "claims.parquet"
    write_aggregate(aggregate_runs(runs), agg)
    out = tmp_path / "out" / "claims"
    options = {"sources": sources_opt, "stand_ins": {"mnist5k": "CIFAR-10"}}
    render("claims", out, aggregate=agg, options=options)
    df = pd.read_csv(out.with_name("claims.csv"), dtype={"seeds": str})
    return df.assign(note=df["note"].fillna(""), seeds=df["seeds"].fillna(""))


def test_claims_table_gives_each_verdict_on_constructed_runs(tmp_path):
    """FedGKD against FedAvg in Table 3, paired by seed: clearly ahead at alpha 1 (holds),
    clearly behind at alpha 0.5 (contradicted), either way at alpha 0.1 (inconclusive); MOON has
    no runs (not run)."""
    r, runs = tmp_path / "runs", []
    base = {0: 0.70, 1: 0.60, 2: 0.65}  # seeds differ a lot: only the pairing resolves the gaps
    gaps = {1.0: [0.020, 0.022, 0.018], 0.5: [-0.020, -0.022, -0.018], 0.1: [0.03, -0.03, 0.01]}
    for alpha, gap in gaps.items():
        for seed, g in enumerate(gap):
            a = base[seed]
            runs.append(("table3/fedavg", make_run(r, f"a{alpha}-{seed}", [a - 0.1, a],
                                                   alpha=alpha, seed=seed)))  # fmt: skip
            runs.append(("table3/fedgkd", make_run(r, f"g{alpha}-{seed}", [a - 0.1, a + g],
                                                   strategy="fedgkd", alpha=alpha, seed=seed)))  # fmt: skip
    src = {"table3": {"paper": "fedgkd_table3", "layout": "grid", "options": {}, "best_of": {}}}
    df = render_claims(tmp_path, runs, src)
    beats = df[df["claim"] == "fedgkd-beats-fedavg"].set_index("setting")
    key = "mnist5k (stand-in for CIFAR-10), α={}, C=0.2, E=2, R=2"
    assert beats.loc[key.format(1), "verdict"] == "holds"
    assert beats.loc[key.format(0.5), "verdict"] == "contradicted"
    assert beats.loc[key.format(0.1), "verdict"] == "inconclusive"
    assert beats.loc[key.format(1), "effect"] == pytest.approx(2.0)  # percentage points
    assert beats.loc[key.format(0.1), "effect"] == pytest.approx(1 / 3)
    assert int(beats.loc[key.format(0.1), "seeds_needed"]) > 3
    text = (tmp_path / "out" / "claims.csv").read_text()
    needed = beats.loc[key.format(0.1), "seeds_needed"]
    assert f",inconclusive,{int(needed)}," in text  # a count, written as one
    assert (beats["n"] == 3).all() and (beats["seeds"] == "0;1;2").all()
    moon = df[df["claim"] == "fedgkd-beats-moon"]
    assert list(moon["verdict"]) == ["not run"] and "moon" in moon["note"].iloc[0]
    # every claim has a row, and every row names its stand-in
    assert set(df["claim"]) == {c.id for c in CLAIMS}
    ran = df[df["verdict"] != "not run"]
    assert ran["setting"].str.contains("stand-in for CIFAR-10").all()
    md = (tmp_path / "out" / "claims.md").read_text()
    assert "paired t-interval" in md and "Of " in md and "stand-in for CIFAR-10" in md


def test_a_run_that_diverged_leaves_its_seed_out(tmp_path):
    r, runs = tmp_path / "runs", []
    for seed in (0, 1, 2):
        runs.append(("table3/fedavg", make_run(r, f"a{seed}", [0.5, 0.6], seed=seed)))
        status = "diverged" if seed == 2 else "complete"
        runs.append(("table3/fedgkd", make_run(r, f"g{seed}", [0.5, 0.7], strategy="fedgkd",
                                               seed=seed, status=status)))  # fmt: skip
    src = {"table3": {"paper": "fedgkd_table3", "layout": "grid", "options": {}, "best_of": {}}}
    row = render_claims(tmp_path, runs, src).query("claim == 'fedgkd-beats-fedavg'").iloc[0]
    assert row["n"] == 2 and row["seeds"] == "0;1"
    assert "FedGKD seed 2 diverged" in row["note"] and "seed(s) 2 without a pair" in row["note"]


def test_a_setting_whose_runs_all_diverged_keeps_its_row(tmp_path):
    r, runs = tmp_path / "runs", []
    for seed in (0, 1):
        for label in ("fedavg", "fedgkd"):
            runs.append((f"table3/{label}", make_run(r, f"{label}{seed}", [0.5], strategy=label,
                                                     seed=seed, status="diverged")))  # fmt: skip
    src = {"table3": {"paper": "fedgkd_table3", "layout": "grid", "options": {}, "best_of": {}}}
    row = render_claims(tmp_path, runs, src).query("claim == 'fedgkd-beats-fedavg'").iloc[0]
    assert row["n"] == 0 and row["verdict"] == "not run" and row["setting"].startswith("mnist5k")
    assert "FedAvg seed 0 diverged" in row["note"]


def test_rounds_to_target_counts_a_miss_as_one_round_more(tmp_path):
    r, runs = tmp_path / "runs", []
    for seed in (0, 1):
        runs.append(
            ("rounds_to_target/fedavg", make_run(r, f"a{seed}", [0.5, 0.6, 0.7], seed=seed))
        )  # never reaches 0.8
        runs.append(("rounds_to_target/feddf",
                     make_run(r, f"d{seed}", [0.5, 0.8 + seed / 100], strategy="feddf", seed=seed,
                              rounds=3)))  # fmt: skip
    src = {"rounds_to_target": {"paper": "feddf_table1", "layout": "rounds_to_target",
           "options": {"targets": [{"alpha": 1.0, "accuracy": 0.8}]}, "best_of": {}}}  # fmt: skip
    df = render_claims(tmp_path, runs, src)
    row = df[df["claim"] == "feddf-fewer-rounds-than-fedavg"].iloc[0]
    # FedDF: round 2; FedAvg never (3 planned rounds: counted as 4)
    assert row["effect"] == pytest.approx(-2.0) and row["unit"] == "rounds"
    assert row["setting"].endswith("T = 80%") and "counted as R+1" in row["note"]
    assert row["verdict"] == "holds"  # sd 0: the interval is the point


def test_a_tuned_column_compares_the_variant_its_table_shows(tmp_path):
    """FedGen as the best of a coefficient sweep (best_of): the claim takes, per setting, the
    variant with the higher accuracy at the round best on validation, as table 3 does."""
    r, runs = tmp_path / "runs", []
    for seed in (0, 1):
        runs.append(("table3/fedgkd", make_run(r, f"g{seed}", [0.6, 0.7], strategy="fedgkd",
                                               seed=seed)))  # fmt: skip
        runs.append(("table3/fedgen", make_run(r, f"c1-{seed}", [0.6, 0.5], strategy="fedgen",
                                               seed=seed, variant="fedgen-coef1")))  # fmt: skip
        runs.append(("table3/fedgen", make_run(r, f"c10-{seed}", [0.6, 0.69 - seed / 100],
                                               strategy="fedgen", seed=seed,
                                               variant="fedgen-coef10")))  # fmt: skip
    sweep = {"fedgen": ["fedgen-coef1", "fedgen-coef10"]}
    src = {"table3": {"paper": "fedgkd_table3", "layout": "grid", "options": {}, "best_of": sweep}}
    row = render_claims(tmp_path, runs, src).query("claim == 'fedgkd-beats-fedgen'").iloc[0]
    # against coef10 (69 and 68): +1 and +2 points; against coef1 it would be +10
    assert row["n"] == 2 and row["effect"] == pytest.approx(1.5)


# --------------------------------------------------------------------------- plan, config, report
def test_the_plan_draws_the_claims_runs_from_the_other_tables():
    plan = Plan(config("tiny"))
    drawn = plan.drawn_from("claims")
    assert drawn["table3"] == ["fedavg", "fedgkd"] and "table7" not in drawn
    runs = plan.target_runs("claims")
    assert {lab.split("/")[0] for lab, _ in runs} == set(drawn)
    assert {run for _, run in runs} <= {run for n in drawn for _, run in plan.target_runs(n)}
    assert "results/tables/claims.md" in plan.all_outputs()
    options = plan.render_options("claims")
    assert options["sources"]["table3"]["paper"] == "fedgkd_table3"
    assert options["stand_ins"] == {"mnist5k": "CIFAR-10"}
    assert "mnist5k (for CIFAR-10)" in plan.caption("claims")
    # the claims train nothing of their own
    without = config("tiny")
    del without["tables"]["claims"]
    assert plan.all_runs() == Plan(without).all_runs()


def test_shipped_configs_have_the_claims_entry_and_validate():
    for name in CONFIGS:
        cfg = config(name)
        assert cfg["tables"]["claims"]["layout"] == "claims", name
        assert semantic_errors(cfg, check_specs=False) == [], name


def test_a_claims_entry_without_runs_or_with_a_grid_is_refused():
    cfg = config("tiny")
    cfg["tables"] = {
        "claims": {"layout": "claims", "caption": "c", "grid": {"dataset": ["mnist5k"]}}
    }
    cfg["figures"] = {}
    errors = "\n".join(semantic_errors(cfg, check_specs=False))
    assert "tables.claims.grid: layout claims takes no grid" in errors
    assert "no table or figure of this configuration has the runs it needs" in errors


def test_the_claims_section_opens_the_report():
    assert report_section("any caption (fedgkd Table 3)", "table", "claims", CLAIMS_SECTION) == (
        CLAIMS_SECTION,
        "claims",
    )
    assert get_layout("claims").section == CLAIMS_SECTION
    # the report's menu sorts sections by name (JavaScript localeCompare: case-insensitive)
    others = [*PAPER_SECTIONS.values(), "Beside the paper", "Other tables", "Other figures"]
    assert sorted([*others, CLAIMS_SECTION], key=str.casefold)[0] == CLAIMS_SECTION


# --------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_tiny_config_builds_the_claims_table(tmp_path):
    """`snakemake results/tables/claims.md` on the tiny configuration (9 runs of 3 rounds)."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "fedkd", src / "fedkd",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(src)}
    work = tmp_path / "work"
    cmd = [sys.executable, "-m", "snakemake", "results/tables/claims.md", "--cores", "1",
           "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
           "--configfile", str(CONFIGS["tiny"])]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(work / "results" / "tables" / "claims.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["claim"] for r in rows} == {c.id for c in CLAIMS}
    ran = [r for r in rows if r["verdict"] != "not run"]
    assert ran and all("stand-in for CIFAR-10" in r["setting"] for r in ran)
    # one seed: an effect but no interval
    assert all(r["verdict"] == "inconclusive" and r["n"] == "1" and r["ci_low"] == "" for r in ran)
    assert {"claim", "source", "setting", "effect", "ci_low", "ci_high", "verdict"} <= set(rows[0])
    html = (work / "results" / "tables" / "claims.html").read_text()
    assert "paired t-interval" in html
    # the report: the claims are a section of their own, the first of its menu
    report = work / "report.html"
    proc = subprocess.run(cmd[:3] + ["--report", str(report)] + cmd[6:], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = report.read_text()
    assert json.dumps(CLAIMS_SECTION)[1:-1] in text or CLAIMS_SECTION in text
