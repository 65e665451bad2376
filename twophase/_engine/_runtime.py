"""Driver-side state of a sink in this process: coordinator, metrics, step listener.

The sink object is settings plus hooks. What the driver learns while running it
-- the coordinator of the current run (with its log), the metrics of recent
batches, a test's step listener -- lives in a :class:`SinkRuntime`, one per
sink object, kept here and dropped when the sink object is garbage-collected.
The Spark glue and the test kit's ``LocalRunner`` both go through
:func:`runtime_of`, so :func:`batch_metrics` works the same for both.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .._metrics import _otel, _otel_setup
from .._metrics._batch import BatchMetrics
from ._coordinator import Coordinator

if TYPE_CHECKING:
    from .._log._coordinator_log import CoordinatorLog
    from .._values import SinkContext
    from ._execution import BatchExecution, StepListener
    from ._hooks import AnySink

__all__ = ["HISTORY", "SinkRuntime", "batch_metrics", "runtime_of"]

#: How many batches of metrics a runtime keeps.
HISTORY = 100


class SinkRuntime:
    """What the driver keeps for one sink object between batches."""

    def __init__(self) -> None:
        #: The coordinator of the current run; replaced on a restart.
        self.coordinator: Coordinator | None = None
        #: Metrics of the most recent batches, oldest first.
        self.metrics: deque[BatchMetrics] = deque(maxlen=HISTORY)
        #: Called at every coordinator step (the test kit's crash points).
        self.step_listener: StepListener | None = None

    def new_run(
        self,
        log: CoordinatorLog,
        context: SinkContext,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Coordinator:
        """Start a run: a new coordinator, replacing the last, its steps heard by the listener.

        The parameters are :class:`~._coordinator.Coordinator`'s; ``on_step`` is the runtime's.
        """
        self.coordinator = Coordinator(log, context, sleep=sleep, on_step=self.on_step)
        return self.coordinator

    def listen(self, listener: StepListener | None) -> None:
        """Install ``listener`` for every coordinator step (None removes it)."""
        self.step_listener = listener

    def on_step(self, step: str, batch_id: int, index: int | None) -> None:
        """Forward a coordinator step to the installed listener, if any."""
        if self.step_listener is not None:
            self.step_listener(step, batch_id, index)

    def run_batch(
        self,
        sink: AnySink,
        execution: BatchExecution,
        *,
        otel_environment: Mapping[str, str] | None = None,
    ) -> BatchMetrics:
        """Run one batch on the current coordinator and keep its metrics.

        ``otel_environment`` (``write_stream``'s) configures this process's
        OpenTelemetry SDK first. A failed batch marks the coordinator failed, so
        that the next call starts a new run (new epoch, recovery) instead of
        trusting its state.
        """
        coordinator = self.coordinator
        if coordinator is None:
            raise RuntimeError("no coordinator: the engine must create one first")
        _otel_setup.configure(otel_environment)
        try:
            metrics = coordinator.run_batch(sink, execution)
        except BaseException:
            coordinator.mark_failed()
            _otel.record_failed_batch(sink)
            _otel_setup.flush()
            raise
        self.metrics.append(metrics)
        return metrics


_LOCK = threading.Lock()
_RUNTIMES: dict[int, SinkRuntime] = {}


def runtime_of(sink: object) -> SinkRuntime:
    """Return the runtime of ``sink`` in this process, creating it on first use.

    Parameters
    ----------
    sink
        A sink object (held weakly: its runtime goes when it goes).

    Returns
    -------
    SinkRuntime
        The sink's driver-side state.
    """
    key = id(sink)
    with _LOCK:
        runtime = _RUNTIMES.get(key)
        if runtime is None:
            runtime = _RUNTIMES[key] = SinkRuntime()
            weakref.finalize(sink, _RUNTIMES.pop, key, None)
        return runtime


def batch_metrics(sink: object) -> list[BatchMetrics]:
    """Metrics of the most recent batches this driver process ran for ``sink``.

    The last 100 batches are kept, oldest first; every batch is also logged as
    one line on the ``twophase.metrics`` logger.

    Parameters
    ----------
    sink
        The sink object passed to ``foreachBatch`` / :func:`twophase.write_stream`
        (or run by :class:`twophase.testing.LocalRunner`).

    Returns
    -------
    list of BatchMetrics
        Empty before the first batch.

    Examples
    --------
    >>> query = twophase.write_stream(df, sink, checkpoint_location=chk).start()  # doctest: +SKIP
    >>> query.processAllAvailable()  # doctest: +SKIP
    >>> twophase.batch_metrics(sink)[-1].rows  # doctest: +SKIP
    5000
    """
    with _LOCK:
        runtime = _RUNTIMES.get(id(sink))
    return list(runtime.metrics) if runtime is not None else []
