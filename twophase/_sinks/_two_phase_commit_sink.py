"""The coordinated protocol: two-phase commit decided on the driver (``docs/protocol.md``)."""

from __future__ import annotations

import abc
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Generic

from .._log._codec import decode_dataclass, encode_dataclass
from .._values import CommitProtocol, TransactionHandle, TransactionStatus
from ._sink import HandleT, TxnT, _SinkBase, required

__all__ = ["TwoPhaseCommitSink"]


class TwoPhaseCommitSink(_SinkBase[TxnT], Generic[TxnT, HandleT]):
    """Base of exactly-once sinks with coordinated two-phase commit (``coordinated``).

    Subclass it for targets whose prepared work can be committed later from
    another process: PostgreSQL ``PREPARE TRANSACTION``, files renamed into
    place, multipart uploads. Executors begin, write and :meth:`pre_commit`
    (prepare) a transaction per partition and return its handle; once every
    partition is prepared the driver records the decision and calls
    :meth:`commit` with each handle. Pass the sink itself to ``foreachBatch``
    (or use :func:`twophase.write_stream`).

    Hooks to implement: :meth:`begin_transaction`, :meth:`write`,
    :meth:`pre_commit`, :meth:`abort` (executor); :meth:`commit`,
    :meth:`list_in_doubt`, :meth:`recover_and_abort` (driver). Optional:
    :meth:`open`, :meth:`check_schema`, :meth:`recover_and_commit`,
    :meth:`fence_attempts`, and the handle codec :meth:`encode_handle` /
    :meth:`decode_handle` (needed only for handles that are not frozen
    dataclasses of plain fields).

    The sink is pickled to the executors with every batch: keep connections
    out of ``__init__`` (open them in ``begin_transaction``), or exclude them
    in your own ``__getstate__``.

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
    bad_rows
        ``"fail"`` (the default): a row the target refuses fails the batch.
        ``"dead_letter"``: it is set aside by :meth:`write_dead_letters` in the
        batch's transaction (the sink must implement it).
    max_bad_rows
        The most rows one batch may set aside (default 100); one more fails the
        batch with a :class:`~twophase.errors.DataError` and nothing of it commits.

    Examples
    --------
    The shape of a sink that writes files and renames them into place
    (``docs/custom-sink.md`` has the complete, tested version):

    >>> from twophase import TwoPhaseCommitSink, TransactionHandle
    >>> class FileSink(TwoPhaseCommitSink[str, TransactionHandle]):
    ...     def begin_transaction(self, ctx): ...   # open "<id>.pending"
    ...     def write(self, txn, batch): ...        # append rows
    ...     def pre_commit(self, txn): ...          # fsync, return a handle
    ...     def abort(self, txn): ...               # delete the pending file
    ...     def commit(self, handle): ...           # rename into place
    ...     def list_in_doubt(self, ctx): ...       # pending files of ctx.identity
    ...     def recover_and_abort(self, handle): ...  # delete one
    """

    protocol: ClassVar[CommitProtocol] = CommitProtocol.COORDINATED

    #: The class of the handles :meth:`pre_commit` returns, which the default
    #: :meth:`decode_handle` rebuilds from the coordinator log. Taken from the
    #: class's type parameters (``TwoPhaseCommitSink[MyTxn, MyHandle]``) when a
    #: subclass does not set it; :class:`~twophase.TransactionHandle` otherwise.
    handle_type: ClassVar[type[TransactionHandle]] = TransactionHandle

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "handle_type" not in cls.__dict__:
            for base in getattr(cls, "__orig_bases__", ()):
                found = [
                    arg
                    for arg in typing.get_args(base)
                    if isinstance(arg, type) and issubclass(arg, TransactionHandle)
                ]
                if found:
                    cls.handle_type = found[-1]
                    break

    list_in_doubt = required(_SinkBase.list_in_doubt)
    recover_and_abort = required(_SinkBase.recover_and_abort)

    @abc.abstractmethod
    def pre_commit(self, txn: TxnT) -> HandleT:
        """Prepare the transaction so that the driver can commit it later.

        Runs on
            an executor.
        Called
            once per transaction, after the last ``write``.
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
            The handle that names the prepared transaction. It is sent to the
            driver and recorded in the commit decision through
            :meth:`encode_handle`, so it must be small: a frozen dataclass
            subclassing :class:`~twophase.TransactionHandle` whose fields are
            plain values needs nothing more.
        """

    @abc.abstractmethod
    def commit(self, handle: HandleT) -> None:
        """Commit a prepared transaction: make it durable and visible.

        Runs on
            the driver, in phase 2, after the decision is durable.
        Called
            once per handle of the batch; again after a crash or a transient
            failure.
        Idempotent
            required: committing an already committed transaction succeeds.
        On failure
            :class:`~twophase.errors.RetriableError` is retried with backoff;
            anything else fails the batch, and the next start finishes it
            with :meth:`recover_and_commit`.

        Parameters
        ----------
        handle
            A handle returned by :meth:`pre_commit`.
        """

    def fence_attempts(self, identity: str, epoch: int, batch_id: int) -> bool:
        """Stop attempts the coordinator no longer waits for from preparing later. Optional.

        A zombie -- a task attempt Spark gave up on whose process lives on --
        can reach :meth:`pre_commit` at any moment, even after the query
        stopped. What it prepares after the driver's last sweep stays prepared,
        holding locks, until the next run's recovery. A sink whose target can
        keep a small record does two things: here it records that every
        attempt ranked at or below ``(epoch, batch_id)`` is stale, and in
        :meth:`pre_commit`, in the transaction it is about to prepare and under
        a lock this hook must wait for, it refuses when its own
        ``(context.epoch, context.batch_id)`` is at or below the record.

        Runs on
            the driver.
        Called
            after recovery (``batch_id`` is -1: every attempt of an earlier
            run is stale), after a committed batch's phase 2 and sweep, and
            after a failed batch's abort (every attempt of this run's batches
            up to ``batch_id`` is stale, and of every earlier run).
        Idempotent
            required; the rank only grows.
        On failure
            after recovery the run fails before writing; after a batch the
            error is logged, and the next batch's sweep or the next run's
            recovery rolls back what a zombie prepared.

        Parameters
        ----------
        identity
            The sink identity.
        epoch
            The run's epoch (:attr:`~twophase.TaskContext.epoch` of its tasks).
        batch_id
            The last finished batch of the run, or -1.

        Returns
        -------
        bool
            True once recorded. False when a transaction that already
            prepared holds what the record needs (a zombie that prepared
            before it): the framework then rolls back the orphans once more
            (:meth:`recover_and_abort`) and calls again, up to three times.
            The default records nothing and returns True.
        """
        return True

    def recover_and_commit(self, handle: HandleT) -> None:
        """Commit a transaction of a decided batch after a restart. Optional.

        The default calls :meth:`commit`.

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

    def transaction_status(self, handle: HandleT) -> TransactionStatus | None:
        """Tell what the target holds of a decided transaction, changing nothing. Optional.

        Recovery asks before it commits a decided batch, so that a batch whose
        transactions the target lost (a failover to a replica that had not
        received them) is written again instead of being reported committed.
        When every transaction of the batch is ``PREPARED``, ``COMMITTED`` or
        ``LOST`` and none is ``COMMITTED`` while one is ``LOST``, and Spark is
        replaying that very batch, recovery rolls back the ones still prepared,
        records the loss, and lets the batch run again: exact. A batch partly
        committed and partly lost, or lost after Spark moved past it, fails
        with :class:`~twophase.errors.FatalError` naming the lost partitions.
        The default returns None (not known): recovery commits every handle as
        before, and a lost one fails in :meth:`recover_and_commit`.

        Runs on
            the driver.
        Called
            at recovery, once per handle of a batch whose commit decision is
            recorded but which is not recorded as committed, before any of
            them is committed; again for every handle after the prepared ones
            are rolled back.
        Idempotent
            required: it only reads.
        On failure
            as :meth:`recover_and_commit`: retriable errors are retried, other
            errors fail the run.

        Parameters
        ----------
        handle
            A handle recorded in the commit decision.

        Returns
        -------
        TransactionStatus or None
            ``LOST`` only on proof that the transaction did not commit: an
            answer the target cannot give must be None, never ``LOST``.
        """
        return None

    def encode_handle(self, handle: HandleT) -> Mapping[str, Any]:
        """Encode a handle for the commit decision, as JSON-able data. Optional.

        The default stores a dataclass's fields (str, int, float, bool, None,
        bytes, and lists, tuples and dicts of them) with its class name:
        ``{"type": "MyHandle", "fields": {...}}``. Override it, with
        :meth:`decode_handle`, for a handle that holds anything else. Keep a
        version of your own in what you return if its shape may change: what
        one release of the sink records, every later release must decode.

        Runs on
            the driver, when the batch's decision is recorded.
        Called
            once per handle of the batch, before the decision is written; the
            framework decodes the result again with :meth:`decode_handle` and
            requires a handle equal to this one.
        Idempotent
            required (pure).
        On failure
            the batch fails before its commit point with a
            :class:`~twophase.errors.ConfigurationError` naming the sink, the
            batch and the handle; its prepared transactions are rolled back
            (nothing is committed, nothing is lost).

        Parameters
        ----------
        handle
            A handle returned by :meth:`pre_commit`.

        Returns
        -------
        Mapping
            JSON-able data (str keys; str, int, float, bool, None, lists and
            mappings inside). Never code, never a pickle.
        """
        return encode_dataclass(handle)

    def decode_handle(self, data: Mapping[str, Any]) -> HandleT:
        """Rebuild a handle from what :meth:`encode_handle` recorded. Optional.

        The default builds :attr:`handle_type` from the recorded fields; a
        field the record lacks takes the class's default, so a handle class
        may grow fields with defaults. It also reads the handles of a decision
        written by twophase 0.2.0, which reach it in the same shape (``type``
        is then the 0.2.0 class's module and name).

        Runs on
            the driver: at recovery, for every decision not yet recorded as
            committed, and right after :meth:`encode_handle` as its check.
        Called
            once per recorded handle.
        Idempotent
            required (pure).
        On failure
            recovery stops with a :class:`~twophase.errors.CoordinatorLogError`
            naming the decision file; nothing is committed or rolled back.

        Parameters
        ----------
        data
            What :meth:`encode_handle` returned, after a round trip through JSON.

        Returns
        -------
        HandleT
            The handle.
        """
        return typing.cast(HandleT, decode_dataclass(self.handle_type, data))
