"""The two PostgreSQL sinks: what each protocol adds to :class:`~._base.PostgresSinkMixin`.

* :class:`PostgresTwoPhaseSink` -- the coordinated protocol: each partition's transaction
  is prepared (``PREPARE TRANSACTION``) on its executor; the driver records
  the decision and runs ``COMMIT PREPARED`` for every partition (phase 2).
* :class:`PostgresMarkerSink` -- the markers protocol, for servers with
  ``max_prepared_transactions = 0``: each partition commits on its executor
  together with a marker row carrying the partition's fingerprint.

Users build them with :func:`~._factory.postgres_sink`, which picks one from
the server.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from twophase import (
    Marker,
    MarkerCommitSink,
    RecoveryContext,
    RetryPolicy,
    SinkContext,
    TwoPhaseCommitSink,
)
from twophase.errors import ConfigurationError

from ._base import PostgresHandle, PostgresSinkMixin
from ._catalog import ServerInfo
from ._config import ConnectionConfig
from ._gid import parse_gid
from ._markers import MarkerTable
from ._options import PostgresOptions
from ._prepared import PreparedTransactions, partition_limit, prepare_transaction
from ._transaction import PostgresTransaction

__all__ = ["PostgresMarkerSink", "PostgresSink", "PostgresTwoPhaseSink"]

_log = logging.getLogger("twophase.connectors.jdbc")

#: Prepared transactions of other sinks older than this are reported by ``open()``.
_STALE_AFTER_SECONDS = 600.0


class PostgresTwoPhaseSink(
    PostgresSinkMixin, TwoPhaseCommitSink[PostgresTransaction, PostgresHandle]
):
    """Exactly-once into PostgreSQL with ``PREPARE TRANSACTION`` (``coordinated``).

    Build it with :func:`~twophase.connectors.jdbc.postgres_sink` (which
    checks the server); the constructor is public for typing and for forcing
    the protocol.

    Every partition of a micro-batch writes its rows with ``COPY`` inside one
    transaction and prepares it; once every partition has prepared, the driver
    records the decision and commits them all. A batch is either committed in
    full or not at all, whatever fails and whenever.

    Parameters
    ----------
    name
        The sink name (part of every gid).
    options
        What to write and how.
    connection
        Connection parameters.
    server
        The server's capabilities, when already read (sets
        :attr:`max_transactions_per_batch` now rather than in :meth:`open`).
    checkpoint_location, retry
        See :class:`twophase.TwoPhaseCommitSink`.
    """

    def __init__(
        self,
        name: str,
        options: PostgresOptions,
        connection: ConnectionConfig,
        *,
        server: ServerInfo | None = None,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(
            options, connection, name=name, checkpoint_location=checkpoint_location, retry=retry
        )
        self._prepared = PreparedTransactions(options, connection)
        if server is not None and server.max_prepared_transactions > 0:
            self.max_transactions_per_batch = partition_limit(
                server.max_prepared_transactions, options.max_partitions
            )

    # ================================================ coordinator hooks (driver)
    def open(self, context: SinkContext) -> None:
        """Also refuse a server that cannot prepare and size batches to its free slots.

        Then warn of other sinks' prepared transactions older than 10 minutes.
        """
        where: dict[str, Any] = {"sink": self.name}
        server = self._checker.server(**where)
        if server.max_prepared_transactions == 0:
            self._prepared.probe(**where)  # raises with the server's message and hint
        max_partitions = self.options.max_partitions
        if max_partitions is not None and max_partitions > server.max_prepared_transactions:
            raise ConfigurationError(
                f"max_partitions={max_partitions} is more than the server's "
                f"max_prepared_transactions={server.max_prepared_transactions}",
                setting="max_partitions",
                **where,
            )
        self.max_transactions_per_batch = partition_limit(
            server.max_prepared_transactions, max_partitions
        )
        super().open(context)
        self._prepared.ensure_fences(context.identity, **where)
        stale = self._prepared.stale(context.identity, _STALE_AFTER_SECONDS, **where)
        if stale:
            _log.warning(
                "sink %s: %d prepared transaction(s) of other twophase sinks are older than "
                "10 minutes (%s%s); they hold locks and slots and block VACUUM. If their "
                "queries are gone (a reset checkpoint), roll them back by hand: see "
                "docs/jdbc.md",
                self.name,
                len(stale),
                ", ".join(stale[:3]),
                ", ..." if len(stale) > 3 else "",
            )
        _log.debug(
            "sink %s: opened on %s (PostgreSQL %s, max_prepared_transactions=%d, %d in use); "
            "at most %d partitions per batch",
            self.name,
            self.connection.describe(),
            server.describe_version(),
            server.max_prepared_transactions,
            server.prepared_in_use,
            self.max_transactions_per_batch,
        )

    def commit(self, handle: PostgresHandle) -> None:
        """``COMMIT PREPARED``; a gid no longer prepared is resolved by its xid (``txid_status``).

        Rolled back: FatalError (rows lost); unknown to the server: committed, with a warning.
        """
        outcome = self._prepared.commit(handle.transaction_id, handle.xid, **self._where(handle))
        if outcome != "committed":
            _log.info("sink %s: %s was %s", self.name, handle.transaction_id, outcome)

    def fence_attempts(self, identity: str, epoch: int, batch_id: int) -> bool:
        """Update this identity's row of ``twophase_fences``; ``pre_commit`` reads it.

        Live stale attempts holding the row are terminated; one that prepared returns False.
        """
        return self._prepared.fence(identity, epoch, batch_id, sink=self.name)

    def list_in_doubt(self, context: RecoveryContext) -> Sequence[PostgresHandle]:
        """Read ``pg_prepared_xacts``: gids of exactly this identity, in this database (no xid)."""
        return [
            PostgresHandle(gid, batch, partition, attempt)
            for gid, batch, partition, attempt in self._prepared.find(
                context.identity, sink=self.name
            )
        ]

    def recover_and_abort(self, handle: PostgresHandle) -> None:
        """``ROLLBACK PREPARED``; a gid that is not this connector's is refused."""
        if parse_gid(handle.transaction_id) is None:
            raise ConfigurationError(
                f"{handle.transaction_id!r} is not a gid of this connector",
                **self._where(handle),
            )
        self._prepared.rollback(handle.transaction_id, **self._where(handle))

    # ============================================ participant hooks (executor)
    def pre_commit(self, txn: PostgresTransaction) -> PostgresHandle:
        """Merge (upsert/CDC), refuse a fenced attempt, ``PREPARE TRANSACTION``.

        The handle carries gid and xid.
        """
        self._writer.finish(txn)
        prepare_transaction(txn, self._prepared.fences)
        c = txn.context
        return PostgresHandle(txn.gid, c.batch_id, c.partition_id, c.attempt, txn.xid, txn.rows)


