r"""Real-time mode on an executor: one partition's epoch as a chain of small commits.

Under ``trigger(realTime=...)`` an epoch is one long task per partition whose rows
arrive as the source produces them. :func:`run_realtime_partition` reads them on
a thread into a queue and, on the task's own thread, commits what arrived every
``commit_interval`` seconds (or every ``commit_rows`` rows): ``begin_transaction``
-> ``write``\\* -> [``write_dead_letters``] -> ``commit_with_marker``, each marker
counting the partition's rows of this epoch committed so far and fingerprinting
that prefix. A replayed epoch reads the partition's markers first, checks that
its first rows are the committed prefix (same count, same fingerprint) and
writes only what follows; rows that differ stop it with
:class:`~twophase.errors.NondeterministicBatchError`. ``docs/realtime.md`` has
the protocol and its proof.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from .._arrow import JOINED_BYTES
from .._fingerprint import FingerprintAccumulator
from .._values import FINGERPRINT_VERSION, Fingerprint, Marker, TaskContext
from ..errors import AbortRequiredError, NondeterministicBatchError, TwoPhaseError
from ._hooks import AnySink, MarkerHooks, as_markers
from ._participant import TaskPlan, _abort_quietly, _clear_earlier_attempts, check_same_release
from ._rejections import PartitionRejections

__all__ = ["RealtimeResult", "RealtimeSettings", "committed_prefix", "run_realtime_partition"]

_log = logging.getLogger("twophase.realtime")

#: Record batches the reader thread may hold before it waits for the writer.
_QUEUED = 65_536


@dataclass(frozen=True)
class RealtimeSettings:
    """How often a real-time partition commits. Picklable.

    Attributes
    ----------
    commit_interval
        Seconds from a row's arrival to the commit that makes it visible, at most
        (plus the commit's own time).
    commit_rows
        Rows that make a commit at once, whatever the time.
    """

    commit_interval: float
    commit_rows: int


@dataclass(frozen=True)
class RealtimeResult:
    """What one real-time partition did in one epoch (for its log line and the tests).

    Attributes
    ----------
    skipped
        Rows of the replayed, already committed prefix, not written again.
    rows
        Rows this attempt committed (dead letters included).
    commits
        Transactions it committed.
    dead_lettered
        Rows it set aside as dead letters.
    """

    skipped: int
    rows: int
    commits: int
    dead_lettered: int


def committed_prefix(markers: Iterable[Marker], partition_id: int) -> Fingerprint | None:
    """Return the fingerprint of the longest committed prefix of one partition, if any.

    Each commit of a real-time partition marks the whole prefix committed so far,
    so the marker with the most rows is the one that counts.

    Parameters
    ----------
    markers
        The markers of one batch (epoch).
    partition_id
        The partition.

    Returns
    -------
    Fingerprint or None
        None when nothing of the partition is committed.
    """
    mine = [m.fingerprint for m in markers if m.partition_id == partition_id]
    return max(mine, key=lambda f: f.count) if mine else None


_Prepare = Callable[[pa.RecordBatch], pa.RecordBatch]


def _joined(
    batches: Sequence[pa.RecordBatch], rows: int, prepare: _Prepare
) -> list[pa.RecordBatch]:
    """Join arrivals (often one row each) into batches of ``rows`` rows and at most JOINED_BYTES.

    One Arrow call for the lot: a call per arrival costs more than the rows' own work.
    """
    if not batches:
        return []
    table = pa.Table.from_batches(batches).combine_chunks()
    if table.nbytes > JOINED_BYTES:
        rows = max(1, min(rows, table.num_rows * JOINED_BYTES // table.nbytes))
    return [prepare(batch) for batch in table.to_batches(max_chunksize=rows)]


class _Feed:
    """The partition's record batches, read on a thread so that a commit never waits for a row."""

    _END = object()

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._queue: queue.Queue[object] = queue.Queue(_QUEUED)
        self._thread = threading.Thread(
            target=self._read, args=(iter(batches),), name="twophase-realtime-reader", daemon=True
        )
        self.ended = False
        self._thread.start()

    def _read(self, batches: Iterator[pa.RecordBatch]) -> None:
        try:
            for batch in batches:
                if batch.num_rows:
                    self._queue.put(batch)
        except BaseException as exc:  # handed to the writer's thread, raised there
            self._queue.put(exc)
        self._queue.put(self._END)

    def take(self, timeout: float | None, limit: int) -> list[pa.RecordBatch]:
        """Wait up to ``timeout`` seconds (None: until a row or the end) for rows; take them all.

        Returns up to about ``limit`` rows; sets :attr:`ended` at the end of the epoch.
        """
        taken: list[pa.RecordBatch] = []
        if self.ended:
            return taken
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return taken
        rows = 0
        while True:
            if item is self._END:
                self.ended = True
                self._thread.join()
                return taken
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, pa.RecordBatch)
            taken.append(item)
            rows += item.num_rows
            if rows >= limit:
                return taken
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return taken


