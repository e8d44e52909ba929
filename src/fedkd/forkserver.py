"""A faster start for the workflow's jobs on one machine: a server process that has imported the
heavy libraries (torch, numpy, pyarrow, pandas, DistilBERT's modules) once, and forks a child
for each ``fedkd`` command sent to it. The child runs the command exactly as a fresh process
would: the sender's argv, working directory, environment, ``sys.path`` and stdin/stdout/stderr
(passed as file descriptors), torch's thread count as a fresh process would set it from the
environment, and fedkd's own modules imported afresh from disk, so an edited source file is seen
at once. A sender whose interpreter flags, CPU affinity or load-time environment (variables read
once when Python or the libraries start, such as PYTHONHASHSEED or OMP_PROC_BIND) differ from the
server's is refused and runs the command in its own process.

The sender waits and exits with the child's exit code; a signal to the sender is passed to the
child, and a sender that dies (even by SIGKILL) takes its child with it. A server that dies (even
by SIGKILL) takes its children with it (a parent-death signal), and their senders wait for that
end before they exit 1, so no command outlives the job that started it.

Used by the Snakefile on local executions: ``fedkd forkserver`` starts with the workflow and ends
with it (or when its parent process goes away); `fedkd` commands find it through the environment
variable FEDKD_FORKSERVER (a Unix socket path). Without it, or when it cannot be reached, a
command runs in its own process as usual. The server listens only on a path that is free or holds
a dead server's socket, and removes only the socket it created. The server never runs torch code
itself, so no thread pool or CUDA context exists when it forks.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import math
import os
import runpy
import select
import signal
import socket
import stat
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
# Environment variables that Python, OpenMP or MKL read once, as they start: a forked child keeps
# the server's reading of them, so a sender whose values differ runs in its own process ...
LOAD_TIME_PREFIXES = ("PYTHON", "OMP_", "GOMP_", "KMP_", "MKL_")
LOAD_TIME_NAMES = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
# ... except these: the thread counts (the child sets torch's as a fresh process would), the
# module search path (the child takes the sender's sys.path) and two read only when used
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
APPLIED_IN_CHILD = (*THREAD_VARIABLES, "PYTHONPATH", "PYTHONBREAKPOINT", "PYTHONSTARTUP")
# a fresh interpreter tells the thread count torch starts with under a request's thread
# variables (once per distinct setting); one that has not answered in this time is stopped
PROBE = "import torch; print(torch.get_num_threads())"
# the server loop's wait for activity: how often it looks at deadlines and its parent (a
# command's end wakes it at once, through the command's pidfd)
LOOP_TIMEOUT = 0.5
PROBE_TIMEOUT = 180.0
# once the server is stopped, how long it waits for its children's end to report their codes
STOP_WAIT = 5.0
_HEADER = struct.Struct("!I")
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class SocketPathError(ValueError):
    """The socket path is taken: not a socket, or a live server's."""


# ----------------------------------------------------------------------------- the sender
def run_remote(argv: list[str]) -> int | None:
    """Run ``fedkd argv`` in a child of the server named by FEDKD_FORKSERVER and return its exit
    code, or None when there is no server to reach or it refuses (the caller then runs it
    itself). A server lost while the command runs: its child ends with it; this waits for that
    end, says so and returns 1."""
    path = os.environ.get(ENV)
    if not path:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = json.dumps(
            {
                "argv": argv,
                "cwd": os.getcwd(),
                "env": dict(os.environ),
                "prefix": sys.prefix,
                "argv0": sys.argv[0] if sys.argv else "fedkd",
                "path": sys.path,
                "cpus": _cpus(),
                "interpreter": _interpreter(),
            }
        ).encode()
        socket.send_fds(sock, [b"R"], [0, 1, 2])
        sock.sendall(_HEADER.pack(len(request)) + request)
        reply = sock.makefile("r")
        pid = int(reply.readline())  # not a number: refused (another environment, ...)
    except (OSError, ValueError):
        sock.close()
        return None
    # a handle on the child while its pid is surely its own, to wait for its end if the server
    # goes (the child is not this process's: waitpid cannot)
    pidfd = _open_pidfd(pid)

    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    try:
        line = reply.readline()
    except OSError:
        line = ""
    sock.close()
    try:
        code = int(line.split()[1]) if line.startswith("exit ") else None
    except (IndexError, ValueError):
        code = None
    if code is None:
        _wait_for_end(pid, pidfd)
        print(
            f"fedkd {argv[0]}: the fork server ended while running this command; its process "
            f"(pid {pid}) has ended with it; run the command again",
            file=sys.stderr,
        )
        return 1
    if pidfd is not None:
        os.close(pidfd)
    return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N


