"""The sink base classes: the hooks a user implements, and the final entry point.

Two classes, one per commit protocol (``DESIGN.md`` section 2):

* :class:`TwoPhaseCommitSink` -- protocol A, coordinated two-phase commit, for
  targets whose prepared work can be committed later from another process.
* :class:`MarkerCommitSink` -- protocol B, per-partition commit with
  idempotence markers, for targets without resumable transactions.

The hooks are grouped by where they run, like Flink's Sink V2 split between
writer and committer:

* **participant hooks** run on executors, once per partition per attempt:
  ``begin_transaction``, ``write``, ``pre_commit``, ``abort``
  (and ``write_marker`` for protocol B);
* **coordinator hooks** run on the driver: ``open``, ``commit``,
  ``recover_and_commit``, ``recover_and_abort``, ``list_in_doubt``
  (and ``read_markers`` for protocol B).

Spark calls the sink object itself from ``foreachBatch``; ``__call__`` is final
and drives the protocol, so a subclass cannot break it.
"""

from __future__ import annotations

import abc
import re
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, final

from ._retry import RetryPolicy
from ._types import (
    CommitProtocol,
    Marker,
    RecoveryContext,
    SinkContext,
    TaskContext,
    TransactionHandle,
)
from .errors import ConfigurationError

if TYPE_CHECKING:
    import pyarrow as pa

    from ._coordinator import StepListener
    from ._metrics import BatchMetrics

__all__ = ["MarkerCommitSink", "TwoPhaseCommitSink", "iter_rows"]

TxnT = TypeVar("TxnT")
HandleT = TypeVar("HandleT", bound=TransactionHandle)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

# Methods that drive the protocol. A subclass overriding one of them is refused
# at class creation time (typing.final only helps type checkers).
_FINAL_METHODS = ("__call__", "__getstate__", "__setstate__", "in_doubt_transactions")


