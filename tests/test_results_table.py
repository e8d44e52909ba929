"""bench/results_table.py reads back every row it writes, whatever text it holds (U+2028 in
--conditions), and refuses, one line naming the line and key, what no table can show as written
(a terminal's escape sequence, a bidi override), a commit that is no hash written as text and a
line nested too deep; HTML, links and entities in a text are shown as the characters written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from test_docs import results_table

ROW = {
    "id": "x-1", "topic": "t", "date": "2026-11-28", "device": "cpu", "commit": None,
    "command": None, "what": "w", "figures": {"a": 1}, "conditions": "c", "readme": "r",
}  # fmt: skip
BENCH_LINE = {"date": "2026-11-28", "device": "NVIDIA H200", "what": "w", "img_s": 5.0,
              "details": {"engine": "graphs"}}  # fmt: skip


def results_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "results.jsonl"
    path.write_text(text, encoding="utf-8")
    return path


def one_row(tmp_path: Path, **changes) -> Path:
    return results_file(tmp_path, json.dumps({**ROW, **changes}) + "\n")


@pytest.mark.parametrize("breaks", ["\u2028", "\u2029", "\x85", "\u2028\n\u2029"])
def test_an_imported_row_reads_back_as_written_whatever_its_conditions(tmp_path, breaks):
    bench = results_file(tmp_path, json.dumps(BENCH_LINE) + "\n")
    results = tmp_path / "out.jsonl"
    conditions = f"before{breaks}after α ✓"
    code = results_table.main(["--import", str(bench), "--results", str(results),
                               "--commit", "abc1234", "--conditions", conditions])  # fmt: skip
    assert code == 0
    assert results.read_text(encoding="utf-8").count("\n") == 1, "one row, one line"
    (row,) = results_table.load(results)
    assert row["conditions"] == conditions and row["commit"] == "abc1234"
    table = results_table.render([row])
    assert "before after α ✓" in table
    # a second import appends to a file that still reads
    assert results_table.main(["--import", str(bench), "--results", str(results),
                               "--commit", "abc1234", "--conditions", "c"]) == 0  # fmt: skip
    assert len(results_table.load(results)) == 2


def test_an_accuracy_check_imports_with_each_seeds_figures(tmp_path):
    """A --precision-check line times nothing (img_s null): its figures are each seed's."""
    check = {**BENCH_LINE, "img_s": None, "details": {
        "precision": "tf32", "final_acc_by_seed": {"0": 0.5, "1": 0.25},
        "best_acc_by_seed": {"0": 0.75, "1": 0.5},
    }}  # fmt: skip
    bench = results_file(tmp_path, json.dumps(check) + "\n")
    (row,) = results_table.import_bench(
        bench, tmp_path / "out.jsonl", commit=None, topic="T", conditions="c"
    )
    assert row["figures"] == {
        "final_acc_seed_0": 0.5, "final_acc_seed_1": 0.25,
        "best_acc_seed_0": 0.75, "best_acc_seed_1": 0.5,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"commit": 1234567}, "line 1: commit 1234567 is not a hash written as text"),
        ({"what": "title\x1b]0;x\x07"}, "line 1: what holds U+001B (a control character)"),
        ({"device": "ab\u202ecd"}, "line 1: device holds U+202E (RIGHT-TO-LEFT OVERRIDE)"),
        ({"readme": "r\x00"}, "line 1: readme holds U+0000 (a control character)"),
        ({"figures": {"a\x1b[2J": 1}}, "line 1: figures holds U+001B"),
        ({"figures": {"a": float("inf")}}, "figure 'a' = inf: a finite number"),
        ({"what": "w" * 150_000 + "\x1b"}, "what holds U+001B"),
        ({"device": ["x"] * 10}, "device must be non-empty text, got a JSON list"),
    ],
)
def test_what_a_table_cannot_show_is_refused_in_one_line(tmp_path, changes, message, capsys):
    path = one_row(tmp_path, **changes)
    with pytest.raises(results_table.ResultsError, match=re.escape(message)):
        results_table.load(path)
    assert results_table.main(["--results", str(path), "--readme"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("results_table: results.jsonl line 1: ") and err.count("\n") == 1
    assert "\x1b" not in err and "\u202e" not in err and len(err) < 400


@pytest.mark.parametrize("depth", [100_000, 5_000])
def test_a_line_nested_too_deep_is_refused_naming_it(tmp_path, depth, capsys):
    path = results_file(tmp_path, '{"id": ' + "[" * depth + "]" * depth + "}\n")
    assert results_table.main(["--results", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("results_table: results.jsonl line 1: ") and err.count("\n") == 1


def test_a_bench_line_of_another_shape_is_refused_naming_it(tmp_path, capsys):
    for line in ({**BENCH_LINE, "details": ["x"]}, "[" * 50_000 + "]" * 50_000):
        bench = results_file(tmp_path, (line if isinstance(line, str) else json.dumps(line)))
        code = results_table.main(["--import", str(bench), "--results", str(tmp_path / "o"),
                                   "--conditions", "c"])  # fmt: skip
        assert code == 1
        assert capsys.readouterr().err.startswith("results_table: results.jsonl line 1: ")
    assert not (tmp_path / "o").exists()


def test_an_escape_in_the_flags_is_refused_before_anything_is_written(tmp_path, capsys):
    bench = results_file(tmp_path, json.dumps(BENCH_LINE) + "\n")
    for flag in ("--conditions", "--topic"):
        argv = ["--import", str(bench), "--results", str(tmp_path / "o"), "--conditions", "c"]
        code = results_table.main([*argv, flag, "x\x1b[2J"])
        assert code == 1
        assert f"{flag} holds U+001B" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_html_links_and_entities_are_shown_as_written(tmp_path):
    row = {**ROW, "what": "<img src=x onerror=alert(1)> &lt; [a](b)",
           "readme": "[click](javascript:alert(1))", "topic": "T [x](javascript:y) <b>",
           "command": "echo '<b>' | `x` ``y``"}  # fmt: skip
    (row,) = results_table.load(one_row(tmp_path, **row))
    md, readme = results_table.render([row]), results_table.render_readme([row])
    code_span = "``` echo '<b>' \\| `x` ``y`` ```"
    for text in (md.replace(code_span, ""), readme):
        assert "<img" not in text and "<b>" not in text
        assert not re.search(r"(?<!\\)\]\(javascript:", text), "no link: its bracket is escaped"
    assert "&lt;img src=x onerror=alert(1)&gt; &amp;lt; \\[a\\](b)" in md
    assert "| \\[click\\](javascript:alert(1)) |" in readme
    assert "## T \\[x\\](javascript:y) &lt;b&gt;" in md
    # a command is code: its text as written, fenced by more backticks than it holds in a row
    assert code_span in md


def test_out_replaces_the_tables_only_once_every_row_is_read(tmp_path, capsys):
    out = tmp_path / "results.md"
    assert results_table.main(["--results", str(one_row(tmp_path)), "--out", str(out)]) == 0
    written = out.read_text(encoding="utf-8")
    assert written == results_table.render(results_table.load(one_row(tmp_path)))
    assert capsys.readouterr().out == "", "the tables went to the file, not standard output"
    # a refused row: the command fails naming it, and the tables written before stay whole
    refused = one_row(tmp_path, what="title\x1b]0;x\x07")
    assert results_table.main(["--results", str(refused), "--out", str(out)]) == 1
    assert "what holds U+001B" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl", "results.md"]


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        # seconds rounded to the hundredth before minutes are split off: never "60 s"
        ("wall_seconds", 119.999, "wall 2 min 00 s"),
        ("wall_seconds", 3599.996, "wall 60 min 00 s"),
        ("wall_seconds", 1633.58, "wall 27 min 13.58 s"),
        ("wall_seconds", 1234567.8, "wall 20,576 min 7.8 s"),
        # a large figure keeps its digits (no 1.23457e+06)
        ("local_img_per_s", 1234567.8, "local 1,234,568 img/s"),
        ("peak_mib", 357.6, "peak mib 357.6"),
        # a range whose label has a word starting "ci" is a range; ci95 is an interval
        ("cifar10_img_per_s", [1000, 2000], "cifar10 1,000–2,000 img/s"),
        ("best_ci95_points", [-0.44, 0.25], "best ci95 [-0.44, 0.25] points"),
    ],
)
def test_a_figure_is_shown_as_its_value_rounded(name, value, shown):
    assert results_table.figure(name, value) == shown
