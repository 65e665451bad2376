r"""The participant: what runs on an executor for one partition of a micro-batch.

One call of :func:`run_participant` per Spark task attempt. It drives the
sink's participant hooks in order -- coordinated: ``begin_transaction`` ->
``write``\\* -> [``write_dead_letters``] -> ``pre_commit``; markers:
``begin_transaction`` -> ``write``\\* -> [``write_dead_letters``] ->
``commit_with_marker`` -- aborts on any failure, and returns a small
picklable :class:`TaskResult` to the driver.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa

from .._arrow import coalesced, read_ahead
from .._fingerprint import FingerprintAccumulator, fingerprint_batches
from .._values import (
    CommitProtocol,
    Fingerprint,
    Marker,
    RecoveryContext,
    TaskContext,
    TransactionHandle,
)
from .._version import __version__
from ..errors import (
    AbortRequiredError,
    ConfigurationError,
    NondeterministicBatchError,
    TwoPhaseError,
    add_note,
)
from ._hooks import AnySink, CoordinatedHooks, MarkerHooks, SinkHooks, as_coordinated, as_markers
from ._rejections import PartitionRejections

__all__ = ["TaskPlan", "TaskResult", "run_participant"]

_log = logging.getLogger("twophase.participant")

_T = TypeVar("_T")


@dataclass(frozen=True)
class TaskPlan:
    """What the driver tells every participant of a batch. Picklable.

    Attributes
    ----------
    sink_name
        The sink name.
    identity
        The sink identity token.
    batch_id
        The micro-batch id.
    protocol
        The commit protocol.
    skip
        Markers protocol, replay: partitions whose rows are already committed.
    expected
        Markers protocol, replay: fingerprint each written partition must have
        (the one measured by the replay check).
    preexisting_markers
        Markers protocol: markers that existed when the batch started, as
        ``(partition_id, attempt, fingerprint)``; a retried task ignores them.
    epoch
        The run's epoch in the coordinator log (see :attr:`TaskContext.epoch`).
    twophase_version
        The release of twophase on the driver that made the plan; a participant
        of another release refuses to write (:func:`check_same_release`).
    """

    sink_name: str
    identity: str
    batch_id: int
    protocol: CommitProtocol
    skip: frozenset[int] = frozenset()
    expected: Mapping[int, Fingerprint] = field(default_factory=dict)
    preexisting_markers: frozenset[tuple[int, int, str]] = frozenset()
    epoch: int = 0
    twophase_version: str = __version__


@dataclass(frozen=True)
class TaskResult:
    """What a participant returns to the driver. Picklable.

    Attributes
    ----------
    partition_id
        The partition.
    attempt
        The task attempt that produced this result.
    rows
        Rows written to the target (0 for skipped or empty partitions; rows set
        aside as dead letters excluded).
    handle
        Coordinated protocol: the prepared transaction's handle (None if empty).
    marker
        Markers protocol: the committed marker (None if empty or skipped).
    skipped
        Markers protocol: the partition was already committed.
    seconds
        Wall time of the participant.
    arrow_bytes
        Arrow bytes handed to the sink's ``write`` hook.
    target_seconds
        Time spent in the sink's hooks (begin, write, prepare or commit): the
        time in the target, for the driver's metrics (no round trip of its own).
    dead_lettered
        Rows set aside as dead letters, by error class (``(class, count)``).
    rejections
        The first errors of those rows, one line each, for the driver's message.
    """

    partition_id: int
    attempt: int
    rows: int
    handle: TransactionHandle | None = None
    marker: Marker | None = None
    skipped: bool = False
    seconds: float = 0.0
    arrow_bytes: int = 0
    target_seconds: float = 0.0
    dead_lettered: tuple[tuple[str, int], ...] = ()
    rejections: tuple[str, ...] = ()


class _HookClock:
    """Time spent in the sink's hooks and bytes written, for :class:`TaskResult`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.arrow_bytes = 0

    def time(self, hook: Callable[..., _T], *args: Any) -> _T:
        started = time.perf_counter()
        try:
            return hook(*args)
        finally:
            self.seconds += time.perf_counter() - started


