"""The papers' own numbers (src/fedkd/report/paper_values.yaml) against the papers.

The FedGKD cells are checked against the tex tables in tests/fixtures/fedgkd_tables.tex (copied
verbatim from ../shared/papers/fedgkd.tex, which a clean clone lacks): each cell's row is found by
its label and its column by position, after checking the header names the expected columns.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedkd.report import paper_values as pv

FIXTURE = Path(__file__).parent / "fixtures" / "fedgkd_tables.tex"
# the papers' texts: $FEDKD_PAPERS_DIR, else ../shared/papers beside the checkout (as test_claims)
PAPERS = Path(
    os.environ.get("FEDKD_PAPERS_DIR")
    or Path(__file__).resolve().parents[1].parent / "shared" / "papers"
)

# --------------------------------------------------------------------------- the tex tables


def _clean(cell: str) -> str:
    """A tex cell as plain text: macros of the method names expanded, markup dropped."""
    s = cell.replace(r"\systemplus", "FedGKD+").replace(r"\systemled", "FedGKD-Vote")
    s = s.replace(r"\system", "FedGKD").replace("$^{+}$", "+")
    m = re.fullmatch(r"\s*\\multi(?:row|column)\{\d+\}\{[^}]*\}\{(.*)\}\s*", s, re.S)
    if m:
        s = m.group(1)
    s = re.sub(r"\\(bf|textbf|underline)\b", "", s)
    s = (
        s.replace(r"\pm", "±")
        .replace(r"\alpha", "α")
        .replace("$", "")
        .replace("{", "")
        .replace("}", "")
    )
    return " ".join(s.split())


def tex_tables(text: str) -> dict[str, list[list[str]]]:
    """label → the rows of its tabular, each a list of cleaned cells."""
    out = {}
    for block in re.findall(r"\\begin\{table\*?\}.*?\\end\{table\*?\}", text, re.S):
        label = re.search(r"\\label\{([^}]*)\}", block).group(1)
        body = re.search(r"\\begin\{tabular\}\{[^}]*\}(.*?)\\end\{tabular\}", block, re.S).group(1)
        lines = [re.sub(r"(?<!\\)%.*", "", line) for line in body.splitlines()]
        body = "\n".join(lines)
        body = re.sub(r"\\(hline|toprule|midrule|bottomrule)\b|\\cline\{[^}]*\}", "", body)
        rows = []
        for chunk in body.split("\\\\"):
            if chunk.strip():
                rows.append([_clean(c) for c in chunk.split("&")])
        out[label] = rows
    return out


def keyed_rows(rows: list[list[str]], nkeys: int) -> dict[tuple, list[str]]:
    """(row label cells) → value cells; an empty label cell repeats the one above (multirow)."""
    out, last = {}, [""] * nkeys
    for row in rows:
        keys = [c if c else last[i] for i, c in enumerate(row[:nkeys])]
        last = keys
        out[tuple(keys)] = row[nkeys:]
    return out


def number(cell: str) -> tuple[float, float | None]:
    """'77.30±0.72' → (77.30, 0.72); '45,000' → (45000, None)."""
    m = re.fullmatch(r"([\d.,]+)\s*(?:±\s*([\d.]+))?", cell)
    assert m, f"not a number: {cell!r}"
    return float(m.group(1).replace(",", "")), (float(m.group(2)) if m.group(2) else None)


@pytest.fixture(scope="module")
def tex() -> dict[str, list[list[str]]]:
    return tex_tables(FIXTURE.read_text())


# --------------------------------------------------------------------------- where each cell is

DS = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "tinyimagenet": "Tiny-ImageNet"}
DS2 = {  # Table 2 spells the datasets its own way
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "tinyimagenet": "Tiny-Imagenet",
    "sst5": "SST-5",
    "agnews": "AG News",
}
DS4 = {"agnews": "AG News", "sst5": "SST-5"}
METHODS = [  # Tables 3-6: the config's column label → the paper's name, in the paper's order
    ("fedavg", "FedAvg"),
    ("fedprox", "FedProx"),
    ("moon", "MOON"),
    ("feddistill+", "FedDistill+"),
    ("fedgen", "FedGen"),
    ("fedgkd", "FedGKD"),
    ("fedgkd-vote", "FedGKD-Vote"),
    ("fedgkd+", "FedGKD+"),
]
NAME = dict(METHODS)
ALPHAS = [1.0, 0.5, 0.1]


def _alpha(a: float) -> str:
    return f"α={a:g}"


def locate(key: str, c: dict) -> tuple[str, int, tuple, int]:
    """(tex label, number of row-label cells, row labels, value column) of a paper_values cell."""
    m = c.get("method")
    if key in ("fedgkd_table3", "fedgkd_table4"):
        label = {"fedgkd_table3": "tbl:table_compare", "fedgkd_table4": "tbl:table_nlp"}[key]
        ds = (DS if key == "fedgkd_table3" else DS4)[c["dataset"]]
        return label, 2, (ds, _alpha(c["alpha"])), [k for k, _ in METHODS].index(m)
    if key == "fedgkd_table5":
        pair = [0.1, 0.2, 0.3, 0.4].index(c["participation"])
        col = 2 * pair + ["best", "final"].index(c["stat"])
        return "tbl:table1_complete", 1, (NAME[m],), col
    if key == "fedgkd_table6":
        return "tbl:acc_straggler", 1, (NAME[m],), [10, 20, 50, 100].index(c["round"])
    if key == "fedgkd_table7":
        row = (DS[c["dataset"]], str(c["buffer"]))
        return "tbl:avg_teacher_buffer", 2, row, ALPHAS.index(c["alpha"])
    if key == "fedgkd_table8":
        return "tbl:buffer_length", 1, (str(c["buffer"]),), ALPHAS.index(c["alpha"])
    if key == "fedgkd_table9":
        row = ({"none": "None", "MSE": "MSE", "KL": "KL"}[m],)
        return "tbl:loss_type", 1, row, ["cifar10", "cifar100", "sst5"].index(c["dataset"])
    if key == "fedgkd_table2":
        col = {"train_size": 1, "num_classes": 2, "clients": 3}[c["quantity"]]
        return "tbl:table-data", 1, (DS2[c["dataset"]],), col
    raise KeyError(key)


# the header each table must have, so that "column by position" means what locate() assumes
HEADERS = {
    "tbl:table_compare": ["Dataset", "Setting"] + [n for _, n in METHODS],
    "tbl:table_nlp": ["Dataset", "Setting"] + [n for _, n in METHODS],
    "tbl:table1_complete": ["Best", "Final"] * 4,  # second header row, after the method column
    "tbl:acc_straggler": ["10", "20", "50", "100"],
    "tbl:avg_teacher_buffer": ["DataSet", "Buffer Length", "α=1", "α=0.5", "α=0.1"],
    "tbl:buffer_length": ["Buffer Length", "α=1", "α=0.5", "α=0.1"],
    "tbl:loss_type": ["Loss Type", "CIFAR-10", "CIFAR-100", "SST-5"],
    "tbl:table-data": ["Dataset", "Task", "Train Data Size", "Class", "clients"],
}
# cells per table in the paper: every one is transcribed
COUNTS = {
    "fedgkd_table2": 15,  # 5 datasets × (train size, classes, clients); Task is a field
    "fedgkd_table3": 72,
    "fedgkd_table4": 16,
    "fedgkd_table5": 64,
    "fedgkd_table6": 32,
    "fedgkd_table7": 24,
    "fedgkd_table8": 12,
    "fedgkd_table9": 9,
}

# a hand-picked sample across rows and columns, typed from the paper: guards the parser above
# (a parser that found nothing, or the wrong row, would fail these) as well as the file
SAMPLE = [
    ("fedgkd_table2", {"dataset": "cifar100", "quantity": "num_classes"}, 100, None),
    ("fedgkd_table2", {"dataset": "tinyimagenet", "quantity": "train_size"}, 90000, None),
    ("fedgkd_table2", {"dataset": "sst5", "quantity": "clients"}, 10, None),
    ("fedgkd_table2", {"dataset": "agnews", "quantity": "train_size"}, 60000, None),
    ("fedgkd_table3", {"dataset": "cifar10", "alpha": 0.1, "method": "fedgkd-vote"}, 72.99, 0.49),
    ("fedgkd_table3", {"dataset": "cifar10", "alpha": 1.0, "method": "fedavg"}, 77.30, 0.72),
    ("fedgkd_table3", {"dataset": "cifar100", "alpha": 0.5, "method": "moon"}, 35.89, 1.12),
    ("fedgkd_table3", {"dataset": "tinyimagenet", "alpha": 0.1, "method": "fedgkd+"}, 35.72, 0.71),
    ("fedgkd_table3", {"dataset": "cifar100", "alpha": 0.1, "method": "feddistill+"}, 33.94, 0.45),
    ("fedgkd_table4", {"dataset": "agnews", "method": "fedavg"}, 89.19, 0.87),
    ("fedgkd_table4", {"dataset": "sst5", "method": "fedgkd"}, 43.24, 1.80),
    ("fedgkd_table4", {"dataset": "sst5", "method": "fedgen"}, 41.00, 3.23),
    ("fedgkd_table5", {"participation": 0.1, "stat": "best", "method": "fedgkd-vote"}, 75.41, 0.56),
    ("fedgkd_table5", {"participation": 0.2, "stat": "final", "method": "fedavg"}, 72.70, 0.78),
    ("fedgkd_table5", {"participation": 0.4, "stat": "final", "method": "fedgkd+"}, 75.24, 0.33),
    ("fedgkd_table5", {"participation": 0.3, "stat": "best", "method": "fedgen"}, 76.73, 0.53),
    ("fedgkd_table6", {"round": 10, "method": "fedavg"}, 36.30, 1.24),
    ("fedgkd_table6", {"round": 100, "method": "fedprox"}, 63.45, 0.40),
    ("fedgkd_table6", {"round": 50, "method": "fedgkd-vote"}, 59.88, 1.07),
    ("fedgkd_table6", {"round": 20, "method": "feddistill+"}, 44.70, 3.07),
    ("fedgkd_table7", {"dataset": "cifar10", "buffer": 1, "alpha": 1.0}, 78.58, 0.61),
    ("fedgkd_table7", {"dataset": "cifar10", "buffer": 5, "alpha": 0.5}, 76.54, 0.17),
    ("fedgkd_table7", {"dataset": "cifar100", "buffer": 7, "alpha": 0.1}, 36.65, 0.64),
    ("fedgkd_table7", {"dataset": "cifar100", "buffer": 3, "alpha": 0.5}, 42.33, 0.21),
    ("fedgkd_table8", {"buffer": 5, "alpha": 0.1}, 72.41, 1.70),
    ("fedgkd_table8", {"buffer": 5, "alpha": 0.5}, 77.44, 0.66),
    ("fedgkd_table8", {"buffer": 3, "alpha": 1.0}, 78.48, 0.39),
    ("fedgkd_table8", {"buffer": 7, "alpha": 0.1}, 71.57, 1.43),
    ("fedgkd_table9", {"method": "none", "dataset": "sst5"}, 40.39, 0.50),
    ("fedgkd_table9", {"method": "MSE", "dataset": "cifar100"}, 38.19, 0.77),
    ("fedgkd_table9", {"method": "KL", "dataset": "cifar10"}, 71.73, 0.79),
]


def _find(key: str, where: dict) -> pd.Series:
    df = pv.paper_cells(key)
    hit = df
    for k, v in where.items():
        hit = hit[hit[k] == v]
    assert len(hit) == 1, f"{key}: {len(hit)} cells match {where}"
    return hit.iloc[0]


# --------------------------------------------------------------------------- the tests


def test_fixture_blocks_are_verbatim_in_the_paper():
    paper = PAPERS / "fedgkd.tex"
    if not paper.exists():
        pytest.skip(f"{paper} is absent: set FEDKD_PAPERS_DIR to the folder of the papers' texts")
    text = paper.read_text()
    blocks = re.findall(r"\\begin\{table\*?\}.*?\\end\{table\*?\}", FIXTURE.read_text(), re.S)
    assert len(blocks) == 8
    for b in blocks:
        assert b in text, b[:200]


def test_headers_are_as_located(tex):
    for label, want in HEADERS.items():
        rows = tex[label]
        # Tables 5 and 6 have a two-row header: the columns are named in its second row
        two_rows = label in ("tbl:table1_complete", "tbl:acc_straggler")
        got = rows[1][1:] if two_rows else rows[0]
        assert got == want, label


@pytest.mark.parametrize("key,where,mean,std", SAMPLE)
def test_sample_cells(tex, key, where, mean, std):
    c = _find(key, where)
    assert c["mean"] == mean
    assert (std is None and pd.isna(c["std"])) or c["std"] == std
    label, nkeys, row, col = locate(key, c.dropna().to_dict())
    got = number(keyed_rows(tex[label], nkeys)[row][col])
    assert got == (mean, std), (label, row, col)


@pytest.mark.parametrize("key", sorted(COUNTS))
def test_every_fedgkd_cell_matches_the_tex(tex, key):
    df = pv.paper_cells(key)
    assert len(df) == COUNTS[key]
    seen = set()
    for c in df.to_dict("records"):
        c = {k: v for k, v in c.items() if not (isinstance(v, float) and math.isnan(v))}
        label, nkeys, row, col = locate(key, c)
        assert (row, col) not in seen, f"{key}: two cells at {row} column {col}"
        seen.add((row, col))
        cells = keyed_rows(tex[label], nkeys)
        assert row in cells, f"{key}: no row {row} in {label}"
        mean, std = number(cells[row][col])
        assert (c["mean"], c.get("std")) == (mean, std), f"{key} {c['cell']}"
        if key == "fedgkd_table2":
            assert c["task"] == cells[row][0]


def test_table2_tasks_and_all_tables_present():
    values = pv.load_paper_values()
    for key in [*COUNTS, "feddf_table1", "fedntd_table1"]:
        assert key in values
    t2 = pv.paper_cells("fedgkd_table2")
    assert set(t2[t2["dataset"].isin(["agnews", "sst5"])]["task"]) == {"text"}


def test_contradiction_is_noted():
    values = pv.load_paper_values()
    vote = {"dataset": "cifar10", "alpha": 0.1, "method": "fedgkd-vote"}
    assert _find("fedgkd_table3", vote)["mean"] == 72.99
    assert _find("fedgkd_table8", {"buffer": 5, "alpha": 0.1})["mean"] == 72.41
    for key in ("fedgkd_table3", "fedgkd_table8"):
        assert any("72.99" in n and "72.41" in n for n in values[key]["notes"]), key


def test_methods_are_config_columns():
    """Each cell's method is a column label of its config target, and its variant (where the
    paper pins one) a variant that column runs."""
    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/paper.yaml").read_text())
    targets = {**config["tables"], **config["figures"]}
    for key, table in pv.load_paper_values().items():
        target = table.get("config_target")
        if target is None or key == "fedgkd_table2":  # Table 2 has no method columns
            continue
        columns = targets[target]["columns"]
        for c in table["cells"]:
            if "variant" not in c:
                continue
            assert c["method"] in columns, (key, c["cell"])
            spec = columns[c["method"]]
            if isinstance(spec, str):
                runs = {spec}
            elif "best_of" in spec:  # a tuned column: any variant of its sweep
                runs = set(spec["best_of"])
            else:
                runs = {spec["variant"], *(case["variant"] for case in spec.get("cases", []))}
            assert c["variant"] in runs, (key, c["cell"], runs)
            assert c["variant"] in config["variants"]


FEDDF_ROWS = {  # FedDF Table 1: (method, local epochs) → the row's six cells as printed
    ("fedavg", 1): "350± 31 546± 191 246± 41 445± 8 278± 83 361± 111",
    ("fedprox", 40): "115± 17 270± 96 87± 49 229± 79 80± 44 284± 130",
    ("feddf", 20): "61± 24 102± 42 28± 10 51± 4 22± 1 33± 18",
}


def test_feddf_table1_sample():
    df = pv.paper_cells("feddf_table1")
    assert len(df) == 54
    for (method, epochs), printed in FEDDF_ROWS.items():
        nums = [float(x) for x in re.findall(r"\d+", printed)]
        cells = list(zip(nums[::2], nums[1::2], strict=True))
        order = [(0.2, 1.0), (0.2, 0.1), (0.4, 1.0), (0.4, 0.1), (0.8, 1.0), (0.8, 0.1)]
        for (participation, alpha), (mean, std) in zip(order, cells, strict=True):
            c = _find(
                "feddf_table1",
                {"method": method, "local_epochs": epochs, "participation": participation,
                 "alpha": alpha},
            )  # fmt: skip
            assert (c["mean"], c["std"]) == (mean, std)
            assert c["target_accuracy"] == (0.80 if alpha == 1.0 else 0.75)
    paper = PAPERS / "feddf.txt"
    if paper.exists():
        text = paper.read_text()
        for printed in FEDDF_ROWS.values():
            assert printed in text


FEDDF_METHODS = {"FEDAVG": "fedavg", "FEDPROX": "fedprox", "FEDAVGM": "fedavgm",
                 "FedDF (ours)": "feddf"}  # fmt: skip
FEDDF_ORDER = [(0.2, 1.0), (0.2, 0.1), (0.4, 1.0), (0.4, 0.1), (0.8, 1.0), (0.8, 0.1)]


def feddf_table1_rows(text: str) -> dict[tuple[str, int], list[tuple[float, float]]]:
    """FedDF Table 1 as feddf.txt prints it: (method, local epochs) → its six (mean, std), in
    the header's order of C and alpha; a row without a method name continues the one above."""
    body = text.split("The number of communication rounds to reach target performance T")[1]
    body = body.split("Table 2:")[0]
    rows, method = {}, None
    names = "|".join(re.escape(n) for n in sorted(FEDDF_METHODS, key=len, reverse=True))
    for line in body.splitlines():
        m = re.fullmatch(rf"\s*({names})?\s*(\d+)((?:\s+\d+±\s*\d+){{6}})\s*", line)
        if not m:
            continue
        method = FEDDF_METHODS[m.group(1)] if m.group(1) else method
        nums = [float(x) for x in re.findall(r"\d+", m.group(3))]
        rows[(method, int(m.group(2)))] = list(zip(nums[::2], nums[1::2], strict=True))
    return rows


