"""The one reader of ``/proc``: which processes exist, their state, command line and environment.

Every question the dev tools ask about a process (is it alive, is it still the one we started, who
are its children, does it carry a service's environment marker) is answered here, so that pid
reuse is guarded the same way everywhere: a process is named by ``(pid, start_time)`` before it is
signalled.

Runs on: the developer's or test session's machine (Linux).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ProcStat",
    "all_pids",
    "environ_has",
    "live_table",
    "process_alive",
    "process_cmdline",
    "process_mentions",
    "processes_with_env",
    "read_stat",
    "signal_each",
]


@dataclass(frozen=True)
class ProcStat:
    """What ``/proc/<pid>/stat`` says about one process.

    Attributes
    ----------
    pid, ppid, pgid : int
        Its id, its parent's and its process group's.
    state : str
        The kernel's state letter (``R``, ``S``, ``T`` when stopped by ``SIGSTOP``, ``Z``...).
    start_time : int
        Clock ticks after boot at which it started: with the pid, it names the process for good.
    """

    pid: int
    ppid: int
    pgid: int
    state: str
    start_time: int

    @property
    def gone(self) -> bool:
        """``True`` for a process that exited (a zombie not reaped yet, or a dead one)."""
        return self.state in ("Z", "X")


def read_stat(pid: int) -> ProcStat | None:
    """Return what ``/proc/<pid>/stat`` says, ``None`` if the process is gone or unreadable.

    Parameters
    ----------
    pid : int
        The process id.

    Returns
    -------
    ProcStat or None
        Its state.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The state follows the command name, which is in parentheses and may contain spaces; after
    # it: state (field 3 of stat), ppid, pgrp, ..., starttime (field 22).
    fields = raw.rsplit(")", 1)[-1].split()
    return ProcStat(pid, int(fields[1]), int(fields[2]), fields[0], int(fields[19]))


def all_pids() -> list[int]:
    """Return the ids of every process in ``/proc`` (some may be gone by the time they are read).

    Returns
    -------
    list of int
        The pids.
    """
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def live_table() -> dict[int, ProcStat]:
    """Return every process that has not exited, by pid.

    Returns
    -------
    dict of int to ProcStat
        The process table.
    """
    table = {}
    for pid in all_pids():
        stat = read_stat(pid)
        if stat is not None and not stat.gone:
            table[pid] = stat
    return table


def process_alive(pid: int) -> bool:
    """Tell whether process ``pid`` exists and is not a zombie.

    Parameters
    ----------
    pid : int
        The process id.

    Returns
    -------
    bool
        ``False`` for a missing process and for one that exited but was not reaped yet.
    """
    if pid <= 0:
        return False
    stat = read_stat(pid)
    if stat is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return not stat.gone


def process_cmdline(pid: int) -> list[str]:
    """Return the command line of process ``pid`` (empty if it is gone or unreadable).

    Parameters
    ----------
    pid : int
        The process id.

    Returns
    -------
    list of str
        The arguments, ``argv[0]`` first.
    """
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def process_mentions(pid: int, needle: str) -> bool:
    """Tell whether process ``pid`` is alive and ``needle`` occurs in its command line.

    This guards against pid reuse: a recorded pid is only trusted (and only ever signalled) if the
    process still refers to the service's own work directory.

    Parameters
    ----------
    pid : int
        The process id.
    needle : str
        Text expected in one of the arguments, e.g. the service's work directory.

    Returns
    -------
    bool
        ``True`` if the process is alive and mentions ``needle``.
    """
    if not process_alive(pid):
        return False
    return any(needle in arg for arg in process_cmdline(pid))


def environ_has(pid: int, entry: bytes) -> bool:
    """Tell whether process ``pid`` was started with the environment entry ``entry``.

    Parameters
    ----------
    pid : int
        The process id.
    entry : bytes
        ``NAME=value``.

    Returns
    -------
    bool
        ``False`` too if the process is gone or its environment unreadable (another user's).
    """
    try:
        return entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def processes_with_env(name: str, value: str) -> list[ProcStat]:
    """Return every process but this one started with ``name=value`` in its environment.

    Parameters
    ----------
    name, value : str
        The environment marker a service sets on all its processes.

    Returns
    -------
    list of ProcStat
        The processes found, in pid order.
    """
    entry = f"{name}={value}".encode()
    found = []
    for pid in sorted(all_pids()):
        if pid != os.getpid() and environ_has(pid, entry):
            stat = read_stat(pid)
            if stat is not None:
                found.append(stat)
    return found


def signal_each(processes: Iterable[ProcStat], sig: int) -> None:
    """Send ``sig`` to each process that still runs and is still the same process.

    Parameters
    ----------
    processes : iterable of ProcStat
        Processes seen earlier; a pid now used by another process (another start time) is skipped.
    sig : int
        The signal number.
    """
    for seen in processes:
        now = read_stat(seen.pid)
        if now is None or now.start_time != seen.start_time or now.gone:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(seen.pid, sig)