class _SinkBase(abc.ABC, Generic[TxnT, HandleT]):
    """What both protocols share: identity, options and the participant hooks."""

    protocol: ClassVar[CommitProtocol]

    #: The most transactions one batch may open at once (None: no limit). When a
    #: batch has more partitions, the framework coalesces it to this many before
    #: phase 1. PostgreSQL sets it from ``max_prepared_transactions``.
    max_transactions_per_batch: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__:
            return
        for name in _FINAL_METHODS:
            if name in cls.__dict__:
                raise TypeError(
                    f"{cls.__qualname__} overrides {name}(), which drives the commit "
                    "protocol and is final; implement the hooks instead"
                )

    def __init__(
        self,
        name: str,
        *,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
        history: int = 100,
    ) -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigurationError(
                f"sink name {name!r} is invalid: use 1-64 characters from "
                "[A-Za-z0-9_.-], starting with a letter or digit (it becomes part of "
                "transaction ids)",
                setting="name",
            )
        if history < 1:
            raise ConfigurationError("history must be >= 1", sink=name, setting="history")
        self.name = name
        self.checkpoint_location = checkpoint_location
        self.retry = retry if retry is not None else RetryPolicy()
        self._metrics: deque[BatchMetrics] = deque(maxlen=history)
        self._step_listener: StepListener | None = None
        self._driver: Any = None  # driver-side state, never pickled

    # ----------------------------------------------------------- pickling
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # Driver-only state stays on the driver: the coordinator, the log, the
        # JVM handles and the metrics history.
        state["_driver"] = None
        state["_step_listener"] = None
        state["_metrics"] = deque(maxlen=self._metrics.maxlen)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # ----------------------------------------------------- the entry point
    @final
    def __call__(self, df: Any, batch_id: int) -> None:
        """Run one micro-batch through the commit protocol (``foreachBatch``).

        Runs on the driver, once per micro-batch, from Spark's
        ``foreachBatch``. Final: it recovers, runs phase 1 on the executors,
        records the decision and commits, in that order.

        Parameters
        ----------
        df
            The micro-batch DataFrame Spark passes to ``foreachBatch``.
        batch_id
            The micro-batch id Spark passes to ``foreachBatch``.
        """
        from ._spark import run_foreach_batch

        run_foreach_batch(self, df, batch_id)

    # --------------------------------------------------- observability
    @property
    def last_metrics(self) -> BatchMetrics | None:
        """Metrics of the most recent batch this driver ran, or None.

        Returns
        -------
        BatchMetrics or None
            See :class:`twophase.BatchMetrics`.
        """
        return self._metrics[-1] if self._metrics else None

    @property
    def metrics_history(self) -> list[BatchMetrics]:
        """Metrics of the most recent batches (bounded by ``history``), oldest first.

        Returns
        -------
        list of BatchMetrics
            One entry per batch call on this driver.
        """
        return list(self._metrics)

    @final
    def in_doubt_transactions(self, partition_slots: int = 0) -> Sequence[HandleT]:
        """List this sink's in-doubt transactions, for operators.

        Runs on the driver (or anywhere the target is reachable). Only valid
        after the sink has run at least one batch in this process, because the
        sink identity comes from the query.

        Parameters
        ----------
        partition_slots
            Passed to :meth:`list_in_doubt` (used by slot-named targets).

        Returns
        -------
        sequence of handles
            The prepared (or possibly open) transactions of this sink.
        """
        if self._driver is None:
            raise ConfigurationError(
                "the sink identity is not known yet: run a batch first, or use "
                "twophase.testing / the connector's own inspection helpers",
                sink=self.name,
            )
        identity: str = self._driver.identity
        return self.list_in_doubt(RecoveryContext(identity, partition_slots))

    def _record_metrics(self, metrics: BatchMetrics) -> None:
        self._metrics.append(metrics)

    # ============================================ coordinator hooks (driver)
    def open(self, context: SinkContext) -> None:
        """Prepare the sink for a run of the query.

        Runs on
            the driver.
        Called
            once per run of the query (at the first batch after a start or a
            restart), before recovery. Use it to validate settings, detect
            target capabilities, create tables or topics.
        Idempotent
            required: every restart calls it again.
        On failure
            the batch fails before anything is written; the exception reaches
            the user through the query's termination.

        Parameters
        ----------
        context
            The query id, run id and sink identity.
        """

    def check_schema(self, schema: pa.Schema, batch_id: int) -> None:
        """Validate the micro-batch schema before anything is written.

        Runs on
            the driver.
        Called
            once per batch, before phase 1 (and before any replay check).
        Idempotent
            required (it must not write).
        On failure
            raise :class:`~twophase.errors.ConfigurationError` naming the
            column; the batch fails with nothing written.

        Parameters
        ----------
        schema
            The Arrow schema the participants will receive.
        batch_id
            The micro-batch id.
        """

    @abc.abstractmethod
    def list_in_doubt(self, context: RecoveryContext) -> Sequence[HandleT]:
        """List this sink's transactions that may be prepared or open.

        Runs on
            the driver at recovery (first batch of every run) and after phase 2
            of protocol A; on an executor when a task is retried.
        Called
            as above; must only return transactions whose id carries
            ``context.identity``.
        Idempotent
            required (read only).
        On failure
            the batch fails before anything is written; restart retries it.

        Parameters
        ----------
        context
            The sink identity and what the coordinator log knows.

        Returns
        -------
        sequence of handles
            One handle per in-doubt transaction.
        """

    @abc.abstractmethod
    def recover_and_abort(self, handle: HandleT) -> None:
        """Roll back an in-doubt transaction that no commit decision names.

        Runs on
            the driver at recovery and after phase 2 (orphans of dead
            attempts); on an executor when a retried task clears what an earlier
            attempt of the same partition left.
        Called
            once per orphan found by :meth:`list_in_doubt`.
        Idempotent
            required: the transaction may already be gone (treat "unknown
            transaction" as success).
        On failure
            the batch fails before writing; restart retries it. A transaction
            that is never rolled back holds its locks and slot.

        Parameters
        ----------
        handle
            The in-doubt transaction.
        """

    # ========================================= participant hooks (executor)
    @abc.abstractmethod
    def begin_transaction(self, context: TaskContext) -> TxnT:
        """Start this partition's transaction.

        Runs on
            an executor.
        Called
            once per non-empty partition per task attempt, before ``write``.
            Empty partitions open no transaction.
        Idempotent
            not required: every attempt gets a new ``context.attempt``, so
            transaction ids never repeat.
        On failure
            the task fails and Spark retries it (new attempt) if allowed.

        Parameters
        ----------
        context
            Identity, batch, partition and attempt.

        Returns
        -------
        TxnT
            The live transaction (a connection, a producer...). It never leaves
            the executor, so it need not be picklable.
        """

    @abc.abstractmethod
    def write(self, txn: TxnT, batch: pa.RecordBatch) -> None:
        """Write one Arrow record batch of the partition into the transaction.

        Runs on
            an executor.
        Called
            zero or more times per transaction, in partition order.
        Idempotent
            not required: the whole transaction is aborted on any failure.
        On failure
            the framework calls :meth:`abort` and fails the task. Raise
            :class:`~twophase.errors.DataError` for bad rows (naming the column).

        Parameters
        ----------
        txn
            The transaction from :meth:`begin_transaction`.
        batch
            Rows of the micro-batch (see :func:`iter_rows` for a row view).
        """

    @abc.abstractmethod
    def pre_commit(self, txn: TxnT) -> HandleT:
        """Finish writing and make the transaction ready to commit.

        Runs on
            an executor.
        Called
            once per transaction after the last ``write``.
        Idempotent
            not required.
        On failure
            the framework calls :meth:`abort` and fails the task.

        Parameters
        ----------
        txn
            The transaction.

        Returns
        -------
        HandleT
            The handle that names the prepared transaction. Protocol A: it is
            sent to the driver and recorded in the decision, so it must be
            small and picklable.
        """

    @abc.abstractmethod
    def abort(self, txn: TxnT) -> None:
        """Roll back this task's transaction (open or prepared).

        Runs on
            an executor.
        Called
            when ``begin_transaction`` returned but ``write``, ``pre_commit``
            (or, protocol B, ``commit``) failed, at most once per transaction.
        Idempotent
            required: the transaction may already be gone.
        On failure
            the error is attached to the original one as a note; the task
            fails with the original error. Anything left prepared is found as
            an orphan by :meth:`list_in_doubt` and rolled back later.

        Parameters
        ----------
        txn
            The transaction.
        """

    @abc.abstractmethod
    def commit(self, handle: HandleT) -> None:
        """Make a pre-committed transaction durable and visible.

        Runs on
            protocol A: the driver, in phase 2, after the decision is durable.
            Protocol B: the executor, right after ``pre_commit``.
        Called
            once per handle; again after a crash or a transient failure.
        Idempotent
            required: committing an already committed transaction succeeds.
        On failure
            protocol A: :class:`~twophase.errors.RetriableError` is retried
            with backoff; anything else fails the batch, and the next start
            finishes it with :meth:`recover_and_commit`. Protocol B: the task
            fails; the retry finds the marker if the commit did land.

        Parameters
        ----------
        handle
            The handle from :meth:`pre_commit`.
        """


