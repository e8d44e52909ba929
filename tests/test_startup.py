"""The commands that import torch or pandas (train, features, partition, aggregate, render)
with Python's cyclic garbage collector paused and then freeze what the imports made
(``fedkd.startup``): those objects live as long as the process, and every full
collection walked them again, during the imports, the rounds and at the interpreter's exit.
Checked in a fresh process, as a job runs the command: after it, the collector is on again and
torch's module namespace is in no generation the collector walks."""

import subprocess
import sys

import pytest

PROBE = r"""
import gc, sys

from fedkd.cli import main

out = sys.argv[1]
if sys.argv[2] == "partition":
    args = ["partition", "--dataset", "mnist5k", "--scheme", "iid", "--clients", "4",
            "--out", f"{out}/part.parquet"]
else:
    args = ["train", "--out", f"{out}/run", "--rounds", "1", "--dataset", "mnist5k", "--clients",
            "20", "--participation", "0.05", "--local-epochs", "1", "--device", "cpu",
            "--model-options", "{channels: [4, 8], hidden: 16}"]
assert "torch" not in sys.modules
assert main(args) == 0
import torch

walked = any(o is vars(torch) for o in gc.get_objects())
print(gc.isenabled(), walked)
"""


@pytest.mark.parametrize("command", ["partition", "train"])
def test_a_commands_imports_are_out_of_the_collectors_walks(tmp_path, command):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path), command],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split() == ["True", "False"]


def test_the_collector_comes_back_as_it_was_after_a_failed_import(monkeypatch):
    """A module that fails to import fails the command as its own import would; the collector
    is on again, or left off where it was off."""
    import gc

    from fedkd import startup

    monkeypatch.setitem(startup.LONG_LIVED_IMPORTS, "train", ("fedkd.no_such_module",))
    assert gc.isenabled()
    with pytest.raises(ImportError):
        startup.import_frozen("train")
    assert gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(ImportError):
            startup.import_frozen("train")
        assert not gc.isenabled()
    finally:
        gc.enable()
    startup.import_frozen("status")  # a command without long-lived imports
    assert gc.isenabled()


def test_a_commands_help_and_a_bad_flag_import_none_of_them():
    """The imports come after the command line is read: its --help or a flag it refuses is
    answered without the seconds of importing torch."""
    code = (
        "import sys; from fedkd.cli import main\n"
        "for argv in (['train', '--help'], ['train', '--no-such-flag']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.splitlines()[-1] == "False", done.stderr


def test_ctrl_c_during_the_imports_ends_the_command_as_it_does_later(tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM) while torch imports ends the command with its exit code and no
    traceback, as it does once the command runs."""
    from fedkd import startup
    from fedkd.cli import main

    (tmp_path / "interrupted_import.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(startup.LONG_LIVED_IMPORTS, "train", ("interrupted_import",))
    assert main(["train", "--out", str(tmp_path / "run")]) == 130


def test_an_error_the_user_can_fix_in_an_import_is_one_line(tmp_path, monkeypatch, capsys):
    """An import failing with an error the user can fix is reported as the command reports it:
    one line and code 2, not a traceback from before the command started."""
    from fedkd import startup
    from fedkd.cli import main

    (tmp_path / "failing_import.py").write_text("raise ValueError('a bad setting')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(startup.LONG_LIVED_IMPORTS, "train", ("failing_import",))
    assert main(["train", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip() == "fedkd train: error: a bad setting"
