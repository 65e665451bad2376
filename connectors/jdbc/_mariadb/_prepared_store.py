"""The coordinated protocol on MariaDB: ``XA PREPARE``, ``XA COMMIT`` by xid, ``XA RECOVER``.

The executor prepares (:meth:`XATransactions.prepare`) and then closes its
connection: MariaDB keeps a prepared XA transaction attached to the session
that prepared it, and another session can only commit it once that one is
gone (``XA COMMIT`` answers "unknown XID", 1397, before). The driver commits,
lists and rolls back by xid through the family's steps
(:class:`~.._prepared_store.PreparedStatements`), from what this store declares:

* ``XA ROLLBACK`` of an xid the server does not know is success;
* ``XA COMMIT`` of such an xid is resolved by the transaction's row in
  ``twophase_prepared`` (:mod:`._zombie_fences`): there means committed; an xid
  still listed by ``XA RECOVER`` is still attached to a session (for a few
  milliseconds after that session closed, or for as long as it lives), and
  the statement is asked again for up to a second, then retried by the
  coordinator (:class:`~twophase.errors.RetriableError`).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from twophase import TransactionHandle

from ..._context import ErrorContext
from .._gid import parse_gid
from .._prepared_store import PreparedStatements
from ._client import MariaDBClient
from ._errors import errno
from ._transaction import MariaDBTransaction
from ._xid import FORMAT_ID, Xid, xid_of
from ._zombie_fences import (
    FENCE_TABLE,
    PREPARED_TABLE,
    create_fence_tables,
    fence_attempts,
    in_schema,
    refuse_if_fenced,
)

__all__ = ["MariaDBHandle", "XATransactions"]

_log = logging.getLogger("twophase.connectors.jdbc")

#: ``XA COMMIT`` / ``XA ROLLBACK`` of an xid the server does not hold prepared (or not detached).
_UNKNOWN_XID = 1397


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
        """
        xa = txn.xa
        assert xa is not None

        def statements(cur: Any) -> None:
            refuse_if_fenced(cur, self.options, txn.context)
            cur.execute("XA END %s, %s, %s", xa)
            cur.execute("XA PREPARE %s, %s, %s", xa)

        self.prepare_with(txn, statements)
        c = txn.context
        return MariaDBHandle(txn.gid, c.batch_id, c.partition_id, c.attempt, txn.rows)

    # ---------------------------------------------------------- driver: phase 2
    prepare_verb = "XA PREPARE"
    commit_verb = "XA COMMIT"
    rollback_verb = "XA ROLLBACK"
    unknown_id = _UNKNOWN_XID
    transaction_kind = "XA transaction"
    docs_page = "docs/mariadb.md"
    attaches = True

    def error_code(self, exc: BaseException) -> object:
        """Return the error number."""
        return errno(exc)

    def id_params(self, gid: str, where: ErrorContext) -> tuple[Any, ...]:
        """Return the xid's ``(gtrid, bqual, formatID)``; refuse a gid not of this connector."""
        parsed = self.ours(gid, where)
        return xid_of(parsed.identity, parsed.batch_id, parsed.partition_id, parsed.attempt).params

    def is_prepared(self, cur: Any, params: tuple[Any, ...]) -> bool:
        """``XA RECOVER`` lists the xid."""
        return any(xid.params == params for xid in _recovered(cur))

    def committed(self, cur: Any, gid: str) -> bool:
        """Whether the transaction's own row in ``twophase_prepared`` is visible."""
        parsed = parse_gid(gid)
        if parsed is None:
            return False
        cur.execute(
            f"SELECT 1 FROM {in_schema(self.options, PREPARED_TABLE)} WHERE identity = %s "
            "AND batch_id = %s AND partition_id = %s AND attempt = %s LIMIT 1",
            (parsed.identity, parsed.batch_id, parsed.partition_id, parsed.attempt),
        )
        return cur.fetchone() is not None

    def prepared_gids(self, identity: str, where: ErrorContext) -> list[str]:
        """Every prepared xid of this connector (``XA RECOVER``); the caller keeps its own."""
        return self.run(
            "listing prepared XA transactions", lambda cur: [x.gid for x in _recovered(cur)], where
        )

    #: The writer's name for :meth:`rollback`.
    rollback_xid = PreparedStatements.rollback


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
