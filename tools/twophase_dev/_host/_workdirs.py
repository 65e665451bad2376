"""Throwaway work directories: one per service instance, with an owner file naming who uses it.

The owner file (``owner.json``: ``creator_pid``, ``service_pid``) is what a later process reads to
tell a directory in use from a stale one, and a recorded server's current pid; its format is shared
with servers started by earlier versions of these tools, so it does not change.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from twophase_dev._host._proc import process_alive, process_mentions

__all__ = [
    "clean_stale_work_dirs",
    "make_work_dir",
    "owner_service_pid",
    "work_dir_in_use",
    "write_owner",
]

#: File in each throwaway work directory that names the processes that own it.
_OWNER_FILE = "owner.json"
#: Prefix of every throwaway work directory, so that stale ones can be found again.
_WORK_DIR_PREFIX = "twophase-dev-"


def make_work_dir(kind: str, parent: Path | None = None) -> Path:
    """Create a fresh throwaway work directory for one service instance.

    The directory is named ``twophase-dev-<kind>-*`` and holds an owner file naming this process,
    so that :func:`clean_stale_work_dirs` can remove it if this process dies without cleaning up.

    Parameters
    ----------
    kind : str
        ``kafka`` or ``postgres``.
    parent : pathlib.Path, optional
        Where to create it; the system temporary directory by default.

    Returns
    -------
    pathlib.Path
        The new directory.
    """
    base = parent if parent is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{_WORK_DIR_PREFIX}{kind}-", dir=base))
    write_owner(work, service_pid=None)
    return work


def write_owner(work_dir: Path, service_pid: int | None) -> None:
    """Record which processes own ``work_dir`` (this one, and the service once it runs).

    Parameters
    ----------
    work_dir : pathlib.Path
        A directory made by :func:`make_work_dir`.
    service_pid : int or None
        The server's pid once started.
    """
    data = {"creator_pid": os.getpid(), "service_pid": service_pid}
    tmp = work_dir / (_OWNER_FILE + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(work_dir / _OWNER_FILE)


def owner_service_pid(work_dir: Path) -> int | None:
    """Return the live server pid that the owner file of ``work_dir`` names, if any.

    A server restarted by a handle other than the one ``twophase-dev up`` recorded (a chaos test
    that attached to it) has a new pid; its owner file names it.

    Parameters
    ----------
    work_dir : pathlib.Path
        A directory made by :func:`make_work_dir`.

    Returns
    -------
    int or None
        The pid, if that process is alive and mentions ``work_dir`` in its command line.
    """
    data = _read_owner(work_dir)
    pid = None if data is None else data.get("service_pid")
    if isinstance(pid, int) and process_mentions(pid, str(work_dir)):
        return pid
    return None


def _read_owner(work_dir: Path) -> dict[str, Any] | None:
    """Return what the owner file of ``work_dir`` says, ``None`` if it is missing or unreadable."""
    try:
        data = json.loads((work_dir / _OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def work_dir_in_use(work_dir: Path) -> bool:
    """Tell whether a live process owns ``work_dir`` (its creator, or the server it names).

    Parameters
    ----------
    work_dir : pathlib.Path
        A directory made by :func:`make_work_dir`.

    Returns
    -------
    bool
        ``True`` if it must not be deleted (also for a directory younger than a minute without an
        owner file, which may be being created).
    """
    data = _read_owner(work_dir)
    if data is None:
        # No readable owner file: either being created right now or not ours to judge. Only dirs
        # older than a minute without one are considered abandoned.
        try:
            return time.time() - work_dir.stat().st_mtime < 60
        except OSError:
            return False
    creator = data.get("creator_pid")
    service = data.get("service_pid")
    if isinstance(service, int) and process_mentions(service, str(work_dir)):
        return True
    return isinstance(creator, int) and process_alive(creator)


def clean_stale_work_dirs(parent: Path | None = None) -> list[Path]:
    """Remove throwaway work directories whose owners are all gone.

    A directory is stale when neither the process that created it nor the server that used it is
    alive (e.g. a test session killed with ``SIGKILL``).

    Parameters
    ----------
    parent : pathlib.Path, optional
        Where to look; the system temporary directory by default.

    Returns
    -------
    list of pathlib.Path
        The directories removed.
    """
    base = parent if parent is not None else Path(tempfile.gettempdir())
    removed: list[Path] = []
    try:
        candidates = sorted(base.glob(f"{_WORK_DIR_PREFIX}*"))
    except OSError:
        return removed
    for work_dir in candidates:
        if not work_dir.is_dir() or work_dir_in_use(work_dir):
            continue
        shutil.rmtree(work_dir, ignore_errors=True)
        if not work_dir.exists():
            removed.append(work_dir)
    return removed
