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

from fedkd.forkserver import ENV, ForkServer, run_remote

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
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", code], stderr=err)
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert path.exists(), log.read_text()
    yield path, log, proc
    proc.terminate()
    proc.wait(10)


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
    base = {"argv": ["train", "--help"], "cwd": os.getcwd(), "env": {}, "prefix": sys.prefix}
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


@pytest.mark.parametrize(
    "body, why",
    [
        (b"[1, 2]", "a JSON list, not an object"),
        (b"{not json", "not JSON"),
        (json.dumps({"cwd": "/", "env": {}, "prefix": sys.prefix}).encode(), "'argv' must be"),
        (_request(argv=[1, 2]), "'argv' must be"),
        (_request(argv=["status", "results/runs"]), "command 'status' is not served"),
        (_request(argv=["forkserver", "--socket", "/tmp/x"]), "command 'forkserver' is not"),
        (_request(cwd="relative"), "'cwd' must be an absolute path"),
        (_request(env=["PATH"]), "'env' must map"),
        (_request(env={"A": 1}), "'env' must map"),
    ],
)
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
