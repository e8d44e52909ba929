"""A configuration's own claims (its ``claims:`` list): each entry is the Claim the registry would
build, it gives the registry's rows and verdicts on the same runs, its runs are planned for the
claims table, a bad entry is refused at planning by its index and statement, and with no
``claims:`` the claims page is what it was."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import yaml

from claim_runs import BYSTANDER_NOISE, TABLE3, config, make_run, pair_runs
from fedkd.pipeline import Plan, validate_config
from fedkd.pipeline.config_file import ConfigError
from fedkd.report import aggregate_runs, render, write_aggregate
from fedkd.report.claims import all_claims
from fedkd.report.claims.claim import DECLARED, Claim, Trend
from fedkd.report.claims.declared import (
    WHERE_KEYS,
    DeclaredClaimError,
    declared_claims,
    entry_claims,
)
from fedkd.report.claims.runs import SETTING

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
REGISTRY = {c.id: c for c in all_claims()}
# the registry's claims written as entries of a configuration: on average, a trend, and stated
# gaps per paper dataset in one setting (a margin mapping and a where)
TWINS = {
    "fedgkd-beats-fedavg": {
        "statement": "FedGKD outperforms FedAvg on average.",
        "id": "ours-beats",
        "tables": ["fedgkd_table3", "table3", "fedgkd_table4", "table4"],
        "treatment": "fedgkd",
        "baseline": "fedavg",
        "aggregate": "mean",
    },
    "fedgkd-gap-grows-with-heterogeneity": {
        "statement": "The gap grows as alpha falls.",
        "id": "ours-grows",
        "tables": ["fedgkd_table3", "table3"],
        "treatment": "fedgkd",
        "baseline": "fedavg",
        "trend": {"key": "alpha", "toward": "low"},
    },
    "fedgkd-beats-fedavg-alpha0.1-by-stated-gaps": {
        "statement": "By the stated gaps at alpha 0.1.",
        "id": "ours-gaps",
        "tables": ["fedgkd_table3", "table3", "fedgkd_table4", "table4"],
        "treatment": "fedgkd",
        "baseline": "fedavg",
        "where": {"alpha": [0.1]},
        "test": "stated-gap",
        "margin": {
            "tinyimagenet": 5.6,
            "cifar100": 1.9,
            "cifar10": 3.0,
            "agnews": 0.4,
            "sst5": 2.8,
        },
        "note": "a stated gap",
    },
}


def twin(entry: dict, registry: Claim) -> Claim:
    """The registry's claim with the fields a configuration's claim has of its own."""
    return Claim(**{
        **registry.__dict__, "id": entry["id"], "paper": DECLARED, "source": "claims[0]",
        "quote": entry["statement"], "note": entry.get("note", ""),
    })  # fmt: skip


@pytest.mark.parametrize("registry_id", list(TWINS))
def test_an_entry_is_the_claim_the_registry_would_build(registry_id):
    entry = TWINS[registry_id]
    (claim,) = entry_claims(entry, 0)
    assert claim == twin(entry, REGISTRY[registry_id])
    assert claim.statement == REGISTRY[registry_id].statement


def test_each_of_makes_one_claim_per_column_with_ids_of_their_own():
    entry = {"statement": "s", "tables": "table3", "treatment": "feddyn",
             "baseline": {"each_of": ["fedgkd", "fedavg"]}, "aggregate": "any"}  # fmt: skip
    claims = entry_claims(entry, 2)
    assert [(c.id, c.baseline, c.aggregate, c.tables, c.source) for c in claims] == [
        ("feddyn-vs-fedgkd", "fedgkd", "any", ("table3",), "claims[2]"),
        ("feddyn-vs-fedavg", "fedavg", "any", ("table3",), "claims[2]"),
    ]
    named = entry_claims({**entry, "id": "dyn", "treatment": "M=1"}, 0)
    assert [c.id for c in named] == ["dyn-m-1-vs-fedgkd", "dyn-m-1-vs-fedavg"]
    (trend,) = entry_claims({**entry, "baseline": "fedavg", "aggregate": "each",
                             "trend": {"key": "dataset", "start": "agnews", "end": "sst5"}}, 0)  # fmt: skip
    assert trend.trend == Trend("dataset", start="agnews", end="sst5")
    with pytest.raises(DeclaredClaimError, match=r"claims\[1\] \('s'\): id 'feddyn-vs-fedgkd'"):
        declared_claims([entry, entry])


def test_the_where_keys_are_those_a_setting_has():
    assert set(WHERE_KEYS) == set(SETTING)


# --------------------------------------------------------------------------- on constructed runs
def render_page(tmp_path: Path, runs, claims: list | None, name: str) -> Path:
    agg = tmp_path / "claims.parquet"
    if not agg.exists():
        write_aggregate(aggregate_runs(runs), agg)
    options = {"sources": TABLE3, "stand_ins": {"mnist5k": "CIFAR-10"}}
    if claims is not None:
        options["claims"] = claims
    out = tmp_path / name / "claims"
    render("claims", out, aggregate=agg, options=options)
    return out


def read_csv(out: Path) -> pd.DataFrame:
    return pd.read_csv(out.with_name("claims.csv"), keep_default_na=False)


# what a row is and how it is judged (the paper's cells, the ids and notes naming other claims
# and the scope on the paper's settings are the registry's alone)
SAME = [
    "statement", "test", "margin", "aggregate", "claim_verdict", "claim_summary", "row", "table",
    "also_in", "setting", "dataset", "stand_in_for", "metric", "unit", "direction", "n",
    "failed", "seeds", "effect", "se", "df", "sd", "step", "variance_from", "ci_low",
    "ci_high", "p_holds", "p_contradicted", "p_adjusted", "verdict", "versus_stated",
    "seeds_needed", "more_seeds", "neither_reached", "stated_gap", "gap_fraction",
]  # fmt: skip


def test_a_declared_claim_gives_the_registrys_rows_and_verdicts(tmp_path):
    """Holds at alpha 1, contradicted at 0.5, inconclusive at 0.1: each twin's rows are its
    registry claim's, value for value, and come first on the page, in their own section."""
    gaps = {1.0: [0.020, 0.022, 0.018], 0.5: [-0.020, -0.022, -0.018], 0.1: [0.03, -0.03, 0.01]}
    runs = pair_runs(tmp_path / "runs", "table3", gaps)
    entries = list(TWINS.values())
    out = render_page(tmp_path, runs, entries, "with")
    df = read_csv(out)
    verdicts = set()
    for registry_id, entry in TWINS.items():
        ours = df[df["claim"] == entry["id"]].reset_index(drop=True)
        theirs = df[df["claim"] == registry_id].reset_index(drop=True)
        assert len(ours) == len(theirs) > 0
        pd.testing.assert_frame_equal(ours[SAME], theirs[SAME])
        assert (ours["paper"] == DECLARED).all() and (ours["quote"] == entry["statement"]).all()
        assert (ours["paper_check"] == "").all() and (theirs["paper_check"] != "").all()
        verdicts |= set(ours["verdict"])
    assert {"holds", "contradicted", "inconclusive"} <= verdicts  # not one verdict throughout
    # the configuration's claims first, then the papers'
    own = [e["id"] for e in entries]
    assert list(dict.fromkeys(df["claim"]))[:3] == own
    assert set(df["claim"]) == {*own, *REGISTRY}
    md = out.with_name("claims.md").read_text()
    assert md.index("| This configuration's claims |") < md.index("[ours-beats]")
    assert md.index("[ours-gaps]") < md.index("| The papers' claims |") < md.index("[fedgkd-")
    assert md.startswith("Table: This configuration's 3 claims: ")
    assert f"The papers' {len(REGISTRY)} claims: " in md.splitlines()[0]
    page = out.with_name("claims.html").read_text()
    own_h2, papers_h2 = (
        page.index("This configuration&#x27;s claims</h2>"),
        page.index("The papers&#x27; claims</h2>"),
    )
    # no paper's gap beside a configuration's claim
    own_part = page[own_h2:papers_h2]
    assert "<b>Ours:</b>" in own_part and "<b>Paper:</b>" not in own_part
    assert (
        own_h2 < page.index('id="ours-beats"') < papers_h2 < page.index('id="fedgkd-beats-fedavg"')
    )


