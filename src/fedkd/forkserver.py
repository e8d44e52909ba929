"""A faster start for the workflow's jobs on one machine: a server process that has imported the
heavy libraries (torch, numpy, pyarrow, pandas, DistilBERT's modules) once, and forks a child
for each ``fedkd`` command sent to it. The child runs the command exactly as a fresh process would: the sender's argv,
working directory, environment and stdin/stdout/stderr (passed as file descriptors), and fedkd's
own modules imported afresh from disk, so an edited source file is seen at once. The sender waits
and exits with the child's exit code; a signal to the sender is passed to the child, and a sender
that dies (even by SIGKILL) takes its child with it.

Used by the Snakefile on local executions: ``fedkd forkserver`` starts with the workflow and ends
with it (or when its parent process goes away); `fedkd` commands find it through the environment
variable FEDKD_FORKSERVER (a Unix socket path). Without it, or when it cannot be reached, a
command runs in its own process as usual. The server never runs torch code itself, so no thread
pool or CUDA context exists when it forks.
"""

from __future__ import annotations

import json
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

ENV = "FEDKD_FORKSERVER"
# the fedkd commands the workflow's rules send (workflow/rules/*.smk); the server runs no other
SERVED = ("train", "partition", "aggregate", "render", "features")
# a request (argv, working directory, environment) larger than this is refused unread: the
# environment of a cluster job is tens of kB
MAX_REQUEST = 4 << 20
# a connection that has not sent its whole request within this many seconds is closed
REQUEST_TIMEOUT = 10.0
# connections still sending their request, at most; further ones are closed at once
MAX_PENDING = 64
PRELOAD = ("torch", "numpy", "pyarrow", "pyarrow.parquet", "pandas", "yaml")
# the text runs' model (about 1 s more to import), where transformers is installed
PRELOAD_OPTIONAL = ("transformers.models.distilbert.modeling_distilbert",)
_HEADER = struct.Struct("!I")


# ----------------------------------------------------------------------------- the sender
def run_remote(argv: list[str]) -> int | None:
    """Run ``fedkd argv`` in a child of the server named by FEDKD_FORKSERVER and return its exit
    code, or None when there is no server to reach (the caller then runs it itself)."""
    path = os.environ.get(ENV)
    if not path:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = json.dumps(
            {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "prefix": sys.prefix}
        ).encode()
        socket.send_fds(sock, [b"R"], [0, 1, 2])
        sock.sendall(_HEADER.pack(len(request)) + request)
        reply = sock.makefile("r")
        pid = int(reply.readline())  # not a number: refused (another Python environment)
    except (OSError, ValueError):
        sock.close()
        return None

    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    line = reply.readline()
    sock.close()
    if not line.startswith("exit "):
        print(f"fedkd: the fork server lost command {argv[:1]} (pid {pid})", file=sys.stderr)
        return 1
    code = int(line.split()[1])
    return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N


# ----------------------------------------------------------------------------- the server
def serve(
    path: str,
    parent: int | None = None,
    idle_exit: float | None = None,
    own_dir: bool = False,
    request_timeout: float = REQUEST_TIMEOUT,
) -> None:
    """Serve on the Unix socket ``path`` until the process ``parent`` is gone (checked twice a
    second) or, with no command running, nothing was asked for ``idle_exit`` seconds; with
    ``own_dir`` the socket's (empty) directory is removed on the way out too.

    Requests are read without blocking, each connection at its own pace, so a slow or idle one
    delays nothing; one that has not sent its whole request within ``request_timeout`` seconds
    is closed. A request that is too large, malformed or for a command not in ``SERVED`` is
    answered with a "refused: ..." line and closed; the server and its running commands go on."""
    # stopped with SIGTERM: end the running commands and remove the socket on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    for name in PRELOAD:
        __import__(name)
    for name in PRELOAD_OPTIONAL:
        try:
            __import__(name)
        except ImportError:
            pass
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    _log(f"ready on {path} (pid {os.getpid()})")
    children: dict[int, socket.socket] = {}  # pid → its sender's connection
    pending: dict[socket.socket, _Request] = {}  # connections still sending their request
    last = time.monotonic()
    try:
        while True:
            if parent is not None and os.getppid() != parent:
                break
            now = time.monotonic()
            if idle_exit is not None and not children and not pending and now - last > idle_exit:
                break
            for conn in [c for c, r in pending.items() if now > r.deadline]:
                _refuse(conn, pending.pop(conn), f"no complete request in {request_timeout:g} s")
            ready, _, _ = select.select([listener, *pending, *children.values()], [], [], 0.5)
            for s in ready:
                if s is listener:
                    conn, _ = listener.accept()
                    last = time.monotonic()
                    if len(pending) >= MAX_PENDING:
                        conn.close()
                        continue
                    conn.setblocking(False)
                    pending[conn] = _Request(last + request_timeout)
                elif s in pending:
                    _advance(s, pending, listener, children)
                    last = time.monotonic()
                else:  # a sender sends nothing more: readable means it went away
                    pid = next(p for p, c in children.items() if c is s)
                    _kill(pid)
            _reap(children)
    finally:
        for pid in children:
            _kill(pid)
        for conn, request in pending.items():
            request.close_fds()
            conn.close()
        listener.close()
        if os.path.exists(path):
            os.unlink(path)
        if own_dir:  # the private directory the workflow made for the socket
            try:
                os.rmdir(os.path.dirname(path))
            except OSError:
                pass


