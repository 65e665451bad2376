"""The coordinator: the driver-side state machine of both commit protocols.

One :class:`Coordinator` per run of a query and sink. It is engine-neutral:
Spark (``twophase._spark``) and the test kit's local runner
(``twophase.testing.LocalRunner``) both hand it the sink and a
:class:`BatchExecution` that runs the participants. It keeps no reference to the
sink between calls: the sink is settings plus hooks, the coordinator is the
protocol's state over the log. See ``docs/protocol.md`` for the diagrams.

The coordinated protocol, per batch::

    recover -> [already committed? return] -> phase 1 (executors prepare)
      -> record decision (commit point) -> phase 2 (commit every handle)
      -> sweep orphans of the batch -> record committed

The markers protocol, per batch::

    recover -> [already committed? return] -> [staging] -> [replay check against
    markers, before writing] -> record intent -> phase 1 (executors commit with
    markers) -> record committed
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from ._codec import HandleCodecError
from ._execution import BatchExecution, StepListener
from ._hooks import AnySink, CoordinatedHooks, MarkerHooks, as_coordinated, as_markers
from ._log import CoordinatorLog
from ._metrics import BatchMetrics
from ._participant import TaskPlan, TaskResult
from ._recovery import recover
from ._replay import legacy_versions, match_markers
from ._types import (
    CommitProtocol,
    Fingerprint,
    RecoveryContext,
    SinkContext,
    TransactionHandle,
)
from .errors import (
    CommitFailedError,
    ConfigurationError,
    RetriableError,
    TwoPhaseError,
    add_note,
)

__all__ = ["Coordinator"]

_log = logging.getLogger("twophase.coordinator")

#: How often a fence held up by a zombie's prepared transaction is retried after a sweep.
_FENCE_TRIES = 3
#: A batch id above every real one: a sweep at recovery covers every batch.
_ANY_BATCH = 2**62


def _key_columns(sink: AnySink, schema: pa.Schema) -> tuple[str, ...]:
    """Return the sink's ``key_by`` columns, each checked to be a column of the batch."""
    columns = tuple(sink.key_by)
    for column in columns:
        if column not in schema.names:
            raise ConfigurationError(
                f"key_by column {column!r} is not a column of the batch (columns: "
                f"{', '.join(schema.names)}); rows are routed to partitions by it",
                column=column,
                setting="key_by",
            )
    return columns


