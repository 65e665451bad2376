"""The run: what both protocols share on the driver -- the log, the step listener, retries, records.

A :class:`Run` is built once per run by the coordinator (``_engine/_coordinator.py``) and
handed to each protocol (``_engine/_coordinated_protocol.py``,
``_engine/_markers_protocol.py``) and to the coordinated protocol's fencing loop
(``_engine/_fencing_loop.py``). It is frozen: every field is set when the run starts and none
changes after, so that no protocol sets state another one reads. What changes during a run
lives in the coordinator log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .._log._coordinator_log import CoordinatorLog
from .._metrics._batch import BatchMetrics
from .._metrics._otel import attributes_of
from .._values import RecoveryContext, SinkContext
from ._execution import BatchExecution, StepListener
from ._hooks import AnySink
from ._participant import TaskPlan, TaskResult
from ._rejections import by_class
from ._steps import Step

__all__ = ["Run", "StateMachine"]

_log = logging.getLogger("twophase.coordinator")


@dataclass(frozen=True)
class Run:
    """One run of a sink on the driver: its log and listener, and every protocol's helpers.

    Attributes
    ----------
    log
        The coordinator log of the sink identity.
    context
        Query id, run id and identity.
    sleep
        Sleep for retry backoff (the test kit's settable clock).
    on_step
        Called at every step of :class:`~twophase._engine._steps.Step` (the test kit's
        crash points), or None.
    """

    log: CoordinatorLog
    context: SinkContext
    sleep: Callable[[float], None] = time.sleep
    on_step: StepListener | None = None

    @property
    def identity(self) -> str:
        """Return the sink identity token."""
        return self.context.identity

    def step(self, step: str, batch_id: int, index: int | None = None) -> None:
        """Announce ``step`` of ``batch_id`` to the listener (where the test kit crashes)."""
        if self.on_step is not None:
            self.on_step(step, batch_id, index)

    def retrying(self, sink: AnySink, fn: Callable[[], None], counter: list[int]) -> None:
        """Call ``fn`` under the sink's retry policy, counting retries in ``counter[0]``."""

        def on_retry(failures: int, exc: BaseException) -> None:
            counter[0] += 1
            _log.warning("sink %s: transient failure #%d, retrying: %s", sink.name, failures, exc)

        sink.retry.call(fn, on_retry=on_retry, sleep=self.sleep)

    def recovery_context(self) -> RecoveryContext:
        """Return what a sink's ``list_in_doubt`` is told: identity, slots, unfinished batches."""
        state = self.log.state
        return RecoveryContext(
            self.identity,
            state.partition_slots,
            tuple(state.unfinished()),
            epoch=self.log.epoch or 0,
        )

    def plan(self, sink: AnySink, batch_id: int, **kwargs: Any) -> TaskPlan:
        """Return the plan every participant of ``batch_id`` runs."""
        epoch = self.log.epoch or 0
        return TaskPlan(sink.name, self.identity, batch_id, sink.protocol, epoch=epoch, **kwargs)

    def record_committed(
        self, sink: AnySink, batch_id: int, rows: int, results: list[TaskResult]
    ) -> float:
        """Record "batch N committed"; return the time right after it."""
        # When, and how much: what `twophase status` shows of the last batch, also to a Spark
        # Connect client, whose sink's metrics stay in the server's process. The dead letters'
        # count is an optional field (0.3.0 on): a reader before it ignores it.
        info: dict[str, Any] = {"rows": rows, "committed_at": time.time()}
        if sink.bad_rows == "dead_letter":
            info["dead_lettered"] = sum(by_class(results).values())
        self.log.record_committed(batch_id, info)
        done = time.perf_counter()
        self.step(Step.RECORDED_COMMITTED, batch_id)
        return done

    def committed_metrics(
        self,
        sink: AnySink,
        batch_id: int,
        partitions: int,
        results: list[TaskResult],
        **fields: Any,
    ) -> BatchMetrics:
        """Return the metrics of a batch this run committed."""
        # What only the executors know came back with phase 1's results: no round trip of its own.
        dead = by_class(results)
        return BatchMetrics(
            sink.name,
            batch_id,
            sink.protocol.value,
            "committed",
            partitions=partitions,
            target=attributes_of(sink)["twophase.target"],
            arrow_bytes=sum(r.arrow_bytes for r in results),
            target_seconds=sum(r.target_seconds for r in results),
            dead_lettered=sum(dead.values()),
            dead_lettered_by_class=dead,
            **fields,
        )

    def replay_metrics(self, sink: AnySink, batch_id: int, **fields: Any) -> BatchMetrics:
        """Return the metrics of a batch the log holds as committed already (a replay)."""
        target = attributes_of(sink)["twophase.target"]
        return BatchMetrics(
            sink.name, batch_id, sink.protocol.value, "already-committed", target=target, **fields
        )


class StateMachine(Protocol):
    """What the coordinator asks of each protocol's state machine over a :class:`Run`."""

    def begin_run(self, sink: AnySink) -> None:
        """Do what the protocol needs once per run, after recovery and before the first batch.

        Parameters
        ----------
        sink
            The sink (of this protocol).
        """
        ...

    def run_batch(
        self, sink: AnySink, execution: BatchExecution, recovered: tuple[int, int]
    ) -> BatchMetrics:
        """Run a batch, its rows routed, to "batch N committed".

        Parameters
        ----------
        sink
            The sink (of this protocol).
        execution
            The engine's view of the batch.
        recovered
            Transactions committed and rolled back by this run's recovery (for the metrics).

        Returns
        -------
        BatchMetrics
            What happened.
        """
        ...