def test_every_feddf_table1_cell_matches_the_text():
    paper = PAPERS / "feddf.txt"
    if not paper.exists():
        pytest.skip(f"{paper} is absent: set FEDKD_PAPERS_DIR to the folder of the papers' texts")
    rows = feddf_table1_rows(paper.read_text())
    assert len(rows) == 9  # FedAvg at 1, 20, 40 local epochs; the others at 20 and 40
    df = pv.paper_cells("feddf_table1")
    got = {}
    for c in df.to_dict("records"):
        key = (c["method"], int(c["local_epochs"]))
        col = FEDDF_ORDER.index((c["participation"], c["alpha"]))
        got[(key, col)] = (c["mean"], c["std"])
    want = {(key, col): v for key, cells in rows.items() for col, v in enumerate(cells)}
    assert got == want


def test_fedntd_table1_against_text():
    df = pv.paper_cells("fedntd_table1")
    fedntd = df[df["method"] == "fedntd"]
    assert set(fedntd["mean"]) == {52.61, 54.42}
    paper = PAPERS / "fedntd.txt"
    if not paper.exists():
        pytest.skip(f"{paper} is absent: set FEDKD_PAPERS_DIR to the folder of the papers' texts")
    text = paper.read_text()
    for c in df.to_dict("records"):
        # Table 1 prints "acc(forgetting)", Appendix G "acc (forgetting)", Appendix F "acc±std"
        if not pd.isna(c["forgetting"]):
            printed = rf"{c['mean']:.2f} ?\({c['forgetting']:.2f}\)"
            assert re.search(printed, text), c["cell"]
        if not pd.isna(c["std"]):
            assert f"{c['mean']:.2f}±{c['std']:.2f}" in text, c["cell"]