class Coordinator:
    """Drives one sink through the commit protocol, batch by batch, on the driver.

    Parameters
    ----------
    log
        The coordinator log of the sink identity (not yet claimed).
    context
        Query id, run id and identity.
    sleep
        Injectable sleep for retry backoff (the test kit's settable clock).
    on_step
        Called at every step of :data:`COORDINATED_STEPS` / :data:`MARKER_STEPS`
        (the test kit crashes the driver there).
    """

    def __init__(
        self,
        log: CoordinatorLog,
        context: SinkContext,
        *,
        sleep: Callable[[float], None] = time.sleep,
        on_step: StepListener | None = None,
    ) -> None:
        self.log = log
        self.context = context
        self.identity = context.identity
        self._sleep = sleep
        self._on_step = on_step
        self._opened = False
        #: Set by the engine glue when a batch failed: the next call starts a new run.
        self.failed = False
        self._recovered_committed = 0
        self._recovered_aborted = 0

    # ------------------------------------------------------------ helpers
    def _step(self, step: str, batch_id: int, index: int | None = None) -> None:
        if self._on_step is not None:
            self._on_step(step, batch_id, index)

    def _retrying(self, sink: AnySink, fn: Callable[[], None], counter: list[int]) -> None:
        def on_retry(failures: int, exc: BaseException) -> None:
            counter[0] += 1
            _log.warning("sink %s: transient failure #%d, retrying: %s", sink.name, failures, exc)

        sink.retry.call(fn, on_retry=on_retry, sleep=self._sleep)

    def _recovery_context(self) -> RecoveryContext:
        state = self.log.state
        return RecoveryContext(
            self.identity,
            state.partition_slots,
            tuple(state.unfinished()),
            epoch=self.log.epoch or 0,
        )

    # ----------------------------------------------------------- recovery
    def start(self, sink: AnySink) -> None:
        """Open the sink, claim the identity and recover (once per run).

        Runs on the driver before the first batch of a run.

        Parameters
        ----------
        sink
            The sink.
        """
        if self._opened:
            return
        sink.open(self.context)
        self.log.load()
        self.log.claim(self.context.run_id, self.context.query_id)
        self._recover(sink)
        if sink.protocol is CommitProtocol.COORDINATED:
            self._fence(sink, -1)  # every attempt of an earlier run is stale
        self._opened = True

    def _recover(self, sink: AnySink) -> None:
        committed, aborted = recover(
            self.log,
            sink,
            self._recovery_context,
            lambda fn, retries: self._retrying(sink, fn, retries),
        )
        self._recovered_committed += committed
        self._recovered_aborted += aborted

    # -------------------------------------------------------------- batch
    def run_batch(self, sink: AnySink, execution: BatchExecution) -> BatchMetrics:
        """Run one micro-batch through the protocol.

        Parameters
        ----------
        sink
            The sink (the driver's copy).
        execution
            The engine's view of the batch.

        Returns
        -------
        BatchMetrics
            What happened; also logged as one line.
        """
        batch_id = execution.batch_id
        self.plan(sink, batch_id)
        recovered = (self._recovered_committed, self._recovered_aborted)
        self._recovered_committed = self._recovered_aborted = 0
        self.log.check_epoch(batch_id)
        if self.log.state.is_committed(batch_id):
            _log.info(
                "sink %s: batch %d is already committed; skipping the replay",
                sink.name,
                batch_id,
            )
            metrics = BatchMetrics(
                sink.name,
                batch_id,
                sink.protocol.value,
                "already-committed",
                recovered_committed=recovered[0],
                recovered_aborted=recovered[1],
            )
        else:
            try:
                sink.check_schema(execution.schema(), batch_id)
                limit = sink.max_transactions_per_batch
                if sink.key_by:
                    execution.key_by(_key_columns(sink, execution.schema()), limit)
                elif limit is not None and execution.num_partitions() > limit:
                    execution.limit_partitions(limit)
                if sink.protocol is CommitProtocol.COORDINATED:
                    metrics = self._run_coordinated(as_coordinated(sink), execution, recovered)
                else:
                    metrics = self._run_markers(as_markers(sink), execution, recovered)
            except TwoPhaseError as exc:
                raise exc.with_context(sink=sink.name, batch_id=batch_id) from exc.__cause__
            finally:
                execution.close()
        metrics.emit()
        return metrics

    def _plan(self, sink: AnySink, batch_id: int, **kwargs: Any) -> TaskPlan:
        epoch = self.log.epoch or 0
        return TaskPlan(sink.name, self.identity, batch_id, sink.protocol, epoch=epoch, **kwargs)

    def _abort_batch(self, sink: AnySink, batch_id: int, keep: frozenset[str] = frozenset()) -> int:
        """Roll back the orphans of ``batch_id`` (all in doubt but ``keep``) and of earlier batches.

        An earlier batch's orphan is a zombie attempt that prepared after that
        batch's own sweep. A batch whose decision is still pending is never
        touched: its prepared transactions are committed by recovery.
        """
        pending = set(self.log.state.pending_decisions()) - {batch_id}
        aborted = 0
        for handle in sink.list_in_doubt(self._recovery_context()):
            if handle.batch_id > batch_id or handle.batch_id in pending:
                continue
            if handle.transaction_id not in keep:
                if handle.batch_id < batch_id:
                    _log.warning(
                        "sink %s: rolling back %s, prepared late by an attempt of batch %d "
                        "that Spark had given up on (a zombie)",
                        sink.name,
                        handle.transaction_id,
                        handle.batch_id,
                    )
                sink.recover_and_abort(handle)
                aborted += 1
        return aborted

    def _fence(self, sink: AnySink, batch_id: int, keep: frozenset[str] = frozenset()) -> None:
        """Make every attempt up to ``batch_id`` (-1: of earlier runs) unable to prepare.

        A zombie that prepared before the fence holds it up: its transaction is
        an orphan, rolled back by a sweep, and the fence is tried again.
        """
        coordinated = as_coordinated(sink)
        epoch = self.log.epoch or 0
        fenced = [False]

        def fence() -> None:
            fenced[0] = coordinated.fence_attempts(self.identity, epoch, batch_id)

        for _ in range(_FENCE_TRIES):
            self._retrying(sink, fence, [0])
            if fenced[0]:
                return
            swept = self._abort_batch(sink, batch_id if batch_id >= 0 else _ANY_BATCH, keep)
            _log.warning(
                "sink %s: a transaction prepared by a stale attempt held up the fence after "
                "batch %d; rolled back %d orphan(s), fencing again",
                sink.name,
                batch_id,
                swept,
            )
        _log.warning(
            "sink %s: could not fence stale attempts after batch %d (%d tries); the next "
            "batch's sweep or the next start's recovery rolls back what they prepare",
            sink.name,
            batch_id,
            _FENCE_TRIES,
        )

    def _fence_after(self, sink: AnySink, batch_id: int, keep: frozenset[str]) -> None:
        """Fence after a finished batch; a failure only postpones it (logged)."""
        try:
            self._fence(sink, batch_id, keep)
        except Exception as exc:
            _log.warning(
                "sink %s: could not fence stale attempts after batch %d (%s); the next "
                "batch's sweep or the next start's recovery rolls back what they prepare",
                sink.name,
                batch_id,
                exc,
            )

    def _sweep_after_commit(
        self,
        sink: AnySink,
        batch_id: int,
        handles: list[TransactionHandle],
    ) -> int:
        """Sweep the orphans of a committed batch, retried; a target still away skips it.

        The batch is committed whatever the sweep does, and its orphans hold no
        decision: the next batch's sweep, or the next start's recovery, rolls
        them back. So a target that stays unreachable through the retry policy
        only postpones the sweep instead of failing a committed batch.
        """
        keep = frozenset(h.transaction_id for h in handles)
        swept = [0]

        def sweep() -> None:
            swept[0] = self._abort_batch(sink, batch_id, keep)

        try:
            self._retrying(sink, sweep, [0])
        except RetriableError as exc:
            _log.warning(
                "sink %s: batch %d is committed, but its orphans could not be swept (%s); "
                "the next batch's sweep or the next start's recovery rolls them back",
                sink.name,
                batch_id,
                exc,
            )
        return swept[0]

    def _run_coordinated(
        self, sink: CoordinatedHooks, execution: BatchExecution, recovered: tuple[int, int]
    ) -> BatchMetrics:
        batch_id = execution.batch_id
        t0 = time.perf_counter()
        try:
            results = execution.run_participants(sink, self._plan(sink, batch_id))
        except BaseException as exc:
            # Driver-side abort of a failed batch: partitions that prepared
            # before another failed must not stay in doubt.
            try:
                aborted = self._abort_batch(sink, batch_id)
                if aborted:
                    _log.info(
                        "sink %s: batch %d failed; aborted %d prepared",
                        sink.name,
                        batch_id,
                        aborted,
                    )
                self._fence_after(sink, batch_id, frozenset())
            except Exception as abort_exc:
                add_note(exc, f"aborting the batch's prepared transactions failed: {abort_exc!r}")
            raise
        self._step("phase1_done", batch_id)
        return self._decide_and_commit(
            sink, batch_id, results, execution.num_partitions(), t0, recovered
        )

    def plan(self, sink: AnySink, batch_id: int) -> None:
        """Start a run for one batch whose tasks have not run yet: claim, recover.

        Parameters
        ----------
        sink
            The sink.
        batch_id
            The batch about to run (for the steps and messages).
        """
        self._step("start", batch_id)
        try:
            self.start(sink)
        except TwoPhaseError as exc:
            raise exc.with_context(sink=sink.name, batch_id=batch_id) from exc.__cause__
        self._step("recovered", batch_id)

    def commit_prepared(
        self, sink: AnySink, batch_id: int, results: list[TaskResult]
    ) -> BatchMetrics:
        """Run the coordinated protocol from the decision on, for a batch already prepared.

        For engines whose driver gets control only after the write tasks (a
        Python data source's ``commit``): recovery ran before the tasks, and
        the log's epoch was adopted from the run that planned them. A batch the
        log already holds as committed (a replay after a crash past that
        record) commits nothing: its new transactions are rolled back.

        Parameters
        ----------
        sink
            The sink (coordinated).
        batch_id
            The micro-batch id.
        results
            Every participant's result.

        Returns
        -------
        BatchMetrics
            What happened; also logged as one line.
        """
        self.log.check_epoch(batch_id)
        coordinated = as_coordinated(sink)
        if self.log.state.is_committed(batch_id):
            for result in results:
                if result.handle is not None:
                    sink.recover_and_abort(result.handle)
            _log.info(
                "sink %s: batch %d is already committed; rolled back its replay",
                sink.name,
                batch_id,
            )
            metrics = BatchMetrics(sink.name, batch_id, sink.protocol.value, "already-committed")
        else:
            self._step("phase1_done", batch_id)
            metrics = self._decide_and_commit(
                coordinated, batch_id, results, len(results), time.perf_counter(), (0, 0)
            )
        metrics.emit()
        return metrics

    def _decide_and_commit(
        self,
        sink: CoordinatedHooks,
        batch_id: int,
        results: list[TaskResult],
        partitions: int,
        t0: float,
        recovered: tuple[int, int],
    ) -> BatchMetrics:
        handles: list[TransactionHandle] = [r.handle for r in results if r.handle is not None]
        rows = sum(r.rows for r in results)
        t1 = time.perf_counter()
        self.log.record_decision(
            batch_id, handles, {"rows": rows}, encode=_checked_encoder(sink, batch_id)
        )
        self._step("decided", batch_id)
        t2 = time.perf_counter()
        retries = [0]
        for index, handle in enumerate(handles):
            try:
                self._retrying(sink, functools.partial(sink.commit, handle), retries)
            except Exception as exc:
                raise CommitFailedError(
                    f"phase 2 could not commit {handle.transaction_id} ({exc}). The commit "
                    "decision is recorded: restarting the query commits the remaining "
                    "transactions before anything else; nothing is lost",
                    sink=sink.name,
                    batch_id=batch_id,
                    partition_id=handle.partition_id,
                ) from exc
            self._step("committed_handle", batch_id, index)
        self._step("phase2_done", batch_id)
        orphans = self._sweep_after_commit(sink, batch_id, handles)
        self._fence_after(sink, batch_id, frozenset(h.transaction_id for h in handles))
        t3 = self._record_committed(batch_id, rows)
        self.log.compact(batch_id)
        return self._committed_metrics(
            sink,
            batch_id,
            partitions,
            rows=rows,
            transactions=len(handles),
            phase1_seconds=t1 - t0,
            decision_seconds=t2 - t1,
            phase2_seconds=t3 - t2,
            commit_retries=retries[0],
            recovered_committed=recovered[0],
            recovered_aborted=recovered[1] + orphans,
        )

    def _record_committed(self, batch_id: int, rows: int) -> float:
        """Record "batch N committed"; return the time right after it."""
        # When, and how much: what `twophase status` shows of the last batch, also to a Spark
        # Connect client, whose sink's metrics stay in the server's process.
        self.log.record_committed(batch_id, {"rows": rows, "committed_at": time.time()})
        done = time.perf_counter()
        self._step("recorded_committed", batch_id)
        return done

    def _committed_metrics(
        self, sink: AnySink, batch_id: int, partitions: int, **fields: Any
    ) -> BatchMetrics:
        return BatchMetrics(
            sink.name, batch_id, sink.protocol.value, "committed", partitions=partitions, **fields
        )

    def _staging_location(self, batch_id: int) -> str:
        # The qualified location (file:/..., hdfs://...): Spark writes the staged copy.
        return f"{self.context.log_location}/staging/{batch_id}"

    def _run_markers(
        self, sink: MarkerHooks, execution: BatchExecution, recovered: tuple[int, int]
    ) -> BatchMetrics:
        batch_id = execution.batch_id
        if sink.staging:
            execution.stage(self._staging_location(batch_id))
        self._step("staged", batch_id)
        t0 = time.perf_counter()
        skip: frozenset[int] = frozenset()
        expected: dict[int, Fingerprint] = {}
        preexisting: frozenset[tuple[int, int, str]] = frozenset()
        if batch_id in self.log.state.intents:
            # A replay of a batch that was started before: some partitions may
            # be committed. Check BEFORE writing anything.
            markers = list(sink.read_markers(self.identity, batch_id))
            if markers:
                preexisting = frozenset(
                    (m.partition_id, m.attempt, str(m.fingerprint)) for m in markers
                )
            if markers and batch_id in self.log.state.rewrite:
                _log.warning(
                    "sink %s: batch %d is rewritten whole, as an operator decided (twophase "
                    "resolve --rewrite): the rows of its %d committed partition(s) are written "
                    "again",
                    sink.name,
                    batch_id,
                    len(markers),
                )
            elif markers:
                replayed = execution.fingerprints()
                legacy = legacy_versions(markers, sink=sink.name, batch_id=batch_id)
                skip, expected = match_markers(
                    markers,
                    replayed,
                    sink=sink.name,
                    batch_id=batch_id,
                    legacy=[execution.fingerprints(version) for version in legacy],
                )
                _log.info(
                    "sink %s: replay of batch %d: %d partition(s) already committed, %d to write",
                    sink.name,
                    batch_id,
                    len(skip),
                    len(expected),
                )
        self.log.record_intent(batch_id, execution.num_partitions())
        self._step("intent_recorded", batch_id)
        t1 = time.perf_counter()
        plan = self._plan(
            sink, batch_id, skip=skip, expected=expected, preexisting_markers=preexisting
        )
        results = execution.run_participants(sink, plan)
        self._step("phase1_done", batch_id)
        t2 = time.perf_counter()
        rows = sum(r.rows for r in results)
        t3 = self._record_committed(batch_id, rows)
        if sink.staging:
            execution.drop_staged(self._staging_location(batch_id))
        self.log.compact(batch_id)
        return self._committed_metrics(
            sink,
            batch_id,
            execution.num_partitions(),
            rows=rows,
            transactions=sum(1 for r in results if r.marker is not None),
            skipped_partitions=sum(1 for r in results if r.skipped),
            phase1_seconds=t2 - t1,
            decision_seconds=t1 - t0,
            phase2_seconds=t3 - t2,
            recovered_committed=recovered[0],
            recovered_aborted=recovered[1],
        )


