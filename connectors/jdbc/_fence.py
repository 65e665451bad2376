"""Protocol B's zombie fence: one live attempt per partition slot, the newest one.

A zombie is an attempt Spark gave up on (its executor was declared lost) whose
process lives on and may still try to commit after Spark's retry did. Without
prepared transactions nothing on the server outlives a connection, so the fence
has two parts, both under a transaction-level advisory lock on (sink identity,
partition slot) that every attempt takes right after ``BEGIN``:

* **take the slot** (:func:`take_slot`): an attempt that finds the lock held
  looks at the holder, named in ``application_name`` as
  ``twophase:<identity>:<batch>:<partition>:<attempt>@<epoch>``. An older holder
  (lower ``(epoch, attempt)``) is a zombie: its backend is terminated, which
  rolls its transaction back and frees the lock. A newer holder means this
  attempt is the zombie: it stops at once.
* **check before committing** (:func:`newer_or_sibling_marker`): under the lock,
  ``commit_with_marker`` looks for a marker of the same (identity, batch,
  partition) committed by another attempt of the same run or by any attempt of a
  newer run. One found means another attempt already committed this partition
  (a zombie that committed between a retry's marker read and its lock, or the
  retry a resumed zombie arrives after): this attempt must not commit.

``(epoch, attempt)`` orders attempts: the epoch is the run's claim in the
coordinator log and grows with every restart (:attr:`twophase.TaskContext.epoch`).
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

from psycopg2 import sql

from twophase import TaskContext
from twophase.errors import AbortRequiredError, FatalError

__all__ = ["application_name", "newer_or_sibling_marker", "slot_key", "take_slot"]

_log = logging.getLogger("twophase.connectors.jdbc")

_NAME_RE = re.compile(r"^twophase:(?P<identity>.+):(\d+):(\d+):(?P<attempt>\d+)@(?P<epoch>\d+)$")
_HOLDER = (
    "SELECT l.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.classid = %s::oid AND l.objid = %s::oid "
    "AND l.objsubid = 2 AND l.granted AND l.pid <> pg_backend_pid()"
)


def slot_key(identity: str, partition: int) -> tuple[int, int]:
    """Return the two int4 keys of the advisory lock of one slot of one identity."""
    digest = hashlib.blake2b(identity.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True), partition


def application_name(context: TaskContext) -> str:
    """Return the ``application_name`` that names an attempt to the other attempts."""
    c = context
    return f"twophase:{c.identity}:{c.batch_id}:{c.partition_id}:{c.attempt}@{c.epoch}"


def _rank(name: str, identity: str) -> tuple[int, int] | None:
    match = _NAME_RE.match(name or "")
    if match is None or match.group("identity") != identity:
        return None
    return int(match.group("epoch")), int(match.group("attempt"))


def take_slot(cur: Any, context: TaskContext) -> None:
    """Name this attempt and take its slot's lock, terminating an older holder.

    Runs right after ``BEGIN``; the lock is held until the transaction ends.

    Raises
    ------
    FatalError
        A newer attempt holds the slot: this attempt is a zombie.
    """
    cur.execute("SELECT set_config('application_name', %s, true)", (application_name(context),))
    key = slot_key(context.identity, context.partition_id)
    cur.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", key)
    if cur.fetchone()[0]:
        return
    mine = (context.epoch, context.attempt)
    cur.execute(_HOLDER, (key[0] & 0xFFFFFFFF, key[1]))
    for pid, name in cur.fetchall():
        theirs = _rank(name, context.identity)
        if theirs is not None and theirs >= mine:
            raise FatalError(
                f"attempt {context.attempt} (run {context.epoch}) of partition "
                f"{context.partition_id} is fenced: attempt {theirs[1]} of run {theirs[0]} "
                "holds the partition's slot. This attempt is a zombie (Spark gave up on it) "
                "and must not write",
                sink=context.sink_name,
                batch_id=context.batch_id,
                partition_id=context.partition_id,
            )
        if theirs is not None:
            cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
            _log.warning(
                "%s: terminated backend %s of %s, an older attempt of the same slot (a zombie)",
                application_name(context),
                pid,
                name,
            )
    cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", key)  # waits at most lock_timeout


def newer_or_sibling_marker(cur: Any, table: Any, context: TaskContext) -> None:
    """Refuse to commit when another attempt already committed this partition.

    Runs under the slot's lock, before the marker is inserted.

    Raises
    ------
    AbortRequiredError
        Another attempt of this run committed the partition (the task retry finds
        its marker and skips the partition).
    FatalError
        An attempt of a newer run committed it: this attempt is a zombie.
    """
    cur.execute(
        sql.SQL(
            "SELECT epoch, attempt FROM {} WHERE identity = %s AND batch_id = %s "
            "AND partition_id = %s AND epoch >= %s AND NOT (epoch = %s AND attempt = %s) "
            "ORDER BY epoch DESC, attempt DESC LIMIT 1"
        ).format(table),
        (
            context.identity,
            context.batch_id,
            context.partition_id,
            context.epoch,
            context.epoch,
            context.attempt,
        ),
    )
    row = cur.fetchone()
    if row is None:
        return
    epoch, attempt = int(row[0]), int(row[1])
    where: dict[str, Any] = {
        "sink": context.sink_name,
        "batch_id": context.batch_id,
        "partition_id": context.partition_id,
    }
    if epoch > context.epoch:
        raise FatalError(
            f"attempt {context.attempt} (run {context.epoch}) is a zombie: run {epoch} already "
            f"committed partition {context.partition_id} of this batch; not writing it again",
            **where,
        )
    raise AbortRequiredError(
        f"attempt {attempt} of this run already committed partition {context.partition_id} "
        f"of this batch while attempt {context.attempt} was writing it; not writing it twice "
        "(the task's next attempt finds that marker and skips the partition)",
        **where,
    )