class _Partition:
    """One real-time partition's epoch: skip the committed prefix, then commit in small steps."""

    def __init__(
        self,
        sink: MarkerHooks,
        ctx: TaskContext,
        committed: Fingerprint | None,
        settings: RealtimeSettings,
        prepare: _Prepare,
    ) -> None:
        self.sink = sink
        self.prepare = prepare
        self.ctx = ctx
        self.settings = settings
        self.committed = committed
        # The chain keeps the fingerprint version of its first commit.
        self.acc = FingerprintAccumulator(committed.version if committed else FINGERPRINT_VERSION)
        self.to_skip = committed.count if committed else 0
        self.skipped = 0
        self.rows = 0
        self.commits = 0
        self.dead_lettered = 0

    @property
    def committed_count(self) -> int:
        return self.committed.count if self.committed else 0

    def skip(self, batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
        """Fingerprint the replayed prefix; return what follows it, once it is checked."""
        rest: list[pa.RecordBatch] = []
        heads: list[pa.RecordBatch] = []
        for batch in batches:
            left = self.to_skip - self.skipped
            if left <= 0:
                rest.append(batch)
                continue
            head = batch if batch.num_rows <= left else batch.slice(0, left)
            heads.append(head)
            self.skipped += head.num_rows
            if head is not batch:
                rest.append(batch.slice(left))
        for joined in _joined(heads, self.to_skip, self.prepare):  # one call, not one per row
            self.acc.add(joined)
        if heads and self.skipped == self.to_skip:
            self._check_prefix()
        return rest

    def _check_prefix(self) -> None:
        replayed = self.acc.result()
        if replayed != self.committed:
            raise NondeterministicBatchError(
                f"the replay of partition {self.ctx.partition_id} of epoch {self.ctx.batch_id} "
                f"does not begin with the rows already committed: its first {self.to_skip} rows "
                f"have fingerprint {replayed}, the committed ones {self.committed}. The source "
                "must replay a partition's records in the same order (Kafka does; an operator "
                "that reorders rows does not); writing them again would duplicate rows",
                sink=self.ctx.sink_name,
                batch_id=self.ctx.batch_id,
                partition_id=self.ctx.partition_id,
            )
        if self.to_skip:
            _log.info(
                "sink %s: epoch %d partition %d: the first %d rows were committed before; "
                "skipping them",
                self.ctx.sink_name,
                self.ctx.batch_id,
                self.ctx.partition_id,
                self.to_skip,
            )

    def check_ended(self) -> None:
        """At the epoch's end: refuse an epoch that ended inside its committed prefix."""
        if self.skipped < self.to_skip:
            raise AbortRequiredError(
                f"the replay of partition {self.ctx.partition_id} of epoch {self.ctx.batch_id} "
                f"ended after {self.skipped} rows, before the {self.to_skip} rows its earlier "
                "run committed; the task fails rather than let the next epoch start inside "
                "committed rows (a restart replays the epoch again)",
                sink=self.ctx.sink_name,
                batch_id=self.ctx.batch_id,
                partition_id=self.ctx.partition_id,
            )

    def commit(self, pending: Sequence[pa.RecordBatch]) -> None:
        """Write ``pending`` and commit it with the marker of the prefix it ends."""
        sink = self.sink
        txn = sink.begin_transaction(self.ctx)
        rejected = PartitionRejections(sink, self.ctx, start=self.acc.count)
        try:
            # One write per commit (arrivals are often one row each), in slices of the
            # sink's write_batch_rows where it has them.
            # The fingerprint is a sum over rows: one call per joined batch, not per arrival.
            rows = sink.write_batch_rows or self.settings.commit_rows
            for batch in _joined(pending, rows, self.prepare):
                self.acc.add(batch)
                rejected.add(sink.write(txn, batch), batch)
            rejected.write(txn)
            if sink.needs_marker_check(txn):
                self._check_no_one_else(txn)
            fingerprint = self.acc.result()
            marker = Marker(
                self.ctx.identity,
                self.ctx.batch_id,
                self.ctx.partition_id,
                self.ctx.attempt,
                fingerprint,
            )
            sink.commit_with_marker(txn, marker)
        except BaseException as exc:
            _abort_quietly(sink, txn, exc)
            raise
        self.rows += fingerprint.count - self.committed_count
        self.committed = fingerprint
        self.commits += 1
        self.dead_lettered += len(rejected.letters)

    def _check_no_one_else(self, txn: object) -> None:
        """Refuse to commit after another attempt extended this partition's committed prefix."""
        found = committed_prefix(
            self.sink.read_markers(self.ctx.identity, self.ctx.batch_id), self.ctx.partition_id
        )
        if (found.count if found else 0) != self.committed_count:
            raise AbortRequiredError(
                f"another attempt committed rows of partition {self.ctx.partition_id} of epoch "
                f"{self.ctx.batch_id} while attempt {self.ctx.attempt} was writing it "
                f"({found} committed, {self.committed} expected); this attempt stops without "
                "committing and a restart replays the epoch from the markers",
                sink=self.ctx.sink_name,
                batch_id=self.ctx.batch_id,
                partition_id=self.ctx.partition_id,
            )


def run_realtime_partition(
    sink: AnySink,
    plan: TaskPlan,
    partition_id: int,
    attempt: int,
    batches: Iterable[pa.RecordBatch],
    settings: RealtimeSettings,
    clock: Callable[[], float] = time.monotonic,
    prepare: _Prepare = lambda batch: batch,
) -> RealtimeResult:
    """Run one real-time task: one partition of one epoch, committed in small steps.

    Runs on an executor, once per task attempt; returns at the epoch's end.

    Parameters
    ----------
    sink
        The (unpickled) sink; markers protocol.
    plan
        The run's plan; ``batch_id`` is the epoch.
    partition_id
        The Spark partition index.
    attempt
        The task attempt number.
    batches
        The partition's rows as they arrive; ends with the epoch.
    settings
        How often to commit.
    clock
        Monotonic seconds (injectable for tests).
    prepare
        Applied to the rows of each write once they are joined, before the
        fingerprint and the sink see them (the engine names the columns there:
        once per write, not once per arriving row).

    Returns
    -------
    RealtimeResult
        What was skipped and committed.
    """
    check_same_release(plan, partition_id)
    markers_sink = as_markers(sink)
    ctx = TaskContext(
        plan.sink_name, plan.identity, plan.batch_id, partition_id, attempt, plan.epoch, True
    )
    try:
        if attempt > 0:
            _clear_earlier_attempts(markers_sink, ctx)
        committed = committed_prefix(
            markers_sink.read_markers(ctx.identity, ctx.batch_id), partition_id
        )
        part = _Partition(markers_sink, ctx, committed, settings, prepare)
        feed = _Feed(batches)
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        due: float | None = None  # when the pending rows must be committed
        while not feed.ended:
            wait = None if due is None else max(0.0, due - clock())
            arrived = feed.take(wait, settings.commit_rows - pending_rows)
            if part.skipped < part.to_skip:
                arrived = part.skip(arrived)
            if arrived:
                if due is None:
                    due = clock() + settings.commit_interval
                pending.extend(arrived)
                pending_rows += sum(b.num_rows for b in arrived)
            if pending and (
                feed.ended or pending_rows >= settings.commit_rows or clock() >= (due or 0.0)
            ):
                part.commit(pending)
                pending, pending_rows, due = [], 0, None
        part.check_ended()
    except TwoPhaseError as exc:
        raise exc.with_context(
            sink=plan.sink_name, batch_id=plan.batch_id, partition_id=partition_id
        ) from exc.__cause__
    _log.info(
        "sink %s: epoch %d partition %d: %d rows in %d commits (%d skipped, %d set aside)",
        plan.sink_name,
        plan.batch_id,
        partition_id,
        part.rows,
        part.commits,
        part.skipped,
        part.dead_lettered,
    )
    return RealtimeResult(part.skipped, part.rows, part.commits, part.dead_lettered)