def _checked_encoder(sink: CoordinatedHooks, batch_id: int) -> Callable[[Any], Mapping[str, Any]]:
    """Return the sink's ``encode_handle``, checked: plain JSON that decodes to an equal handle.

    Runs before the decision is written, so that a handle the log cannot give
    back fails the batch before its commit point (its transactions are rolled
    back) instead of stranding a decided batch.
    """

    def encode(handle: Any) -> Mapping[str, Any]:
        what = f"the handle {getattr(handle, 'transaction_id', handle)!r}"
        fix = (
            "A handle is stored as JSON: return a frozen dataclass of plain fields "
            f"(set {type(sink).__name__}.handle_type to its class), or override "
            "encode_handle and decode_handle (docs/custom-sink.md)"
        )
        try:
            data = sink.encode_handle(handle)
            again = sink.decode_handle(json.loads(json.dumps(data, allow_nan=False)))
        except (HandleCodecError, TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"{what} cannot be recorded in the commit decision: {exc}. {fix}",
                sink=sink.name,
                batch_id=batch_id,
                setting="encode_handle",
            ) from exc
        if again != handle:
            raise ConfigurationError(
                f"{what} does not survive the coordinator log: recorded as {data!r:.200}, "
                f"it decodes to {again!r:.200}. {fix}",
                sink=sink.name,
                batch_id=batch_id,
                setting="encode_handle",
            )
        return data

    return encode