FEDNTD_METHODS = {"FedAvg [37]": "fedavg", "FedCurv [43]": "fedcurv", "FedProx [30]": "fedprox",
                  "FedNova [47]": "fednova", "SCAFFOLD [20]": "scaffold", "MOON [28]": "moon",
                  "FedNTD (Ours)": "fedntd"}  # fmt: skip
# the value column of each transcribed setting (of Table 1's 7; the notes say why)
FEDNTD_COLUMN = {"shards": 1, "dirichlet": 2}


def fedntd_blocks(text: str, start: str) -> dict[str, dict[str, list[str]]]:
    """The Sharding and LDA blocks of the table that begins at ``start``: partition → method →
    its value cells as printed."""
    body = text[text.index(start) :]
    out = {}
    for name, key in (("Sharding", "shards"), ("LDA", "dirichlet")):
        block = body[body.index(f"NIID Partition Strategy : {name}") :].splitlines()[1:]
        rows = {}
        for line in block:
            cells = [c.strip() for c in line.split("|")]
            if cells[0] in FEDNTD_METHODS:
                rows[FEDNTD_METHODS[cells[0]]] = cells[1:8]
            if cells[0] == "FedNTD (Ours)":
                break
        out[key] = rows
    return out


def test_every_fedntd_cell_is_in_its_column():
    paper = PAPERS / "fedntd.txt"
    if not paper.exists():
        pytest.skip(f"{paper} is absent: set FEDKD_PAPERS_DIR to the folder of the papers' texts")
    text = paper.read_text()
    table1 = fedntd_blocks(text, "NIID Partition Strategy : Sharding")
    appendix_f = fedntd_blocks(text, "Appendix F Experiment Table")
    df = pv.paper_cells("fedntd_table1")
    assert len(df) == 14
    for c in df.to_dict("records"):
        col = FEDNTD_COLUMN[c["partition"]]
        printed = table1[c["partition"]][c["method"]][col]
        if c["method"] == "fedavg":  # Table 1 prints FedAvg's accuracy alone
            assert printed == f"{c['mean']:.2f}", c["cell"]
            assert pd.isna(c["std"]), c["cell"]
            continue
        assert printed == f"{c['mean']:.2f}({c['forgetting']:.2f})", c["cell"]
        with_std = appendix_f[c["partition"]][c["method"]][col]
        assert with_std == f"{c['mean']:.2f}±{c['std']:.2f}", c["cell"]


