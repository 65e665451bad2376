"""The markers protocol on the driver, one state machine: stage, check the replay, commit.

Per batch, after recovery and routing (``_engine/_coordinator.py``)::

    [staging] -> [replay check against markers, before writing] -> record intent
      -> phase 1 (executors commit with markers) -> record committed

A run needs nothing of its own before its first batch: no fence (the markers
are the defence against a replay), so :meth:`MarkersProtocol.begin_run` does nothing.
"""

from __future__ import annotations

import logging
import time

from .._metrics._batch import BatchMetrics
from .._values import Fingerprint
from ._execution import BatchExecution
from ._hooks import AnySink, MarkerHooks, as_markers
from ._rejections import check_batch
from ._replay import legacy_versions, match_markers
from ._run import Run
from ._steps import Step

__all__ = ["MarkersProtocol"]

_log = logging.getLogger("twophase.coordinator")


class MarkersProtocol:
    """Runs the markers protocol on the driver: a batch from staging to "batch N committed".

    A :class:`~._run.StateMachine` over ``run``, the run whose log holds the intents.
    """

    def __init__(self, run: Run) -> None:
        self._run = run

    def begin_run(self, sink: AnySink) -> None:
        """Do nothing: no attempt is fenced, a replay is checked instead."""

    def run_batch(
        self, sink: AnySink, execution: BatchExecution, recovered: tuple[int, int]
    ) -> BatchMetrics:
        """Run a batch from staging to "batch N committed" (``StateMachine.run_batch``)."""
        markers_sink = as_markers(sink)
        run = self._run
        batch_id = execution.batch_id
        if markers_sink.staging:
            execution.stage(self._staging_location(batch_id))
        run.step(Step.STAGED, batch_id)
        t0 = time.perf_counter()
        skip, expected, preexisting = self._check_replay(markers_sink, execution)
        run.log.record_intent(batch_id, execution.num_partitions())
        run.step(Step.INTENT_RECORDED, batch_id)
        t1 = time.perf_counter()
        plan = run.plan(
            sink, batch_id, skip=skip, expected=expected, preexisting_markers=preexisting
        )
        results = execution.run_participants(markers_sink, plan)
        # Over max_bad_rows, the batch fails after its partitions committed (each
        # held to the bound before its commit); a restart skips them, dead letters too.
        check_batch(sink, results)
        run.step(Step.PHASE1_DONE, batch_id)
        t2 = time.perf_counter()
        rows = sum(r.rows for r in results)
        t3 = run.record_committed(sink, batch_id, rows, results)
        if markers_sink.staging:
            execution.drop_staged(self._staging_location(batch_id))
        run.log.compact(batch_id)
        return run.committed_metrics(
            sink,
            batch_id,
            execution.num_partitions(),
            results,
            rows=rows,
            transactions=sum(1 for r in results if r.marker is not None),
            skipped_partitions=sum(1 for r in results if r.skipped),
            phase1_seconds=t2 - t1,
            decision_seconds=t1 - t0,
            phase2_seconds=t3 - t2,
            recovered_committed=recovered[0],
            recovered_aborted=recovered[1],
        )

    def _staging_location(self, batch_id: int) -> str:
        # The qualified location (file:/..., hdfs://...): Spark writes the staged copy.
        return f"{self._run.context.log_location}/staging/{batch_id}"

    def _check_replay(
        self, sink: MarkerHooks, execution: BatchExecution
    ) -> tuple[frozenset[int], dict[int, Fingerprint], frozenset[tuple[int, int, str]]]:
        """Return the partitions to skip, the fingerprints expected, the markers found.

        A batch with no intent recorded is no replay: nothing is read.
        """
        batch_id = execution.batch_id
        state = self._run.log.state
        skip: frozenset[int] = frozenset()
        expected: dict[int, Fingerprint] = {}
        preexisting: frozenset[tuple[int, int, str]] = frozenset()
        if batch_id in state.intents:
            # A replay of a batch that was started before: some partitions may
            # be committed. Check BEFORE writing anything.
            markers = list(sink.read_markers(self._run.identity, batch_id))
            if markers:
                preexisting = frozenset(
                    (m.partition_id, m.attempt, str(m.fingerprint)) for m in markers
                )
            if markers and batch_id in state.rewrite:
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
        return skip, expected, preexisting
