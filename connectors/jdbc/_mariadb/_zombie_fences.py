"""The zombie fences of both MariaDB protocols.

A zombie is an attempt Spark gave up on whose process lives on and may still
try to commit after Spark's retry did. ``(epoch, batch, attempt)`` orders
attempts, as in the PostgreSQL dialect (:func:`.._fence_verdict.attempt_rank`).

**The coordinated protocol.** PostgreSQL keeps a shared row lock through
``PREPARE TRANSACTION``; MariaDB releases shared locks at ``XA PREPARE``
(MDEV-26682), and keeps only exclusive ones. So every XA transaction inserts,
right before preparing, its own row into ``twophase_prepared`` (exclusive
until it commits or rolls back), then reads its identity's rank in
``twophase_fences`` and refuses to prepare at or below it
(:func:`refuse_if_fenced`). The driver (:func:`fence_attempts`) first raises
the rank, then locks and deletes the ``twophase_prepared`` rows at or below it:
a row still locked belongs to a transaction that read the old rank -- one
that already prepared holds the lock until the coordinator's sweep rolls it
back, and the fence is tried again. Committed rows are also the record that a
transaction committed: ``XA COMMIT`` of an xid the server no longer knows is
resolved by them (:mod:`._prepared_store`). Every XA transaction also takes its partition's
slot (below) before ``XA START``, until ``XA PREPARE`` closes its session: the
session of an attempt whose client vanished (a network partition) is killed by
the next attempt of the slot instead of keeping the xid taken.

**The markers protocol.** One live attempt per partition slot, the newest: the
slot is a named lock (``GET_LOCK``) that every attempt takes before ``BEGIN``
(``XA START`` in the coordinated protocol); each attempt also holds a lock
named after its own rank, and registers the rank and that lock's name in
``twophase_attempts``, so that an attempt that finds the slot taken can tell
who holds it (``IS_USED_LOCK``). An older holder is a zombie: its connection
is killed (a user may kill its own connections), which rolls its transaction
back and frees the slot. A newer holder means this attempt is the zombie: it
stops at once. The batch is part of the rank: a zombie of batch 0 left with a
high attempt number is older than every attempt of batch 1. Named locks belong
to the session: :func:`release_slot` frees them before the connection goes
back to its pool; the attempt that takes the slot deletes the registry rows of
older attempts whose locks are free, so the registry holds about one row per
slot. 0.2.0 registered ``(epoch, attempt)`` in ``twophase_slots``, which is
read (never written) to recognise an attempt of 0.2.0 still alive.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from twophase import TaskContext
from twophase.errors import FatalError

from ..._context import ErrorContext
from .._fence_verdict import Rank, attempt_rank, refuse_stale_attempt
from .._options import JdbcOptions, QualifiedName
from .._rows import FORMAT_COLUMN, FORMAT_DEFINITION, check_row_format, row_dicts
from ._errors import errno
from ._rows import mariadb_add_format_column
from ._sql import quote

__all__ = [
    "ATTEMPTS_TABLE",
    "FENCE_TABLE",
    "LEGACY_SLOTS_TABLE",
    "PREPARED_TABLE",
    "create_fence_tables",
    "create_slots_table",
    "fence_attempts",
    "in_schema",
    "refuse_if_fenced",
    "release_slot",
    "take_slot",
]

_log = logging.getLogger("twophase.connectors.jdbc")

FENCE_TABLE = "twophase_fences"
PREPARED_TABLE = "twophase_prepared"
#: The markers protocol's registry of attempts: rank, and the lock each holds while it lives.
ATTEMPTS_TABLE = "twophase_attempts"
#: 0.2.0's registry, ranked without the batch: read to recognise a live attempt of 0.2.0.
LEGACY_SLOTS_TABLE = "twophase_slots"
#: Seconds the driver's fence waits for a row lock before it gives up for this try.
_FENCE_LOCK_WAIT = 1


def in_schema(options: JdbcOptions, name: str) -> str:
    """Return a fence table's quoted name, in the marker table's database."""
    table = QualifiedName(options.marker_table.schema, name)
    return ".".join(quote(p) for p in table.parts())


# ------------------------------------------------------- the coordinated protocol
def create_fence_tables(cur: Any, options: JdbcOptions, identity: str) -> None:
    """Create the fence tables and the slot registry if missing, and this identity's rank."""
    create_slots_table(cur, options)
    fences = in_schema(options, FENCE_TABLE)
    prepared = in_schema(options, PREPARED_TABLE)
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {fences} (identity VARCHAR(255) NOT NULL PRIMARY KEY, "
        "epoch BIGINT NOT NULL, batch_id BIGINT NOT NULL, "
        "fenced_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        f"{FORMAT_DEFINITION}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {prepared} (identity VARCHAR(255) NOT NULL, "
        "batch_id BIGINT NOT NULL, partition_id INT NOT NULL, attempt INT NOT NULL, "
        "epoch BIGINT NOT NULL, prepared_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        f"{FORMAT_DEFINITION}, PRIMARY KEY (identity, batch_id, partition_id, attempt, epoch)) "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
    mariadb_add_format_column(cur, fences)
    mariadb_add_format_column(cur, prepared)
    cur.execute(
        f"INSERT IGNORE INTO {fences} (identity, epoch, batch_id) VALUES (%s, -1, -1)",
        (identity,),
    )


def refuse_if_fenced(cur: Any, options: JdbcOptions, context: TaskContext) -> None:
    """Record this XA transaction, then refuse to prepare a stale attempt.

    Runs in the partition's XA transaction right before ``XA END``.

    Raises
    ------
    FatalError
        The coordinator finished this attempt's batch (or its run) without it:
        this attempt is a zombie and must not prepare.
    """
    c = context
    cur.execute(
        f"INSERT INTO {in_schema(options, PREPARED_TABLE)} "
        "(identity, batch_id, partition_id, attempt, epoch) VALUES (%s, %s, %s, %s, %s)",
        (c.identity, c.batch_id, c.partition_id, c.attempt, c.epoch),
    )
    cur.execute(
        f"SELECT * FROM {in_schema(options, FENCE_TABLE)} WHERE identity = %s LOCK IN SHARE MODE",
        (c.identity,),
    )
    refuse_stale_attempt(row_dicts(cur), in_schema(options, FENCE_TABLE), c)


def fence_attempts(cur: Any, options: JdbcOptions, identity: str, rank: tuple[int, int]) -> bool:
    """Record that every attempt of ``identity`` at or below ``rank`` is stale (driver).

    Returns
    -------
    bool
        False when a transaction that read the old rank still holds its row
        (one that prepared: the coordinator's sweep rolls it back).
    """
    epoch, batch = rank
    cur.execute(
        f"UPDATE {in_schema(options, FENCE_TABLE)} SET epoch = %s, batch_id = %s, "
        "fenced_at = CURRENT_TIMESTAMP(6) "
        "WHERE identity = %s AND (epoch < %s OR (epoch = %s AND batch_id < %s))",
        (epoch, batch, identity, epoch, epoch, batch),
    )
    prepared = in_schema(options, PREPARED_TABLE)
    stale = "identity = %s AND (epoch < %s OR (epoch = %s AND batch_id <= %s))"
    params = (identity, epoch, epoch, batch)
    cur.execute("BEGIN")
    try:
        cur.execute(
            f"SET STATEMENT innodb_lock_wait_timeout = {_FENCE_LOCK_WAIT} FOR "
            f"SELECT 1 FROM {prepared} WHERE {stale} FOR UPDATE",
            params,
        )
        cur.fetchall()
        cur.execute(f"DELETE FROM {prepared} WHERE {stale}", params)
    except Exception as exc:
        cur.execute("ROLLBACK")
        if getattr(exc, "args", (None,))[0] == 1205:  # a lock wait timeout
            return False
        raise
    cur.execute("COMMIT")
    return True


# ---------------------------------------------------------- the markers protocol
def _lock_name(identity: str, partition: int) -> str:
    """Return the named lock of a slot (the same name since 0.2.0: old and new attempts meet)."""
    digest = hashlib.blake2b(identity.encode(), digest_size=8).hexdigest()
    return f"tp:{digest}:{partition}"


def _attempt_lock(identity: str, partition: int, rank: Rank) -> str:
    """Return the named lock of one attempt (36 characters; MariaDB allows 64)."""
    key = "\0".join(str(p) for p in (identity, partition, *rank))
    return "tp:a:" + hashlib.blake2b(key.encode(), digest_size=16).hexdigest()[:31]


def create_slots_table(cur: Any, options: JdbcOptions) -> None:
    """Create the attempts registry (``twophase_attempts``) if missing."""
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {in_schema(options, ATTEMPTS_TABLE)} "
        "(identity VARCHAR(255) NOT NULL, partition_id INT NOT NULL, epoch BIGINT NOT NULL, "
        "batch_id BIGINT NOT NULL, attempt INT NOT NULL, lock_name VARCHAR(64) NOT NULL, "
        f"{FORMAT_DEFINITION}, PRIMARY KEY (identity, partition_id, epoch, batch_id, attempt)) "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )


def take_slot(cur: Any, options: JdbcOptions, context: TaskContext) -> None:
    """Hold this attempt's lock and take its slot's, killing an older holder.

    Runs on an autocommit session before ``BEGIN``; the locks are the session's
    until :func:`release_slot`. Once the slot is taken, the registry forgets
    the older attempts of the slot whose sessions are gone.

    Raises
    ------
    FatalError
        A newer attempt holds the slot: this attempt is a zombie.
    """
    c = context
    mine = attempt_rank(c)
    slot = _lock_name(c.identity, c.partition_id)
    own = _attempt_lock(c.identity, c.partition_id, mine)
    cur.execute("SELECT GET_LOCK(%s, 0)", (own,))
    cur.fetchone()
    table = in_schema(options, ATTEMPTS_TABLE)
    cur.execute(
        f"INSERT IGNORE INTO {table} (identity, partition_id, epoch, batch_id, attempt, "
        "lock_name) VALUES (%s, %s, %s, %s, %s, %s)",
        (c.identity, c.partition_id, *mine, own),
    )
    cur.execute("SELECT GET_LOCK(%s, 0)", (slot,))
    if cur.fetchone()[0] != 1:
        _fence_the_holder(cur, options, context, slot)
        timeout = max(1, int(options.lock_timeout))
        cur.execute("SELECT GET_LOCK(%s, %s)", (slot, timeout))
        if cur.fetchone()[0] != 1:
            raise FatalError(
                f"partition {c.partition_id}'s slot stayed taken for {timeout} s (lock_timeout) "
                "by a session that is not an attempt of this sink",
                **ErrorContext.of_task(c).keywords(),
            )
    cur.execute(
        f"DELETE FROM {table} WHERE identity = %s AND partition_id = %s "
        "AND (epoch, batch_id, attempt) < (%s, %s, %s) AND IS_FREE_LOCK(lock_name) = 1",
        (c.identity, c.partition_id, *mine),
    )


