"""Fake sinks over :class:`FakeTarget`, with fault injection at every hook.

:class:`FakeSink` speaks the coordinated protocol (prepare on executors,
commit on the driver); :class:`FakeMarkerSink` speaks the markers protocol
(commit with a marker on the executor).
Both consult the target's fault rules at the start of every hook, so a test can
make any hook fail for a chosen batch, partition and attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from .._sinks._marker_commit_sink import MarkerCommitSink
from .._sinks._two_phase_commit_sink import TwoPhaseCommitSink
from .._values import (
    DeadLetter,
    Marker,
    RecoveryContext,
    RowError,
    TaskContext,
    TransactionHandle,
    TransactionStatus,
    parse_transaction_id,
)
from ._target import FakeTarget

__all__ = ["FakeMarkerSink", "FakeSink", "FakeTransaction"]


@dataclass
class FakeTransaction:
    """A live fake transaction (executor side)."""

    context: TaskContext

    @property
    def transaction_id(self) -> str:
        """Return the transaction id."""
        return self.context.transaction_id


def _of_identity(ids: Sequence[str], identity: str) -> list[TransactionHandle]:
    handles = []
    for txn_id in ids:
        if txn_id.startswith(identity + ":"):
            handle = parse_transaction_id(txn_id)
            if handle is not None:
                handles.append(handle)
    return handles


class _FakeParticipant:
    """Executor hooks both fake sinks share (each consults the fault rules first)."""

    target: FakeTarget
    name: str

    def begin_transaction(self, context: TaskContext) -> FakeTransaction:
        """Open a transaction in the target (fault point ``begin_transaction``)."""
        c = context
        self.target.check_fault("begin_transaction", c.batch_id, c.partition_id, c.attempt)
        self.target.begin(c.transaction_id)
        return FakeTransaction(c)

    def write(self, txn: FakeTransaction, batch: pa.RecordBatch) -> list[RowError]:
        """Append the batch's rows but those the target refuses, and return those (``write``)."""
        c = txn.context
        self.target.check_fault("write", c.batch_id, c.partition_id, c.attempt)
        rows = batch.to_pylist()
        refused = self.target.refused(rows)
        positions = {e.row for e in refused}
        good = [row for index, row in enumerate(rows) if index not in positions]
        self.target.append(txn.transaction_id, good)
        return refused

    def write_dead_letters(self, txn: FakeTransaction, letters: Sequence[DeadLetter]) -> None:
        """Add the dead letters to the transaction (fault point ``write_dead_letters``)."""
        c = txn.context
        self.target.check_fault("write_dead_letters", c.batch_id, c.partition_id, c.attempt)
        self.target.add_dead_letters(txn.transaction_id, list(letters))

    def read_dead_letters(self) -> Iterator[DeadLetter]:
        """Yield the sink's committed dead letters, oldest first (``read_dead_letters``)."""
        self.target.check_fault("read_dead_letters")
        mine = [letter for letter in self.target.dead_letters() if letter.sink == self.name]
        return iter(sorted(mine, key=lambda x: (x.batch_id, x.partition_id, x.position)))

    def redrive_dead_letters(self, letters: Sequence[DeadLetter]) -> list[RowError]:
        """Move the rows the target takes now back, in one transaction (a fault point)."""
        self.target.check_fault("redrive_dead_letters")
        refused = self.target.refused([letter.values() for letter in letters])
        kept = {e.row for e in refused}
        moved = [letter for index, letter in enumerate(letters) if index not in kept]
        txn_id = f"redrive-{self.name}-{uuid.uuid4().hex[:12]}"
        self.target.begin(txn_id)
        self.target.append(txn_id, [letter.values() for letter in moved])
        self.target.add_redriven(txn_id, moved)
        self.target.commit_open(txn_id)
        return refused

    def abort(self, txn: FakeTransaction) -> None:
        """Roll back the transaction (fault point ``abort``)."""
        c = txn.context
        self.target.check_fault("abort", c.batch_id, c.partition_id, c.attempt)
        self.target.rollback(txn.transaction_id)

    def recover_and_abort(self, handle: TransactionHandle) -> None:
        """Roll back an in-doubt transaction (fault point ``recover_and_abort``)."""
        h = handle
        self.target.check_fault("recover_and_abort", h.batch_id, h.partition_id, h.attempt)
        self.target.rollback(h.transaction_id)


