"""The JDBC sinks: what each protocol adds to :class:`~._base.JdbcSinkMixin`.

* :class:`JdbcTwoPhaseSink` -- the coordinated protocol: each partition's transaction
  is prepared on its executor; the driver records the decision and commits every
  partition by its transaction id (phase 2).
* :class:`JdbcMarkerSink` -- the markers protocol: each partition commits on its
  executor together with a marker row carrying the partition's fingerprint.

Both are written once for every database; a concrete sink names its dialect
(:mod:`._dialect`): the PostgreSQL sinks are in :mod:`._postgres`, the MariaDB
ones in :mod:`._mariadb._dialect`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Generic, TypeVar

from twophase import (
    Marker,
    MarkerCommitSink,
    RecoveryContext,
    RetryPolicy,
    SinkContext,
    TransactionHandle,
    TransactionStatus,
    TwoPhaseCommitSink,
)

from .._context import ErrorContext
from ._base import JdbcSinkMixin
from ._config import ConnectionConfig
from ._dialect import MarkerStore, PreparedStore
from ._options import JdbcOptions
from ._transaction import JdbcTransaction

__all__ = ["JdbcMarkerSink", "JdbcTwoPhaseSink"]

_log = logging.getLogger("twophase.connectors.jdbc")

TxnT = TypeVar("TxnT", bound=JdbcTransaction)
HandleT = TypeVar("HandleT", bound=TransactionHandle)


class JdbcTwoPhaseSink(
    JdbcSinkMixin[TxnT], TwoPhaseCommitSink[TxnT, HandleT], Generic[TxnT, HandleT]
):
    """Exactly-once into a database with prepared transactions (``coordinated``).

    Every partition of a micro-batch writes its rows inside one transaction
    and prepares it; once every partition has prepared, the driver records
    the decision and commits them all. A batch is either committed in full or
    not at all, whatever fails and whenever. Subclass it with a ``dialect``.

    Parameters
    ----------
    name, options, connection
        The sink name, what to write and how, the connection parameters.
    checkpoint_location, retry
        See :class:`twophase.TwoPhaseCommitSink`.
    """

    def __init__(
        self,
        name: str,
        options: JdbcOptions,
        connection: ConnectionConfig,
        *,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(
            options, connection, name=name, checkpoint_location=checkpoint_location, retry=retry
        )
        self._prepared: PreparedStore[TxnT, HandleT] = self.dialect.prepared(options, connection)

    # ================================================ coordinator hooks (driver)
    def open(self, context: SinkContext) -> None:
        """Also refuse a server that cannot prepare, size batches to it and set up the fence.

        Then warn of other sinks' prepared transactions left behind.
        """
        where = ErrorContext(self.name)
        self.max_transactions_per_batch = self._prepared.capacity(context.identity, where)
        super().open(context)
        self._prepared.ensure_ready(context.identity, where)

    def commit(self, handle: HandleT) -> None:
        """Commit by transaction id; one already committed is success.

        Rolled back: FatalError (rows lost).
        """
        outcome = self._prepared.commit_prepared(handle, ErrorContext.of_handle(self.name, handle))
        if outcome != "committed":
            _log.info("sink %s: %s was %s", self.name, handle.transaction_id, outcome)

    def transaction_status(self, handle: HandleT) -> TransactionStatus | None:
        """Tell prepared, committed (by the transaction's own proof row), or lost.

        None for a handle of 0.2.0 on PostgreSQL, whose transaction wrote no proof row.
        """
        return self._prepared.status(handle, ErrorContext.of_handle(self.name, handle))

    def fence_attempts(self, identity: str, epoch: int, batch_id: int) -> bool:
        """Update this identity's fence; ``pre_commit`` reads it before preparing.

        Live stale attempts holding the fence are terminated; one that prepared returns False.
        """
        return self._prepared.fence(identity, epoch, batch_id, ErrorContext(self.name))

    def list_in_doubt(self, context: RecoveryContext) -> Sequence[HandleT]:
        """List the prepared transactions of exactly this identity."""
        return self._prepared.in_doubt(context.identity, ErrorContext(self.name))

    def recover_and_abort(self, handle: HandleT) -> None:
        """Roll back by transaction id; an id that is not this connector's is refused."""
        self._prepared.rollback_prepared(handle, ErrorContext.of_handle(self.name, handle))

    # ============================================ participant hooks (executor)
    def pre_commit(self, txn: TxnT) -> HandleT:
        """Merge (upsert/CDC), refuse a fenced attempt, prepare.

        The handle carries the transaction id.
        """
        txn.set_aside.check(txn.where)
        self._writer.finish(txn)
        return self._prepared.prepare(txn)


class JdbcMarkerSink(JdbcSinkMixin[TxnT], MarkerCommitSink[TxnT]):
    """Exactly-once into a database without prepared transactions (``markers``).

    Every partition commits its own transaction on its executor, with a row
    in the marker table that records the partition's fingerprint. A batch
    replayed after a failure writes only the partitions whose marker is
    missing; if the replayed rows differ from those committed, it stops with
    :class:`~twophase.errors.NondeterministicBatchError` (or use
    ``staging=True``). Readers can see a batch's partitions commit one by one.

    Nothing is fenced at recovery (the base class's empty
    :meth:`list_in_doubt`): a transaction that did not commit died with its
    connection. Subclass it with a ``dialect``.

    Parameters
    ----------
    name, options, connection
        The sink name, what to write and how, the connection parameters.
    staging, checkpoint_location, retry
        See :class:`twophase.MarkerCommitSink` (``staging``: replays are
        deterministic even when the pipeline is not).
    """

    def __init__(
        self,
        name: str,
        options: JdbcOptions,
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
        self._markers: MarkerStore[TxnT] = self.dialect.markers(options, connection)
        self.max_transactions_per_batch = options.max_partitions

    def open(self, context: SinkContext) -> None:
        """Also create the marker table if missing and prune this identity's old markers."""
        super().open(context)
        self._markers.ensure(context.identity, ErrorContext(self.name))

    def read_markers(self, identity: str, batch_id: int) -> Sequence[Marker]:
        """Select the batch's rows of the marker table (only committed rows are visible)."""
        return self._markers.read(identity, batch_id, ErrorContext(self.name, batch_id))

    def commit_with_marker(self, txn: TxnT, marker: Marker) -> None:
        """Merge (upsert/CDC), insert the marker row, commit.

        A lost commit reply is resolved by the marker: present is success, absent retriable.
        """
        txn.set_aside.check(txn.where)
        self._writer.finish(txn)
        self._markers.commit_with_marker(txn, marker)