def _first_non_empty(
    batches: Iterable[pa.RecordBatch],
) -> tuple[pa.RecordBatch | None, Iterator[pa.RecordBatch]]:
    iterator = iter(batches)
    for batch in iterator:
        if batch.num_rows:
            return batch, iterator
    return None, iterator


def run_participant(
    sink: AnySink,
    plan: TaskPlan,
    partition_id: int,
    attempt: int,
    batches: Iterable[pa.RecordBatch],
) -> TaskResult:
    """Run one task attempt of one partition through the sink's hooks.

    Runs on an executor, once per task attempt.

    Parameters
    ----------
    sink
        The (unpickled) sink.
    plan
        The batch plan from the driver.
    partition_id
        The Spark partition index.
    attempt
        The task attempt number.
    batches
        The partition's rows as Arrow record batches.

    Returns
    -------
    TaskResult
        Handle (coordinated) or marker (markers) and counts.
    """
    check_same_release(plan, partition_id)
    started = time.perf_counter()
    ctx = TaskContext(
        plan.sink_name, plan.identity, plan.batch_id, partition_id, attempt, plan.epoch
    )
    try:
        if plan.protocol is CommitProtocol.COORDINATED:
            result = _run_coordinated(as_coordinated(sink), ctx, batches)
        else:
            result = _run_markers(as_markers(sink), plan, ctx, batches)
    except TwoPhaseError as exc:
        raise exc.with_context(
            sink=plan.sink_name, batch_id=plan.batch_id, partition_id=partition_id
        ) from exc.__cause__
    return TaskResult(
        partition_id=result.partition_id,
        attempt=attempt,
        rows=result.rows,
        handle=result.handle,
        marker=result.marker,
        skipped=result.skipped,
        seconds=time.perf_counter() - started,
        arrow_bytes=result.arrow_bytes,
        target_seconds=result.target_seconds,
        dead_lettered=result.dead_lettered,
        rejections=result.rejections,
    )


def check_same_release(plan: TaskPlan, partition_id: int) -> None:
    """Refuse to write when this executor's twophase is not the driver's release.

    The sink and the plan are pickled by reference to classes the executor
    imports from its own installation; a participant of another release could
    write records its driver (or the next release) reads differently.

    Raises
    ------
    ConfigurationError
        The releases differ (a driver before 0.3.0 sends no version).
    """
    # A plan pickled by a driver before 0.3.0 has no such attribute in its state.
    driver = vars(plan).get("twophase_version")
    if driver == __version__:
        return
    raise ConfigurationError(
        f"the driver runs twophase {driver or 'older than 0.3.0'} but this executor has "
        f"twophase {__version__} (at {os.path.dirname(__file__)}): a "
        "participant refuses to write for a driver of another release. Install the same "
        "twophase wheel on the driver and on every executor (spark.submit.pyFiles, "
        "--py-files, or the cluster's libraries), then restart the query; nothing was "
        "written (docs/upgrading.md)",
        sink=plan.sink_name,
        batch_id=plan.batch_id,
        partition_id=partition_id,
        setting="twophase version",
    )


def _abort_quietly(sink: SinkHooks, txn: Any, error: BaseException) -> None:
    try:
        sink.abort(txn)
    except Exception as abort_error:
        _log.warning("abort after a failed hook also failed: %r", abort_error)
        add_note(error, f"abort() of the failed transaction also failed: {abort_error!r}")


def _clear_earlier_attempts(sink: SinkHooks, ctx: TaskContext) -> None:
    """Roll back (coordinated) or fence (markers) what earlier attempts of this partition left open.

    Slot-named targets (Kafka) list in-doubt slots with no batch of their own:
    a handle with ``batch_id < 0`` names the slot only, and fencing it is what
    this attempt needs.
    """
    listing = RecoveryContext(ctx.identity, ctx.partition_id + 1, epoch=ctx.epoch, task=ctx)
    for handle in sink.list_in_doubt(listing):
        if handle.partition_id != ctx.partition_id:
            continue
        if handle.batch_id < 0 or (
            handle.batch_id == ctx.batch_id and handle.attempt < ctx.attempt
        ):
            _log.info("aborting %s left by an earlier attempt", handle.transaction_id)
            sink.recover_and_abort(handle)


