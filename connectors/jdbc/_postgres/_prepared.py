"""The coordinated protocol's SQL: prepare, ``COMMIT`` / ``ROLLBACK PREPARED``, recovery.

The executor prepares (:meth:`PreparedTransactions.prepare`); the driver probes the
server, commits, lists and rolls back by gid (:class:`PreparedTransactions`).
Every driver statement runs in autocommit mode and is safe to repeat: an
unknown gid is success for ``ROLLBACK PREPARED`` and is resolved through the
transaction's xid for ``COMMIT PREPARED``.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg2
from psycopg2 import sql

from twophase import TransactionHandle, TransactionStatus
from twophase.errors import ConfigurationError

from ..._context import ErrorContext
from .._coordinated import PreparedStatements
from .._gid import GID_PREFIX, gid_prefix
from . import _sql
from ._client import PostgresClient
from ._commits import (
    commits_table,
    create_commits_table,
    outcome_of_vanished,
    prune_commits,
    record_commit,
    transaction_status,
)
from ._errors import is_connection_error, map_error, sqlstate
from ._fencing import create_fence_table, fence_attempts, fence_table, refuse_if_fenced
from ._slots import active_sinks, share_slots
from ._transaction import PostgresTransaction

__all__ = [
    "PostgresHandle",
    "PreparedTransactions",
]

_log = logging.getLogger("twophase.connectors.jdbc")

#: SQLSTATE of ``COMMIT/ROLLBACK PREPARED`` with a gid that is not prepared.
_UNKNOWN_GID = "42704"

#: Prepared transactions of other sinks older than this are reported by ``open()``.
_STALE_AFTER_SECONDS = 600.0


@dataclass(frozen=True)
class PostgresHandle(TransactionHandle):
    """The handle of one partition's prepared transaction. Frozen and picklable.

    Attributes
    ----------
    transaction_id
        The gid, ``tp:<identity>:<batch>:<partition>:<attempt>``.
    batch_id, partition_id, attempt
        Where it came from.
    xid
        The server's 64-bit transaction id. None for handles rebuilt from
        ``pg_prepared_xacts``.
    rows
        Rows written by the transaction (informational).
    proof
        Whether the transaction wrote its row into ``twophase_commits`` (every
        transaction since 0.3.0): a gid that vanished is then told committed
        or lost by that row, on any server of the cluster. Without it (a
        decision of 0.2.0) the gid is resolved by its xid (``txid_status``),
        which a failover can make lie.
    """

    xid: int | None = None
    rows: int = 0
    proof: bool = False


class PreparedTransactions(PostgresClient, PreparedStatements[PostgresHandle]):
    """Driver-side statements on prepared transactions (also run by a retried task).

    Picklable (options and connection parameters only). It is the PostgreSQL
    dialect's :class:`~._dialect.PreparedStore`.
    """

    # ------------------------------------------------- the PreparedStore protocol
    def capacity(self, identity: str, where: ErrorContext) -> int | None:
        """Refuse a server that cannot prepare; size batches to this sink's share of its slots.

        Parameters
        ----------
        identity
            This sink's identity.
        where
            Error context (sink, batch, partition).

        Returns
        -------
        int
            How many partitions one batch may have (:mod:`._slots`).

        Raises
        ------
        ConfigurationError
            ``max_prepared_transactions = 0`` (with the server's hint),
            ``max_partitions`` above it, or no slot left for this sink.
        """
        server = self.server(where)
        if server.max_prepared_transactions == 0:
            self.probe(where)  # raises with the server's message and hint
        fences = _sql.ident(fence_table(self.options))
        active = self.run(
            "listing the server's coordinated sinks",
            lambda cur: active_sinks(cur, identity, fences.as_string(cur)),
            where,
        )
        share = share_slots(
            server.max_prepared_transactions, self.options.max_partitions, active, where
        )
        share.report(
            where.sink,
            f"{self.connection.describe()} (PostgreSQL {server.describe_version()})",
            server.prepared_in_use,
            capped=self.options.max_partitions is not None,
        )
        return share.limit

    def ensure_ready(self, identity: str, where: ErrorContext) -> None:
        """Create the fence row; warn of other sinks' prepared transactions over 10 minutes old.

        Parameters
        ----------
        identity
            The sink identity.
        where
            Error context (sink, batch, partition).
        """
        self.ensure_fences(identity, where)
        stale = self.stale(identity, _STALE_AFTER_SECONDS, where)
        if stale:
            _log.warning(
                "sink %s: %d prepared transaction(s) of other twophase sinks are older than "
                "10 minutes (%s%s); they hold locks and slots and block VACUUM. If their "
                "queries are gone (a reset checkpoint), roll them back by hand: see "
                "docs/jdbc.md",
                where.sink,
                len(stale),
                ", ".join(stale[:3]),
                ", ..." if len(stale) > 3 else "",
            )

    def prepare(self, txn: PostgresTransaction) -> PostgresHandle:
        """Refuse a fenced attempt and ``PREPARE TRANSACTION`` (executor).

        Parameters
        ----------
        txn
            The open, finished transaction.

        Returns
        -------
        PostgresHandle
            The handle, with gid and xid.
        """
        conn = txn.open_connection("PREPARE TRANSACTION")
        try:
            with conn.cursor() as cur:
                refuse_if_fenced(cur, self.fences, txn.context)
                record_commit(cur, self.commits, txn.gid, txn.context)
                cur.execute("PREPARE TRANSACTION %s", (txn.gid,))
        except psycopg2.Error as exc:
            if is_connection_error(exc):
                # The server may have prepared it before the connection broke.
                txn.state = "unknown"
            raise txn.failure(exc, f"PREPARE TRANSACTION {txn.gid!r}") from exc
        txn.state = "prepared"
        txn.conn = None
        txn.pool.release(conn)
        c = txn.context
        return PostgresHandle(
            txn.gid, c.batch_id, c.partition_id, c.attempt, txn.xid, txn.rows, proof=True
        )

    def commit_prepared(self, handle: PostgresHandle, where: ErrorContext) -> str:
        """``COMMIT PREPARED``; a gid no longer prepared is resolved by its proof row (or xid).

        Parameters
        ----------
        handle
            The handle.
        where
            Error context (sink, batch, partition).

        Returns
        -------
        str
            As :meth:`commit`.
        """
        return self.commit(handle.transaction_id, handle.xid, where, proof=handle.proof)

    def rollback_prepared(self, handle: PostgresHandle, where: ErrorContext) -> None:
        """``ROLLBACK PREPARED``; a gid that is not this connector's is refused.

        Parameters
        ----------
        handle
            The handle.
        where
            Error context (sink, batch, partition).

        Raises
        ------
        ConfigurationError
            The gid is not one of this connector's.
        """
        self.ours(handle.transaction_id, where)
        self.rollback(handle.transaction_id, where)

    # ------------------------------------------------------------ statements
    def probe(self, where: ErrorContext) -> None:
        """Check that the server accepts ``PREPARE TRANSACTION``; fail with its own hint.

        Prepares an empty transaction under a gid no real transaction uses and
        rolls it back at once.

        Parameters
        ----------
        where
            Error context (sink, batch, partition).

        Raises
        ------
        ConfigurationError
            The server refuses (``max_prepared_transactions = 0``), with the
            server's message and hint.
        """
        probe_gid = f"{GID_PREFIX}probe:{uuid.uuid4().hex}"

        def probe(cur: Any) -> None:
            cur.execute("BEGIN")
            try:
                cur.execute("PREPARE TRANSACTION %s", (probe_gid,))
            except psycopg2.Error as exc:
                if cur.connection.info.transaction_status != 0:
                    cur.execute("ROLLBACK")
                raise ConfigurationError(
                    "protocol='coordinated' needs PREPARE TRANSACTION, which this server "
                    f"refuses: {map_error(exc, 'PREPARE TRANSACTION').message}. Or let the "
                    "sink use protocol='markers' (protocol='auto' picks it)",
                    setting="max_prepared_transactions",
                    **where.keywords(),
                ) from None
            cur.execute("ROLLBACK PREPARED %s", (probe_gid,))

        self.run("probing PREPARE TRANSACTION", probe, where)

    @property
    def fences(self) -> sql.Composable:
        """Return the fence table's quoted name."""
        return _sql.ident(fence_table(self.options))

    @property
    def commits(self) -> sql.Composable:
        """Return the quoted name of the table of commit proofs."""
        return _sql.ident(commits_table(self.options))

    handle_type = PostgresHandle

    @property
    def fence_tables(self) -> str:
        """Name the fence tables: ``twophase_fences`` and ``twophase_commits``."""
        return (
            f"{fence_table(self.options)} (one row per query) and "
            f"{commits_table(self.options)} (one row per transaction of the last batches)"
        )

    fence_rights = (
        "the sink's user needs SELECT, INSERT, UPDATE on the first and SELECT, INSERT, DELETE on "
        "the second (GRANT them on existing tables) and CREATE on their schema to create them "
        "(or create them as docs/jdbc.md shows)"
    )

    def create_fences(self, cur: Any, identity: str) -> None:
        """Create ``twophase_fences``, with this identity's row, and ``twophase_commits``."""
        create_fence_table(cur, self.fences, identity)
        create_commits_table(cur, self.commits)

    def move_fence(self, cur: Any, identity: str, rank: tuple[int, int]) -> bool:
        """Raise the identity's fence row to ``rank`` (:func:`~._fencing.fence_attempts`).

        Once it is raised, the commit proofs of the batches before the rank's go: the
        coordinator finished them, and no recovery commits them again.
        """
        if not fence_attempts(cur, self.fences, identity, rank):
            return False
        prune_commits(cur, self.commits, identity, rank[1])
        return True

    def commit(self, gid: str, xid: int | None, where: ErrorContext, *, proof: bool = False) -> str:
        """``COMMIT PREPARED gid``; an unknown gid is resolved by its proof row, or its xid.

        Parameters
        ----------
        gid
            The gid.
        xid
            The 64-bit transaction id recorded at ``begin`` (None when unknown).
        where
            Error context (sink, batch, partition).
        proof
            Whether the transaction wrote its row into ``twophase_commits``
            (:attr:`PostgresHandle.proof`).

        Returns
        -------
        str
            ``"committed"`` (now), ``"already committed"`` (its proof row, or
            the xid, says so), or ``"assumed committed"`` (no proof, and the
            server no longer knows the xid).

        Raises
        ------
        FatalError
            The transaction did not commit on this server and is prepared no
            more: its rows are lost (a failover to a standby that had not
            received it, or a ``ROLLBACK PREPARED`` by hand).
        RetriableError
            The server is unreachable, or the transaction is still running.
        """

        def commit(cur: Any) -> str | None:
            try:
                cur.execute("COMMIT PREPARED %s", (gid,))
                return None
            except psycopg2.Error as exc:
                if sqlstate(exc) != _UNKNOWN_GID:
                    raise
            return outcome_of_vanished(cur, self.commits if proof else None, gid, xid, where)

        outcome = self.run(f"COMMIT PREPARED {gid!r}", commit, where)
        return "committed" if outcome is None else outcome

    def status(self, handle: PostgresHandle, where: ErrorContext) -> TransactionStatus | None:
        """Tell prepared, committed or lost, by ``pg_prepared_xacts`` and the proof row.

        None for a handle without a proof row (0.2.0): an xid tells nothing
        across a failover, and such a handle is committed as before.
        """
        if not handle.proof:
            return None
        gid = handle.transaction_id

        def query(cur: Any) -> TransactionStatus:
            return transaction_status(cur, self.commits, gid)

        return self.run(f"status of {gid!r}", query, where)

    def rollback(self, gid: str, where: ErrorContext) -> bool:
        """``ROLLBACK PREPARED gid`` on a pooled connection; an unknown gid is success.

        Parameters
        ----------
        gid
            The gid.
        where
            Error context (sink, batch, partition).

        Returns
        -------
        bool
            Whether a prepared transaction was rolled back.
        """

        def rollback(cur: Any) -> bool:
            try:
                cur.execute("ROLLBACK PREPARED %s", (gid,))
            except psycopg2.Error as exc:
                if sqlstate(exc) == _UNKNOWN_GID:
                    return False
                raise
            return True

        return self.run(f"ROLLBACK PREPARED {gid!r}", rollback, where)

    def prepared_gids(self, identity: str, where: ErrorContext) -> list[str]:
        """List the gids of this identity's prefix in ``pg_prepared_xacts``, in this database.

        Parameters
        ----------
        identity
            The sink identity.
        where
            Error context (sink, batch, partition).

        Returns
        -------
        list of str
            The gids.
        """
        prefix = gid_prefix(identity)

        def query(cur: Any) -> list[str]:
            cur.execute(
                "SELECT gid FROM pg_catalog.pg_prepared_xacts "
                "WHERE database = current_database() AND left(gid, %s) = %s ORDER BY gid",
                (len(prefix), prefix),
            )
            return [r[0] for r in cur.fetchall()]

        return self.run("listing prepared transactions", query, where)

    def stale(self, identity: str, older_than: float, where: ErrorContext) -> list[str]:
        """List prepared transactions of other identities of this connector, older than a limit.

        They hold locks and slots and block VACUUM; nothing of this run will
        resolve them (a reset checkpoint, another query), so ``open()`` warns.

        Parameters
        ----------
        identity
            This sink's identity (excluded).
        older_than
            Age in seconds.
        where
            Error context (sink, batch, partition).

        Returns
        -------
        list of str
            Their gids.
        """
        mine = gid_prefix(identity)

        def query(cur: Any) -> list[str]:
            cur.execute(
                "SELECT gid FROM pg_catalog.pg_prepared_xacts WHERE database = current_database() "
                "AND left(gid, %s) = %s AND left(gid, %s) <> %s "
                "AND prepared < now() - make_interval(secs => %s) ORDER BY prepared",
                (len(GID_PREFIX), GID_PREFIX, len(mine), mine, older_than),
            )
            return [r[0] for r in cur.fetchall()]

        return self.run("listing stale prepared transactions", query, where)
