"""The coordinated protocol on the driver, one state machine: fence, prepare, decide, commit.

Per run, after recovery, every attempt of an earlier run is fenced. Per batch,
after recovery and routing (``_engine/_coordinator.py``)::

    phase 1 (executors prepare) -> record decision (commit point)
      -> phase 2 (commit every handle) -> sweep orphans of the batch
      -> fence stale attempts -> record committed

A batch whose phase 1 fails has its prepared transactions rolled back here, on
the driver. The sweeps and the fence are the fencing loop's
(``_engine/_fencing_loop.py``), a collaborator built over the same run.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from .._log._codec import HandleCodecError
from .._metrics._batch import BatchMetrics
from .._values import TransactionHandle
from ..errors import CommitFailedError, ConfigurationError, add_note
from ._execution import BatchExecution
from ._fencing_loop import FencingLoop
from ._hooks import AnySink, CoordinatedHooks, as_coordinated
from ._participant import TaskResult
from ._rejections import by_class, check_batch
from ._run import Run
from ._steps import Step

__all__ = ["CoordinatedProtocol"]

_log = logging.getLogger("twophase.coordinator")


class CoordinatedProtocol:
    """Runs the coordinated protocol on the driver: a run's fence, a batch's phases.

    A :class:`~._run.StateMachine`, and :meth:`commit_prepared` for engines that
    prepare before the driver gets control.

    Parameters
    ----------
    run
        The run; its fencing loop is built over it too.
    """

    def __init__(self, run: Run) -> None:
        self._run = run
        self._fencing = FencingLoop(run)

    def begin_run(self, sink: AnySink) -> None:
        """Fence every attempt of an earlier run (``StateMachine.begin_run``)."""
        self._fencing.fence(sink, -1)  # every attempt of an earlier run is stale

    def run_batch(
        self, sink: AnySink, execution: BatchExecution, recovered: tuple[int, int]
    ) -> BatchMetrics:
        """Run a batch from phase 1 to "batch N committed" (``StateMachine.run_batch``)."""
        coordinated = as_coordinated(sink)
        batch_id = execution.batch_id
        t0 = time.perf_counter()
        try:
            results = execution.run_participants(coordinated, self._run.plan(sink, batch_id))
            check_batch(sink, results)
        except BaseException as exc:
            # Driver-side abort of a failed batch: partitions that prepared
            # before another failed must not stay in doubt.
            try:
                aborted = self._fencing.sweep(sink, batch_id)
                if aborted:
                    _log.info(
                        "sink %s: batch %d failed; aborted %d prepared",
                        sink.name,
                        batch_id,
                        aborted,
                    )
                self._fencing.fence_after(sink, batch_id, frozenset())
            except Exception as abort_exc:
                add_note(exc, f"aborting the batch's prepared transactions failed: {abort_exc!r}")
            raise
        self._run.step(Step.PHASE1_DONE, batch_id)
        return self._decide_and_commit(
            coordinated, batch_id, results, execution.num_partitions(), t0, recovered
        )

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
        log = self._run.log
        log.check_epoch(batch_id)
        coordinated = as_coordinated(sink)
        if log.state.is_committed(batch_id):
            for result in results:
                if result.handle is not None:
                    sink.recover_and_abort(result.handle)
            _log.info(
                "sink %s: batch %d is already committed; rolled back its replay",
                sink.name,
                batch_id,
            )
            metrics = self._run.replay_metrics(sink, batch_id)
        else:
            try:
                check_batch(sink, results)
            except Exception:
                for result in results:  # over max_bad_rows: nothing of the batch commits
                    if result.handle is not None:
                        sink.recover_and_abort(result.handle)
                raise
            self._run.step(Step.PHASE1_DONE, batch_id)
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
        run = self._run
        t1 = time.perf_counter()
        facts: dict[str, Any] = {"rows": rows}
        if sink.bad_rows == "dead_letter":  # an optional field: recovery counts them too
            facts["dead_lettered"] = by_class(results)
        run.log.record_decision(batch_id, handles, facts, encode=_checked_encoder(sink, batch_id))
        run.step(Step.DECIDED, batch_id)
        t2 = time.perf_counter()
        retries = [0]
        for index, handle in enumerate(handles):
            try:
                run.retrying(sink, functools.partial(sink.commit, handle), retries)
            except Exception as exc:
                raise CommitFailedError(
                    f"phase 2 could not commit {handle.transaction_id} ({exc}). The commit "
                    "decision is recorded: restarting the query commits the remaining "
                    "transactions before anything else; nothing is lost",
                    sink=sink.name,
                    batch_id=batch_id,
                    partition_id=handle.partition_id,
                ) from exc
            run.step(Step.COMMITTED_HANDLE, batch_id, index)
        run.step(Step.PHASE2_DONE, batch_id)
        orphans = self._fencing.sweep_after_commit(sink, batch_id, handles)
        self._fencing.fence_after(sink, batch_id, frozenset(h.transaction_id for h in handles))
        t3 = run.record_committed(sink, batch_id, rows, results)
        run.log.compact(batch_id)
        return run.committed_metrics(
            sink,
            batch_id,
            partitions,
            results,
            rows=rows,
            transactions=len(handles),
            phase1_seconds=t1 - t0,
            decision_seconds=t2 - t1,
            phase2_seconds=t3 - t2,
            commit_retries=retries[0],
            recovered_committed=recovered[0],
            recovered_aborted=recovered[1] + orphans,
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
