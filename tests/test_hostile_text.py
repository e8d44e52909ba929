"""User text echoed back is text: a terminal's escape sequences and bidi overrides in the keys of
params, model_options and dataset_options, in a run folder's name or in a column label never
reach the terminal or a table as themselves; a long value is cut with its length said; and a
strategy module of one's own that fails, or exits, while it is imported is one line naming it."""

from __future__ import annotations

import json
import sys

import pytest

from fedkd.cli import main
from fedkd.config import RunSpec, SpecError
from fedkd.echo import safe_message, safe_text, shown
from fedkd.strategies import MODULES_VARIABLE, StrategyModuleError, strategy_names
from planning_checks import errors_of, small_config

# a window-title change, a screen clear, a bidi override and a C1 control sequence introducer
HOSTILE = "a\x1b]0;PWNED\x07\x1b[2J\u202ez\x9b"


def assert_inert(text: str) -> None:
    """No character that a terminal acts on or that reorders text is left as itself."""
    for ch in ("\x1b", "\x07", "\u202e", "\x9b"):
        assert ch not in text, repr(ch)


# ----------------------------------------------------------------------------- the helpers


def test_safe_text_escapes_what_a_terminal_acts_on_and_keeps_the_rest():
    assert safe_text(HOSTILE) == "a\\x1b]0;PWNED\\x07\\x1b[2J\\u202ez\\x9b"
    assert safe_text("FedGKD (M=3) α σ ✓") == "FedGKD (M=3) α σ ✓"
    assert safe_text("x" * 100, 10) == "x" * 10 + "... (100 characters)"


def test_shown_quotes_as_repr_does_and_cuts_a_long_value_saying_its_length():
    assert shown("fedavg") == "'fedavg'" and shown(0.5) == "0.5"
    long = shown("y" * 150_000)
    assert long == repr("y" * 80) + "... (150,000 characters)"
    assert_inert(shown(HOSTILE)) and assert_inert(shown({HOSTILE: [HOSTILE]}))


def test_a_message_keeps_its_lines_and_cuts_each_to_a_screenful():
    message = safe_message("first\n" + "z" * 5000 + HOSTILE)
    first, second = message.split("\n")
    assert first == "first" and second.endswith(f"... ({5000 + len(HOSTILE):,} characters)")
    assert len(second) < 2100


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("key", ["params", "model_options", "dataset_options"])
def test_a_hostile_key_is_escaped_in_trains_refusal(key, tmp_path, capsys):
    flag = f"--{key.replace('_', '-')}"
    code = main(["train", "--out", str(tmp_path / "r"), "--dataset", "mnist5k",
                 flag, json.dumps({HOSTILE: 1})])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("fedkd train: error:")
    assert_inert(err)
    assert "a\\x1b]0;PWNED\\x07\\x1b[2J\\u202ez\\x9b" in err
    assert not (tmp_path / "r").exists()


def test_a_hostile_key_is_escaped_where_the_run_spec_names_it():
    for options in ({"params": {HOSTILE: 1}}, {"model_options": {HOSTILE: 1}}):
        with pytest.raises(SpecError) as info:
            RunSpec.from_dict({"dataset": "mnist5k", **options})
        assert_inert(str(info.value))
        assert "is not a" in str(info.value)


def test_a_long_value_is_cut_with_its_length_in_a_refusal(tmp_path, capsys):
    code = main(["train", "--out", str(tmp_path / "r"), "--dataset", "mnist5k",
                 "--partition", "p" * 150_000])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "... (150,000 characters)" in err and len(err) < 3000


def test_hostile_keys_of_a_configuration_are_escaped_in_its_refusal():
    cfg = small_config()
    cfg["variants"]["fedavg"]["params"] = {HOSTILE: 1}
    cfg["variants"]["fedavg"]["model_options"] = {HOSTILE: 1}
    cfg["defaults"]["dataset_options"] = {HOSTILE: 1}
    cfg["defaults"][HOSTILE] = 1  # a key the schema does not know
    message = errors_of(cfg)
    assert_inert(message)
    assert "\\x1b[2J" in message


