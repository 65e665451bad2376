"""The markers protocol's driver side: staging, the replay check against markers, phase 1.

Per batch, after recovery (``_engine/_coordinator.py``)::

    [staging] -> [replay check against markers, before writing] -> record intent
      -> phase 1 (executors commit with markers) -> record committed
"""

from __future__ import annotations

import logging
import time

from .._metrics._batch import BatchMetrics
from .._types import Fingerprint
from ._execution import BatchExecution
from ._hooks import MarkerHooks
from ._replay import legacy_versions, match_markers
from ._run import Run
from ._steps import Step

__all__ = ["MarkersProtocol"]

_log = logging.getLogger("twophase.coordinator")


class MarkersProtocol(Run):
    """Runs a batch of the markers protocol from staging to "batch N committed"."""

    def _staging_location(self, batch_id: int) -> str:
        # The qualified location (file:/..., hdfs://...): Spark writes the staged copy.
        return f"{self.context.log_location}/staging/{batch_id}"

    def _run_markers(
        self, sink: MarkerHooks, execution: BatchExecution, recovered: tuple[int, int]
    ) -> BatchMetrics:
        batch_id = execution.batch_id
        if sink.staging:
            execution.stage(self._staging_location(batch_id))
        self._step(Step.STAGED, batch_id)
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
        self._step(Step.INTENT_RECORDED, batch_id)
        t1 = time.perf_counter()
        plan = self._plan(
            sink, batch_id, skip=skip, expected=expected, preexisting_markers=preexisting
        )
        results = execution.run_participants(sink, plan)
        self._step(Step.PHASE1_DONE, batch_id)
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