class FakeSink(_FakeParticipant, TwoPhaseCommitSink[FakeTransaction, TransactionHandle]):
    """A sink of the coordinated protocol writing to a :class:`FakeTarget`.

    Parameters
    ----------
    name
        Sink name.
    target
        Where rows go. Use a directory target with Spark.
    **kwargs
        Passed to :class:`~twophase.TwoPhaseCommitSink`.
    """

    def __init__(self, name: str, target: FakeTarget, **kwargs: object) -> None:
        super().__init__(name, **kwargs)  # type: ignore[arg-type]
        self.target = target

    # participant hooks (executor)
    def pre_commit(self, txn: FakeTransaction) -> TransactionHandle:
        """Prepare the transaction (fault point ``pre_commit``)."""
        c = txn.context
        self.target.check_fault("pre_commit", c.batch_id, c.partition_id, c.attempt)
        self.target.prepare(txn.transaction_id)
        return TransactionHandle(txn.transaction_id, c.batch_id, c.partition_id, c.attempt)

    def commit(self, handle: TransactionHandle) -> None:
        """Commit a prepared transaction, idempotently (fault point ``commit``)."""
        h = handle
        self.target.check_fault("commit", h.batch_id, h.partition_id, h.attempt)
        self.target.commit_prepared(h.transaction_id)

    def recover_and_commit(self, handle: TransactionHandle) -> None:
        """Commit after a restart (fault point ``recover_and_commit``)."""
        h = handle
        self.target.check_fault("recover_and_commit", h.batch_id, h.partition_id, h.attempt)
        self.target.commit_prepared(h.transaction_id)

    def transaction_status(self, handle: TransactionHandle) -> TransactionStatus:
        """Return what the target holds of it (fault point ``transaction_status``).

        Lose a prepared transaction, as a failover to a lagging replica does,
        with :meth:`FakeTarget.rollback`.
        """
        h = handle
        self.target.check_fault("transaction_status", h.batch_id, h.partition_id, h.attempt)
        return self.target.status(h.transaction_id)

    def list_in_doubt(self, context: RecoveryContext) -> list[TransactionHandle]:
        """List prepared transactions of this identity (fault point ``list_in_doubt``)."""
        self.target.check_fault("list_in_doubt")
        return _of_identity(self.target.prepared(), context.identity)


class FakeMarkerSink(_FakeParticipant, MarkerCommitSink[FakeTransaction]):
    """A sink of the markers protocol writing to a :class:`FakeTarget` with markers.

    Parameters
    ----------
    name
        Sink name.
    target
        Where rows and markers go.
    **kwargs
        Passed to :class:`~twophase.MarkerCommitSink` (e.g. ``staging=True``).
    """

    def __init__(self, name: str, target: FakeTarget, **kwargs: object) -> None:
        super().__init__(name, **kwargs)  # type: ignore[arg-type]
        self.target = target

    def commit_with_marker(self, txn: FakeTransaction, marker: Marker) -> None:
        """Commit rows and marker at once (fault point ``commit_with_marker``)."""
        c = txn.context
        self.target.check_fault("commit_with_marker", c.batch_id, c.partition_id, c.attempt)
        self.target.set_marker(txn.transaction_id, marker)
        self.target.commit_open(txn.transaction_id)

    def read_markers(self, identity: str, batch_id: int) -> list[Marker]:
        """Return committed markers of the batch (fault point ``read_markers``)."""
        self.target.check_fault("read_markers", batch_id)
        return self.target.markers(identity, batch_id)

    def list_in_doubt(self, context: RecoveryContext) -> list[TransactionHandle]:
        """List open transactions of this identity: they outlive their task here, like Kafka's."""
        self.target.check_fault("list_in_doubt")
        return _of_identity(self.target.open_transactions(), context.identity)