@pytest.mark.parametrize(
    ("label", "says"),
    [
        ("Fed\u202eAvg", "holds the invisible character U+202E (RIGHT-TO-LEFT OVERRIDE)"),
        ("Fed\u2066Avg", "holds the invisible character U+2066 (LEFT-TO-RIGHT ISOLATE)"),
        ("Fed\u2028Avg", "holds the invisible character U+2028 (LINE SEPARATOR)"),
        ("Fed\x85Avg", "holds the invisible character U+0085"),
    ],
)
def test_a_label_with_a_bidi_or_line_control_is_refused_at_planning(label, says):
    cfg = small_config()
    cfg["tables"]["table3"]["columns"] = {label: "fedavg"}
    message = errors_of(cfg)
    assert f"tables.table3.columns: the label {shown(label)} {says}" in message
    assert "remove it" in message
    assert_inert(message)


def test_a_refused_150kb_label_is_cut_in_its_refusal():
    cfg = small_config()
    cfg["tables"]["table3"]["columns"] = {"L" * 150_000: "fedavg"}
    message = errors_of(cfg)
    assert "... (150,000 characters) is 150,000 characters long; keep a label to 100" in message
    assert len(message) < 2000


def test_fedkd_status_escapes_a_run_folders_name(tmp_path, capsys):
    run = tmp_path / "runs" / "mnist5k" / f"fed{HOSTILE}" / "s" / "seed0"
    run.mkdir(parents=True)
    record = {"status": "running", "rounds_done": 1, "spec": {"rounds": 5},
              "process": {"pid": 1, "host": "another-host"}}  # fmt: skip
    (run / "run.json").write_text(json.dumps(record))
    assert main(["status", "--runs", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert_inert(out)
    assert "fed" + safe_text(HOSTILE, None) in out


# ----------------------------------------------------------------------------- tables


def test_a_bidi_override_in_a_label_reaches_no_table_format(tmp_path):
    """A label reaches a table from `fedkd.report.aggregate_runs` called from Python too, which
    neither planning nor the command line sees: every format writes a bidi override or an
    escape as the replacement character."""
    from fedkd.report.render import render
    from report_runs import agg_file, make_run

    label = "Fed\u202eAvg\x1b[2J"
    run = make_run(tmp_path / "runs", "a", [0.1, 0.5])
    out = tmp_path / "t"
    render("grid", out, aggregate=agg_file(tmp_path, [(label, run)]),
           options={"columns": [label], "caption": "cap\u2067tion"})  # fmt: skip
    for suffix in (".tex", ".md", ".csv", ".html"):
        text = out.with_name(out.name + suffix).read_text()
        assert_inert(text)
        assert "Avg" in text, suffix


@pytest.mark.parametrize("form", ["--run", "runs file, =", "runs file, tab"])
def test_fedkd_aggregate_refuses_a_label_with_a_bidi_override(form, tmp_path, capsys):
    """As planning and `fedkd train --label` refuse it: one line naming the label, the
    character and the fix, nothing written."""
    from report_runs import make_run

    run = make_run(tmp_path / "runs", "a", [0.1, 0.5])
    label = "Fed\u202eAvg"
    out = tmp_path / "agg.parquet"
    if form == "--run":
        args = ["--run", f"{label}={run}"]
    else:
        runs_file = tmp_path / "table.runs"
        runs_file.write_text(f"{label}{'=' if form.endswith('=') else chr(9)}{run}\n")
        args = ["--runs-file", str(runs_file)]
    assert main(["aggregate", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert (
        "its label 'Fed\\u202eAvg' holds the invisible character U+202E (RIGHT-TO-LEFT OVERRIDE)"
        in err
    )
    assert "remove it" in err
    assert_inert(err)
    assert not out.exists()


# ----------------------------------------------------------------------------- strategy modules

BROKEN_MODULES = {
    "exits": ("import sys\nsys.exit(0)\n", "it calls sys.exit(0) (a module must not end the "
              "program) (line 2)"),
    "exits-with-text": ("import sys\n\nsys.exit('bye\\x1b[2J')\n",
                        "it calls sys.exit('bye\\x1b[2J') (a module must not end the program) "
                        "(line 3)"),
    "syntax": ("def f(:\n", "SyntaxError at line 1: "),
    "raises": ("x = 1\nraise RuntimeError('boom')\n", "RuntimeError: boom (line 2)"),
    "raises-in-a-function": ("def f():\n    raise KeyError('k')\n\nf()\n", "KeyError: 'k' (line 2)"),
    "imports-nothing": ("import no_such_module_anywhere\n",
                        "ModuleNotFoundError: No module named 'no_such_module_anywhere' (line 1)"),
}  # fmt: skip


@pytest.mark.parametrize("case", BROKEN_MODULES)
def test_a_strategy_module_failing_while_imported_is_one_line_naming_it(
    case, tmp_path, monkeypatch, capsys
):
    text, cause = BROKEN_MODULES[case]
    module = tmp_path / "mine.py"
    module.write_text(text)
    monkeypatch.setenv(MODULES_VARIABLE, str(module))
    with pytest.raises(StrategyModuleError) as info:
        strategy_names()
    message = str(info.value)
    assert message.startswith(
        f"{MODULES_VARIABLE}: the strategy module {module} failed while being imported: "
    )
    assert cause in message and "\n" not in message
    assert message.endswith(f"fix it, or remove it from {MODULES_VARIABLE}")
    assert not [m for m in sys.modules if m.startswith("fedkd_strategy_module_mine")]
    # the commands say it in that one line and exit 2, never 0 with no output
    for argv in (["strategies"], ["train", "--out", str(tmp_path / "r"), "--dataset", "mnist5k"]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == f"fedkd {argv[0]}: error: {safe_message(message)}\n"
    assert not (tmp_path / "r").exists()


def test_a_strategy_name_registered_twice_is_one_line(tmp_path, monkeypatch, capsys):
    module = tmp_path / "twice.py"
    module.write_text(
        "from fedkd.strategies.base import Strategy\n\n\n"
        "class Again(Strategy):\n"
        '    name = "fedavg"\n'
    )
    monkeypatch.setenv(MODULES_VARIABLE, str(module))
    assert main(["strategies"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedkd strategies: error: strategy name 'fedavg' is registered twice")
    assert str(module) in err and err.count("\n") == 1


def test_ctrl_c_while_a_strategy_module_is_imported_stays_an_interrupt(tmp_path, monkeypatch):
    module = tmp_path / "interrupted.py"
    module.write_text("raise KeyboardInterrupt\n")
    monkeypatch.setenv(MODULES_VARIABLE, str(module))
    with pytest.raises(KeyboardInterrupt):
        strategy_names()
    assert main(["strategies"]) == 130


def test_a_train_label_with_a_bidi_or_control_character_is_refused_in_one_line(capsys, tmp_path):
    """``fedkd train --label`` refuses what planning refuses in a column label, before training,
    and echoes the label escaped."""
    code = main(["train", "--out", str(tmp_path / "run"), "--label", f"variant={HOSTILE}"])
    err = capsys.readouterr().err
    assert code == 2 and "--label" in err and "remove it" in err
    assert_inert(err)
    assert not (tmp_path / "run").exists()


def test_a_user_modules_summary_and_an_out_path_reach_the_terminal_escaped(
    tmp_path, monkeypatch, capsys
):
    """What the commands print on success is the user's text too: a strategy module's paper and
    summary (its fields still tab-separated), and the --out path aggregate reports."""
    from report_runs import make_run

    module = tmp_path / "loud.py"
    module.write_text(
        "from fedkd.strategies.fedavg import FedAvg\n\n\n"
        "class Loud(FedAvg):\n"
        '    name = "loud"\n'
        f"    paper = {HOSTILE!r}\n"
        f"    summary = {HOSTILE!r}\n"
    )
    monkeypatch.setenv(MODULES_VARIABLE, str(module))
    assert main(["strategies", "--details"]) == 0
    out = capsys.readouterr().out
    assert_inert(out)
    assert f"loud\t{safe_text(HOSTILE, None)}\t{safe_text(HOSTILE, None)}\n" in out

    folder = tmp_path / f"out{HOSTILE}"
    folder.mkdir()
    run = make_run(tmp_path / "runs", "a", [0.1, 0.5])
    assert main(["aggregate", "--out", str(folder / "agg.parquet"), "--run", f"a={run}"]) == 0
    err = capsys.readouterr().err
    assert_inert(err)
    assert f"out{safe_text(HOSTILE, None)}/agg.parquet: 1 run, 2 rows" in err