def _cpus() -> list[int] | None:
    """The CPUs this process may run on (a child runs on the sender's, as a fresh one would)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _interpreter() -> list:
    """The interpreter's command-line settings (-O, -X ..., -W ...), as JSON reads them back."""
    return json.loads(json.dumps([list(sys.flags), sys.warnoptions, sys._xoptions]))


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux 5.3+, or already gone
        return None


def _wait_for_end(pid: int, pidfd: int | None) -> None:
    """Return once process ``pid`` has ended (a zombie has ended: it writes nothing more)."""
    if pidfd is not None:
        select.select([pidfd], [], [])  # readable once the process has exited
        os.close(pidfd)
        return
    while _running(pid):
        time.sleep(0.1)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True


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

    ``path`` must be free or a dead server's socket: anything else there (a file, a live
    server's socket) is left alone and ``SocketPathError`` raised. On the way out the socket is
    removed only if the path still holds the one this server created.

    Requests are read without blocking, each connection at its own pace, so a slow or idle one
    delays nothing; one that has not sent its whole request within ``request_timeout`` seconds
    is closed. A request that is too large, malformed, for a command not in ``SERVED``, or from
    a sender this server cannot stand in for (another Python environment, interpreter flags,
    CPU affinity or load-time variable) is answered with a "refused: ..." line and closed; the
    server and its running commands go on."""
    # nan would never be exceeded (a server that never exits), 0 or less ends it at once
    if idle_exit is not None and not (math.isfinite(idle_exit) and idle_exit > 0):
        raise ValueError(f"idle_exit={idle_exit!r} must be a number of seconds above 0")
    _check_socket_path(path)  # before the imports: a taken path is said at once
    # stopped with SIGTERM: end the running commands and remove the socket on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    # the environment as Python and the libraries read it at start: a library may set a
    # variable as it is imported (KMP_DUPLICATE_LIB_OK, seen on a GPU machine), which a sender
    # that has not imported it yet lacks, and which a fresh process would set the same way
    launch_env = dict(os.environ)
    for name in PRELOAD:
        __import__(name)
    for name in PRELOAD_OPTIONAL:
        try:
            __import__(name)
        except ImportError:
            pass
    server = _Server(path, request_timeout, launch_env)
    _log(f"ready on {path} (pid {os.getpid()})")
    try:
        server.loop(parent, idle_exit)
    finally:
        server.close()
        if own_dir:  # the private directory the workflow made for the socket
            try:
                os.rmdir(os.path.dirname(path))
            except OSError:
                pass


def _check_socket_path(path: str) -> bool:
    """Whether ``path`` holds a dead server's socket (to be replaced); False when it is free.
    ``SocketPathError`` when it holds anything else: another file, or a socket that answers."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise SocketPathError(f"--socket {path}: {exc.strerror}") from None
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketPathError(
            f"--socket {path} exists and is not a socket; it is left alone: pass a path that "
            f"does not exist"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return True  # nobody listens: a dead server's socket
    except OSError as exc:
        raise SocketPathError(
            f"--socket {path}: cannot tell whether it is in use ({exc})"
        ) from None
    finally:
        probe.close()
    raise SocketPathError(
        f"--socket {path}: another fork server listens there; stop it or pass another path"
    )


def _listen(path: str) -> tuple[socket.socket, tuple[int, int]]:
    """A listening socket at ``path`` and its (device, inode), to know it as ours later."""
    if _check_socket_path(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        listener.listen(64)
        info = os.lstat(path)
    except OSError as exc:
        listener.close()
        raise SocketPathError(f"--socket {path}: cannot listen there ({exc})") from None
    return listener, (info.st_dev, info.st_ino)


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


class _Probe:
    """A fresh interpreter asked for torch's thread count under one thread setting, and the
    requests waiting for its answer."""

    def __init__(self, env: dict, cwd: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROBE], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.deadline = time.monotonic() + PROBE_TIMEOUT
        self.output = b""
        self.waiting: list[tuple[socket.socket, dict, list[int]]] = []


class _Refused(Exception):
    pass


class _Server:
    def __init__(self, path: str, request_timeout: float, launch_env: dict[str, str]):
        self.path, self.request_timeout = path, request_timeout
        self.listener, self.identity = _listen(path)
        self.pid = os.getpid()
        # the parent-death signal: set by each child right after fork (Linux)
        self.libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
        self.env = launch_env  # as Python and the libraries read it at start
        # what the preloaded imports set or removed: a fresh process would do the same
        self.import_effects = _changes(launch_env, dict(os.environ))
        self.cpus, self.interpreter = _cpus(), _interpreter()
        self.children: dict[int, socket.socket] = {}  # pid → its sender's connection
        # pid → a descriptor readable once that command has exited: its end wakes the loop at
        # once, and its sender hears its exit code then (not up to a select timeout later)
        self.exit_fds: dict[int, int] = {}
        self.pending: dict[socket.socket, _Request] = {}  # connections still sending a request
        # torch's thread count a fresh process starts with, per thread setting; under the
        # server's own, a child keeps what it inherits
        self.threads: dict[tuple, int | None] = {_thread_key(self.env): None}
        self.probes: dict[tuple, _Probe] = {}
        self.last = time.monotonic()

    def loop(self, parent: int | None, idle_exit: float | None) -> None:
        while True:
            if parent is not None and os.getppid() != parent:
                return
            now = time.monotonic()
            busy = self.children or self.pending or self.probes
            if idle_exit is not None and not busy and now - self.last > idle_exit:
                return
            for conn in [c for c, r in self.pending.items() if now > r.deadline]:
                why = f"no complete request in {self.request_timeout:g} s"
                _refuse(conn, self.pending.pop(conn), why)
            for key in [k for k, p in self.probes.items() if now > p.deadline]:
                self._probe_failed(key, f"no answer in {PROBE_TIMEOUT:g} s")
            probe_pipes = {p.proc.stdout: k for k, p in self.probes.items()}
            exits = set(self.exit_fds.values())
            watched = [self.listener, *self.pending, *self.children.values(), *probe_pipes, *exits]
            ready, _, _ = select.select(watched, [], [], LOOP_TIMEOUT)
            for s in ready:
                if s is self.listener:
                    conn, _ = self.listener.accept()
                    self.last = time.monotonic()
                    if len(self.pending) >= MAX_PENDING:
                        conn.close()
                        continue
                    conn.setblocking(False)
                    self.pending[conn] = _Request(self.last + self.request_timeout)
                elif s in self.pending:
                    self._advance(s)
                    self.last = time.monotonic()
                elif s in probe_pipes:
                    self._read_probe(probe_pipes[s])
                elif s in exits:
                    pass  # a command ended: reaped below
                else:  # a sender sends nothing more: readable means it went away
                    pid = next(p for p, c in self.children.items() if c is s)
                    _kill(pid)
            self._reap()

    def close(self) -> None:
        """End the running commands (waiting briefly, to tell their senders how they ended),
        the probes and the pending requests; remove the socket if it is still ours."""
        for pid in self.children:
            _kill(pid)
        deadline = time.monotonic() + STOP_WAIT
        while self.children and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)
        for pid in list(self.exit_fds):
            self._forget_exit_fd(pid)
        for probe in self.probes.values():
            probe.proc.kill()
            probe.proc.wait()
            for conn, _, fds in probe.waiting:
                for fd in fds:
                    os.close(fd)
                conn.close()
        for conn, request in self.pending.items():
            request.close_fds()
            conn.close()
        self.listener.close()
        try:
            info = os.lstat(self.path)
        except OSError:
            return
        # another server may have taken the path since (after this one stopped answering)
        if stat.S_ISSOCK(info.st_mode) and (info.st_dev, info.st_ino) == self.identity:
            os.unlink(self.path)

    def _advance(self, conn: socket.socket) -> None:
        """Read what ``conn`` has sent; once its request is whole, check it and start it."""
        request = self.pending[conn]
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
            self._check_sender(body)
        except _Refused as why:
            _refuse(conn, self.pending.pop(conn), str(why))
            return
        except OSError as exc:
            _refuse(conn, self.pending.pop(conn), f"connection error ({exc})")
            return
        del self.pending[conn]
        conn.setblocking(True)
        key = _thread_key(body["env"])
        if key in self.threads:
            self._start(conn, body, request.fds, self.threads[key])
            return
        if key not in self.probes:
            try:
                self.probes[key] = _Probe(_without_server(body["env"]), body["cwd"])
            except OSError as exc:
                _refuse_started(conn, request.fds, f"cannot start a fresh interpreter ({exc})")
                return
        self.probes[key].waiting.append((conn, body, request.fds))

    def _check_sender(self, body: dict) -> None:
        """``_Refused`` where a child of this server would not run as the sender's own process:
        what Python and the libraries read once at start differs."""
        if body["interpreter"] != self.interpreter:
            raise _Refused("another interpreter setting (-O, -X, -W)")
        if body["cpus"] != self.cpus:
            raise _Refused("another CPU affinity")
        env = body["env"]
        for name in sorted({*env, *self.env}):
            loaded_once = name.startswith(LOAD_TIME_PREFIXES) or name in LOAD_TIME_NAMES
            if loaded_once and name not in APPLIED_IN_CHILD and env.get(name) != self.env.get(name):
                raise _Refused(f"{name} differs from the server's (read once, at start)")

    def _read_probe(self, key: tuple) -> None:
        probe = self.probes[key]
        chunk = os.read(probe.proc.stdout.fileno(), 4096)
        if chunk:
            probe.output += chunk
            return
        code = probe.proc.wait()
        probe.proc.stdout.close()
        try:
            if code != 0:
                raise ValueError
            threads = int(probe.output)
        except ValueError:  # the sender's own process then fails as the probe did
            self._probe_failed(key, f"a fresh interpreter failed under {_describe(key)}")
            return
        del self.probes[key]
        self.threads[key] = threads
        _log(f"torch starts with {threads} threads under {_describe(key)}")
        for conn, body, fds in probe.waiting:
            self._start(conn, body, fds, threads)

    def _probe_failed(self, key: tuple, why: str) -> None:
        probe = self.probes.pop(key)
        if probe.proc.poll() is None:
            probe.proc.kill()
            probe.proc.wait()
        probe.proc.stdout.close()
        for conn, _, fds in probe.waiting:
            _refuse_started(conn, fds, why)

    def _start(self, conn: socket.socket, body: dict, fds: list[int], threads: int | None):
        try:
            pid = os.fork()
        except OSError as exc:
            _refuse_started(conn, fds, f"cannot fork ({exc})")
            return
        if pid == 0:  # the child: become the command
            try:
                self._die_with_server()
                self.listener.close()
                for c in self.children.values():
                    c.close()
                for c, other in self.pending.items():  # requests still arriving are the server's
                    other.close_fds()
                    c.close()
                for fd in self.exit_fds.values():
                    os.close(fd)
                for probe in self.probes.values():
                    os.close(probe.proc.stdout.fileno())
                    for c, _, waiting_fds in probe.waiting:
                        for fd in waiting_fds:
                            os.close(fd)
                        c.close()
                conn.close()
            except BaseException:
                os._exit(1)
            _run_child(body, fds, threads, self.env, self.import_effects)
        for fd in fds:
            os.close(fd)
        _log(f"pid {pid}: fedkd {' '.join(body['argv'][:3])}")
        try:
            conn.sendall(f"{pid}\n".encode())
        except OSError:
            _kill(pid)
        self.children[pid] = conn
        exit_fd = _open_pidfd(pid)
        if exit_fd is not None:
            self.exit_fds[pid] = exit_fd

    def _die_with_server(self) -> None:
        """In a child just forked: be killed when the server ends, however it ends; if it has
        already ended (between the fork and now), end at once."""
        if self.libc is not None:
            self.libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != self.pid:
            os._exit(1)

    def _forget_exit_fd(self, pid: int) -> None:
        fd = self.exit_fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def _reap(self) -> None:
        for pid in list(self.children):  # only the commands' pids: the probes are Popen's
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not ours to wait for: its sender hears no exit code
                _log(f"pid {pid}: its end is unknown")
                self.children.pop(pid).close()
                self._forget_exit_fd(pid)
                continue
            if done == 0:
                continue
            conn = self.children.pop(pid)
            self._forget_exit_fd(pid)
            code = os.waitstatus_to_exitcode(status)
            _log(f"pid {pid}: exit {code}")
            try:
                conn.sendall(f"exit {code}\n".encode())
            except OSError:
                pass
            conn.close()


def _thread_key(env: dict) -> tuple:
    return tuple(env.get(name) for name in THREAD_VARIABLES)


def _describe(key: tuple) -> str:
    return ", ".join(
        f"{n}={v!r}" if v is not None else f"{n} unset"
        for n, v in zip(THREAD_VARIABLES, key, strict=True)
    )


def _without_server(env: dict) -> dict:
    return {k: v for k, v in env.items() if k != ENV}


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
    path, argv0, cpus = body.get("path"), body.get("argv0"), body.get("cpus")
    if not isinstance(path, list) or not all(isinstance(p, str) for p in path):
        raise _Refused("'path' must be the sender's sys.path, a list of strings")
    if not isinstance(argv0, str):
        raise _Refused("'argv0' must be the sender's sys.argv[0], a string")
    if cpus is not None and not (
        isinstance(cpus, list) and all(type(c) is int and c >= 0 for c in cpus)
    ):
        raise _Refused("'cpus' must be a list of CPU numbers, or null")
    if any("\0" in a for a in [*argv, cwd, argv0, *path]):
        raise _Refused("argv, cwd and path may not contain NUL characters")
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


def _refuse_started(conn: socket.socket, fds: list[int], why: str) -> None:
    """Refuse a request already read whole (its sender then runs the command itself)."""
    request = _Request(0.0)
    request.fds = fds
    _refuse(conn, request, why)


def _changes(before: dict[str, str], after: dict[str, str]) -> dict[str, str | None]:
    """The variables whose value differs from ``before`` to ``after`` (None: removed)."""
    return {k: after.get(k) for k in {*before, *after} if before.get(k) != after.get(k)}


def _run_child(
    request: dict,
    fds: list[int],
    threads: int | None,
    launch_env: dict[str, str],
    import_effects: dict[str, str | None],
) -> None:
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
        # the preloaded imports' own settings, as the sender's imports would make them from the
        # same starting value (from another one they might decide otherwise: left alone)
        for name, value in import_effects.items():
            if request["env"].get(name) == launch_env.get(name):
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        os.environ.pop(ENV, None)  # the command runs here, not in yet another child
        # modules found as the sender finds them (its sys.path: its directory, not the server's)
        sys.path[:] = request["path"]
        sys.path_importer_cache.clear()
        importlib.invalidate_caches()
        # fedkd itself from disk, as a fresh process would import it (the server holds only
        # this module, which may be older than the sources)
        for name in [m for m in sys.modules if m == "fedkd" or m.startswith("fedkd.")]:
            del sys.modules[name]
        if threads is not None:
            import torch

            # the count torch started with in a fresh process under these variables (which
            # torch read from the server's environment when it loaded)
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the descriptors outlive this frame
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        sys.argv = [request["argv0"], *request["argv"]]
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


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


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
        # code, and a CUDA run served equals one alone (tests/gpu, one H200), but on a GPU a run
        # lasts minutes against the seconds saved, and several GPUs are untested: on request
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
