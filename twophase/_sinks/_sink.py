"""What every sink is: settings, the final entry point, and the hooks both protocols share.

The two public base classes build on it, one per commit protocol
(``docs/protocol.md``): :class:`~twophase.TwoPhaseCommitSink` in
``_sinks/_two_phase_commit_sink.py`` (``coordinated``) and :class:`~twophase.MarkerCommitSink` in
``_sinks/_marker_commit_sink.py`` (``markers``). Every hook's contract (where it runs, when
and how often, whether it must be idempotent, what happens when it fails) is
written once, on the class that declares the hook. The sink object holds
settings only: the driver-side state of a running query (coordinator, log,
metrics) lives in the engine, so a subclass may keep transient state and control
its own pickling. ``__call__`` drives the protocol and is final.
"""

from __future__ import annotations

import abc
import functools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar, cast, final

from .._retry import RetryPolicy
from .._spark import _entry
from .._values import (
    CommitProtocol,
    RecoveryContext,
    RowError,
    SinkContext,
    TaskContext,
    TransactionHandle,
)
from ..errors import ConfigurationError
from ._dead_letter_hooks import DeadLetterHooks, check_bad_rows

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from .._engine._hooks import AnySink

__all__ = ["DEFAULT_MAX_BAD_ROWS", "HandleT", "TxnT", "iter_rows", "required"]

TxnT = TypeVar("TxnT")
HandleT = TypeVar("HandleT", bound=TransactionHandle)
_F = TypeVar("_F", bound=Callable[..., Any])

#: ``max_bad_rows`` when a sink does not set it: more rows refused in one batch usually mean
#: the target changed (a column narrowed, a constraint added), not that the rows are bad.
DEFAULT_MAX_BAD_ROWS = 100

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

# Methods that drive the protocol. A subclass overriding one of them is refused
# at class creation time (typing.final only helps type checkers).
_FINAL_METHODS = ("__call__",)


def required(hook: _F) -> _F:
    """Re-declare an optional hook of the shared base as abstract (same contract text)."""

    @functools.wraps(hook)
    def required(*args: Any, **kwargs: Any) -> Any:
        return hook(*args, **kwargs)

    return cast(_F, abc.abstractmethod(required))