# --------------------------------------------------------------------------- the loader's checks


def _write(tmp_path, data) -> Path:
    p = tmp_path / "values.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


GOOD = {
    "t": {
        "source": "S",
        "metric": "M",
        "notes": [],
        "cells": [
            {"dataset": "cifar10", "method": "fedavg", "mean": 1.0, "std": None, "cell": "c"}
        ],
    }
}


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda d: d["t"].pop("source"), "source"),
        (lambda d: d["t"].update(extra=1), "extra"),
        (lambda d: d["t"]["cells"][0].pop("mean"), "mean"),
        (lambda d: d["t"]["cells"][0].update(mean="72.99"), "mean"),
        (lambda d: d["t"]["cells"][0].update(colour="red"), "colour"),
        (lambda d: d["t"]["cells"][0].update(dataset="cifar-10"), "cifar-10"),
        (lambda d: d["t"]["cells"][0].pop("std"), "std"),
        (lambda d: d["t"].update(cells=[]), "cells"),
        (lambda d: d["t"]["cells"].append(dict(d["t"]["cells"][0])), "twice"),
    ],
)
def test_loader_rejects_bad_files(tmp_path, change, message):
    import copy

    data = copy.deepcopy(GOOD)
    change(data)
    with pytest.raises(pv.PaperValuesError, match=message):
        pv.load_paper_values(_write(tmp_path, data))


def test_loader_accepts_good_file_and_unknown_table(tmp_path):
    path = _write(tmp_path, GOOD)
    assert pv.load_paper_values(path)["t"]["cells"][0]["mean"] == 1.0
    df = pv.paper_cells("t", path)
    assert list(df["mean"]) == [1.0] and df["table"].iloc[0] == "t"
    with pytest.raises(pv.PaperValuesError, match="no table 'nope'"):
        pv.paper_cells("nope", path)
