"""The zombie fences of both protocols.

The coordinated protocol: **a fence row per identity** in the table
``twophase_fences`` (in the marker table's schema). The driver records in it,
after recovery and after every finished batch, the rank ``(epoch, batch)`` at or
below which every attempt is stale (:func:`fence_attempts`); every transaction
reads it ``FOR SHARE`` right before ``PREPARE TRANSACTION`` and refuses to
prepare when its own rank is not above it (:func:`refuse_if_fenced`). The share
lock travels with the prepared transaction, so the driver's update waits for an
attempt that read the row before it: a live one is terminated, a prepared one
is an orphan the coordinator rolls back before trying again. After the update,
no stale attempt can prepare, whenever it wakes up -- even after the query has
stopped.

The markers protocol: one live attempt per partition slot, the newest one.

A zombie is an attempt Spark gave up on (its executor was declared lost) whose
process lives on and may still try to commit after Spark's retry did. Without
prepared transactions nothing on the server outlives a connection, so the fence
has two parts, both under a transaction-level advisory lock on (sink identity,
partition slot) that every attempt takes right after ``BEGIN``:

* **take the slot** (:func:`take_slot`): an attempt that finds the lock held
  looks at the holder, named in ``application_name`` as
  ``twophase:<identity>:<batch>:<partition>:<attempt>@<epoch>``. An older holder
  (lower ``(epoch, batch, attempt)``) is a zombie: its backend is terminated,
  which rolls its transaction back and frees the lock. A newer holder means this
  attempt is the zombie: it stops at once.
* **check before committing** (:func:`._marker_table.newer_or_sibling_marker`, shared by
  every dialect): under the lock,
  ``commit_with_marker`` looks for a marker of the same (identity, batch,
  partition) committed by another attempt of the same run or by any attempt of a
  newer run. One found means another attempt already committed this partition
  (a zombie that committed between a retry's marker read and its lock, or the
  retry a resumed zombie arrives after): this attempt must not commit.

``(epoch, batch, attempt)`` orders attempts: the epoch is the run's claim in the
coordinator log and grows with every restart (:attr:`twophase.TaskContext.epoch`);
within a run, an attempt of an earlier batch is older than every attempt of a
later one, whatever their attempt numbers.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

from psycopg2 import sql

from twophase import TaskContext
from twophase.errors import FatalError

from ..._context import ErrorContext
from .._fence_verdict import Rank, attempt_rank, refuse_stale_attempt
from .._options import JdbcOptions, QualifiedName
from .._rows import row_dicts
from ._rows import pg_add_format_column

__all__ = [
    "application_name",
    "create_fence_table",
    "fence_attempts",
    "fence_table",
    "refuse_if_fenced",
    "slot_key",
    "take_slot",
]

_log = logging.getLogger("twophase.connectors.jdbc")

_NAME_RE = re.compile(
    r"^twophase:(?P<identity>.+):(?P<batch>\d+):(\d+):(?P<attempt>\d+)@(?P<epoch>\d+)$"
)
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


def _rank(name: str, identity: str) -> Rank | None:
    match = _NAME_RE.match(name or "")
    if match is None or match.group("identity") != identity:
        return None
    return int(match.group("epoch")), int(match.group("batch")), int(match.group("attempt"))


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
    mine = attempt_rank(context)
    cur.execute(_HOLDER, (key[0] & 0xFFFFFFFF, key[1]))
    for pid, name in cur.fetchall():
        theirs = _rank(name, context.identity)
        if theirs is not None and theirs >= mine:
            raise FatalError(
                f"attempt {context.attempt} of batch {context.batch_id} (run {context.epoch}) "
                f"of partition {context.partition_id} is fenced: attempt {theirs[2]} of batch "
                f"{theirs[1]} (run {theirs[0]}) holds the partition's slot. This attempt is a "
                "zombie (Spark gave up on it) and must not write",
                **ErrorContext.of_task(context).keywords(),
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


# ------------------------------------------------------- the coordinated protocol

#: The fence table's name, in the schema of the marker table.
FENCE_TABLE = "twophase_fences"
_CREATE_FENCES = (
    "CREATE TABLE IF NOT EXISTS {} (identity text PRIMARY KEY, epoch bigint NOT NULL, "
    "batch_id bigint NOT NULL, fenced_at timestamptz NOT NULL DEFAULT now(), "
    "record_format smallint NOT NULL DEFAULT 1)"
)
#: How long the driver's fence waits for a lock before looking for zombies.
_FENCE_LOCK_WAIT = "500ms"


def fence_table(options: JdbcOptions) -> QualifiedName:
    """Return the fence table of a sink: ``twophase_fences`` beside the marker table."""
    return QualifiedName(options.marker_table.schema, FENCE_TABLE)


def create_fence_table(cur: Any, table: sql.Composable, identity: str) -> None:
    """Create the fence table if missing and this identity's row (nothing fenced yet).

    Runs on the driver when the sink opens, before any task of the run: a task
    always finds its identity's row to lock.
    """
    cur.execute("SELECT to_regclass(%s)", (table.as_string(cur),))
    if cur.fetchone()[0] is None:
        cur.execute(sql.SQL(_CREATE_FENCES).format(table))
    else:
        pg_add_format_column(cur, table.as_string(cur))
    cur.execute(
        sql.SQL(
            "INSERT INTO {} (identity, epoch, batch_id) VALUES (%s, -1, -1) "
            "ON CONFLICT (identity) DO NOTHING"
        ).format(table),
        (identity,),
    )


def refuse_if_fenced(cur: Any, table: sql.Composable, context: TaskContext) -> None:
    """Lock the identity's fence row (shared) and refuse to prepare a stale attempt.

    Runs in the partition's transaction right before ``PREPARE TRANSACTION``.

    Raises
    ------
    FatalError
        The coordinator finished this attempt's batch (or its run) without it:
        this attempt is a zombie and must not prepare.
    """
    cur.execute(
        sql.SQL("SELECT * FROM {} WHERE identity = %s FOR SHARE").format(table),
        (context.identity,),
    )
    refuse_stale_attempt(row_dicts(cur), table.as_string(cur), context)


def _terminate_stale_backends(cur: Any, identity: str, rank: tuple[int, int]) -> int:
    """Terminate live backends of this identity's attempts ranked at or below ``rank``."""
    cur.execute(
        "SELECT pid, application_name FROM pg_stat_activity "
        "WHERE application_name LIKE 'twophase:%%' AND pid <> pg_backend_pid()"
    )
    terminated = 0
    for pid, name in cur.fetchall():
        match = _NAME_RE.match(name or "")
        if match is None or match.group("identity") != identity:
            continue
        if (int(match.group("epoch")), int(match.group(2))) <= rank:
            cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
            terminated += 1
            _log.warning("terminated backend %s of %s, a stale attempt (a zombie)", pid, name)
    return terminated