def _batches(
    given: Iterator[pa.RecordBatch],
    rows: int | None,
    seen: Callable[[pa.RecordBatch], object] = lambda _: None,
) -> contextlib.AbstractContextManager[Iterator[pa.RecordBatch]]:
    """Give ``write`` its batches: joined up to ``write_batch_rows``, then read one ahead."""
    joined = coalesced(given, rows, seen=seen)
    return contextlib.nullcontext(joined) if rows is None else read_ahead(joined)


def _run_coordinated(
    sink: CoordinatedHooks, ctx: TaskContext, batches: Iterable[pa.RecordBatch]
) -> TaskResult:
    if ctx.attempt > 0:
        _clear_earlier_attempts(sink, ctx)
    first, rest = _first_non_empty(batches)
    if first is None:
        return TaskResult(ctx.partition_id, ctx.attempt, 0)
    clock = _HookClock()
    txn = clock.time(sink.begin_transaction, ctx)
    rows = 0
    rejected = PartitionRejections(sink, ctx)
    try:
        given = itertools.chain((first,), rest)
        with _batches(given, sink.write_batch_rows) as written:
            for batch in written:
                rejected.add(clock.time(sink.write, txn, batch), batch)
                rows += batch.num_rows
                clock.arrow_bytes += batch.nbytes
        clock.time(rejected.write, txn)
        handle: object = clock.time(sink.pre_commit, txn)
    except BaseException as exc:
        _abort_quietly(sink, txn, exc)
        raise
    if not isinstance(handle, TransactionHandle):  # the hook's type is not enforced at run time
        _abort_quietly(sink, txn, TypeError())
        raise TypeError(
            f"{type(sink).__name__}.pre_commit() must return a TransactionHandle, "
            f"got {type(handle).__name__}"
        )
    return TaskResult(
        ctx.partition_id,
        ctx.attempt,
        rows - len(rejected.letters),
        handle=handle,
        arrow_bytes=clock.arrow_bytes,
        target_seconds=clock.seconds,
        dead_lettered=rejected.classes(),
        rejections=rejected.samples(),
    )


