"""What classic PySpark and Spark Connect share: a batch DataFrame run as a batch execution.

Runs on the driver (classic: the application's Python process; Spark Connect:
the server's ``foreachBatch`` worker). Phase 1 goes through ``mapInArrow`` in
both modes, so executors receive Arrow record batches and the batch is
computed once. The modes differ in how they find the query's identity and
checkpoint and how they reach the checkpoint's file system: ``twophase._spark._classic``
(py4j, Hadoop) and ``twophase._spark._connect`` (no JVM in Python).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .._arrow import binary_array
from .._engine._coordinator import Coordinator
from .._engine._hooks import AnySink
from .._engine._participant import TaskPlan, TaskResult, run_participant
from .._engine._runtime import runtime_of
from .._fingerprint import fingerprint_batches
from .._log._identity import SinkIdentity
from .._log._sink_log import open_sink_log
from .._pyspark import arrow_schema
from .._stores._store import LogStore, open_store
from .._values import FINGERPRINT_VERSION, Fingerprint
from ..errors import UnsafeConfigurationError
from ._serde import dumps, loads

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "NO_OPTIONS",
    "DataFrameExecution",
    "QueryOptions",
    "arrow_schema_of",
    "check_speculation",
    "current_coordinator",
    "has_state_directory",
    "new_coordinator",
    "renamed",
    "session_conf",
]

_log = logging.getLogger("twophase.spark")


@dataclass(frozen=True)
class QueryOptions:
    """What :func:`twophase.write_stream` knows of the query, kept beside the user's sinks.

    Picklable: under Spark Connect it travels to the server with the sinks, in
    the ``foreachBatch`` function. Nothing of it is written onto a sink.

    Attributes
    ----------
    checkpoint_location
        The query's checkpoint location, as given to ``write_stream``.
    otel_environment
        ``OTEL_*`` settings for the process that runs the sinks' driver side.
    connect_session
        The id of the Spark Connect session that starts the query (None: classic).
    """

    checkpoint_location: str | None = None
    otel_environment: Mapping[str, str] | None = None
    connect_session: str | None = None

    def checkpoint_of(self, sink: AnySink) -> str | None:
        """Return the checkpoint location ``sink`` runs under: ``write_stream``'s, else its own."""
        return self.checkpoint_location or sink.checkpoint_location


#: A sink passed to ``foreachBatch`` directly: nothing known beside the sink.
NO_OPTIONS = QueryOptions()


def session_conf(spark: Any, key: str, default: str) -> str:
    """Return a Spark setting: the application's conf first, then the session's.

    Parameters
    ----------
    spark
        A classic or Spark Connect session (Connect has no ``sparkContext``).
    key, default
        The setting and the value when it is not set.

    Returns
    -------
    str
        The value.
    """
    value = None
    try:
        value = spark.sparkContext.getConf().get(key, None)
    except Exception:  # Spark Connect: no SparkContext in Python
        value = None
    if value is None:
        try:
            value = spark.conf.get(key, default)
        except Exception:
            value = default
    return str(value if value is not None else default)


def check_speculation(spark: Any, sink_name: str, batch_id: int | None = None) -> None:
    """Refuse ``spark.speculation=true``.

    Two speculative attempts of one partition would both open a transaction
    (and, under the coordinated protocol, both prepare and hold locks). Neither protocol is
    proven safe under it, so it is refused.

    Parameters
    ----------
    spark
        The session.
    sink_name, batch_id
        For the message.
    """
    if session_conf(spark, "spark.speculation", "false").strip().lower() == "true":
        raise UnsafeConfigurationError(
            "spark.speculation=true is not supported: speculative task attempts would "
            "write the same partition twice. Set spark.speculation=false for this "
            "application (or run the sink in an application of its own)",
            sink=sink_name,
            batch_id=batch_id,
            setting="spark.speculation",
        )


def current_coordinator(sink: AnySink, query_id: str, run_id: str) -> Coordinator | None:
    """Return the coordinator of this run of the query, if this process has a healthy one.

    Parameters
    ----------
    sink
        The sink.
    query_id, run_id
        The query and its current run.

    Returns
    -------
    Coordinator or None
        None when the run is new (a restart) or the last batch failed: the
        caller then creates a new coordinator, which recovers.
    """
    current = runtime_of(sink).coordinator
    if (
        current is not None
        and current.context.query_id == query_id
        and current.context.run_id == run_id
        and not current.failed
    ):
        return current
    return None