def fence_attempts(cur: Any, table: sql.Composable, identity: str, rank: tuple[int, int]) -> bool:
    """Record that every attempt of ``identity`` ranked at or below ``rank`` is stale.

    Runs on the driver on an autocommit connection. A live stale attempt that
    holds the row (it read it before preparing) is terminated; one that already
    prepared is left to the coordinator's sweep.

    Returns
    -------
    bool
        False when a prepared transaction holds the row.
    """
    upsert = sql.SQL(
        "INSERT INTO {} AS f (identity, epoch, batch_id) VALUES (%s, %s, %s) "
        "ON CONFLICT (identity) DO UPDATE SET epoch = EXCLUDED.epoch, "
        "batch_id = EXCLUDED.batch_id, fenced_at = now() "
        "WHERE (f.epoch, f.batch_id) < (EXCLUDED.epoch, EXCLUDED.batch_id)"
    ).format(table)
    for last in (False, True):
        cur.execute("BEGIN")
        try:
            cur.execute(f"SET LOCAL lock_timeout = '{_FENCE_LOCK_WAIT}'")
            cur.execute(upsert, (identity, *rank))
        except Exception as exc:
            cur.execute("ROLLBACK")
            if getattr(exc, "pgcode", None) != "55P03":
                raise
            if last or not _terminate_stale_backends(cur, identity, rank):
                return False
            continue
        cur.execute("COMMIT")
        return True
    return False