def test_a_statement_is_text_on_the_page(tmp_path):
    gaps = {1.0: [0.020, 0.022, 0.018]}
    runs = pair_runs(tmp_path / "runs", "table3", gaps)
    entry = {**TWINS["fedgkd-beats-fedavg"], "statement": "<script>alert(1)</script> *bold*"}
    out = render_page(tmp_path, runs, [entry], "with")
    page = out.with_name("claims.html").read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_index_says_why_a_claim_whose_methods_ran_was_not_compared(tmp_path):
    """A trend along C on runs of one C: both methods have runs, so the index names the reason
    rather than saying there are none."""
    runs = pair_runs(tmp_path / "runs", "table3", {1.0: [0.02, 0.022, 0.018]})
    entry = {**GOOD, "id": "grows", "trend": {"key": "participation", "toward": "low"}}
    page = render_page(tmp_path, runs, [entry], "with").with_name("claims.html").read_text()
    row = page[page.index('href="#grows"') :]
    row = row[: row.index("</tr>")]
    assert "table3 runs one value of participation only: the trend needs two" in row, row
    assert "no runs" not in row


def test_without_claims_the_papers_part_is_unchanged_byte_for_byte(tmp_path):
    """Claims about a pair no paper claim compares (FedDyn, FedAvg) add their section and leave
    every byte of the papers' part as the page without them writes it."""
    runs = []
    for alpha in (1.0, 0.1):
        for seed, a in enumerate((0.70, 0.60, 0.65)):
            for label, extra in (("fedavg", 0.0), ("fedgkd", 0.02), ("feddyn", 0.01),
                                 ("bystander", BYSTANDER_NOISE[seed])):  # fmt: skip
                d = make_run(tmp_path / "runs", f"{label}-{alpha}-{seed}", [a - 0.1, a + extra],
                             strategy=label, alpha=alpha, seed=seed)  # fmt: skip
                runs.append((f"table3/{label}", d))
    entries = [
        {"statement": "FedDyn beats FedAvg.", "tables": "table3", "treatment": "feddyn",
         "baseline": "fedavg"},
        {"statement": "FedDyn is within a point of FedAvg.", "id": "dyn-equivalent",
         "tables": "table3", "treatment": "feddyn", "baseline": "fedavg", "test": "equivalence",
         "margin": 1.0, "aggregate": "mean"},
    ]  # fmt: skip
    without = render_page(tmp_path, runs, None, "without")
    empty = render_page(tmp_path, runs, [], "empty")
    with_ = render_page(tmp_path, runs, entries, "with")
    for ext in ("csv", "md", "tex", "html"):
        assert (
            empty.with_name(f"claims.{ext}").read_bytes()
            == without.with_name(f"claims.{ext}").read_bytes()
        )
    own = {"feddyn-vs-fedavg", "dyn-equivalent"}
    # CSV: the same lines once the configuration's (which come first) are left out
    a = without.with_name("claims.csv").read_text().splitlines()
    b = with_.with_name("claims.csv").read_text().splitlines()
    k = sum(line.split(",", 1)[0] in own for line in b)
    assert k == 2 + 3 and all(line.split(",", 1)[0] in own for line in b[1 : 1 + k])
    assert b[0] == a[0] and b[1 + k :] == a[1:]
    # Markdown and LaTeX: the rows, less the configuration's section, and the notes
    for ext in ("md", "tex"):
        a = without.with_name(f"claims.{ext}").read_text().splitlines()
        b = with_.with_name(f"claims.{ext}").read_text().splitlines()
        start = next(i for i, line in enumerate(b) if "This configuration's claims" in line)
        end = next(i for i, line in enumerate(b) if line.lstrip("| ").startswith("The papers'"))
        kept = b[:start] + b[end + 1 :]
        differ = [(x, y) for x, y in zip(a, kept, strict=True) if x != y]
        assert len(differ) == 1 and "claims:" in differ[0][1], differ  # the caption's counts
    # HTML: the papers' part as it was
    a = without.with_name("claims.html").read_text()
    b = with_.with_name("claims.html").read_text()
    part = a[a.index('<table class="index">') : a.rindex("</section>")]
    assert b.index("The papers&#x27; claims</h2>") < b.index(part)


