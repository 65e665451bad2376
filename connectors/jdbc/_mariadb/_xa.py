"""The coordinated protocol on MariaDB: ``XA PREPARE``, ``XA COMMIT`` by xid, ``XA RECOVER``.

The executor prepares (:meth:`XATransactions.prepare`) and then closes its
connection: MariaDB keeps a prepared XA transaction attached to the session
that prepared it, and another session can only commit it once that one is
gone (``XA COMMIT`` answers "unknown XID", 1397, before). The driver commits,
lists and rolls back by xid; every statement runs in autocommit mode and is
safe to repeat:

* ``XA ROLLBACK`` of an xid the server does not know is success;
* ``XA COMMIT`` of such an xid is resolved by the transaction's row in
  ``twophase_prepared`` (:mod:`._fencing`): there means committed; an xid
  still listed by ``XA RECOVER`` is still attached to a session (for a few
  milliseconds after that session closed, or for as long as it lives), and
  the statement is asked again for up to a second, then retried by the
  coordinator (:class:`~twophase.errors.RetriableError`).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from twophase import TransactionHandle, TransactionStatus
from twophase.errors import FatalError, RetriableError

from ..._context import ErrorContext
from .._coordinated import PreparedStatements
from ._client import MariaDBClient
from ._errors import errno
from ._fencing import (
    FENCE_TABLE,
    PREPARED_TABLE,
    create_fence_tables,
    fence_attempts,
    in_schema,
    refuse_if_fenced,
)
from ._transaction import MariaDBTransaction
from ._xid import FORMAT_ID, Xid, xid_of

__all__ = ["MariaDBHandle", "XATransactions"]

_log = logging.getLogger("twophase.connectors.jdbc")

_UNKNOWN_XID = 1397
#: Pauses before asking again about an xid still attached to the session that prepared it:
#: MariaDB detaches a branch a few milliseconds after that session closed.
_DETACH_WAITS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4)


@dataclass(frozen=True)
class MariaDBHandle(TransactionHandle):
    """The handle of one partition's prepared XA transaction. Frozen and picklable.

    Attributes
    ----------
    transaction_id
        ``tp:<identity>:<batch>:<partition>:<attempt>`` (gtrid ``tp:<identity>``,
        bqual ``<batch>:<partition>:<attempt>``).
    batch_id, partition_id, attempt
        Where it came from.
    rows
        Rows written by the transaction (informational).
    """

    rows: int = 0


class XATransactions(MariaDBClient, PreparedStatements[MariaDBHandle]):
    """The coordinated protocol's statements (the dialect's :class:`~.._dialect.PreparedStore`).

    Picklable (options and connection parameters only).
    """

    # ------------------------------------------------------------- driver: open
    def capacity(self, identity: str, where: ErrorContext) -> int | None:
        """Check that the server prepares XA transactions; MariaDB has no slot limit.

        Parameters
        ----------
        identity
            This sink's identity (unused: nothing is shared).
        where
            Error context (sink, batch, partition).

        Returns
        -------
        int or None
            ``max_partitions`` (None: no limit).
        """
        probe = Xid(f"tp:probe:{uuid.uuid4().hex}", "0")

        def run(cur: Any) -> str:
            cur.execute("XA START %s, %s, %s", probe.params)
            cur.execute("XA END %s, %s, %s", probe.params)
            cur.execute("XA PREPARE %s, %s, %s", probe.params)
            cur.execute("XA ROLLBACK %s, %s, %s", probe.params)
            cur.execute("SELECT @@version")
            return str(cur.fetchone()[0])

        version = self.run("probing XA PREPARE", run, where)
        _log.debug(
            "sink %s: opened on %s (%s): protocol 'coordinated' (XA)",
            where.sink,
            self.connection.describe(),
            version,
        )
        return self.options.max_partitions

    handle_type = MariaDBHandle

    @property
    def fence_tables(self) -> str:
        """Name the fence tables, beside the marker table."""
        return f"{FENCE_TABLE} and {PREPARED_TABLE}"

    fence_rights = "the sink's user needs CREATE, SELECT, INSERT, UPDATE and DELETE there"

    def ensure_ready(self, identity: str, where: ErrorContext) -> None:
        """Create the fence tables (``twophase_fences``, ``twophase_prepared``) and this rank.

        Parameters
        ----------
        identity
            The sink identity.
        where
            Error context (sink, batch, partition).
        """
        self.ensure_fences(identity, where)

    def create_fences(self, cur: Any, identity: str) -> None:
        """Create both fence tables if missing, and this identity's rank."""
        create_fence_tables(cur, self.options, identity)

    def move_fence(self, cur: Any, identity: str, rank: tuple[int, int]) -> bool:
        """Raise the rank and clear the rows of attempts at or below it."""
        return fence_attempts(cur, self.options, identity, rank)

    # --------------------------------------------------------- executor: prepare
    def prepare(self, txn: MariaDBTransaction) -> MariaDBHandle:
        """Record the transaction, refuse a fenced attempt, ``XA END`` and ``XA PREPARE``.

        The connection is closed afterwards, which detaches the prepared
        transaction from it (the driver cannot commit it before).

        Parameters
        ----------
        txn
            The open, finished transaction.

        Returns
        -------
        MariaDBHandle
            The handle.
        """
        conn = txn.open_connection("XA PREPARE")
        assert txn.xa is not None
        try:
            with conn.cursor() as cur:
                refuse_if_fenced(cur, self.options, txn.context)
                cur.execute("XA END %s, %s, %s", txn.xa)
                cur.execute("XA PREPARE %s, %s, %s", txn.xa)
        except txn.errors.error as exc:
            if txn.errors.is_connection_error(exc):
                txn.state = "unknown"  # the server may have prepared it
            raise txn.failure(exc, f"XA PREPARE {txn.gid!r}") from exc
        txn.state = "prepared"
        txn.conn = None
        txn.pool.discard(conn)  # detaches the prepared transaction
        c = txn.context
        return MariaDBHandle(txn.gid, c.batch_id, c.partition_id, c.attempt, txn.rows)

    # ---------------------------------------------------------- driver: phase 2
    def _listed(self, cur: Any, xid: Xid) -> bool:
        return xid in _recovered(cur)

    def _committed(self, cur: Any, xid: Xid, handle: MariaDBHandle) -> bool:
        """Whether the transaction's own row in ``twophase_prepared`` is visible: it committed."""
        cur.execute(
            f"SELECT 1 FROM {in_schema(self.options, PREPARED_TABLE)} WHERE identity = %s "
            "AND batch_id = %s AND partition_id = %s AND attempt = %s LIMIT 1",
            (xid.gtrid[3:], handle.batch_id, handle.partition_id, handle.attempt),
        )
        return cur.fetchone() is not None

    def status(self, handle: MariaDBHandle, where: ErrorContext) -> TransactionStatus:
        """Tell prepared (``XA RECOVER`` lists it), committed (its row is visible), or lost.

        Parameters
        ----------
        handle
            The handle.
        where
            Error context (sink, batch, partition).

        Returns
        -------
        TransactionStatus
            Prepared is asked first, so a commit between the two queries shows
            as committed, never as lost.
        """
        xid = self._xid(handle, where)

        def query(cur: Any) -> TransactionStatus:
            if self._listed(cur, xid):
                return TransactionStatus.PREPARED
            if self._committed(cur, xid, handle):
                return TransactionStatus.COMMITTED
            return TransactionStatus.LOST

        return self.run(f"status of {handle.transaction_id!r}", query, where)

    def commit_prepared(self, handle: MariaDBHandle, where: ErrorContext) -> str:
        """``XA COMMIT``; an xid the server does not know is resolved by its row.

        Parameters
        ----------
        handle
            The handle.
        where
            Error context (sink, batch, partition).

        Returns
        -------
        str
            ``"committed"`` or ``"already committed"``.

        Raises
        ------
        FatalError
            The transaction was rolled back: its rows are lost.
        RetriableError
            The server is unreachable, or the transaction is still attached to
            the session that prepared it.
        """
        xid = self._xid(handle, where)

        def commit(cur: Any) -> str:
            try:
                cur.execute("XA COMMIT %s, %s, %s", xid.params)
                return "committed"
            except self.errors.error as exc:
                if errno(exc) != _UNKNOWN_XID:
                    raise
            if self._listed(cur, xid):
                return "attached"
            return "already committed" if self._committed(cur, xid, handle) else "gone"

        outcome = self.run(f"XA COMMIT {handle.transaction_id!r}", commit, where)
        for pause in _DETACH_WAITS:
            if outcome != "attached":
                break
            time.sleep(pause)
            outcome = self.run(f"XA COMMIT {handle.transaction_id!r}", commit, where)
        if outcome == "attached":
            raise RetriableError(
                f"{handle.transaction_id!r} is prepared but still attached to the session that "
                "prepared it (its task has not closed its connection yet); retried",
                **where.keywords(),
            )
        if outcome == "gone":
            raise FatalError(
                f"XA transaction {handle.transaction_id!r} of a decided batch was rolled back (by "
                "hand or by another process): its rows are lost. Restore them from the source "
                "(see docs/mariadb.md, 'resolving in-doubt transactions by hand')",
                **where.keywords(),
            )
        return outcome

    def rollback_prepared(self, handle: MariaDBHandle, where: ErrorContext) -> None:
        """``XA ROLLBACK``; an xid that is not this connector's is refused.

        Parameters
        ----------
        handle
            The handle.
        where
            Error context (sink, batch, partition).
        """
        self.rollback_xid(handle.transaction_id, where)

    def rollback_xid(self, gid: str, where: ErrorContext) -> bool:
        """``XA ROLLBACK`` by transaction id; an xid the server does not know is success.

        Parameters
        ----------
        gid
            The handle's transaction id.
        where
            Error context (sink, batch, partition).

        Returns
        -------
        bool
            Whether a prepared transaction was rolled back.

        Raises
        ------
        RetriableError
            The xid is prepared but still attached to a live session.
        """
        xid = self._xid_of(gid, where)

        def rollback(cur: Any) -> str:
            try:
                cur.execute("XA ROLLBACK %s, %s, %s", xid.params)
                return "rolled back"
            except self.errors.error as exc:
                if errno(exc) != _UNKNOWN_XID:
                    raise
            return "attached" if self._listed(cur, xid) else "unknown"

        outcome = self.run(f"XA ROLLBACK {gid!r}", rollback, where)
        for pause in _DETACH_WAITS:
            if outcome != "attached":
                break
            time.sleep(pause)
            outcome = self.run(f"XA ROLLBACK {gid!r}", rollback, where)
        if outcome == "attached":
            raise RetriableError(
                f"{gid!r} is prepared but still attached to the session that prepared it; retried",
                **where.keywords(),
            )
        return outcome == "rolled back"

    def prepared_gids(self, identity: str, where: ErrorContext) -> list[str]:
        """List the gids of the prepared XA transactions of this connector (``XA RECOVER``).

        Parameters
        ----------
        identity
            The sink identity (the caller keeps only its own).
        where
            Error context (sink, batch, partition).

        Returns
        -------
        list of str
            The gids.
        """

        def query(cur: Any) -> list[str]:
            return [xid.gid for xid in _recovered(cur)]

        return self.run("listing prepared XA transactions", query, where)

    def _xid(self, handle: MariaDBHandle, where: ErrorContext) -> Xid:
        return self._xid_of(handle.transaction_id, where)

    def _xid_of(self, gid: str, where: ErrorContext) -> Xid:
        parsed = self.ours(gid, where)
        return xid_of(parsed.identity, parsed.batch_id, parsed.partition_id, parsed.attempt)


def _recovered(cur: Any) -> list[Xid]:
    """Run ``XA RECOVER``: the prepared xids of this connector's format (others are skipped)."""
    cur.execute("XA RECOVER")
    found = []
    for format_id, gtrid_length, _bqual_length, data in cur.fetchall():
        if int(format_id) != FORMAT_ID:
            continue
        raw = data if isinstance(data, bytes) else str(data).encode()
        n = int(gtrid_length)
        try:
            found.append(Xid(raw[:n].decode(), raw[n:].decode()))
        except UnicodeDecodeError:
            continue
    return found
