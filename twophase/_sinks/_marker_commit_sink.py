"""The markers protocol: per-partition commit with idempotence markers (``docs/protocol.md``)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import ClassVar, Literal

from .._retry import RetryPolicy
from .._values import CommitProtocol, Marker
from ._sink import DEFAULT_MAX_BAD_ROWS, TxnT, _SinkBase

__all__ = ["MarkerCommitSink"]


class MarkerCommitSink(_SinkBase[TxnT]):
    """Base of exactly-once sinks with per-partition commit and markers (``markers``).

    For targets that cannot commit a transaction from another process (Kafka
    through librdkafka, PostgreSQL with ``max_prepared_transactions = 0``,
    SQLite, a plain file). Every partition commits on its executor, writing an
    idempotence marker in the same transaction (:meth:`commit_with_marker`).
    On replay the coordinator reads the markers (:meth:`read_markers`) and
    writes only the partitions that are not committed yet, or stops with
    :class:`~twophase.errors.NondeterministicBatchError` when the replay does
    not match what was committed.

    Hooks to implement: :meth:`begin_transaction`, :meth:`write`,
    :meth:`commit_with_marker`, :meth:`abort` (executor) and
    :meth:`read_markers`. Optional: :meth:`open`, :meth:`check_schema`, and
    :meth:`list_in_doubt` with :meth:`recover_and_abort` for targets where an
    earlier attempt's open transaction can outlive its task and must be
    fenced before a retry reads the markers (Kafka), and
    :meth:`needs_marker_check` to spare the check before a commit that
    cannot race another attempt.

    In Spark's real-time mode (``trigger={"realTime": ...}``, ``docs/realtime.md``)
    the same hooks run in a loop inside one task: every ``commit_interval`` the
    partition begins a transaction, writes what arrived and commits it with a
    marker whose fingerprint covers every row of the partition's epoch committed
    so far (:attr:`TaskContext.realtime` is True). So a partition of one batch
    gets several markers, each longer than the one before: keep them all (the
    key of the JDBC connectors' marker table includes the fingerprint), or keep
    the longest.

    Parameters
    ----------
    name
        Name of the sink, part of every transaction id and marker.
    staging
        Write every batch once to the checkpoint location and publish from that
        copy, so that replays are deterministic even when the pipeline is not.
        Costs one extra write and read of each batch.
    checkpoint_location, retry, bad_rows
        As for :class:`TwoPhaseCommitSink`.
    max_bad_rows
        As for :class:`TwoPhaseCommitSink`, but a partition commits on its
        executor: each partition is held to it before its commit, and a batch
        whose partitions together set aside more fails after they committed (a
        restart then skips them, dead letters included).

    Examples
    --------
    The shape of a sink over a database without prepared transactions
    (``docs/custom-sink.md`` has the complete, tested version):

    >>> from twophase import MarkerCommitSink
    >>> class TableSink(MarkerCommitSink[object]):
    ...     def begin_transaction(self, ctx): ...       # connect, BEGIN
    ...     def write(self, txn, batch): ...            # INSERT the rows
    ...     def commit_with_marker(self, txn, marker): ...  # INSERT marker, COMMIT
    ...     def abort(self, txn): ...                   # ROLLBACK, close
    ...     def read_markers(self, identity, batch_id): ...  # SELECT markers
    """

    protocol: ClassVar[CommitProtocol] = CommitProtocol.MARKERS

    def __init__(
        self,
        name: str,
        *,
        staging: bool = False,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
        bad_rows: Literal["fail", "dead_letter"] = "fail",
        max_bad_rows: int = DEFAULT_MAX_BAD_ROWS,
    ) -> None:
        super().__init__(
            name,
            checkpoint_location=checkpoint_location,
            retry=retry,
            bad_rows=bad_rows,
            max_bad_rows=max_bad_rows,
        )
        self.staging = staging

    @abc.abstractmethod
    def commit_with_marker(self, txn: TxnT, marker: Marker) -> None:
        """Write the idempotence marker into the transaction and commit both.

        Runs on
            an executor, on the transaction this task began.
        Called
            once per transaction, after the last ``write`` (in real-time mode,
            several transactions per task, each marker's fingerprint counting
            the partition's rows committed so far). The marker must become
            visible exactly when the rows do: in the same transaction,
            committed together.
        Idempotent
            not required: a retried task reads the markers first and skips a
            partition whose commit landed.
        On failure
            the framework calls :meth:`abort` and fails the task; Spark's retry
            finds the marker if the commit did land, and writes the partition
            otherwise.

        Parameters
        ----------
        txn
            The transaction from :meth:`begin_transaction`.
        marker
            Identity, batch, partition, attempt and the rows' fingerprint.
        """

    def needs_marker_check(self, txn: TxnT) -> bool:
        """Say whether the markers must be read again before ``txn`` commits.

        A task attempt the framework no longer waits for -- an earlier attempt
        declared lost, or a task of a stopped or crashed run whose process
        lives on -- may commit this partition after the batch's replay check.
        So, when this returns True, the framework reads the markers after the
        last ``write`` and before :meth:`commit_with_marker`; when another
        attempt committed the partition since the batch started, it aborts
        ``txn`` and skips the partition (same rows) or fails with
        :class:`~twophase.errors.NondeterministicBatchError` (other rows).

        That read is exact only if no other attempt can commit the partition
        between it and this commit: from :meth:`begin_transaction` on, the
        transaction must exclude the other attempts of its partition slot
        (Kafka: a producer epoch; a database: a lock held until commit), or
        the commit itself must be conditional.

        Runs on
            an executor, once per transaction, after the last ``write``.
        Idempotent
            required (no side effects).
        On failure
            the framework calls :meth:`abort` and fails the task.

        Parameters
        ----------
        txn
            The transaction from :meth:`begin_transaction`.

        Returns
        -------
        bool
            True (the default) to read the markers. Return False only when no
            other attempt can have committed since a check this transaction
            inherits (``KafkaSink``: its pooled producer was checked when it
            was initialised and nothing fenced it since).
        """
        return True

    @abc.abstractmethod
    def read_markers(self, identity: str, batch_id: int) -> Sequence[Marker]:
        """Read the committed markers of one batch.

        Runs on
            the driver when a batch that was started before is replayed; on an
            executor when a task is retried, and before a commit when
            :meth:`needs_marker_check` says so.
        Called
            on the driver, before anything of the batch is written; on an
            executor, before a retry writes and before a checked commit.
        Idempotent
            required (read only). Only markers of committed transactions may be
            returned.
        On failure
            the batch (or the retried task) fails with nothing written.

        Parameters
        ----------
        identity
            The sink identity token.
        batch_id
            The micro-batch id.

        Returns
        -------
        sequence of Marker
            One marker per committed partition of the batch.
        """