# --------------------------------------------------------------------------- planning
def tiny_with(claims) -> dict:
    cfg = config("tiny")
    cfg["claims"] = claims
    return cfg


def test_a_claims_runs_are_planned_for_the_claims_table():
    """tiny's table7 (FedGKD per buffer length) is no paper claim's: a claim over it puts its
    runs under the claims table; without claims: the plan is what it was."""
    base = Plan(config("tiny"))
    assert "table7" not in base.drawn_from("claims")
    assert "claims" not in base.render_options("claims")
    entry = {"statement": "A longer buffer does not help.", "tables": "table7",
             "treatment": "M=2", "baseline": "M=1", "test": "non-inferiority", "margin": 0.5}  # fmt: skip
    cfg = tiny_with([entry])
    validate_config(cfg, SCHEMA, check_specs=False)
    plan = Plan(cfg)
    assert plan.drawn_from("claims")["table7"] == ["M=1", "M=2"]
    mine = {run for lab, run in plan.target_runs("claims") if lab.startswith("table7/")}
    assert mine and mine == {run for _, run in plan.target_runs("table7")}
    assert {run for _, run in base.target_runs("claims")} < {
        run for _, run in plan.target_runs("claims")
    }
    assert plan.render_options("claims")["claims"] == [entry]
    assert plan.all_runs() == base.all_runs()  # the claims train nothing of their own