class TwoPhaseCommitSink(_SinkBase[TxnT, HandleT]):
    """Base of exactly-once sinks with coordinated two-phase commit (protocol A).

    Subclass it for targets whose prepared work can be committed later from
    another process: PostgreSQL ``PREPARE TRANSACTION``, files renamed into
    place, multipart uploads. Implement the participant hooks (executor) and
    the coordinator hooks (driver); pass the sink itself to ``foreachBatch``.

    The sink object is pickled to the executors: keep connections out of
    ``__init__`` (open them lazily in ``begin_transaction``).

    Parameters
    ----------
    name
        Name of the sink, part of every transaction id. 1-64 characters from
        ``[A-Za-z0-9_.-]``.
    checkpoint_location
        The query's checkpoint location. Optional: found from the running query
        when omitted; when given it is checked against the query.
    retry
        Backoff for driver-side commits that fail transiently.
    history
        How many batches of metrics to keep in :attr:`metrics_history`.

    Examples
    --------
    A minimal sink writing files that are renamed into place on commit:

    >>> import os, pyarrow.parquet as pq
    >>> from twophase import TwoPhaseCommitSink, TransactionHandle
    >>> class FileSink(TwoPhaseCommitSink[str, TransactionHandle]):
    ...     def __init__(self, name, directory):
    ...         super().__init__(name)
    ...         self.directory = directory
    ...     def begin_transaction(self, ctx):
    ...         self._ctx = ctx
    ...         return os.path.join(self.directory, ctx.transaction_id + ".pending")
    ...     def write(self, txn, batch):
    ...         pq.write_table(pa.Table.from_batches([batch]), txn)
    ...     def pre_commit(self, txn):
    ...         c = self._ctx
    ...         return TransactionHandle(txn, c.batch_id, c.partition_id, c.attempt)
    ...     def abort(self, txn): ...
    ...     def commit(self, handle): ...
    ...     def list_in_doubt(self, ctx): ...
    ...     def recover_and_abort(self, handle): ...

    See ``docs/custom-sink.md`` for a complete, tested version.
    """

    protocol: ClassVar[CommitProtocol] = CommitProtocol.COORDINATED

    def recover_and_commit(self, handle: HandleT) -> None:
        """Commit a transaction of a decided batch after a restart.

        Runs on
            the driver.
        Called
            at recovery, for every handle of a batch whose commit decision is
            recorded but which is not recorded as committed.
        Idempotent
            required: the handle may already be committed (the driver died
            between two commits of phase 2).
        On failure
            :class:`~twophase.errors.RetriableError` is retried with backoff;
            anything else fails the batch and the next start tries again. It
            must eventually succeed, or the decided batch stays incomplete.

        Parameters
        ----------
        handle
            A handle recorded in the commit decision.
        """
        self.commit(handle)