def _fence_the_holder(cur: Any, options: JdbcOptions, context: TaskContext, slot: str) -> None:
    """Kill the slot's holder if it is an older attempt; stop if it is a newer one."""
    c = context
    cur.execute("SELECT IS_USED_LOCK(%s)", (slot,))
    holder = cur.fetchone()[0]
    if holder is None:  # freed meanwhile
        return
    mine = attempt_rank(c)
    for theirs in _holder_ranks(cur, options, context, holder):
        if theirs == mine:
            continue
        if theirs > mine:
            raise FatalError(
                f"attempt {c.attempt} of batch {c.batch_id} (run {c.epoch}) of partition "
                f"{c.partition_id} is fenced: attempt {theirs[2]} of batch {theirs[1]} (run "
                f"{theirs[0]}) holds the partition's slot. This attempt is a zombie (Spark gave "
                "up on it) and must not write",
                **ErrorContext.of_task(c).keywords(),
            )
        cur.execute(f"KILL CONNECTION {int(holder)}")
        _log.warning(
            "attempt %d of batch %d (run %d) of %s partition %d: killed connection %s of "
            "attempt %d of batch %d (run %d), an older attempt of the same slot (a zombie)",
            c.attempt,
            c.batch_id,
            c.epoch,
            c.identity,
            c.partition_id,
            holder,
            theirs[2],
            theirs[1],
            theirs[0],
        )
        return


def _holder_ranks(cur: Any, options: JdbcOptions, context: TaskContext, holder: int) -> list[Rank]:
    """Return the ranks that the session ``holder`` registered for this slot.

    An attempt of 0.2.0 registered ``(epoch, attempt)`` in ``twophase_slots``
    and held a lock named after it: it ranks as batch -1 of its run, since a
    newer release runs in a newer run.
    """
    c = context
    where = "WHERE identity = %s AND partition_id = %s AND IS_USED_LOCK({}) = %s"
    table = in_schema(options, ATTEMPTS_TABLE)
    cur.execute(
        f"SELECT * FROM {table} {where.format('lock_name')}", (c.identity, c.partition_id, holder)
    )
    rows = row_dicts(cur)
    if not rows:
        table = in_schema(options, LEGACY_SLOTS_TABLE)
        name = "CONCAT(%s, ':', epoch, ':', attempt)"
        params = (c.identity, c.partition_id, _lock_name(c.identity, c.partition_id), holder)
        try:
            cur.execute(f"SELECT *, -1 AS batch_id FROM {table} {where.format(name)}", params)
        except Exception as exc:
            if errno(exc) == 1146:  # no such table: no attempt of 0.2.0 ever ran here
                return []
            raise
        rows = row_dicts(cur)
    for row in rows:
        check_row_format(
            row.get(FORMAT_COLUMN),
            table=table,
            row=f"identity {c.identity!r}, partition {c.partition_id}",
            where=ErrorContext.of_task(c),
        )
    return [(int(r["epoch"]), int(r["batch_id"]), int(r["attempt"])) for r in rows]


def release_slot(cur: Any) -> None:
    """Free the session's named locks (before the connection goes back to its pool)."""
    cur.execute("DO RELEASE_ALL_LOCKS()")
