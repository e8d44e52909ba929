"""The fork server (fedkd.forkserver): a command sent to it runs as a fresh process would (same
output, files, exit code), a killed sender takes its command with it, and without a reachable
server a command runs in its own process. Hostile requests (idle, huge, malformed, for another
command) are refused and leave the server and its running commands alone."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fedkd.forkserver import (
    ENV,
    ForkServer,
    SocketPathError,
    _cpus,
    _interpreter,
    run_remote,
    serve,
)

# a small run: 2 clients of 400 images a round
TRAIN = [
    "train", "--dataset", "mnist5k", "--clients", "10", "--participation", "0.2", "--rounds",
    "1", "--local-epochs", "1", "--seed", "0", "--model-options",
    "{channels: [8, 16], hidden: 32}",
]  # fmt: skip


@pytest.fixture(scope="module")
def module_server(tmp_path_factory):
    """One server for the tests that only send to it: starting one imports torch (seconds)."""
    log = tmp_path_factory.mktemp("forkserver") / "forkserver.log"
    fs = ForkServer(log=log)
    assert fs.start(), log.read_text()
    os.environ.pop(ENV)  # set by each test that uses it (fixture server), not by the others
    yield fs
    fs.stop()


@pytest.fixture
def server(module_server, monkeypatch):
    monkeypatch.setenv(ENV, module_server.path)
    return module_server


def fedkd(args, env, cwd, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "fedkd", *args], env=env, cwd=cwd, capture_output=True,
        text=True, **kwargs,
    )  # fmt: skip


def test_a_served_command_runs_as_a_fresh_process_would(server, tmp_path):
    served_env = dict(os.environ)
    assert served_env[ENV] == server.path
    alone_env = {k: v for k, v in os.environ.items() if k != ENV}
    served = fedkd([*TRAIN, "--out", "served"], served_env, tmp_path)
    alone = fedkd([*TRAIN, "--out", "alone"], alone_env, tmp_path)
    assert served.returncode == alone.returncode == 0, served.stderr
    # the sender's stdout and stderr are the command's
    assert served.stdout.replace("served", "alone") == alone.stdout
    assert "complete: best acc" in served.stdout and "round 1/1" in served.stderr
    a = pd.read_parquet(tmp_path / "served" / "metrics.parquet")
    b = pd.read_parquet(tmp_path / "alone" / "metrics.parquet")
    assert a["test_acc"].tolist() == b["test_acc"].tolist()
    assert a["train_loss"].tolist() == b["train_loss"].tolist()
    # a bad spec: the same error and exit code as in its own process
    bad = fedkd(["train", "--out", "x", "--dataset", "nope"], served_env, tmp_path)
    assert bad.returncode == 2 and "dataset='nope' is unknown" in bad.stderr


def test_a_killed_sender_takes_its_command_with_it(server, tmp_path):
    sender = subprocess.Popen(
        [sys.executable, "-m", "fedkd", *TRAIN, "--rounds", "200", "--out", "long"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    metrics = tmp_path / "long" / "metrics.parquet"
    deadline = time.monotonic() + 60
    while not metrics.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert metrics.exists(), "the served run never wrote a round"
    sender.send_signal(signal.SIGKILL)
    sender.wait()
    rounds = len(pd.read_parquet(metrics))
    time.sleep(3)  # the server notices within half a second, then the child is gone
    assert len(pd.read_parquet(metrics)) <= rounds + 1
    assert rounds < 200


def test_without_a_server_commands_run_in_their_own_process(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, str(tmp_path / "no-such.sock"))
    assert run_remote(["train", "--help"]) is None
    monkeypatch.delenv(ENV)
    assert run_remote(["train", "--help"]) is None
    monkeypatch.setenv(ENV, "off")
    assert not ForkServer().start()


def test_a_sender_from_another_python_environment_is_refused(server, monkeypatch):
    monkeypatch.setattr(sys, "prefix", "/another/venv")
    assert run_remote(["train", "--help"]) is None


def test_stop_removes_the_socket_and_the_variable(tmp_path):
    fs = ForkServer(log=tmp_path / "log")
    assert fs.start()
    path = Path(fs.path)
    assert path.exists() and os.environ[ENV] == str(path)
    fs.stop()
    assert not path.exists() and ENV not in os.environ


def test_on_a_machine_with_an_nvidia_gpu_it_starts_only_on_request(monkeypatch, tmp_path):
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: p == "/dev/nvidiactl" or real_exists(p))
    monkeypatch.delenv(ENV, raising=False)
    assert not ForkServer(log=tmp_path / "log").start()
    assert ENV not in os.environ


def test_a_server_whose_workflow_died_ends_and_leaves_nothing(tmp_path):
    """The workflow process killed outright (no stop()): the server notices its parent is gone,
    ends, and removes its socket and directory."""
    code = (
        "import os, sys, time; from fedkd.forkserver import ForkServer; "
        f"fs = ForkServer(log={str(tmp_path / 'log')!r}); assert fs.start(); "
        "print(fs.path, fs.proc.pid, flush=True); time.sleep(60)"
    )
    workflow = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    path, _ = workflow.stdout.readline().split()
    assert Path(path).exists()
    workflow.kill()
    workflow.wait()
    deadline = time.monotonic() + 10
    while Path(path).parent.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    # removed by the server on its way out: it saw its parent go and left its loop
    assert not Path(path).parent.exists()


# --------------------------------------------------------------------------- hostile requests
@pytest.fixture(scope="module")
def bare_server(tmp_path_factory):
    """A server with a short request timeout, on its own socket; its log is its stderr."""
    folder = tmp_path_factory.mktemp("bare")
    path, log = folder / "s.sock", folder / "server.log"
    code = f"from fedkd.forkserver import serve; serve({str(path)!r}, request_timeout=2.0)"
    proc = serving(code, path, log)
    yield path, log, proc
    proc.terminate()
    proc.wait(10)


def serving(code: str, path: Path, log: Path, env: dict | None = None) -> subprocess.Popen:
    """``python -c code`` (a server on ``path``, its stderr to ``log``), once it listens."""
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", code], stderr=err, env=env)
    deadline = time.monotonic() + 120
    while not path.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert path.exists(), log.read_text()
    return proc


def _connect(path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(15)
    sock.connect(str(path))
    return sock


def _ask(path, body: bytes, size: int | None = None) -> str:
    """Send the descriptors, a length header (``size``, default the body's) and ``body``; the
    server's first reply line."""
    with _connect(path) as sock:
        socket.send_fds(sock, [b"R"], [0, 1, 2])
        sock.sendall(struct.pack("!I", len(body) if size is None else size) + body)
        return sock.makefile("r").readline()


def _request(**fields) -> bytes:
    """A request as run_remote builds it (from this process), with ``fields`` replaced."""
    base = {
        "argv": ["train", "--help"], "cwd": os.getcwd(), "env": dict(os.environ),
        "prefix": sys.prefix, "argv0": "fedkd", "path": sys.path, "cpus": _cpus(),
        "interpreter": _interpreter(),
    }  # fmt: skip
    return json.dumps({**base, **fields}).encode()


def _served(env_path, cwd) -> subprocess.CompletedProcess:
    """`fedkd train --help` sent to the server (its log names it: it was not run locally)."""
    env = {**os.environ, ENV: str(env_path)}
    return subprocess.run(
        [sys.executable, "-m", "fedkd", "train", "--help"], env=env, cwd=cwd,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_an_idle_connection_delays_no_other_request_and_is_closed(bare_server, tmp_path):
    path, log, proc = bare_server
    idle = _connect(path)  # connects and sends nothing (before: every request waited on it)
    half = _connect(path)
    socket.send_fds(half, [b"R"], [0, 1, 2])  # the descriptors, then nothing more
    started = time.monotonic()
    served = _served(path, tmp_path)
    assert served.returncode == 0 and "--out" in served.stdout
    assert time.monotonic() - started < 30
    # both are closed after the request timeout (2 s here), with the reason
    for sock in (idle, half):
        assert sock.makefile("r").readline().startswith("refused: no complete request in 2 s")
        assert sock.recv(1) == b""
        sock.close()
    assert proc.poll() is None
    assert "fedkd train --help" in log.read_text()


def test_a_huge_header_is_refused_unread(bare_server):
    path, _, proc = bare_server
    reply = _ask(path, b"", size=0xFFFF_FFFF)
    assert reply.startswith("refused: a request of 4294967295 bytes; at most")
    assert proc.poll() is None


MALFORMED = [
    (b"[1, 2]", "a JSON list, not an object"),
    (b"{not json", "not JSON"),
    (json.dumps({"cwd": "/", "env": {}, "prefix": sys.prefix}).encode(), "'argv' must be"),
    (_request(argv=[1, 2]), "'argv' must be"),
    (_request(argv=["status", "results/runs"]), "command 'status' is not served"),
    (_request(argv=["forkserver", "--socket", "/tmp/x"]), "command 'forkserver' is not"),
    (_request(cwd="relative"), "'cwd' must be an absolute path"),
    (_request(env=["PATH"]), "'env' must map"),
    (_request(env={"A": 1}), "'env' must map"),
    (_request(path="/usr/lib"), "'path' must be the sender's sys.path"),
    (_request(argv0=None), "'argv0' must be"),
    (_request(cpus=[-1]), "'cpus' must be a list of CPU numbers"),
    (_request(cpus=[10_000]), "another CPU affinity"),
    (_request(interpreter=[[9], [], {}]), "another interpreter setting"),
    # read once as Python or OpenMP start: the server's reading would stand in the child
    (_request(env={**os.environ, "PYTHONHASHSEED": "7"}), "PYTHONHASHSEED differs"),
    (_request(env={**os.environ, "OMP_PROC_BIND": "true"}), "OMP_PROC_BIND differs"),
]


# named by the reason: a request's body holds this environment, which differs between processes
@pytest.mark.parametrize("body, why", MALFORMED, ids=[why for _, why in MALFORMED])
def test_a_malformed_request_is_refused_and_the_server_goes_on(bare_server, body, why):
    path, _, proc = bare_server
    assert _ask(path, body).startswith(f"refused: {why}")
    assert proc.poll() is None


def test_bad_requests_leave_a_running_command_alone(bare_server, tmp_path):
    """Before, a body [1, 2] crashed the server, which ended the running `fedkd train`."""
    path, _, proc = bare_server
    env = {**os.environ, ENV: str(path)}
    sender = subprocess.Popen(
        [sys.executable, "-m", "fedkd", *TRAIN, "--out", "run"], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (tmp_path / "run" / "run.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (tmp_path / "run" / "run.json").exists(), "the served run never started"
    for body in (b"[1, 2]", json.dumps({"cwd": "/"}).encode(), b"\xff"):
        assert _ask(path, body).startswith("refused:")
    out, err = sender.communicate(timeout=120)
    assert sender.returncode == 0, err
    assert "complete: best acc" in out
    rounds = int(TRAIN[TRAIN.index("--rounds") + 1])
    assert len(pd.read_parquet(tmp_path / "run" / "metrics.parquet")) == rounds
    assert proc.poll() is None


def test_the_served_commands_are_the_ones_the_workflow_runs():
    import re

    from fedkd import cli
    from fedkd.forkserver import SERVED

    rules = (Path(__file__).parents[1] / "workflow" / "rules").glob("*.smk")
    sent = {m for f in rules for m in re.findall(r"\bfedkd ([a-z]+) ", f.read_text())}
    assert sent == set(SERVED)
    assert cli.SERVED is SERVED


# --------------------------------------------------------------------------- a server that dies
def _state(pid: int) -> str | None:
    """The state letter /proc gives process ``pid`` (Z: ended, not yet reaped), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return None


@pytest.fixture
def start_server():
    """Start ``fedkd forkserver --socket PATH`` in a directory; it is stopped after the test."""
    started = []

    def start(path: Path, log: Path, cwd: Path) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k != ENV}
        with open(log, "w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "fedkd", "forkserver", "--socket", str(path)], cwd=cwd,
                env=env, stderr=err,
            )  # fmt: skip
        started.append(proc)
        deadline = time.monotonic() + 120
        while "ready on" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        assert "ready on" in log.read_text(), log.read_text()
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)


@pytest.mark.slow
def test_a_killed_server_takes_its_command_with_it_and_the_run_resumes_at_once(
    start_server, tmp_path
):
    """Before, the child trained on after `kill -9` of the server; the sender exited 1 at once,
    and a retry was refused as "being written by another run"."""
    path = tmp_path / "s.sock"
    server = start_server(path, tmp_path / "server.log", tmp_path)
    args = [*TRAIN, "--rounds", "2", "--out", "run"]
    sender = subprocess.Popen(
        [sys.executable, "-m", "fedkd", *args], cwd=tmp_path, env={**os.environ, ENV: str(path)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    record = tmp_path / "run" / "run.json"
    deadline = time.monotonic() + 120
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert record.exists(), "the served run never started"
    child = json.loads(record.read_text())["process"]["pid"]
    assert child not in (sender.pid, server.pid) and _state(child) not in (None, "Z")
    server.send_signal(signal.SIGKILL)
    server.wait()
    out, err = sender.communicate(timeout=120)
    # the sender is gone only once its command is: nothing of the run is left running
    assert _state(child) in (None, "Z", "X")
    assert sender.returncode == 1
    assert "the fork server ended while running this command" in err and f"pid {child}" in err
    assert "complete:" not in out  # it was killed mid-run
    # resumable at once: the lock went with the child
    alone = {k: v for k, v in os.environ.items() if k != ENV}
    fresh = fedkd(args, alone, tmp_path, timeout=600)
    assert fresh.returncode == 0, fresh.stderr
    assert "complete: best acc" in fresh.stdout
    assert len(pd.read_parquet(tmp_path / "run" / "metrics.parquet")) == 2


def test_a_sender_that_loses_its_server_exits_only_after_its_command(tmp_path):
    """A stand-in server starts no command: it names a process of this test as the command,
    then goes. The sender must wait for that process's end (Snakemake would otherwise see the
    job end while the command still writes), then exit 1 saying what happened."""
    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    command = subprocess.Popen(["sleep", "60"])
    code = "import sys; from fedkd.forkserver import run_remote; sys.exit(run_remote(['train']))"
    sender = subprocess.Popen(
        [sys.executable, "-c", code], env={**os.environ, ENV: str(path)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    listener.settimeout(60)
    conn, _ = listener.accept()
    with conn:  # read the request whole, as a server does, and answer with the "command"
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        for fd in fds:
            os.close(fd)
        (size,) = struct.unpack("!I", conn.recv(4, socket.MSG_WAITALL))
        assert json.loads(conn.recv(size, socket.MSG_WAITALL))["argv"] == ["train"]
        conn.sendall(f"{command.pid}\n".encode())
    # and the server is gone
    listener.close()
    with pytest.raises(subprocess.TimeoutExpired):
        sender.wait(timeout=3)  # the command still runs: so does its sender
    command.kill()
    command.wait()
    _, err = sender.communicate(timeout=30)
    assert sender.returncode == 1
    assert (
        f"the fork server ended while running this command; its process (pid {command.pid})" in err
    )


@pytest.mark.slow
def test_a_stopped_server_ends_its_commands_and_passes_their_exit_codes_on(start_server, tmp_path):
    path = tmp_path / "s.sock"
    server = start_server(path, tmp_path / "server.log", tmp_path)
    sender = subprocess.Popen(
        [sys.executable, "-m", "fedkd", *TRAIN, "--rounds", "200", "--out", "run"], cwd=tmp_path,
        env={**os.environ, ENV: str(path)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (tmp_path / "run" / "run.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "run" / "run.json").exists(), "the served run never started"
    server.terminate()
    assert server.wait(30) == 0
    _, err = sender.communicate(timeout=60)
    assert sender.returncode == 128 + signal.SIGTERM, err  # as the shell reports a SIGTERM
    assert "the fork server ended" not in err
    assert not path.exists()


# --------------------------------------------------------------------------- as a fresh process
@pytest.mark.slow
@pytest.mark.parametrize(
    "variables",
    [{"OMP_NUM_THREADS": "0"}, {"OMP_NUM_THREADS": "999999"}, {"MKL_NUM_THREADS": "1"}],
    ids=["omp-0", "omp-999999", "mkl-1"],
)
def test_a_served_command_runs_on_the_threads_a_fresh_process_would(server, tmp_path, variables):
    """Before, OMP_NUM_THREADS=0 crashed a served command (torch.set_num_threads(0)), 999999
    failed to allocate, and MKL_NUM_THREADS was not read at all; a fresh process runs each."""
    # the case's variables alone: a thread count inherited (a test worker's) would decide instead
    inherited = {
        k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    }
    env = {**inherited, **variables}
    alone = {k: v for k, v in env.items() if k != ENV}
    fresh = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=alone,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr
    log = Path(server.log)
    started = log.read_text().count(": fedkd train")
    served = fedkd([*TRAIN, "--out", "run"], env, tmp_path, timeout=600)
    assert served.returncode == 0, served.stderr
    assert log.read_text().count(": fedkd train") == started + 1  # it ran in the server
    device = json.loads((tmp_path / "run" / "run.json").read_text())["device"]["name"]
    assert device.endswith(f", {int(fresh.stdout)} threads)"), device


def test_a_served_command_imports_fedkd_from_the_senders_path_not_the_servers_directory(
    start_server, tmp_path
):
    """Before, the child kept the server's sys.path, whose first entry is the directory the
    server started in: a `fedkd/` folder there replaced the installed package."""
    start, work = tmp_path / "start", tmp_path / "work"
    start.mkdir()
    work.mkdir()
    path, log = tmp_path / "s.sock", tmp_path / "server.log"
    server = start_server(path, log, start)  # `python -m`: sys.path[0] is `start`
    (start / "fedkd").mkdir()
    (start / "fedkd" / "__init__.py").write_text("raise SystemExit('the wrong fedkd')\n")
    served = _served(path, work)
    assert served.returncode == 0, served.stderr
    assert "--out" in served.stdout and "the wrong fedkd" not in served.stderr
    assert "fedkd train --help" in log.read_text()
    server.terminate()
    server.wait(30)
    assert not path.exists()  # its own socket, removed on the way out


def test_a_sender_the_server_cannot_stand_in_for_runs_in_its_own_process(bare_server, tmp_path):
    """A hash seed differs (read once, as Python starts): the child would hash as the server
    does, so the command runs in the sender's own process, with the sender's seed."""
    path, log, _ = bare_server
    env = {**os.environ, ENV: str(path), "PYTHONHASHSEED": "123"}
    code = "from fedkd.forkserver import run_remote; print(run_remote(['train', '--help']))"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "None"  # refused: the caller runs it itself
    assert "refused a request: PYTHONHASHSEED differs" in log.read_text()


# --------------------------------------------------------------------------- the socket path
def test_a_path_that_is_not_a_socket_is_refused_and_left_alone(tmp_path):
    existing = tmp_path / "existing.txt"
    existing.write_text("kept\n")
    env = {k: v for k, v in os.environ.items() if k != ENV}
    proc = fedkd(["forkserver", "--socket", "existing.txt"], env, tmp_path, timeout=120)
    assert proc.returncode == 2
    assert "--socket existing.txt exists and is not a socket" in proc.stderr
    assert existing.read_text() == "kept\n"
    # nor a directory, nor a link (even to a socket)
    (tmp_path / "folder").mkdir()
    with pytest.raises(SocketPathError, match="exists and is not a socket"):
        serve(str(tmp_path / "folder"))
    (tmp_path / "link").symlink_to(existing)
    with pytest.raises(SocketPathError, match="exists and is not a socket"):
        serve(str(tmp_path / "link"))
    assert (tmp_path / "folder").is_dir() and (tmp_path / "link").is_symlink()


def test_a_live_servers_path_is_refused_and_that_server_goes_on(bare_server, tmp_path):
    """Before, a second server unlinked the first one's socket and took its path."""
    path, _, proc = bare_server
    inode = os.stat(path).st_ino
    with pytest.raises(SocketPathError, match="another fork server listens there"):
        serve(str(path))
    assert os.stat(path).st_ino == inode and proc.poll() is None
    served = _served(path, tmp_path)
    assert served.returncode == 0 and "--out" in served.stdout


def test_a_server_takes_a_dead_servers_socket_and_removes_only_its_own(start_server, tmp_path):
    """Before, a server on its way out unlinked whatever was at its path: the socket of the
    server that had taken the path since."""
    path = tmp_path / "s.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))  # a socket nobody listens on: a server killed before it could remove it
    dead.close()
    server = start_server(path, tmp_path / "server.log", tmp_path)
    assert _served(path, tmp_path).returncode == 0
    # another socket takes the path while this server runs
    os.unlink(path)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(path))
    other.listen(1)
    inode = os.stat(path).st_ino
    server.terminate()
    assert server.wait(30) == 0
    assert path.exists() and os.stat(path).st_ino == inode  # left to its owner
    other.close()


def test_a_commands_end_reaches_its_sender_at_once_not_at_the_servers_next_look(tmp_path):
    """The server waits for activity up to LOOP_TIMEOUT at a time; a command's exit must wake it
    (its pidfd), or every job would wait for the next look. With the wait set to 120 s, a command
    that fails at once must still come back long before."""
    sock = tmp_path / "fs.sock"
    code = "import sys, fedkd.forkserver as f; f.LOOP_TIMEOUT = 120.0; f.serve(sys.argv[1])"
    log = tmp_path / "server.log"
    with log.open("w") as err:
        server = subprocess.Popen([sys.executable, "-c", code, str(sock)], stderr=err)
    try:
        deadline = time.monotonic() + 120
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sock.exists(), "the server did not start"
        # the socket is bound before the imports end: wait until it answers a command
        env = {**os.environ, ENV: str(sock)}
        start = time.monotonic()
        sent = fedkd(["train", "--rounds", "abc"], env, tmp_path, timeout=100)
        assert sent.returncode == 2 and "--out" in sent.stderr
        assert time.monotonic() - start < 100
        started = time.monotonic()
        again = fedkd(["train", "--rounds", "abc"], env, tmp_path, timeout=60)
        assert again.returncode == 2
        assert time.monotonic() - started < 60  # not the 120 s look
        # both were served (not run by their senders for want of a server)
        assert log.read_text().count("exit 2") == 2, log.read_text()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_variable_a_preloaded_library_sets_on_import_is_the_childs_too_and_refuses_nothing(
    tmp_path,
):
    """On a GPU machine a library the server preloads set KMP_DUPLICATE_LIB_OK as it was
    imported: every sender (which had not imported it yet) was refused as if its own value
    differed. The server now compares with its environment as it started, and the child gets
    what the import set or removed, as a fresh process importing it would, except a variable
    the sender set to a value of its own (the import might have decided otherwise: kept)."""
    modules, fake, work = tmp_path / "modules", tmp_path / "fake", tmp_path / "work"
    for folder in (modules, fake / "fedkd", work):
        folder.mkdir(parents=True)
    (modules / "sets_variables_on_import.py").write_text(
        "import os\nos.environ['KMP_DUPLICATE_LIB_OK'] = 'TRUE'\n"
        "os.environ['SET_ON_IMPORT'] = '1'\nos.environ['OWN_VALUE'] = '1'\n"
        "os.environ.pop('REMOVED_ON_IMPORT', None)\n"
    )
    # the command the child runs: fedkd as found on the sender's path, here one that writes
    # its environment down
    (fake / "fedkd" / "__init__.py").write_text("")
    (fake / "fedkd" / "__main__.py").write_text(
        "import json, os\nopen('env.json', 'w').write(json.dumps(dict(os.environ)))\n"
    )
    path, log = tmp_path / "s.sock", tmp_path / "server.log"
    code = (
        f"import sys; sys.path.insert(0, {str(modules)!r}); import fedkd.forkserver as f; "
        f"f.PRELOAD += ('sets_variables_on_import',); f.serve({str(path)!r})"
    )
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "KMP_DUPLICATE_LIB_OK")}
    env["REMOVED_ON_IMPORT"] = "1"
    server = serving(code, path, log, env)
    try:
        send = (
            f"import sys; from fedkd.forkserver import run_remote; "
            f"sys.path.insert(0, {str(fake)!r}); print(run_remote(['train']))"
        )
        proc = subprocess.run(
            [sys.executable, "-c", send], env={**env, ENV: str(path), "OWN_VALUE": "mine"},
            cwd=work,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "refused" not in log.read_text(), log.read_text()
        assert proc.stdout.strip() == "0"  # served: the child's exit code
        child_env = json.loads((work / "env.json").read_text())
        assert child_env["KMP_DUPLICATE_LIB_OK"] == "TRUE"
        assert child_env["SET_ON_IMPORT"] == "1"
        assert "REMOVED_ON_IMPORT" not in child_env
        assert child_env["OWN_VALUE"] == "mine"
    finally:
        server.terminate()
        server.wait(30)