GOOD = {"statement": "FedGKD beats FedAvg.", "tables": "table3", "treatment": "fedgkd",
        "baseline": "fedavg"}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"baseline": "fedprox"},
         "claims[1] ('FedGKD beats FedAvg.'): 'table3' has no column 'fedprox'; its columns are "
         "fedavg, fedgkd"),
        ({"treatment": "fedgkd-M1"}, "variant 'fedgkd-M1' is column 'fedgkd'"),
        ({"tables": "table33"},
         "claims[1] ('FedGKD beats FedAvg.').tables: 'table33' is not a table or figure of this "
         "configuration; name one whose runs it compares: table2, table3, "),
        ({"tables": "table1"}, "'table1' (layout traits) has no runs of its own to compare"),
        ({"aggregate": "every"},
         "claims[1] ('FedGKD beats FedAvg.').aggregate: 'every' is not one of"),
        ({"test": "equivalence"}, "a equivalence claim needs a margin > 0"),
        ({"id": "fedgkd-beats-fedavg"}, "id 'fedgkd-beats-fedavg' is a paper's claim's too"),
        ({"where": {"alfa": [0.1]}}, "where: no setting has key(s) alfa"),
        ({"trend": {"key": "alpha"}}, "a trend along alpha grows toward 'low' or 'high'"),
        ({"baseline": "fedgkd"}, "treatment and baseline name the same column"),
        ({"margn": 1}, "claims[1] ('FedGKD beats FedAvg.'): 'margn' was unexpected; did you mean"),
        # values the cited table's runs never have: the claim could only say "not run"
        ({"where": {"alpha": [0.5]}},
         "where {alpha: [0.5]} selects no setting of 'table3', whose runs have alpha 1.0, 0.1"),
        ({"where": {"dataset": ["cifar100"]}},
         "whose runs have dataset mnist5k (stand-in for CIFAR-10)"),
        ({"tables": "table6", "trend": {"key": "alpha", "toward": "low"}},
         "trend along alpha compares two of its values, and the runs of 'table6' have alpha 0.1 "
         "only"),
        ({"trend": {"key": "dataset", "start": "agnews", "end": "sst5"}},
         "trend from AG News to SST-5 compares a dataset standing for each, and the runs of "
         "'table3' have dataset mnist5k (stand-in for CIFAR-10) only"),
        ({"metric": "at_round"},
         "metric 'at_round' compares the rounds 10, 20, 50, 100 of 'table3' (its options.rounds, "
         "else these) from round 1 on, and its runs play 3 rounds"),
    ],
)  # fmt: skip
def test_a_bad_entry_is_refused_at_planning_by_index_and_statement(change, message):
    cfg = tiny_with([dict(GOOD, id="first"), {**GOOD, **change}])
    with pytest.raises(ConfigError) as refused:
        validate_config(cfg, SCHEMA, check_specs=False)
    text = str(refused.value)
    assert message in text, text
    assert "claims[0]" not in text  # the good entry is not blamed


def test_claims_without_a_claims_table_or_twice_the_same_pair_are_refused():
    cfg = tiny_with([GOOD, GOOD])
    del cfg["tables"]["claims"]
    with pytest.raises(ConfigError) as refused:
        validate_config(cfg, SCHEMA, check_specs=False)
    text = str(refused.value)
    assert "claims: a configuration's claims are tested on its claims table; add one" in text
    assert "claims[1] ('FedGKD beats FedAvg.'): id 'fedgkd-vs-fedavg' is another claim's" in text


