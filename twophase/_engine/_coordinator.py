"""The coordinator: the driver-side state machine of both commit protocols.

One :class:`Coordinator` per run of a query and sink. It is engine-neutral:
Spark (``twophase._spark._classic``) and the test kit's local runner
(``twophase.testing.LocalRunner``) both hand it the sink and a
:class:`BatchExecution` that runs the participants. It keeps no reference to the
sink between calls: the sink is settings plus hooks, the coordinator is the
protocol's state over the log. See ``docs/protocol.md`` for the diagrams.

The coordinator holds what both protocols do before a batch's own work (claim
the identity, recover, skip a batch already committed, check the schema, route
rows to the sink's transactions) and hands the batch to its protocol's driver
side: ``_engine/_coordinated.py`` (decision and phase 2, with the fencing loop of
``_engine/_fencing_loop.py``) or ``_engine/_markers.py`` (replay check and phase 1).
Both are built on ``_engine/_run.py``, the run's state over the log.

Per batch, either protocol::

    start -> recover -> [already committed? return] -> check schema, route rows
      -> the protocol's batch (coordinated: prepare, decide, commit; markers:
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
from .._types import CommitProtocol, SinkContext
from ..errors import ConfigurationError, TwoPhaseError
from ._coordinated import CoordinatedProtocol
from ._execution import BatchExecution, StepListener
from ._hooks import AnySink, as_coordinated, as_markers
from ._markers import MarkersProtocol
from ._recovery import recover
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


class Coordinator(CoordinatedProtocol, MarkersProtocol):
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
        if sink.protocol is CommitProtocol.COORDINATED:
            self._fence(sink, -1)  # every attempt of an earlier run is stale
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
            self._recovery_context,
            lambda fn, retries: self._retrying(sink, fn, retries),
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
            _log.info(
                "sink %s: batch %d is already committed; skipping the replay",
                sink.name,
                batch_id,
            )
            metrics = self._replay_metrics(
                sink, batch_id, recovered_committed=recovered[0], recovered_aborted=recovered[1]
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

    def plan(self, sink: AnySink, batch_id: int) -> None:
        """Start a run for one batch whose tasks have not run yet: claim, recover.

        Parameters
        ----------
        sink
            The sink.
        batch_id
            The batch about to run (for the steps and messages).
        """
        self._step(Step.START, batch_id)
        try:
            self.start(sink, batch_id)
        except TwoPhaseError as exc:
            raise exc.with_context(sink=sink.name, batch_id=batch_id) from exc.__cause__
        self._step(Step.RECOVERED, batch_id)