class _Request:
    """A request being received: the sender's three descriptors, then a length header and JSON."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.fds: list[int] | None = None
        self.data = bytearray()

    def close_fds(self) -> None:
        for fd in self.fds or []:
            os.close(fd)
        self.fds = []


class _Refused(Exception):
    pass


def _advance(conn: socket.socket, pending: dict, listener: socket.socket, children: dict) -> None:
    """Read what ``conn`` has sent; once its request is whole, check it and start the command."""
    request = pending[conn]
    try:
        try:
            if request.fds is None:
                # the descriptors come with the first byte, on their own
                msg, fds, _, _ = socket.recv_fds(conn, 1, 3)
                request.fds = list(fds)
                if not msg:
                    raise _Refused("closed before sending a request")
                if msg != b"R" or len(fds) != 3:
                    raise _Refused("a request starts with stdin, stdout and stderr")
                return
            have = len(request.data)
            size = _HEADER.unpack_from(request.data)[0] if have >= _HEADER.size else None
            want = _HEADER.size - have if size is None else _HEADER.size + size - have
            chunk = conn.recv(min(want, 1 << 16))
        except BlockingIOError:
            return
        if not chunk:
            raise _Refused("closed before sending its whole request")
        request.data += chunk
        if size is None and len(request.data) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(request.data)
            if size > MAX_REQUEST:
                raise _Refused(f"a request of {size} bytes; at most {MAX_REQUEST} are read")
        if size is None or len(request.data) < _HEADER.size + size:
            return
        body = _check_request(bytes(request.data[_HEADER.size :]))
    except _Refused as why:
        _refuse(conn, pending.pop(conn), str(why))
        return
    except OSError as exc:
        _refuse(conn, pending.pop(conn), f"connection error ({exc})")
        return
    del pending[conn]
    conn.setblocking(True)
    pid = _start(conn, body, request.fds, listener, children, pending)
    if pid is not None:
        children[pid] = conn


def _check_request(raw: bytes) -> dict:
    """The request as the sender (``run_remote``) builds it, or ``_Refused`` saying what is wrong."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise _Refused(f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(body, dict):
        raise _Refused(f"a JSON {type(body).__name__}, not an object")
    argv, cwd, env, prefix = (body.get(k) for k in ("argv", "cwd", "env", "prefix"))
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise _Refused("'argv' must be a non-empty list of strings")
    if argv[0] not in SERVED:
        raise _Refused(f"command {argv[0][:40]!r} is not served; served: {', '.join(SERVED)}")
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise _Refused("'cwd' must be an absolute path")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
        for k, v in env.items()
    ):
        raise _Refused("'env' must map variable names to strings")
    if any("\0" in a for a in [*argv, cwd]):
        raise _Refused("argv and cwd may not contain NUL characters")
    if prefix != sys.prefix:  # the libraries here are not the sender's
        raise _Refused("another Python environment")
    return body


def _refuse(conn: socket.socket, request: _Request, why: str) -> None:
    request.close_fds()
    _log(f"refused a request: {why}")
    try:
        conn.setblocking(True)
        conn.settimeout(1.0)
        conn.sendall(f"refused: {why}\n".encode())
    except OSError:
        pass
    conn.close()