class MarkerCommitSink(_SinkBase[TxnT, HandleT]):
    """Base of exactly-once sinks with per-partition commit and markers (protocol B).

    For targets that cannot commit a transaction from another process (Kafka
    through librdkafka, PostgreSQL with ``max_prepared_transactions = 0``).
    Every partition commits on its executor; in the same transaction the
    framework has it write an idempotence marker (:meth:`write_marker`). On
    replay the coordinator reads the markers (:meth:`read_markers`) and writes
    only partitions that are not committed yet, or stops with
    :class:`~twophase.errors.NondeterministicBatchError` when the replay does
    not match what was committed.

    Parameters
    ----------
    name
        Name of the sink, part of every transaction id and marker.
    staging
        Write every batch once to the checkpoint location and publish from that
        copy, so that replays are deterministic even when the pipeline is not.
        Costs one extra write and read of each batch.
    checkpoint_location, retry, history
        As for :class:`TwoPhaseCommitSink`.
    """

    protocol: ClassVar[CommitProtocol] = CommitProtocol.MARKERS

    def __init__(
        self,
        name: str,
        *,
        staging: bool = False,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
        history: int = 100,
    ) -> None:
        super().__init__(
            name, checkpoint_location=checkpoint_location, retry=retry, history=history
        )
        self.staging = staging

    @abc.abstractmethod
    def write_marker(self, txn: TxnT, marker: Marker) -> None:
        """Write the idempotence marker inside the partition's transaction.

        Runs on
            an executor.
        Called
            once per transaction, after the last ``write`` and before
            ``pre_commit``: the marker must commit or abort with the rows.
        Idempotent
            not required.
        On failure
            the framework aborts the transaction and fails the task.

        Parameters
        ----------
        txn
            The transaction.
        marker
            Identity, batch, partition, attempt and the rows' fingerprint.
        """

    @abc.abstractmethod
    def read_markers(self, identity: str, batch_id: int) -> Sequence[Marker]:
        """Read the committed markers of one batch.

        Runs on
            the driver when a batch that was started before is replayed; on an
            executor when a task is retried.
        Called
            before anything of the batch is written.
        Idempotent
            required (read only). Only markers of committed transactions may be
            returned.
        On failure
            the batch fails with nothing written.

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


def iter_rows(batch: pa.RecordBatch) -> Iterator[dict[str, Any]]:
    """Iterate over the rows of an Arrow record batch as dicts.

    A convenience for simple sinks; the Arrow batch itself is faster.

    Parameters
    ----------
    batch
        A record batch passed to :meth:`TwoPhaseCommitSink.write`.

    Yields
    ------
    dict
        One ``{column: value}`` dict per row.
    """
    yield from batch.to_pylist()