class _SinkBase(DeadLetterHooks[TxnT], abc.ABC, Generic[TxnT]):
    """Settings and the hooks both protocols share."""

    protocol: ClassVar[CommitProtocol]

    #: The most transactions one batch may open at once (None: no limit). When a
    #: batch has more partitions, the framework coalesces it to this many before
    #: phase 1. PostgreSQL sets it from ``max_prepared_transactions``.
    max_transactions_per_batch: int | None = None

    #: Columns whose equal values must reach one participant (the key of an
    #: upsert or CDC sink). When set, the framework routes every row of a key to
    #: one partition before phase 1 (a hash shuffle into at most as many
    #: partitions as the batch has, and at most
    #: :attr:`max_transactions_per_batch`), with the rows of each partition in
    #: the batch's own order: partition by partition, row by row, as Spark
    #: produced them (for a Kafka source, offset order within each topic
    #: partition). A sink that merges rows by key then never has two
    #: transactions of one batch touching one key, whatever the user's
    #: partitioning. Empty (the default): the batch keeps its partitioning.
    key_by: tuple[str, ...] = ()

    #: How many rows the framework joins into one :meth:`write` call: it concatenates the
    #: partition's Arrow record batches, in order, until the call has that many rows or 64 MiB
    #: of Arrow data (None, the default: each record batch as Spark produced it,
    #: ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows at most). A sink that settles each
    #: call on its own -- to report the rows it refused before returning -- raises it for fewer,
    #: larger calls, at the cost of holding them in the Python worker's memory (twice: while
    #: ``write`` settles one call's rows, the framework reads and joins the next in a thread of
    #: its own, so that the target is not idle while Spark's rows are read).
    write_batch_rows: int | None = None

    #: How many :meth:`recover_and_abort` calls recovery may run at once, in
    #: threads of the driver (1: one after the other). Raise it when each call
    #: mostly waits on the target and calls for different handles are
    #: independent and thread-safe; ``KafkaSink`` fences its slots 256 at a time.
    recovery_concurrency: ClassVar[int] = 1

    @property
    def metrics_target(self) -> str:
        """The kind of target, the ``twophase.target`` attribute of the sink's metrics.

        ``"kafka"``, ``"postgresql"``, ``"mariadb"`` for the bundled
        connectors; ``"custom"`` unless a subclass says otherwise (a short,
        fixed word: it labels every metric of the sink, see
        ``docs/monitoring.md``).
        """
        return "custom"

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
        bad_rows: Literal["fail", "dead_letter"] = "fail",
        max_bad_rows: int = DEFAULT_MAX_BAD_ROWS,
    ) -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigurationError(
                f"sink name {name!r} is invalid: use 1-64 characters from "
                "[A-Za-z0-9_.-], starting with a letter or digit (it becomes part of "
                "transaction ids)",
                setting="name",
            )
        check_bad_rows(type(self), bad_rows, max_bad_rows)
        self.name = name
        self.checkpoint_location = checkpoint_location
        self.retry = retry if retry is not None else RetryPolicy()
        #: What a row the target refuses does: ``"fail"`` fails the batch (a
        #: :class:`~twophase.errors.DataError`), ``"dead_letter"`` sets it aside
        #: through :meth:`write_dead_letters`, in the batch's transaction.
        self.bad_rows = bad_rows
        #: The most rows one batch may set aside; one more fails the batch with a
        #: :class:`~twophase.errors.DataError` (each partition is held to it on its
        #: executor, the batch's total on the driver: ``docs/custom-sink.md``).
        self.max_bad_rows = max_bad_rows

    # ----------------------------------------------------- the entry point
    @final
    def __call__(self, df: DataFrame, batch_id: int) -> None:
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
        _entry.run_foreach_batch(cast("AnySink", self), df, batch_id)

    # ============================================ coordinator hooks (driver)
    def open(self, context: SinkContext) -> None:
        """Prepare the sink for a run of the query. Optional.

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
        """Validate the micro-batch schema before anything is written. Optional.

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

    def list_in_doubt(self, context: RecoveryContext) -> Sequence[TransactionHandle]:
        """List this sink's transactions that may still be prepared or open.

        Required by the coordinated protocol. Optional for the markers
        protocol, where it names what earlier attempts may have left open so
        that it can be fenced; the default lists nothing, which is right for
        targets whose uncommitted work dies with its connection or process.

        Runs on
            the driver at recovery (first batch of every run) and, coordinated,
            after phase 2 and after a failed phase 1; on an executor when a task
            is retried (only handles of its own partition are used there).
        Called
            as above; must only return transactions whose id carries
            ``context.identity``.
        Idempotent
            required (read only).
        On failure
            the batch (or the retried task) fails before anything is written;
            a restart retries it.

        Parameters
        ----------
        context
            The sink identity and what the coordinator log knows.

        Returns
        -------
        sequence of TransactionHandle
            One handle per in-doubt transaction (or per slot to fence).
        """
        return ()

    def recover_and_abort(self, handle: Any) -> None:
        """Roll back or fence an in-doubt transaction that no commit decision names.

        Required by the coordinated protocol; by the markers protocol, when
        :meth:`list_in_doubt` is overridden.

        Runs on
            the driver at recovery and, coordinated, after phase 2 (orphans of
            dead attempts); on an executor when a retried task clears what an
            earlier attempt of the same partition left.
        Called
            once per handle found by :meth:`list_in_doubt`; at recovery, up to
            :attr:`recovery_concurrency` calls at once, from driver threads.
        Idempotent
            required: the transaction may already be gone (treat "unknown
            transaction" as success).
        On failure
            the batch fails before writing; restart retries it. A transaction
            that is never rolled back holds its locks and slot.

        Parameters
        ----------
        handle
            A handle from :meth:`list_in_doubt`.
        """
        raise NotImplementedError(
            f"{type(self).__qualname__}.list_in_doubt() returned {handle!r} but the sink "
            "does not implement recover_and_abort() to roll it back"
        )

    # ========================================= participant hooks (executor)
    @abc.abstractmethod
    def begin_transaction(self, context: TaskContext) -> TxnT:
        """Start this partition's transaction.

        Runs on
            an executor.
        Called
            once per non-empty partition per task attempt, before ``write``.
            Empty partitions open no transaction. In real-time mode
            (``context.realtime``), once per commit of the task: the
            transactions of one task follow each other, never overlap.
        Idempotent
            not required: every attempt gets a new ``context.attempt``, so
            ``context.transaction_id`` never repeats -- but in real-time mode
            the transactions of one task share it.
        On failure
            the task fails and Spark retries it (new attempt) if allowed.

        Parameters
        ----------
        context
            Identity, batch, partition and attempt.

        Returns
        -------
        TxnT
            The live transaction (a connection, a producer...). It is handed to
            every later hook of this partition and never leaves the executor,
            so it need not be picklable.
        """

    @abc.abstractmethod
    def write(self, txn: TxnT, batch: pa.RecordBatch) -> Sequence[RowError] | None:
        """Write one Arrow record batch of the partition into the transaction.

        Runs on
            an executor.
        Called
            zero or more times per transaction, in partition order; never with
            an empty batch.
        Idempotent
            not required: the whole transaction is aborted on any failure.
        On failure
            the framework calls :meth:`abort` and fails the task. What is wrong
            with the whole batch (a missing table, a privilege, a lost connection)
            is an exception; raise :class:`~twophase.errors.DataError` (naming
            the column) for a bad row when the sink cannot leave it out.

        Parameters
        ----------
        txn
            The transaction from :meth:`begin_transaction`.
        batch
            Rows of the micro-batch (see :func:`iter_rows` for a row view).

        Returns
        -------
        sequence of RowError or None
            The rows of ``batch`` the target refused, each by its position in
            ``batch``, with every other row written (a savepoint rolled back around
            the refused ones, say); None or empty when all were written. The
            framework then fails the batch (``bad_rows="fail"``) or hands them to
            :meth:`write_dead_letters` (``"dead_letter"``), up to
            :attr:`max_bad_rows`.
        """

    @abc.abstractmethod
    def abort(self, txn: TxnT) -> None:
        """Roll back this task's transaction, whatever state it is in.

        Runs on
            an executor.
        Called
            when ``write`` or the commit step of the executor (coordinated:
            ``pre_commit``; markers: ``commit_with_marker``) failed, at most
            once per transaction.
        Idempotent
            required: the transaction may already be gone, or (markers)
            its commit may even have landed before the failure was seen.
        On failure
            the error is attached to the original one as a note; the task
            fails with the original error. Coordinated: anything left prepared
            is found by :meth:`list_in_doubt` and rolled back later.

        Parameters
        ----------
        txn
            The transaction.
        """


def iter_rows(batch: pa.RecordBatch) -> Iterator[dict[str, Any]]:
    """Iterate over the rows of an Arrow record batch as dicts.

    A convenience for simple sinks; the Arrow batch itself is faster.

    Parameters
    ----------
    batch
        A record batch passed to a sink's ``write`` hook.

    Yields
    ------
    dict
        One ``{column: value}`` dict per row.
    """
    yield from batch.to_pylist()
