"""The coordinator: one run of a sink on the driver, handing each batch to its protocol.

One :class:`Coordinator` per run of a query and sink. It is engine-neutral:
Spark (``twophase._spark``: classic and Connect) and the test kit's local runner
(``twophase.testing.LocalRunner``) both hand it the sink and a
:class:`BatchExecution` that runs the participants. It keeps no reference to the
sink between calls: the sink is settings plus hooks, the coordinator is the
protocol's state over the log. See ``docs/protocol.md`` for the diagrams.

It is composed, not inherited: it builds the run (``_engine/_run.py``: the log,
the step listener, retries) and one object per protocol over it --
:class:`~._coordinated_protocol.CoordinatedProtocol` (with its fencing loop) and
:class:`~._markers_protocol.MarkersProtocol` -- and does what both protocols do before a
batch's own work: claim the identity, recover, skip a batch already committed,
check the schema, route rows to the sink's transactions. Per batch, either protocol::

    start -> recover -> [the protocol's begin_run, once per run]
      -> [already committed? compute it without writing if it holds state, return]
      -> check schema, route rows
      -> the protocol's run_batch (coordinated: prepare, decide, commit; markers:
         check the replay, commit with markers)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pyarrow as pa

from .._log._coordinator_log import CoordinatorLog
from .._metrics import _otel
from .._metrics._batch import BatchMetrics
from .._values import CommitProtocol, SinkContext
from ..errors import ConfigurationError, TwoPhaseError
from ._coordinated_protocol import CoordinatedProtocol
from ._execution import BatchExecution, StepListener
from ._hooks import AnySink
from ._markers_protocol import MarkersProtocol
from ._participant import TaskResult
from ._recovery import recover
from ._run import Run, StateMachine
from ._steps import Step

__all__ = ["Coordinator"]

_log = logging.getLogger("twophase.coordinator")


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
        self._run = Run(log, context, sleep, on_step)
        self._coordinated = CoordinatedProtocol(self._run)
        self._markers = MarkersProtocol(self._run)
        self._opened = False
        self._failed = False
        self._recovered_committed = 0
        self._recovered_aborted = 0

    @property
    def log(self) -> CoordinatorLog:
        """Return the coordinator log of the sink identity."""
        return self._run.log

    @property
    def context(self) -> SinkContext:
        """Return the run's query id, run id and identity."""
        return self._run.context

    @property
    def failed(self) -> bool:
        """Return whether a batch of this run failed: the next call starts a new run."""
        return self._failed

    def mark_failed(self) -> None:
        """Record that a batch failed (the engine glue calls it): the next call starts a new run."""
        self._failed = True

    def _protocol(self, sink: AnySink) -> StateMachine:
        """Return the object that runs the sink's protocol."""
        if sink.protocol is CommitProtocol.COORDINATED:
            return self._coordinated
        return self._markers

    # ----------------------------------------------------------- recovery
    def start(self, sink: AnySink, batch_id: int) -> None:
        """Open the sink, claim the identity and recover (once per run).

        Runs on the driver before the first batch of a run.

        Parameters
        ----------
        sink
            The sink.
        batch_id
            The run's first batch (Spark replays an unfinished batch first).
        """
        if self._opened:
            return
        sink.open(self.context)
        self.log.load()
        self.log.claim(self.context.run_id, self.context.query_id)
        self._recover(sink, batch_id)
        self._protocol(sink).begin_run(sink)
        self._opened = True
        self._report_last_committed(sink)

    def _report_last_committed(self, sink: AnySink) -> None:
        """Start the last-committed gauges from the log: a run stuck on its first batch shows."""
        state = self.log.state
        last = max(state.committed, default=state.committed_through)
        record = self.log.read_record(last, "committed") if last >= 0 else None
        when = (record or {}).get("committed_at")
        if isinstance(when, (int, float)):
            _otel.record_last_committed(_otel.attributes_of(sink), last, float(when))

    def _recover(self, sink: AnySink, batch_id: int) -> None:
        committed, aborted = recover(
            self.log,
            sink,
            self._run.recovery_context,
            lambda fn, retries: self._run.retrying(sink, fn, retries),
            batch_id,
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
            metrics = self._skip(sink, execution, recovered)
        else:
            try:
                sink.check_schema(execution.schema(), batch_id)
                limit = sink.max_transactions_per_batch
                if sink.key_by:
                    execution.key_by(_key_columns(sink, execution.schema()), limit)
                elif limit is not None and execution.num_partitions() > limit:
                    execution.limit_partitions(limit)
                metrics = self._protocol(sink).run_batch(sink, execution, recovered)
            except TwoPhaseError as exc:
                raise exc.with_context(sink=sink.name, batch_id=batch_id) from exc.__cause__
            finally:
                execution.close()
        metrics.emit()
        return metrics

    def _skip(
        self, sink: AnySink, execution: BatchExecution, recovered: tuple[int, int]
    ) -> BatchMetrics:
        """Skip the replay of a committed batch; compute it, writing nothing, if it holds state.

        The engine's state of a stateful query (Spark's state stores) is committed by computing
        the batch; Spark 4.2 and later fail the query if the replay leaves it uncommitted
        (``STATE_STORE_COMMIT_VALIDATION_FAILED``). A stateless batch is not computed at all.
        """
        batch_id = execution.batch_id
        try:
            stateful = execution.holds_state()
            if stateful:
                execution.compute_without_writing()
        except TwoPhaseError as exc:
            raise exc.with_context(sink=sink.name, batch_id=batch_id) from exc.__cause__
        finally:
            execution.close()
        _log.info(
            "sink %s: batch %d is already committed; skipping the replay%s",
            sink.name,
            batch_id,
            " (computed without writing: the query holds state)" if stateful else "",
        )
        return self._run.replay_metrics(
            sink, batch_id, recovered_committed=recovered[0], recovered_aborted=recovered[1]
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
        self._run.step(Step.START, batch_id)
        try:
            self.start(sink, batch_id)
        except TwoPhaseError as exc:
            raise exc.with_context(sink=sink.name, batch_id=batch_id) from exc.__cause__
        self._run.step(Step.RECOVERED, batch_id)

    def commit_prepared(
        self, sink: AnySink, batch_id: int, results: list[TaskResult]
    ) -> BatchMetrics:
        """Decide and commit a batch already prepared (a Python data source's ``commit``).

        See :meth:`.CoordinatedProtocol.commit_prepared`: the coordinated protocol's own.
        """
        return self._coordinated.commit_prepared(sink, batch_id, results)