class PostgresMarkerSink(PostgresSinkMixin, MarkerCommitSink[PostgresTransaction]):
    """Exactly-once into PostgreSQL without prepared transactions (``markers``).

    For servers with ``max_prepared_transactions = 0`` (PostgreSQL's default,
    and most managed services). Every partition commits its own transaction on
    its executor, with a row in the marker table that records the partition's
    fingerprint. A batch replayed after a failure writes only the partitions
    whose marker is missing; if the replayed rows differ from those committed,
    it stops with :class:`~twophase.errors.NondeterministicBatchError` (or use
    ``staging=True``). Readers can see a batch's partitions commit one by one.

    Nothing is fenced at recovery (the base class's empty
    :meth:`list_in_doubt`): a transaction that did not commit died with its
    connection. Build it with :func:`~twophase.connectors.jdbc.postgres_sink`.

    Parameters
    ----------
    name
        The sink name.
    options
        What to write and how.
    connection
        Connection parameters.
    staging
        Stage each batch in the checkpoint first, so that replays are
        deterministic even when the pipeline is not.
    checkpoint_location, retry
        See :class:`twophase.MarkerCommitSink`.
    """

    def __init__(
        self,
        name: str,
        options: PostgresOptions,
        connection: ConnectionConfig,
        *,
        staging: bool = False,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(
            options,
            connection,
            name=name,
            staging=staging,
            checkpoint_location=checkpoint_location,
            retry=retry,
        )
        self._markers = MarkerTable(options, connection)
        self.max_transactions_per_batch = options.max_partitions

    def open(self, context: SinkContext) -> None:
        """Also create the marker table if missing and prune this identity's old markers."""
        super().open(context)
        self._markers.ensure(context.identity, sink=self.name)

    def read_markers(self, identity: str, batch_id: int) -> Sequence[Marker]:
        """Select the batch's rows of the marker table (only committed rows are visible)."""
        return self._markers.read(identity, batch_id, sink=self.name)

    def commit_with_marker(self, txn: PostgresTransaction, marker: Marker) -> None:
        """Merge (upsert/CDC), insert the marker row, ``COMMIT``.

        A lost ``COMMIT`` reply is resolved by the marker: present is success, absent retriable.
        """
        self._writer.finish(txn)
        self._markers.commit_with_marker(txn, marker)


#: Either PostgreSQL sink, as returned by :func:`~twophase.connectors.jdbc.postgres_sink`.
PostgresSink = PostgresTwoPhaseSink | PostgresMarkerSink
