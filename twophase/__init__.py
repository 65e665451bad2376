"""twophase: exactly-once sinks for PySpark Structured Streaming, by two-phase commit.

Subclass :class:`TwoPhaseCommitSink` (the coordinated protocol: two-phase
commit coordinated by the driver) or :class:`MarkerCommitSink` (the markers
protocol: per-partition commit with idempotence markers), implement the
hooks, and pass the sink to
``foreachBatch``::

    query = df.writeStream.foreachBatch(MySink("orders")).option(
        "checkpointLocation", "/chk/orders").start()

or let :func:`write_stream` wire it and refuse unsafe settings::

    query = twophase.write_stream(df, MySink("orders"), checkpoint_location="/chk/orders").start()

This namespace is the whole public API: what a sink subclasses (the two base
classes), receives (contexts, handles, markers, fingerprints, record batches),
raises or catches (:mod:`twophase.errors`), and the helpers around them. The
test kit is :mod:`twophase.testing`; the bundled connectors are
:mod:`twophase.connectors.jdbc` and :mod:`twophase.connectors.kafka`.
"""

# First: a PySpark outside the supported range fails the import here, naming it.
from . import _pyspark  # noqa: F401  # isort: skip
import sys as _sys

from . import _values
from ._engine._runtime import batch_metrics
from ._fingerprint import fingerprint_batches
from ._metrics._batch import BatchMetrics
from ._retry import RetryPolicy
from ._sinks._marker_commit_sink import MarkerCommitSink
from ._sinks._sink import iter_rows
from ._sinks._two_phase_commit_sink import TwoPhaseCommitSink
from ._spark._entry import await_termination, write_stream
from ._spark._format import register_format
from ._values import (
    CommitProtocol,
    DeadLetter,
    Fingerprint,
    Marker,
    RecoveryContext,
    RowError,
    SinkContext,
    TaskContext,
    TransactionHandle,
    TransactionStatus,
    parse_transaction_id,
)
from ._version import __version__
from .errors import (
    AbortRequiredError,
    CommitFailedError,
    ConcurrentQueryError,
    ConfigurationError,
    CoordinatorLogError,
    DataError,
    FatalError,
    NondeterministicBatchError,
    RetriableError,
    TransactionError,
    TwoPhaseError,
    UnsafeConfigurationError,
)

# Handles and markers pickled before the value types' module was renamed name it
# twophase._types (0.2.0's decisions, a task result of another release): they still load.
_sys.modules.setdefault(f"{__name__}._types", _values)

__all__ = [
    "AbortRequiredError",
    "BatchMetrics",
    "CommitFailedError",
    "CommitProtocol",
    "ConcurrentQueryError",
    "ConfigurationError",
    "CoordinatorLogError",
    "DataError",
    "DeadLetter",
    "FatalError",
    "Fingerprint",
    "Marker",
    "MarkerCommitSink",
    "NondeterministicBatchError",
    "RecoveryContext",
    "RetriableError",
    "RetryPolicy",
    "RowError",
    "SinkContext",
    "TaskContext",
    "TransactionError",
    "TransactionHandle",
    "TransactionStatus",
    "TwoPhaseCommitSink",
    "TwoPhaseError",
    "UnsafeConfigurationError",
    "__version__",
    "await_termination",
    "batch_metrics",
    "fingerprint_batches",
    "iter_rows",
    "parse_transaction_id",
    "register_format",
    "write_stream",
]
