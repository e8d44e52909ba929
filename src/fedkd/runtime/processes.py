"""Which process wrote a record, and whether that very process still runs.

A pid alone is not an identity: once a process ends, the kernel hands its pid to the next one,
and after a reboot every pid is reused. ``process_identity`` records, next to host and pid, the
process's start time (field 22 of /proc/<pid>/stat, clock ticks since boot) and the boot id;
``is_same_process`` then tells the recorded process from a later one holding the same pid.
Without /proc (not Linux) the start time and boot id are left out and the pid decides alone.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

PROC = Path("/proc")
BOOT_ID = PROC / "sys/kernel/random/boot_id"
# the largest pid Linux hands out (PID_MAX_LIMIT, 2**22); a larger number is no process id
PID_MAX = 4_194_304
# /proc/<pid>/stat fields after the command name's closing ')': field 3 (state) comes first
_STATE, _START = 0, 22 - 3


def process_stat(pid: int) -> tuple[str, int] | None:
    """The state letter (R, S, Z...) and start time (clock ticks since boot) of process ``pid``,
    None when it does not exist or /proc cannot tell. The command name, field 2, may hold spaces
    and parentheses of its own, so the fields are counted after its last ')'."""
    try:
        text = (PROC / str(pid) / "stat").read_bytes()
        fields = text.rsplit(b")", 1)[1].split()
        return fields[_STATE].decode("ascii", "replace"), int(fields[_START])
    except (OSError, IndexError, ValueError):
        return None


def boot_id() -> str | None:
    """This boot's id (a new one after every reboot); None without /proc."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def process_identity(pid: int | None = None) -> dict:
    """``{"host", "pid", "start", "boot"}`` of process ``pid`` (default: this one), as a run
    record keeps it; "start" and "boot" are left out where /proc cannot give them."""
    pid = os.getpid() if pid is None else pid
    identity: dict = {"host": socket.gethostname(), "pid": pid}
    stat = process_stat(pid)
    if stat is not None:
        identity["start"] = stat[1]
        boot = boot_id()
        if boot is not None:
            identity["boot"] = boot
    return identity


def valid_pid(pid: object) -> bool:
    """Whether ``pid`` can be a process id: an int (never a bool) in 1..PID_MAX."""
    return isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid <= PID_MAX


def is_same_process(record: object) -> bool | None:
    """Whether the process ``record`` (a ``process_identity`` dict) names still runs.

    True: it runs (with a recorded start time, it is that very process; without one, only that
    the pid is alive, see ``is_verified``). False: it has ended, is a zombie, or its pid now
    belongs to a process started at another time or in another boot. None: it cannot be told
    from here (another host, a record that is not an identity, no /proc to ask)."""
    if not isinstance(record, dict) or not valid_pid(record.get("pid")):
        return None
    if record.get("host") != socket.gethostname():
        return None
    pid = record["pid"]
    recorded_boot = record.get("boot")
    if isinstance(recorded_boot, str) and boot_id() not in (None, recorded_boot):
        return False  # rebooted since: every process of that boot has ended
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process holds that pid: /proc still tells
        pass
    except OSError:
        return None
    stat = process_stat(pid)
    if stat is None:
        if not (PROC / "self").exists():  # no /proc here: the live pid is all there is
            return True
        # gone since the signal, or hidden (/proc mounted with hidepid): cannot be told
        return False if not (PROC / str(pid)).exists() else None
    state, start = stat
    if state == "Z":  # ended, not yet reaped by its parent
        return False
    recorded_start = record.get("start")
    if isinstance(recorded_start, int) and not isinstance(recorded_start, bool):
        return start == recorded_start
    # an older record without its start time: a pid whose program is no fedkd is another's
    try:
        cmdline = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return b"fedkd" in cmdline


def is_verified(record: object) -> bool:
    """Whether ``record`` holds the start time that makes ``is_same_process`` exact (records
    written before it was kept have only host and pid)."""
    if not isinstance(record, dict):
        return False
    start = record.get("start")
    return isinstance(start, int) and not isinstance(start, bool)
