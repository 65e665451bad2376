"""Producer lanes: which of a slot's ``transactional.id`` values this Python worker uses.

Spark hands partition *p* of a batch to whichever Python worker is free, so with
one ``transactional.id`` per partition slot the slot's producer would move
between workers, and every move would cost an ``init_transactions`` that fences
the producer idle in the other worker (the cost measured in
``benchmarks/findings.md``). So every slot has ``producer_lanes`` transactional
ids, one per *lane*, and each Python worker process claims a lane of its own
for its lifetime: partition *p* run by the worker holding lane *k* always uses
the id of (*p*, *k*), whose producer stays initialised in that worker from one
batch to the next.

A lane is claimed on the host with an exclusive ``flock`` on a file under the
temporary directory, one file per (sink identity, lane); the lock goes away
with the process, even when it is killed. A worker claims the lowest free
lane, so *n* workers on a host use lanes ``0 .. n-1``. When every lane is held
(more workers on the host than lanes), the worker shares a lane, chosen by its
process id: still correct, as two producers of one id fence each other, but
their slots fall back to re-initialising when they alternate.

Only the lanes of one partition slot ever run that partition, so a retry of
the partition fences all of them (``KafkaTransaction.begin``), and recovery
fences every lane of every slot the identity used: the number of ids stays
``partition_slots * producer_lanes``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
from pathlib import Path

__all__ = ["lane_of_this_process", "release_all"]

_log = logging.getLogger("twophase.connectors.kafka")

_lock = threading.Lock()
#: (identity key, lanes) -> (pid that claimed, lane, fd holding the lock or -1).
_claimed: dict[tuple[str, int], tuple[int, int, int]] = {}


def _lock_dir(key: str) -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return Path(tempfile.gettempdir()) / f"twophase-lanes-{uid}" / digest


def _try_claim(directory: Path, lane: int) -> int:
    """Lock the lane's file without waiting; return its fd, or -1 when another process holds it."""
    import fcntl

    fd = os.open(directory / f"lane-{lane}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return -1
    return fd


def _claim(key: str, lanes: int) -> tuple[int, int]:
    try:
        directory = _lock_dir(key)
        directory.mkdir(parents=True, exist_ok=True)
        for lane in range(lanes):
            fd = _try_claim(directory, lane)
            if fd >= 0:
                return lane, fd
    except (ImportError, OSError) as exc:  # no fcntl (Windows), read-only temp...
        _log.debug("producer lanes: cannot claim one (%s); sharing by process id", exc)
    lane = os.getpid() % lanes
    _log.debug("producer lanes: all %d held on this host; sharing lane %d", lanes, lane)
    return lane, -1


def lane_of_this_process(key: str, lanes: int) -> int:
    """Return this process's lane among ``lanes`` for a sink identity, claiming one on first use.

    Parameters
    ----------
    key
        The transactional-id prefix and sink identity: lanes are claimed per key.
    lanes
        The sink's ``producer_lanes``.

    Returns
    -------
    int
        A lane in ``0 .. lanes - 1``.
    """
    if lanes <= 1:
        return 0
    pid = os.getpid()
    with _lock:
        held = _claimed.get((key, lanes))
        if held is not None and held[0] == pid:
            return held[1]
        # First use here, or a forked child: the parent's lock is not ours to keep.
        lane, fd = _claim(key, lanes)
        _claimed[(key, lanes)] = (pid, lane, fd)
        return lane


def release_all() -> None:
    """Give up every lane this process holds (tests; the exit does it anyway)."""
    with _lock:
        held = list(_claimed.values())
        _claimed.clear()
    pid = os.getpid()
    for owner, _, fd in held:
        if owner == pid and fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
