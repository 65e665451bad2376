"""What the driver side of both protocols shares: the run's log, its steps, retries and records.

The coordinator (``_engine/_coordinator.py``) is assembled from one class per protocol's
driver side (``_engine/_coordinated.py``, ``_engine/_markers.py``) and the fencing
loop (``_engine/_fencing_loop.py``), all built on :class:`Run`: the state of one run
over the coordinator log, and the helpers every step of either protocol uses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from .._log._coordinator_log import CoordinatorLog
from .._metrics._batch import BatchMetrics
from .._metrics._otel import attributes_of
from .._types import RecoveryContext, SinkContext
from ._execution import StepListener
from ._hooks import AnySink
from ._participant import TaskPlan, TaskResult
from ._steps import Step

__all__ = ["Run"]

_log = logging.getLogger("twophase.coordinator")


class Run:
    """The state of one run of a sink on the driver, and the helpers of every protocol step.

    Constructed as a :class:`~twophase._engine._coordinator.Coordinator`, which sets
    these attributes.

    Attributes
    ----------
    log
        The coordinator log of the sink identity.
    context
        Query id, run id and identity.
    identity
        The sink identity token.
    """

    log: CoordinatorLog
    context: SinkContext
    identity: str
    _sleep: Callable[[float], None]
    _on_step: StepListener | None

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

    def _plan(self, sink: AnySink, batch_id: int, **kwargs: Any) -> TaskPlan:
        epoch = self.log.epoch or 0
        return TaskPlan(sink.name, self.identity, batch_id, sink.protocol, epoch=epoch, **kwargs)

    def _record_committed(self, batch_id: int, rows: int) -> float:
        """Record "batch N committed"; return the time right after it."""
        # When, and how much: what `twophase status` shows of the last batch, also to a Spark
        # Connect client, whose sink's metrics stay in the server's process.
        self.log.record_committed(batch_id, {"rows": rows, "committed_at": time.time()})
        done = time.perf_counter()
        self._step(Step.RECORDED_COMMITTED, batch_id)
        return done

    def _committed_metrics(
        self,
        sink: AnySink,
        batch_id: int,
        partitions: int,
        results: list[TaskResult],
        **fields: Any,
    ) -> BatchMetrics:
        # What only the executors know came back with phase 1's results: no round trip of its own.
        return BatchMetrics(
            sink.name,
            batch_id,
            sink.protocol.value,
            "committed",
            partitions=partitions,
            target=attributes_of(sink)["twophase.target"],
            arrow_bytes=sum(r.arrow_bytes for r in results),
            target_seconds=sum(r.target_seconds for r in results),
            **fields,
        )

    def _replay_metrics(self, sink: AnySink, batch_id: int, **fields: Any) -> BatchMetrics:
        """Return the metrics of a batch the log holds as committed already (a replay)."""
        target = attributes_of(sink)["twophase.target"]
        return BatchMetrics(
            sink.name, batch_id, sink.protocol.value, "already-committed", target=target, **fields
        )
