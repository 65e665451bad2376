"""The engine's view of a sink: the hooks the coordinator and participants call.

The documented contract of every hook is on the public base classes
(:class:`twophase.TwoPhaseCommitSink`, :class:`twophase.MarkerCommitSink`). These
structural types let the engine (coordinator, participant, Spark glue) depend on
the hooks without importing the base classes, whose final ``__call__`` in turn
depends on the engine: the import graph stays a tree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias

from .._values import (
    CommitProtocol,
    DeadLetter,
    Marker,
    RecoveryContext,
    RowError,
    SinkContext,
    TaskContext,
    TransactionStatus,
)
from .._values import TransactionHandle as Handle

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from .._retry import RetryPolicy

__all__ = [
    "AnySink",
    "CoordinatedHooks",
    "MarkerHooks",
    "SinkHooks",
    "as_coordinated",
    "as_markers",
]


class SinkHooks(Protocol):
    """Settings and hooks both protocols share."""

    name: str
    checkpoint_location: str | None
    retry: RetryPolicy
    max_transactions_per_batch: int | None
    key_by: tuple[str, ...]
    write_batch_rows: int | None
    recovery_concurrency: ClassVar[int]
    max_bad_rows: int

    @property
    def protocol(self) -> CommitProtocol: ...
    @property
    def bad_rows(self) -> str: ...

    def __call__(self, df: DataFrame, batch_id: int) -> None: ...
    def open(self, context: SinkContext) -> None: ...
    def check_schema(self, schema: pa.Schema, batch_id: int) -> None: ...
    def list_in_doubt(self, context: RecoveryContext) -> Sequence[Handle]: ...
    def recover_and_abort(self, handle: Any) -> None: ...
    def begin_transaction(self, context: TaskContext) -> Any: ...
    def write(self, txn: Any, batch: pa.RecordBatch) -> Sequence[RowError] | None: ...
    def write_dead_letters(self, txn: Any, letters: Sequence[DeadLetter]) -> None: ...
    def abort(self, txn: Any) -> None: ...


class CoordinatedHooks(SinkHooks, Protocol):
    """The coordinated protocol: prepare on executors, commit by handle on the driver."""

    def pre_commit(self, txn: Any) -> Handle: ...
    def commit(self, handle: Any) -> None: ...
    def fence_attempts(self, identity: str, epoch: int, batch_id: int) -> bool: ...
    def recover_and_commit(self, handle: Any) -> None: ...
    def transaction_status(self, handle: Any) -> TransactionStatus | None: ...
    def encode_handle(self, handle: Any) -> Mapping[str, Any]: ...
    def decode_handle(self, data: Mapping[str, Any]) -> Handle: ...


class MarkerHooks(SinkHooks, Protocol):
    """The markers protocol: commit with a marker on executors, check markers on replay."""

    staging: bool

    def commit_with_marker(self, txn: Any, marker: Marker) -> None: ...
    def needs_marker_check(self, txn: Any) -> bool: ...
    def read_markers(self, identity: str, batch_id: int) -> Sequence[Marker]: ...


AnySink: TypeAlias = CoordinatedHooks | MarkerHooks


def as_coordinated(sink: AnySink) -> CoordinatedHooks:
    """Return ``sink`` typed as a sink of the coordinated protocol, or raise ``TypeError``."""
    if sink.protocol is not CommitProtocol.COORDINATED:
        raise TypeError(f"{type(sink).__name__} is not a sink of the coordinated protocol")
    return sink  # type: ignore[return-value]


def as_markers(sink: AnySink) -> MarkerHooks:
    """Return ``sink`` typed as a sink of the markers protocol, or raise ``TypeError``."""
    if sink.protocol is not CommitProtocol.MARKERS:
        raise TypeError(f"{type(sink).__name__} is not a sink of the markers protocol")
    return sink  # type: ignore[return-value]
