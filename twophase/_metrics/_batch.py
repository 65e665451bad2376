"""Per-batch metrics, available programmatically, logged as one line and recorded per batch."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from . import _otel

__all__ = ["BatchMetrics"]

_log = logging.getLogger("twophase.metrics")


@dataclass(frozen=True)
class BatchMetrics:
    """What happened to one micro-batch.

    Attributes
    ----------
    sink
        Sink name.
    batch_id
        Micro-batch id.
    protocol
        ``"coordinated"`` or ``"markers"``.
    outcome
        ``"committed"``; ``"already-committed"`` (replay skipped);
        ``"recovered"`` (finished from the decision of an earlier run).
    rows
        Rows written by this call (rows of skipped partitions excluded).
    partitions
        Partitions of the batch DataFrame (after any coalescing).
    transactions
        Transactions opened (non-empty partitions written).
    skipped_partitions
        Partitions not written because their marker showed them committed.
    phase1_seconds
        Wall time of phase 1 (the Spark job running the participants).
    decision_seconds
        Wall time to record the decision (coordinated) or the intent (markers).
    phase2_seconds
        Wall time of phase 2 (coordinated: the driver's commits; markers: recording
        completion).
    commit_retries
        Transient commit failures retried in phase 2.
    recovered_committed
        Handles of earlier decided batches committed by recovery.
    recovered_aborted
        In-doubt transactions rolled back (recovery and orphan sweeps).
    target
        The kind of target (the sink's ``metrics_target``: ``"kafka"``,
        ``"postgresql"``, ``"mariadb"``, ``"custom"``...).
    arrow_bytes
        Arrow bytes the participants handed to the sink's ``write`` hook.
    target_seconds
        Time the participants spent in the sink's hooks, summed over partitions.
    dead_lettered
        Rows set aside as dead letters (a sink with ``bad_rows="dead_letter"``),
        committed with the batch; not counted in ``rows``.
    dead_lettered_by_class
        The same rows by error class (``{"not_null": 2, ...}``).
    """

    sink: str
    batch_id: int
    protocol: str
    outcome: str
    rows: int = 0
    partitions: int = 0
    transactions: int = 0
    skipped_partitions: int = 0
    phase1_seconds: float = 0.0
    decision_seconds: float = 0.0
    phase2_seconds: float = 0.0
    commit_retries: int = 0
    recovered_committed: int = 0
    recovered_aborted: int = 0
    target: str = "custom"
    arrow_bytes: int = 0
    target_seconds: float = 0.0
    dead_lettered: int = 0
    dead_lettered_by_class: Mapping[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Return the metrics as a plain dict (for JSON, dashboards).

        Returns
        -------
        dict
            Field name to value.
        """
        return asdict(self)

    def log_line(self) -> str:
        """Return the one-line summary that is logged for every batch.

        Returns
        -------
        str
            ``key=value`` pairs.
        """
        return (
            f"twophase sink={self.sink} batch={self.batch_id} protocol={self.protocol} "
            f"outcome={self.outcome} rows={self.rows} partitions={self.partitions} "
            f"transactions={self.transactions} skipped={self.skipped_partitions} "
            f"phase1={self.phase1_seconds:.3f}s decision={self.decision_seconds:.3f}s "
            f"phase2={self.phase2_seconds:.3f}s retries={self.commit_retries} "
            f"recovered_committed={self.recovered_committed} "
            f"recovered_aborted={self.recovered_aborted}"
            + (f" dead_lettered={self.dead_lettered}" if self.dead_lettered else "")
        )

    def emit(self) -> None:
        """Log :meth:`log_line` at INFO on the ``twophase.metrics`` logger; record it.

        Recorded through the OpenTelemetry API (``docs/monitoring.md``): a no-op
        until an SDK is installed.
        """
        _log.info("%s", self.log_line())
        _otel.record_batch(self)
