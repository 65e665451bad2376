"""twophase: exactly-once sinks for PySpark Structured Streaming, by two-phase commit.

Subclass :class:`TwoPhaseCommitSink` (coordinated two-phase commit, protocol
A) or :class:`MarkerCommitSink` (per-partition commit with idempotence
markers, protocol B), implement the hooks, and pass the sink to
``foreachBatch``::

    query = df.writeStream.foreachBatch(MySink("orders")).option(
        "checkpointLocation", "/chk/orders").start()

or let :func:`write_stream` wire it and refuse unsafe settings::

    query = twophase.write_stream(df, MySink("orders"), checkpoint_location="/chk/orders").start()

Layout: the hooks are in ``_sink.py``; the driver-side coordinator in
``_coordinator.py``; the executor-side participant in ``_participant.py``;
the coordinator log and identity in ``_log.py`` and ``_identity.py``; the
Spark glue in ``_spark.py``; errors in :mod:`twophase.errors`; the test kit in
:mod:`twophase.testing`; connectors in :mod:`twophase.connectors`.
"""

from ._coordinator import COORDINATED_STEPS, MARKER_STEPS, BatchExecution, Coordinator
from ._fingerprint import FingerprintAccumulator, fingerprint_batches
from ._identity import SinkIdentity
from ._log import CoordinatorLog, HadoopFileStore, LocalFileStore, LogStore
from ._metrics import BatchMetrics
from ._retry import RetryPolicy
from ._sink import MarkerCommitSink, TwoPhaseCommitSink, iter_rows
from ._spark import write_stream
from ._types import (
    CommitProtocol,
    Fingerprint,
    Marker,
    RecoveryContext,
    SinkContext,
    TaskContext,
    TransactionHandle,
)
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

__version__ = "0.1.0"

__all__ = [
    "COORDINATED_STEPS",
    "MARKER_STEPS",
    "AbortRequiredError",
    "BatchExecution",
    "BatchMetrics",
    "CommitFailedError",
    "CommitProtocol",
    "ConcurrentQueryError",
    "ConfigurationError",
    "Coordinator",
    "CoordinatorLog",
    "CoordinatorLogError",
    "DataError",
    "FatalError",
    "Fingerprint",
    "FingerprintAccumulator",
    "HadoopFileStore",
    "LocalFileStore",
    "LogStore",
    "Marker",
    "MarkerCommitSink",
    "NondeterministicBatchError",
    "RecoveryContext",
    "RetriableError",
    "RetryPolicy",
    "SinkContext",
    "SinkIdentity",
    "TaskContext",
    "TransactionError",
    "TransactionHandle",
    "TwoPhaseCommitSink",
    "TwoPhaseError",
    "UnsafeConfigurationError",
    "__version__",
    "fingerprint_batches",
    "iter_rows",
    "write_stream",
]