def test_a_bad_claim_is_the_only_error_where_it_alone_would_draw_runs():
    """A claims table fed by the configuration's own claim alone: a wrong label in that claim is
    named with its fix, and the claims table is not also told to be removed."""
    cfg = tiny_with([{"statement": "M=2 beats M=1.", "tables": "table7", "treatment": "M=3",
                      "baseline": "M=1"}])  # fmt: skip
    cfg["tables"] = {name: cfg["tables"][name] for name in ("claims", "table7")}
    cfg["figures"] = {}
    with pytest.raises(ConfigError) as refused:
        validate_config(cfg, SCHEMA, check_specs=False)
    text = str(refused.value)
    assert "'table7' has no column 'M=3'; its columns are M=1, M=2" in text, text
    assert "remove the entry" not in text, text


def test_the_example_configuration_validates_and_draws_its_table():
    cfg = yaml.safe_load((REPO / "examples" / "feddyn" / "config.yaml").read_text())
    # its strategy is a module outside the package: the variant aside, everything else checks
    cfg = copy.deepcopy(cfg)
    cfg["variants"]["feddyn"] = {"strategy": "fedprox"}
    validate_config(cfg, SCHEMA, check_specs=False)
    claims = declared_claims(cfg["claims"])
    assert [(c.treatment, c.baseline) for c in claims] == [
        ("feddyn", "fedavg"),
        ("feddyn", "fedgkd"),
    ]
    assert Plan(cfg).drawn_from("claims") == {"table3": ["fedavg", "fedgkd", "feddyn"]}


def test_the_front_page_counts_the_configurations_claims_apart(tmp_path):
    """The report's front page: the papers' count leaves the configuration's claims out, and a
    line of their own counts them."""
    from fedkd.report.agreement import claims_rst

    csv = tmp_path / "claims.csv"
    pd.DataFrame({
        "claim": ["mine", "mine", "a", "b"],
        "paper": [DECLARED, DECLARED, "fedgkd", "fedntd"],
        "verdict": ["holds", "holds", "contradicted", "not run"],
        "claim_verdict": ["holds", "holds", "contradicted", "not run"],
    }).to_csv(csv, index=False)  # fmt: skip
    text = claims_rst(csv)
    assert "Each of the papers' 2 claims" in text and "0 holds, 1 contradicted, 1 not run" in text
    assert (
        "**This configuration's claims.** Its 1 own claim, tested the same way: 1 holds, " in text
    )
    papers_only = tmp_path / "papers.csv"
    pd.read_csv(csv).iloc[2:].to_csv(papers_only, index=False)
    assert "This configuration" not in claims_rst(papers_only)


def test_a_declared_claim_reads_the_entries_it_names_and_no_other():
    (claim,) = entry_claims({**GOOD, "tables": ["grid", "table3"]}, 0)
    assert claim.selects("table3", "fedgkd_table3", "grid")
    # an entry named like another's layout or paper key selects that entry alone
    assert not claim.selects("table5", "grid", "grid")
    assert not claim.selects("table4", None, "grid")
    assert REGISTRY["fedgkd-beats-fedavg"].selects("main", "fedgkd_table3", "grid")


def test_the_schema_speaks_the_claims_vocabulary():
    from fedkd.report.claims import claim as model
    from fedkd.report.claims.declared import FIELDS, REQUIRED

    schema = yaml.safe_load(SCHEMA.read_text())["$defs"]["claim"]
    props = schema["properties"]
    assert set(props) == set(FIELDS) and set(schema["required"]) == set(REQUIRED)
    assert props["metric"]["enum"] == list(model.METRICS)
    assert props["test"]["enum"] == list(model.TESTS)
    assert props["aggregate"]["enum"] == list(model.AGGREGATES)
    assert props["direction"]["enum"] == list(model.DIRECTIONS)
    assert props["trend"]["properties"]["key"]["enum"] == list(model.TREND_KEYS)


def test_a_stated_gap_entry_carries_its_fraction_and_refuses_one_out_of_range():
    entry = {"statement": "FedDyn is 2 points ahead of FedAvg.", "tables": "table3",
             "treatment": "feddyn", "baseline": "fedavg", "test": "stated-gap", "margin": 2.0,
             "gap_fraction": 0.8}  # fmt: skip
    (claim,) = entry_claims(entry, 0)
    assert (claim.test, claim.margin, claim.gap_fraction) == ("stated-gap", 2.0, 0.8)
    with pytest.raises(DeclaredClaimError, match=r"claims\[0\].*gap_fraction"):
        entry_claims({**entry, "gap_fraction": 1.5}, 0)
    with pytest.raises(DeclaredClaimError, match=r"claims\[0\].*gap_fraction"):
        entry_claims({**entry, "test": "superiority", "gap_fraction": 0.8}, 0)
