"""The proof that a prepared transaction committed, and the outcome of a gid that vanished.

``COMMIT PREPARED`` of a decided gid the server no longer knows means either that
the transaction committed (a commit whose answer was lost, a retry) or that it
is lost (a failover to a standby that had not received it, a ``ROLLBACK
PREPARED`` by hand). The server's transaction id cannot tell which: it is not
an identity across a failover, since a promoted standby reuses the ids the old
primary had used. So each transaction inserts its own row into
``twophase_commits`` before it prepares (:func:`record_commit`): the row is
visible, on any server of the cluster, exactly when the transaction committed
there (:func:`outcome_of_vanished`). Decisions of 0.2.0, whose transactions
wrote no such row, are still resolved by their xid (``txid_status``).
"""

from __future__ import annotations

import logging
from typing import Any

from psycopg2 import sql

from twophase import TaskContext
from twophase.errors import FatalError, RetriableError

from ..._context import ErrorContext
from .._options import JdbcOptions, QualifiedName
from .._rows import check_row_format

__all__ = [
    "COMMITS_TABLE",
    "commits_table",
    "committed_or_raise",
    "create_commits_table",
    "outcome_of_vanished",
    "prune_commits",
    "record_commit",
    "recorded_commit",
]

_log = logging.getLogger("twophase.connectors.jdbc")

#: One row per prepared transaction, written by the transaction itself before it prepares.
COMMITS_TABLE = "twophase_commits"
_CREATE_COMMITS = (
    "CREATE TABLE IF NOT EXISTS {} (gid text PRIMARY KEY, identity text NOT NULL, "
    "batch_id bigint NOT NULL, partition_id integer NOT NULL, "
    "prepared_at timestamptz NOT NULL DEFAULT now(), "
    "record_format smallint NOT NULL DEFAULT 1)"
)


def commits_table(options: JdbcOptions) -> QualifiedName:
    """Return the table of commit proofs: ``twophase_commits`` beside the marker table."""
    return QualifiedName(options.marker_table.schema, COMMITS_TABLE)


def create_commits_table(cur: Any, table: sql.Composable) -> None:
    """Create ``twophase_commits`` if missing (driver, when the sink opens)."""
    cur.execute("SELECT to_regclass(%s)", (table.as_string(cur),))
    if cur.fetchone()[0] is None:
        cur.execute(sql.SQL(_CREATE_COMMITS).format(table))


def record_commit(cur: Any, table: sql.Composable, gid: str, context: TaskContext) -> None:
    """Insert this transaction's proof row (executor, in the transaction, before it prepares)."""
    cur.execute(
        sql.SQL(
            "INSERT INTO {} (gid, identity, batch_id, partition_id) VALUES (%s, %s, %s, %s)"
        ).format(table),
        (gid, context.identity, context.batch_id, context.partition_id),
    )


def recorded_commit(cur: Any, table: sql.Composable, gid: str) -> bool:
    """Whether the transaction ``gid`` committed on this server (its proof row is visible)."""
    cur.execute(sql.SQL("SELECT record_format FROM {} WHERE gid = %s").format(table), (gid,))
    rows = cur.fetchall()
    if rows:
        check_row_format(rows[0][0], table=table.as_string(cur), row=f"gid {gid!r}")
    return bool(rows)


def prune_commits(cur: Any, table: sql.Composable, identity: str, batch_id: int) -> None:
    """Delete the proofs of the batches before ``batch_id``, which the coordinator finished."""
    cur.execute(
        sql.SQL("DELETE FROM {} WHERE identity = %s AND batch_id < %s").format(table),
        (identity, batch_id),
    )


def outcome_of_vanished(
    cur: Any, commits: sql.Composable | None, gid: str, xid: int | None, where: ErrorContext
) -> str:
    """Tell what became of a decided gid the server no longer holds prepared.

    Parameters
    ----------
    cur
        An autocommit cursor.
    commits
        ``twophase_commits`` when the transaction wrote its proof row there
        (every transaction since 0.3.0), else None: the xid decides.
    gid, xid
        The transaction.
    where
        Error context (sink, batch, partition).

    Returns
    -------
    str
        ``"already committed"``, or ``"assumed committed"`` (no proof, and the
        server no longer knows the xid).
    """
    if commits is not None:
        status = "committed" if recorded_commit(cur, commits, gid) else "lost"
    elif xid is None:
        status = None
    else:
        cur.execute("SELECT txid_status(%s)", (xid,))
        status = cur.fetchone()[0]
    outcome = committed_or_raise(status, gid, where)
    if outcome == "assumed committed":
        _log.warning(
            "%s is not prepared any more and the server cannot tell whether its "
            "transaction committed (no xid, or too old); a transaction named by a commit "
            "decision is only ever committed, so it is taken as committed",
            gid,
        )
    return outcome


def committed_or_raise(status: str | None, gid: str, where: ErrorContext) -> str:
    """Turn the status of a vanished prepared transaction into its outcome, or raise.

    ``status`` is ``txid_status()``'s (``committed``, ``aborted``, ``in
    progress`` or None) or the proof row's (``committed`` or ``lost``).
    """
    if status == "committed":
        return "already committed"
    if status == "lost":
        raise FatalError(
            f"prepared transaction {gid!r} of a decided batch is no longer prepared and did not "
            "commit on this server (its proof row is not in twophase_commits): its rows are "
            "lost. The likely cause is a failover to a standby that had not received it "
            "(asynchronous replication), or a ROLLBACK PREPARED by hand. Nothing is reported "
            "committed: restore the batch's rows from the source (docs/jdbc.md, 'Failover needs "
            "synchronous replication')",
            **where.keywords(),
        )
    if status == "aborted":
        raise FatalError(
            f"prepared transaction {gid!r} of a decided batch was rolled back (by hand or by "
            "another process): its rows are lost. Restore them from the source (see "
            "docs/jdbc.md, 'resolving in-doubt transactions by hand')",
            **where.keywords(),
        )
    if status == "in progress":
        raise RetriableError(f"transaction of {gid!r} is still in progress", **where.keywords())
    return "assumed committed"
