"""The coordinated protocol's SQL: prepare, ``COMMIT`` / ``ROLLBACK PREPARED``, recovery.

The executor prepares (:meth:`PreparedTransactions.prepare`); the driver probes the
server and sizes batches to its slots; the steps by gid (commit, rollback,
status, ids in doubt, fence) are the family's (:class:`~.._prepared_store.PreparedStatements`),
from what this store declares: the statements, SQLSTATE 42704 for an unknown
gid, ``pg_prepared_xacts``, and the proof rows of ``twophase_commits``
(:mod:`._commit_proofs`; the xid for a decision of 0.2.0).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg2
from psycopg2 import sql

from twophase import TransactionHandle, TransactionStatus
from twophase.errors import ConfigurationError

from ..._context import ErrorContext
from .._gid import GID_PREFIX, gid_prefix
from .._prepared_store import PreparedStatements
from . import _sql
from ._client import PostgresClient
from ._commit_proofs import (
    commits_table,
    create_commits_table,
    outcome_of_vanished,
    prune_commits,
    record_commit,
    recorded_commit,
)
from ._errors import map_error, sqlstate
from ._prepared_capacity import active_sinks, share_slots
from ._transaction import PostgresTransaction
from ._zombie_fences import create_fence_table, fence_attempts, fence_table, refuse_if_fenced

__all__ = [
    "PostgresHandle",
    "PreparedTransactions",
]


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
            How many partitions one batch may have (:mod:`._prepared_capacity`).

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

        def statements(cur: Any) -> None:
            refuse_if_fenced(cur, self.fences, txn.context)
            record_commit(cur, self.commits, txn.gid, txn.context)
            cur.execute("PREPARE TRANSACTION %s", (txn.gid,))

        self.prepare_with(txn, statements)
        c = txn.context
        return PostgresHandle(
            txn.gid, c.batch_id, c.partition_id, c.attempt, txn.xid, txn.rows, proof=True
        )

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
        """Raise the identity's fence row to ``rank`` (:func:`~._zombie_fences.fence_attempts`).

        Once it is raised, the commit proofs of the batches before the rank's go: the
        coordinator finished them, and no recovery commits them again.
        """
        if not fence_attempts(cur, self.fences, identity, rank):
            return False
        prune_commits(cur, self.commits, identity, rank[1])
        return True

    prepare_verb = "PREPARE TRANSACTION"
    commit_verb = "COMMIT PREPARED"
    rollback_verb = "ROLLBACK PREPARED"
    unknown_id = "42704"

    def error_code(self, exc: BaseException) -> object:
        """Return the SQLSTATE."""
        return sqlstate(exc)

    def id_params(self, gid: str, where: ErrorContext) -> tuple[Any, ...]:
        """Return the gid itself."""
        return (gid,)

    def is_prepared(self, cur: Any, params: tuple[Any, ...]) -> bool:
        """``pg_prepared_xacts`` lists the gid."""
        cur.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", params)
        return cur.fetchone() is not None

    def committed(self, cur: Any, gid: str) -> bool:
        """Its row in ``twophase_commits`` (:func:`~._commit_proofs.recorded_commit`)."""
        return recorded_commit(cur, self.commits, gid)

    def vanished(self, cur: Any, handle: PostgresHandle, where: ErrorContext) -> str:
        """Tell by its proof row, or by its xid for 0.2.0 (:mod:`._commit_proofs`)."""
        commits = self.commits if handle.proof else None
        return outcome_of_vanished(cur, commits, handle.transaction_id, handle.xid, where)

    def status(self, handle: PostgresHandle, where: ErrorContext) -> TransactionStatus | None:
        """None for a handle without a proof row (0.2.0): an xid tells nothing across a failover."""
        return super().status(handle, where) if handle.proof else None

    def prepared_gids(self, identity: str, where: ErrorContext) -> list[str]:
        """List the gids of this identity's prefix in ``pg_prepared_xacts``, in this database."""
        prefix = gid_prefix(identity)
        return self._gids(
            "listing prepared transactions",
            "left(gid, %s) = %s ORDER BY gid",
            (len(prefix), prefix),
            where,
        )

    def stale(self, identity: str, older_than: float, where: ErrorContext) -> list[str]:
        """List those of other identities of this connector older than ``older_than``, by age."""
        mine = gid_prefix(identity)
        return self._gids(
            "listing stale prepared transactions",
            "left(gid, %s) = %s AND left(gid, %s) <> %s "
            "AND prepared < now() - make_interval(secs => %s) ORDER BY prepared",
            (len(GID_PREFIX), GID_PREFIX, len(mine), mine, older_than),
            where,
        )

    def _gids(
        self, doing: str, condition: str, params: tuple[Any, ...], where: ErrorContext
    ) -> list[str]:
        """List the gids of ``pg_prepared_xacts`` in this database that meet ``condition``."""

        def query(cur: Any) -> list[str]:
            cur.execute(
                "SELECT gid FROM pg_catalog.pg_prepared_xacts "
                f"WHERE database = current_database() AND {condition}",
                params,
            )
            return [r[0] for r in cur.fetchall()]

        return self.run(doing, query, where)
