"""What the coordinator needs from an engine, and the driver steps it announces.

:class:`BatchExecution` is the engine's side of a batch: Spark implements it over
the batch DataFrame (``twophase._spark._dataframe``), the test kit over partitions held in
memory (``twophase.testing.LocalRunner``). The step names (``_steps.py``) are where a
:data:`StepListener` is called, and where the test kit simulates a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import pyarrow as pa

from .._values import FINGERPRINT_VERSION, Fingerprint
from ._hooks import AnySink
from ._participant import TaskPlan, TaskResult

__all__ = ["BatchExecution", "StepListener"]

StepListener = Callable[[str, int, "int | None"], None]


class BatchExecution(Protocol):
    """What the coordinator needs from the engine that runs a batch.

    Implemented for Spark (``mapInArrow`` over the batch DataFrame) and by the
    test kit (partitions held in memory).
    """

    @property
    def batch_id(self) -> int:
        """Return the micro-batch id."""
        ...

    def schema(self) -> pa.Schema:
        """Return the Arrow schema participants will receive."""
        ...

    def num_partitions(self) -> int:
        """Return the number of partitions (participant slots)."""
        ...

    def limit_partitions(self, limit: int) -> None:
        """Reduce the number of partitions to at most ``limit`` (coalesce)."""
        ...

    def key_by(self, columns: tuple[str, ...], limit: int | None) -> None:
        """Route every row of a key to one partition, keeping the batch's row order.

        At most as many partitions as the batch has, and at most ``limit``;
        a later :meth:`stage` keeps the routing and the order.
        """
        ...

    def stage(self, location: str) -> None:
        """Materialise the batch at ``location`` (or reuse a complete copy) and read from it."""
        ...

    def drop_staged(self, location: str) -> None:
        """Delete a staged copy once its batch is committed."""
        ...

    def fingerprints(self, version: int = FINGERPRINT_VERSION) -> dict[int, Fingerprint]:
        """Fingerprint every non-empty partition, pinning the layout for the write.

        Parameters
        ----------
        version
            The fingerprint algorithm: an earlier one only to compare with
            markers written by an earlier release.
        """
        ...

    def run_participants(self, sink: AnySink, plan: TaskPlan) -> list[TaskResult]:
        """Run phase 1: one participant per partition; return every result."""
        ...

    def holds_state(self) -> bool:
        """Return whether computing the batch commits engine state (Spark's state stores).

        A replay the sink skips still has to compute such a batch: Spark (4.2 and later)
        fails a query whose ``foreachBatch`` left a stateful batch's state uncommitted.
        """
        ...

    def compute_without_writing(self) -> None:
        """Compute every partition of the batch and discard its rows (nothing is written)."""
        ...

    def close(self) -> None:
        """Release what the execution holds (cached data)."""
        ...