def new_coordinator(
    sink: AnySink,
    *,
    query_id: str,
    run_id: str,
    checkpoint: str,
    store: Callable[[str], LogStore] = open_store,
) -> Coordinator:
    """Create the coordinator of a new run and keep it in the sink's runtime.

    Parameters
    ----------
    sink
        The sink.
    query_id, run_id
        The query (its id names the sink's identity) and its current run.
    checkpoint
        The query's checkpoint location; the log lives under it.
    store
        Opens the log's store at a location (see :func:`~twophase._log._sink_log.open_sink_log`).

    Returns
    -------
    Coordinator
        The coordinator; its log is opened (and recovery run) by its first batch.
    """
    identity = SinkIdentity(sink.name, query_id)
    log = open_sink_log(checkpoint, identity, store=store)
    context = identity.context(checkpoint, run_id)
    coordinator = runtime_of(sink).new_run(log, context)
    _log.info(
        "sink %s: identity %s, coordinator log at %s",
        sink.name,
        identity.token,
        context.log_location,
    )
    return coordinator


def arrow_schema_of(df: DataFrame) -> pa.Schema:
    """Return the Arrow schema ``mapInArrow`` hands the participants of ``df``'s partitions."""
    spark = df.sparkSession
    timezone = spark.conf.get("spark.sql.session.timeZone", "UTC")
    large = spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
    return arrow_schema(
        df.schema, timezone=str(timezone), prefers_large_types=str(large).lower() == "true"
    )


#: The column that carries a row's position in the batch through a key_by shuffle.
_POSITION = "__twophase_position"
#: Computed after coalescing, before the shuffle: CollapseRepartition keeps the coalesce.
_COALESCED = "__twophase_coalesced"

#: The directory of Spark's state stores below a query's checkpoint (every version, every mode).
STATE_DIRECTORY = "state"


def has_state_directory(store: LogStore) -> bool:
    """Return whether the checkpoint at ``store`` holds Spark state (a stateful query's stores).

    Spark keeps every stateful operator's stores below ``<checkpoint>/state/<operator id>``, and
    nothing else there; a stateless query never creates the directory.

    Parameters
    ----------
    store
        A store rooted at the query's checkpoint.

    Returns
    -------
    bool
        True when ``state`` has an entry (an operator's directory).
    """
    directories = getattr(store, "list_directories", None)
    if directories is not None and directories(STATE_DIRECTORY):
        return True
    return bool(store.list(STATE_DIRECTORY))


_RESULT_SCHEMA = pa.schema([pa.field("result", pa.binary())])


def _result_batch(result: bytes) -> pa.RecordBatch:
    """One task's result as the one row of a batch (``from_pylist`` would import pandas)."""
    return pa.RecordBatch.from_arrays([binary_array([result], pa.binary())], schema=_RESULT_SCHEMA)


_ArrowFn = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def renamed(batch: pa.RecordBatch, names: list[str]) -> pa.RecordBatch:
    """Return the batch with its columns named ``names`` (types, nullability, metadata kept)."""
    fields = [field.with_name(name) for field, name in zip(batch.schema, names, strict=True)]
    schema = pa.schema(fields, metadata=batch.schema.metadata)
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def map_in_arrow(df: DataFrame, fn: _ArrowFn) -> list[Any]:
    """Run ``fn`` over every partition of ``df`` with ``mapInArrow`` and collect its results.

    ``mapInArrow`` resolves each column by its name as SQL text (a dot reads
    as a struct's field, a backtick is a syntax error), so the columns cross
    by position (``_0``, ``_1``...) and ``fn`` gets them under their own names.

    Parameters
    ----------
    df
        The DataFrame.
    fn
        Arrow batches in, batches of one ``result binary`` column out.

    Returns
    -------
    list
        The result rows.
    """
    names = list(df.columns)
    positional = [f"_{i}" for i in range(len(names))]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return fn(renamed(batch, names) for batch in batches)

    rows: list[Any] = df.toDF(*positional).mapInArrow(run, "result binary").collect()
    return rows


def _participant_fn(sink: AnySink, plan: TaskPlan) -> _ArrowFn:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext as SparkTaskContext

        task = SparkTaskContext.get()
        assert task is not None
        result = run_participant(sink, plan, task.partitionId(), task.attemptNumber(), batches)
        yield _result_batch(dumps(result))

    return run


def _fingerprint_fn(version: int) -> _ArrowFn:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext as SparkTaskContext

        task = SparkTaskContext.get()
        assert task is not None
        fingerprint = fingerprint_batches(batches, version)
        yield _result_batch(dumps((task.partitionId(), fingerprint)))

    return run


