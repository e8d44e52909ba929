"""A run folder's lifecycle under hostile conditions: the temporary files a killed write leaves
are removed by the next start (only those fedkd's atomic writes name so, never a link or a
folder, never in a folder another run holds); a full disk leaves run.json true, and the next
start resumes; an ``--out`` that cannot be written is one line naming the folder and the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fedkd import files
from planted_links import VICTIM_TEXT, plant


def _quiet_run(out: Path, rounds: int = 3, log=None):
    from fedkd.config import RunSpec
    from fedkd.engine.run import Run
    from small_runs import TINY

    return Run(RunSpec(**TINY, rounds=rounds), out, log=log or (lambda msg: None))


def _killed_write(path: Path) -> Path:
    """The temporary file ``atomic_write`` makes for ``path``, left as a kill mid-write leaves it."""
    fd, tmp = files._create_exclusive(path)
    os.write(fd, b"half a file")
    os.close(fd)
    return tmp


def test_a_start_removes_the_temporaries_killed_writes_left_and_nothing_else(
    tmp_path, victim, fake_rounds
):
    out = tmp_path / "run"
    _quiet_run(out).run(stop_after_round=1)
    litter = [_killed_write(out / name) for name in ("checkpoint.pt", "checkpoint.pt", "run.json")]
    litter.append(_killed_write(out / "metrics.parquet"))
    kept = [out / "notes.tmp", out / "checkpoint.pt.tmp", out / "checkpoint.pt.ab.tmp"]
    for path in kept:
        path.write_bytes(b"not fedkd's")
    (out / "run.json.0123456789ab.tmp").mkdir()  # a folder of that name is no file of ours
    plant(out / "checkpoint.pt.aaaaaaaaaaaa.tmp", victim)
    said = []
    record = _quiet_run(out, log=said.append).run()
    assert record["status"] == "complete"
    assert not any(p.exists() for p in litter)
    assert all(p.read_bytes() == b"not fedkd's" for p in kept)
    assert (out / "run.json.0123456789ab.tmp").is_dir()
    assert (out / "checkpoint.pt.aaaaaaaaaaaa.tmp").is_symlink()
    assert victim.read_bytes() == VICTIM_TEXT
    names = ", ".join(sorted(p.name for p in litter))
    assert f"[fedkd] {out}: removed 4 temporary file(s) an interrupted write left ({names})" in said


def test_the_temporaries_of_a_folder_another_run_holds_are_left(tmp_path, fake_rounds):
    from fedkd.engine.run_outputs import RunConflictError, RunLock

    out = tmp_path / "run"
    _quiet_run(out).run(stop_after_round=1)
    tmp = _killed_write(out / "checkpoint.pt")  # the live writer's file
    with RunLock(out), pytest.raises(RunConflictError, match="being written by another run"):
        _quiet_run(out).run()
    assert tmp.read_bytes() == b"half a file"


def test_a_full_disk_leaves_run_json_true_and_the_next_start_resumes(
    tmp_path, fake_rounds, monkeypatch
):
    """The disk fills after round 2: no file can be written, run.json included, so it cannot
    say stopped; it says what was true after round 2 (written after each round), the log says
    what the checkpoint holds, and once there is space the same command resumes from it."""
    import errno

    create = files._create_exclusive
    full = {"now": False}

    def on_a_full_disk(path):
        if full["now"]:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return create(path)

    monkeypatch.setattr(files, "_create_exclusive", on_a_full_disk)
    out, said = tmp_path / "run", []
    run = _quiet_run(out, log=said.append)
    run.on_rounds_done = lambda done, row: full.update(now=done == 2)
    with pytest.raises(OSError, match="No space left"):
        run.run()
    record = json.loads((out / "run.json").read_text())
    assert (record["status"], record["rounds_done"]) == ("running", 2)
    assert said[-1].startswith(f"[fedkd] {out / 'run.json'} could not be updated (")
    assert said[-1].endswith(
        "it says running, 2 round(s) done, not stopped; the checkpoint holds 2 round(s), and "
        "the same command resumes from there once the file can be written"
    )
    full["now"] = False
    said.clear()
    assert _quiet_run(out, log=said.append).run()["status"] == "complete"
    assert f"[fedkd] resuming {out} after round 2/3" in said


def test_a_full_disk_with_room_for_run_json_records_stopped_with_the_rounds_done(
    tmp_path, fake_rounds, monkeypatch
):
    import errno

    from fedkd.engine import checkpoint

    fsync = os.fsync
    run = _quiet_run(tmp_path / "run")

    def no_space_in_round_2(fd):
        if run._rounds_checkpointed == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        fsync(fd)

    monkeypatch.setattr(checkpoint.os, "fsync", no_space_in_round_2)
    with pytest.raises(OSError, match="No space left"):
        run.run()
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (record["status"], record["rounds_done"]) == ("stopped", 1)
    assert record["error"].startswith("no space left on device")


TRAIN_ARGS = [
    "--dataset", "mnist5k", "--clients", "20", "--participation", "0.05", "--local-epochs", "1",
    "--device", "cpu", "--rounds", "1", "--model-options", "{channels: [4, 8], hidden: 16}",
]  # fmt: skip


def _read_only_message(out: Path, folder: Path) -> str:
    return (
        f"fedkd train: error: --out {out}: {folder} is read-only (no write permission, or a "
        f"read-only file system), and a run writes its files there; give an --out you can "
        f"write to, or make {folder} writable"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder without write permission")
def test_train_into_a_read_only_folder_is_one_line_naming_it(tmp_path, capsys):
    from fedkd.cli import main

    folder = tmp_path / "results"
    folder.mkdir(mode=0o555)
    out = folder / "run"
    assert main(["train", "--out", str(out), *TRAIN_ARGS]) == 2
    err = capsys.readouterr().err
    assert err.strip() == _read_only_message(out, folder) and not out.exists()


def test_train_into_a_folder_it_cannot_write_is_refused_before_any_work(
    tmp_path, capsys, monkeypatch
):
    """As for a user without write permission (os.access says no; this test may run as root)."""
    from fedkd import cli

    folder = tmp_path / "results"
    folder.mkdir()
    access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: Path(path) != folder and access(path, mode)
    )
    monkeypatch.setattr(cli, "_spec_from_args", lambda args: pytest.fail("work was done"))
    out = folder / "sub" / "run"
    assert cli.main(["train", "--out", str(out), *TRAIN_ARGS]) == 2
    err = capsys.readouterr().err
    assert err.strip() == _read_only_message(out, folder) and "Traceback" not in err
    assert sorted(folder.iterdir()) == []


def test_a_folder_that_refuses_the_run_later_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """A folder that refuses the write only when it is made (a read-only file system that
    access() did not see, or permissions changed meanwhile)."""
    import errno

    from fedkd.cli import main

    folder = tmp_path / "results"
    folder.mkdir()
    out = folder / "run"
    mkdir = Path.mkdir

    def read_only_file_system(self, *args, **kwargs):
        if self == out:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only_file_system)
    assert main(["train", "--out", str(out), *TRAIN_ARGS]) == 2
    err = capsys.readouterr().err
    assert err.strip() == _read_only_message(out, folder) and "Traceback" not in err