def _start(
    conn: socket.socket,
    request: dict,
    fds: list[int],
    listener: socket.socket,
    children: dict,
    pending: dict,
) -> int | None:
    pid = os.fork()
    if pid == 0:  # the child: become the command
        listener.close()
        for c in children.values():
            c.close()
        for c, other in pending.items():  # requests still arriving belong to the server
            other.close_fds()
            c.close()
        conn.close()
        _run_child(request, fds)
    for fd in fds:
        os.close(fd)
    _log(f"pid {pid}: fedkd {' '.join(request['argv'][:3])}")
    try:
        conn.sendall(f"{pid}\n".encode())
    except OSError:
        _kill(pid)
    return pid


def _run_child(request: dict, fds: list[int]) -> None:
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(
                sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            )
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.pop(ENV, None)  # the command runs here, not in yet another child
        # fedkd itself from disk, as a fresh process would import it (the server holds only
        # this module, which may be older than the sources)
        for name in [m for m in sys.modules if m == "fedkd" or m.startswith("fedkd.")]:
            del sys.modules[name]
        import torch

        threads = os.environ.get("OMP_NUM_THREADS")
        if threads and threads.isdigit():
            torch.set_num_threads(int(threads))
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the descriptors outlive this frame
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        sys.argv = ["fedkd", *request["argv"]]
        # as `python -m fedkd ...` runs it: fedkd.__main__ ends in SystemExit with the exit code
        # (and the server itself never imports the CLI, which imports the server)
        runpy.run_module("fedkd", run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # reported as a fresh process would, then the exit code
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _log(message: str) -> None:
    """One line in the server's log (its stderr): what it started and how that ended."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _recv_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("the sender closed the connection")
        data += chunk
    return data


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        _log(f"pid {pid}: exit {code}")
        try:
            conn.sendall(f"exit {code}\n".encode())
        except OSError:
            pass
        conn.close()


# ----------------------------------------------------------------------------- the workflow's side
class ForkServer:
    """The workflow's fork server: ``start()`` launches ``fedkd forkserver`` as a child of this
    process and sets FEDKD_FORKSERVER for the jobs it starts; ``stop()`` ends it.
    FEDKD_FORKSERVER=off in the environment keeps it from starting; on a machine with an NVIDIA
    GPU it starts only with FEDKD_FORKSERVER=on (tests/gpu checks it there)."""

    def __init__(self, log: str | os.PathLike | None = None, wait: float = 30.0):
        self.log, self.wait = log, wait
        self.proc = None
        self.path: str | None = None

    def start(self) -> bool:
        """Start it; False (and the jobs start as usual) when it does not listen within ``wait``
        seconds."""
        wanted = os.environ.get(ENV)
        if wanted == "off":
            return False
        # Forking after CUDA is initialised breaks CUDA in the child; the server runs no CUDA
        # code, but this path has not been run on a GPU machine yet: there, only on request
        if wanted != "on" and os.path.exists("/dev/nvidiactl"):
            return False
        self.path = os.path.join(tempfile.mkdtemp(prefix="fedkd-"), "forkserver.sock")
        if self.log:
            os.makedirs(os.path.dirname(os.path.abspath(self.log)), exist_ok=True)
        err = open(self.log, "a") if self.log else subprocess.DEVNULL  # noqa: SIM115
        cmd = [sys.executable, "-m", "fedkd", "forkserver", "--socket", self.path]
        # a CUDA availability check in an imported library asks NVML, not the CUDA runtime,
        # so the server never initialises CUDA before it forks
        env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
        env.pop(ENV, None)
        self.proc = subprocess.Popen(
            [*cmd, "--parent", str(os.getpid()), "--own-dir"],
            stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True, env=env,
        )  # fmt: skip
        if self.log:
            err.close()  # the server holds its own copy
        deadline = time.monotonic() + self.wait
        while time.monotonic() < deadline and self.proc.poll() is None:
            if os.path.exists(self.path):
                os.environ[ENV] = self.path
                return True
            time.sleep(0.05)
        self.stop()
        return False

    def stop(self) -> None:
        """End the server (it removes its socket and directory itself; here too in case it was
        killed or never listened)."""
        os.environ.pop(ENV, None)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.path:
            for remove, leftover in (
                (os.unlink, self.path),
                (os.rmdir, os.path.dirname(self.path)),
            ):
                try:
                    remove(leftover)
                except OSError:
                    pass
        self.proc = None