class DataFrameExecution:
    """A micro-batch DataFrame seen by the coordinator (:class:`~twophase.BatchExecution`).

    The engine-specific parts -- how many partitions, where a staged copy
    lives -- are left to the subclasses of each mode.

    Parameters
    ----------
    df
        The micro-batch DataFrame.
    batch_id
        The micro-batch id.
    """

    def __init__(self, df: DataFrame, batch_id: int) -> None:
        self.df = df
        self._batch_id = batch_id
        self._persisted = False
        # key_by: columns, partition count, the routed batch with its rows' positions.
        self._keys: tuple[tuple[str, ...], int] | None = None
        self._positioned: DataFrame | None = None

    @property
    def batch_id(self) -> int:
        """Return the micro-batch id."""
        return self._batch_id

    def schema(self) -> pa.Schema:
        """Return the Arrow schema the participants receive."""
        return arrow_schema_of(self.df)

    def num_partitions(self) -> int:
        """Return the number of participant slots (each mode says how it counts)."""
        raise NotImplementedError

    #: Coalesce a batch of more splits than transactions before routing it (one shuffle
    #: map task per transaction, not per split); ``benchmarks/bench_key_by.py`` compares.
    route_after_coalescing: bool = True

    def key_by(self, columns: tuple[str, ...], limit: int | None) -> None:
        """Hash-partition the batch by ``columns``, each partition in the batch's row order.

        Into as many partitions as the batch has (at most ``limit``); one
        partition already holds every key together, so it is left alone. The
        rows' positions are taken on the splits as Spark produced them, before
        anything coalesces them.
        """
        from pyspark.sql import functions as sf

        original = self.df
        partitions = self.num_partitions()
        bound = partitions if limit is None else min(partitions, limit)
        self._keys = (columns, max(1, bound))
        positioned = original.withColumn(_POSITION, sf.monotonically_increasing_id())
        if partitions <= 1:
            self._positioned = positioned  # kept for staging only: no shuffle needed
            return
        self._route(positioned, coalesce=self.route_after_coalescing)

    def _route(self, positioned: DataFrame, *, coalesce: bool = False) -> None:
        """Route ``positioned`` (the batch and each row's position) by the key columns.

        With ``coalesce``, the splits are first coalesced to the transactions
        (a narrow step): the shuffle's map side then runs one task per
        transaction instead of one per split, which a batch of thousands of
        small splits needs. Positions were taken before, so the order holds.
        """
        from pyspark.sql import functions as sf

        assert self._keys is not None
        columns, partitions = self._keys
        keys = [sf.col("`" + c.replace("`", "``") + "`") for c in columns]
        order = [_POSITION]
        if coalesce:
            positioned = positioned.coalesce(partitions).withColumn(
                _COALESCED, sf.spark_partition_id()
            )
            order.append(_COALESCED)  # used, so never pruned: the coalesce stays
        routed = positioned.repartition(partitions, *keys).sortWithinPartitions(*order)
        self._positioned = routed.drop(_COALESCED)
        self.df = self._positioned.drop(_POSITION)
        self._routed(partitions)

    def _routed(self, partitions: int) -> None:
        """Note that the batch now has exactly ``partitions`` partitions."""

    def _read_staged(self, location: str, complete: bool) -> None:
        """Write the batch to ``location`` unless ``complete``; then read it from there.

        A batch routed by key is written with its rows' positions and routed
        again when read back: files are read in an order of Spark's choosing.
        """
        written = self._positioned if self._positioned is not None else self.df
        if not complete:
            written.write.mode("overwrite").parquet(location)
        staged = self.df.sparkSession.read.parquet(location)
        if self._keys is not None and _POSITION in staged.columns:
            self._route(staged)
        else:
            self.df = staged

    def fingerprints(self, version: int = FINGERPRINT_VERSION) -> dict[int, Fingerprint]:
        """Fingerprint every non-empty partition by ``version``; persists the batch to write it."""
        if not self._persisted:
            self.df = self.df.persist()
            self._persisted = True
        rows = map_in_arrow(self.df, _fingerprint_fn(version))
        result: dict[int, Fingerprint] = {}
        for row in rows:
            partition_id, fingerprint = loads(row[0])
            if fingerprint.count:
                result[partition_id] = fingerprint
        return result

    def run_participants(self, sink: AnySink, plan: TaskPlan) -> list[TaskResult]:
        """Run phase 1: one participant per partition, in one Spark job."""
        rows = map_in_arrow(self.df, _participant_fn(sink, plan))
        return [loads(row[0]) for row in rows]

    def holds_state(self) -> bool:
        """Return whether the query keeps state in its checkpoint (each mode says how it looks)."""
        raise NotImplementedError

    def compute_without_writing(self) -> None:
        """Run every partition of the batch through Spark's ``noop`` writer: rows computed, dropped.

        Spark's stateful operators commit their state stores as their partitions finish; the
        ``noop`` format writes nothing and returns nothing to the driver (one job, no shuffle of
        its own: cheaper than ``count()``, see docs/guarantees.md).
        """
        self.df.write.format("noop").mode("overwrite").save()

    def close(self) -> None:
        """Unpersist the batch if the replay check persisted it."""
        if self._persisted:
            self.df.unpersist()
            self._persisted = False