def _run_markers(
    sink: MarkerHooks,
    plan: TaskPlan,
    ctx: TaskContext,
    batches: Iterable[pa.RecordBatch],
) -> TaskResult:
    if ctx.partition_id in plan.skip:
        return TaskResult(ctx.partition_id, ctx.attempt, 0, skipped=True)
    if ctx.attempt > 0:
        # Fence earlier attempts of this slot first (a zombie must not commit
        # after we looked), then read: an earlier attempt may have committed
        # before failing (e.g. lost while reporting back). Its marker tells.
        _clear_earlier_attempts(sink, ctx)
        mine = _committed_by_others(sink, plan, ctx)
        if mine:
            buffered = [b for b in batches if b.num_rows]
            if _already_committed(mine, fingerprint_batches(buffered), plan, ctx, buffered):
                return TaskResult(ctx.partition_id, ctx.attempt, 0, skipped=True)
    first, rest = _first_non_empty(batches)
    if first is None:
        return TaskResult(ctx.partition_id, ctx.attempt, 0)
    clock = _HookClock()
    txn = clock.time(sink.begin_transaction, ctx)
    acc = FingerprintAccumulator()
    rejected = PartitionRejections(sink, ctx)
    try:
        given = itertools.chain((first,), rest)
        with _batches(given, sink.write_batch_rows, acc.add) as written:
            for batch in written:
                rejected.add(clock.time(sink.write, txn, batch), batch)
                clock.arrow_bytes += batch.nbytes
        clock.time(rejected.write, txn)
        fingerprint = acc.result()
        expected = plan.expected.get(ctx.partition_id)
        if expected is not None and expected != fingerprint:
            raise NondeterministicBatchError(
                f"partition {ctx.partition_id} changed between the replay check "
                f"(fingerprint {expected}) and the write (fingerprint {fingerprint}); "
                "the batch is not deterministic. Enable staging=True on the sink",
                sink=plan.sink_name,
                batch_id=plan.batch_id,
                partition_id=ctx.partition_id,
            )
        if sink.needs_marker_check(txn):
            # A zombie (an earlier attempt, or a task of an earlier run) may have
            # committed this partition after the replay check. The transaction
            # excludes it from now on; look once more before committing.
            mine = _committed_by_others(sink, plan, ctx)
            if mine and _already_committed(mine, fingerprint, plan, ctx):
                sink.abort(txn)
                return TaskResult(ctx.partition_id, ctx.attempt, 0, skipped=True)
        marker = Marker(ctx.identity, ctx.batch_id, ctx.partition_id, ctx.attempt, fingerprint)
        clock.time(sink.commit_with_marker, txn, marker)
    except BaseException as exc:
        _abort_quietly(sink, txn, exc)
        raise
    return TaskResult(
        ctx.partition_id,
        ctx.attempt,
        fingerprint.count - len(rejected.letters),
        marker=marker,
        arrow_bytes=clock.arrow_bytes,
        target_seconds=clock.seconds,
        dead_lettered=rejected.classes(),
        rejections=rejected.samples(),
    )


def _committed_by_others(sink: MarkerHooks, plan: TaskPlan, ctx: TaskContext) -> list[Marker]:
    """Markers of this partition committed since the batch started (not by this attempt)."""
    return [
        m
        for m in sink.read_markers(ctx.identity, ctx.batch_id)
        if m.partition_id == ctx.partition_id
        and (m.partition_id, m.attempt, str(m.fingerprint)) not in plan.preexisting_markers
    ]


def _already_committed(
    mine: list[Marker],
    fingerprint: Fingerprint,
    plan: TaskPlan,
    ctx: TaskContext,
    rows: list[pa.RecordBatch] | None = None,
) -> bool:
    """Say whether another attempt committed these rows; raise when it committed other rows.

    A marker of another release (another fingerprint version) is compared with
    ``rows`` fingerprinted by its version; without ``rows`` (streamed, not kept)
    the task fails so that its retry, which keeps them, compares.
    """
    ours = {fingerprint.version: fingerprint}
    if rows is not None:
        for version in {m.fingerprint.version for m in mine} - set(ours):
            ours[version] = fingerprint_batches(rows, version)
    if any(ours.get(m.fingerprint.version) == m.fingerprint for m in mine):
        _log.info(
            "sink %s: batch %d partition %d was committed by attempt %d meanwhile; skipping it",
            plan.sink_name,
            ctx.batch_id,
            ctx.partition_id,
            mine[0].attempt,
        )
        return True
    earlier = [m for m in mine if m.fingerprint.version not in ours]
    if earlier:
        raise AbortRequiredError(
            f"attempt {earlier[0].attempt} of partition {ctx.partition_id}, run by another "
            f"release of twophase, committed since the batch started (fingerprint "
            f"{earlier[0].fingerprint}); this attempt did not keep its rows to compare them "
            "with that fingerprint version, so it aborts and the task's retry compares them"
        )
    raise NondeterministicBatchError(
        f"attempt {ctx.attempt} of partition {ctx.partition_id} computed rows "
        f"(fingerprint {fingerprint}) that differ from those attempt "
        f"{mine[0].attempt} already committed (fingerprint {mine[0].fingerprint}). "
        "The batch is not deterministic; writing it again would duplicate rows. "
        "Make the pipeline deterministic or enable staging=True on the sink",
        sink=plan.sink_name,
        batch_id=plan.batch_id,
        partition_id=ctx.partition_id,
    )
