"""The Spark glue: ``foreachBatch`` -> coordinator, and phase 1 through ``mapInArrow``.

Runs on the driver, inside Spark's ``foreachBatch`` call. It finds the
query's id and checkpoint (``docs/protocol.md``), refuses unsafe settings,
keeps one coordinator per run of the query in the sink's runtime, and runs the
participants with ``mapInArrow`` so executors receive Arrow record batches and
the batch is computed once (one Spark job; a second one only when the
markers protocol checks a replay, and then over a persisted copy).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._engine._coordinator import Coordinator
from .._engine._hooks import AnySink
from .._engine._runtime import runtime_of
from .._log._identity import query_id_in_metadata
from .._metrics._otel_setup import OTEL_ATTRIBUTE
from .._pyspark import connect_session_id
from .._stores._hadoop import HadoopFileStore
from .._stores._store import LogStore, open_store
from ..errors import ConfigurationError, find_error
from . import _connect
from ._dataframe import (
    DataFrameExecution,
    check_speculation,
    current_coordinator,
    new_coordinator,
)
from ._targets import Target, as_targets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter  # types only, never imported

__all__ = ["SparkBatchExecution", "run_foreach_batch", "write_stream"]

_QUERY_ID_KEY = "sql.streaming.queryId"
# One id per Python driver process; combined with the query id it names a run
# when Spark does not expose its own run id to foreachBatch.
_PROCESS_RUN = uuid.uuid4().hex


def _sessions(spark: Any) -> Iterator[Any]:
    jvm = spark.sparkContext._jvm
    yield spark._jsparkSession
    session_cls = jvm.org.apache.spark.sql.SparkSession
    for getter in ("getActiveSession", "getDefaultSession"):
        try:
            option = getattr(session_cls, getter)()
            if option.isDefined():
                yield option.get()
        except Exception:
            continue


def find_checkpoint(spark: Any, query_id: str) -> str | None:
    """Find the resolved checkpoint root of the running query ``query_id``.

    Parameters
    ----------
    spark
        The batch DataFrame's session (a clone of the one that started the query).
    query_id
        The query id.

    Returns
    -------
    str or None
        The checkpoint root, or None if it cannot be found.
    """
    for jsession in _sessions(spark):
        try:
            query = jsession.streams().get(query_id)
        except Exception:
            continue
        if query is None:
            continue
        try:
            execution = query.streamingQuery() if hasattr(query, "streamingQuery") else query
            return str(execution.resolvedCheckpointRoot())
        except Exception:
            continue
    return None


def _read_metadata_id(spark: Any, checkpoint: str) -> str | None:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint.rstrip('/')}/metadata")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        raw = bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()
    return query_id_in_metadata(raw)


def _qualify(spark: Any, location: str) -> str:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(location)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return str(fs.makeQualified(path).toString())


def _resolve_checkpoint(sink: AnySink, spark: Any, query_id: str, batch_id: int) -> str:
    found = find_checkpoint(spark, query_id)
    if sink.checkpoint_location is not None:
        given = _qualify(spark, sink.checkpoint_location)
        metadata_id = _read_metadata_id(spark, given)
        if metadata_id != query_id:
            raise ConfigurationError(
                f"checkpoint_location={sink.checkpoint_location!r} is not the checkpoint of "
                f"the running query (its metadata names query {metadata_id}, the query is "
                f"{query_id}). Pass the same location as the query's checkpointLocation, "
                "or omit it",
                sink=sink.name,
                batch_id=batch_id,
                setting="checkpoint_location",
            )
        return given
    if found is None:
        raise ConfigurationError(
            "could not find the checkpoint location of the running query. Start the "
            "query with twophase.write_stream(df, sink, checkpoint_location=...) or pass "
            "checkpoint_location=... to the sink",
            sink=sink.name,
            batch_id=batch_id,
            setting="checkpoint_location",
        )
    return found


#: The Spark setting that keeps the log of an object-store checkpoint in Spark's file system.
LOG_STORE_KEY = "spark.twophase.logStore"
_LOG_STORES = ("auto", "hadoop")


def log_store(spark: Any, location: str) -> LogStore:
    """Return the store of a coordinator log at ``location`` (a qualified Hadoop path).

    :func:`~twophase._stores._store.open_store`'s rule, with Spark's
    ``CheckpointFileManager`` for every file system twophase has no store of
    its own for, and for every one but local disk when ``spark.twophase.logStore``
    is ``hadoop``. A local path (``file:``) gets plain files written with fsync
    and an atomic rename or link: as atomic as ``CheckpointFileManager`` there,
    more durable (Hadoop's local file system does not fsync), and about a
    hundred times cheaper per record. An object store whose client libraries
    are installed (S3, GCS, Azure) gets its conditional writes, as without the
    JVM: ``CheckpointFileManager``'s create there checks, then writes, so two
    racing drivers would not be told apart.

    Parameters
    ----------
    spark
        The driver's session.
    location
        The log's directory.

    Returns
    -------
    LogStore
        The store.

    Raises
    ------
    ConfigurationError
        ``spark.twophase.logStore`` is neither ``auto`` nor ``hadoop``.
    """
    choice = str(spark.conf.get(LOG_STORE_KEY, "auto")).strip().lower()
    if choice not in _LOG_STORES:
        raise ConfigurationError(
            f"{LOG_STORE_KEY}={choice!r} is not one of {', '.join(_LOG_STORES)}",
            setting=LOG_STORE_KEY,
        )
    return open_store(
        location,
        spark_fs=lambda uri: HadoopFileStore(spark, uri),
        spark_fs_always=choice == "hadoop",
    )


def _coordinator_for(sink: AnySink, df: DataFrame, batch_id: int) -> Coordinator:
    spark = df.sparkSession
    sc = spark.sparkContext
    query_id = sc.getLocalProperty(_QUERY_ID_KEY)
    if not query_id:
        raise ConfigurationError(
            "the sink was called outside a streaming query: pass it to "
            "df.writeStream.foreachBatch(sink) (or use twophase.write_stream)",
            sink=sink.name,
            batch_id=batch_id,
        )
    run_id = f"{_PROCESS_RUN}:{query_id}"
    current = current_coordinator(sink, query_id, run_id)
    if current is not None:
        return current
    check_speculation(spark, sink.name, batch_id)
    checkpoint = _resolve_checkpoint(sink, spark, query_id, batch_id)
    return new_coordinator(
        sink,
        query_id=query_id,
        run_id=run_id,
        checkpoint=checkpoint,
        store=lambda location: log_store(spark, location),
    )


def run_foreach_batch(sink: AnySink, df: DataFrame, batch_id: int) -> None:
    """Run one micro-batch of ``sink`` (the body of ``sink.__call__``).

    Parameters
    ----------
    sink
        The sink.
    df
        The micro-batch DataFrame: classic, or Spark Connect's (then the sink
        runs in the Connect server's ``foreachBatch`` worker, without py4j).
    batch_id
        The micro-batch id.
    """
    if _connect.is_connect(df):
        _connect.run_foreach_batch(sink, df, batch_id)
        return
    _coordinator_for(sink, df, batch_id)
    runtime_of(sink).run_batch(sink, SparkBatchExecution(df, batch_id))


class SparkBatchExecution(DataFrameExecution):
    """A classic micro-batch DataFrame; staged copies go through Hadoop's file system.

    Parameters
    ----------
    df
        The micro-batch DataFrame.
    batch_id
        The micro-batch id.
    """

    def __init__(self, df: DataFrame, batch_id: int) -> None:
        super().__init__(df, batch_id)
        self._partitions: int | None = None  # cached: df.rdd costs a planning round trip

    def num_partitions(self) -> int:
        """Return the number of partitions of the batch."""
        if self._partitions is None:
            self._partitions = int(self.df.rdd.getNumPartitions())
        return self._partitions

    def limit_partitions(self, limit: int) -> None:
        """Coalesce the batch to at most ``limit`` partitions."""
        self.df = self.df.coalesce(limit)
        self._partitions = None

    def _routed(self, partitions: int) -> None:
        self._partitions = partitions

    def _fs(self, location: str) -> tuple[Any, Any]:
        spark = self.df.sparkSession
        jvm: Any = spark.sparkContext._jvm
        path = jvm.org.apache.hadoop.fs.Path(location)
        return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path

    def stage(self, location: str) -> None:
        """Write the batch once to ``location`` (Parquet) and read it from there.

        A complete staged copy (``_SUCCESS`` present) from an earlier run is
        reused, so a replay sees exactly the rows of the first run.
        """
        fs, path = self._fs(location)
        self._read_staged(location, bool(fs.exists(path.suffix("/_SUCCESS"))))
        self._partitions = None

    def drop_staged(self, location: str) -> None:
        """Delete the staged copy of a committed batch."""
        fs, path = self._fs(location)
        fs.delete(path, True)


def write_stream(
    df: DataFrame,
    sink: AnySink | Sequence[Target],
    *,
    checkpoint_location: str,
    query_name: str | None = None,
    trigger: dict[str, Any] | None = None,
    otel_environment: Mapping[str, str] | None = None,
) -> DataStreamWriter:
    """Return a ``DataStreamWriter`` wired to ``sink`` -- call ``.start()`` on it.

    Sets ``foreachBatch(sink)`` and the checkpoint location together (so the
    sink's coordinator log is always stored with the query's checkpoint) and
    refuses unsafe settings before the query starts.

    Parameters
    ----------
    df
        A streaming DataFrame.
    sink
        The exactly-once sink; or a list of targets, each a sink or a
        ``(sink, projection)`` pair: each batch is then computed once
        (persisted) and written by each sink in turn, each sink exactly-once
        on its own (not atomically together), with the columns its
        ``projection(batch)`` selects. The projection must be deterministic.
        Sink names must differ.
    checkpoint_location
        The query's checkpoint location (required: exactly-once needs one).
    query_name
        Optional query name.
    trigger
        Keyword arguments for ``DataStreamWriter.trigger`` (e.g.
        ``{"processingTime": "10 seconds"}`` or ``{"availableNow": True}``).
    otel_environment
        ``OTEL_*`` settings for the process that runs the sink's driver side
        -- under Spark Connect, the server's, which the client cannot reach
        otherwise: with ``OTEL_METRICS_EXPORTER`` (``otlp``, ``prometheus``)
        and no OpenTelemetry SDK set up there, twophase installs one that
        exports its metrics (needs the ``otel`` extra there). A setting
        already in that process's environment wins. See
        ``docs/monitoring.md``.

    Returns
    -------
    pyspark.sql.streaming.DataStreamWriter
        Ready to ``.start()``.

    Examples
    --------
    >>> query = twophase.write_stream(  # doctest: +SKIP
    ...     events, postgres_sink(...), checkpoint_location="/chk/events",
    ...     trigger={"processingTime": "5 seconds"}).start()

    Two targets, the batch computed once:

    >>> as_records = lambda b: b.selectExpr("id AS key", "to_json(struct(*)) AS value")
    >>> query = twophase.write_stream(  # doctest: +SKIP
    ...     orders, [pg_sink, (kafka_sink, as_records)], checkpoint_location="/chk/orders"
    ... ).start()
    """
    targets = as_targets(sink)
    sinks: list[AnySink] = targets.sinks if targets is not None else [sink]  # type: ignore[list-item]
    name = ",".join(s.name for s in sinks)
    if not getattr(df, "isStreaming", False):
        raise ConfigurationError(
            "write_stream needs a streaming DataFrame (spark.readStream...)", sink=name
        )
    if not checkpoint_location:
        raise ConfigurationError(
            "checkpoint_location is required", sink=name, setting="checkpoint_location"
        )
    others = [k for k in otel_environment or {} if not str(k).startswith("OTEL_")]
    if others:
        raise ConfigurationError(
            f"otel_environment takes OpenTelemetry's OTEL_* settings only, not {others[0]!r}",
            sink=name,
            setting="otel_environment",
        )
    check_speculation(df.sparkSession, name)
    session = connect_session_id(df.sparkSession)
    for each in sinks:
        each.checkpoint_location = checkpoint_location
        if otel_environment:
            # Pickled with the sink to wherever its driver side runs (_runtime configures it).
            setattr(each, OTEL_ATTRIBUTE, {str(k): str(v) for k, v in otel_environment.items()})
        # Under Spark Connect, the session that starts the query (from PySpark 4.3 the batches
        # run in a clone of it, which lists no running query): recorded before pickling.
        _connect.record_session(each, session)
    function: Any = targets if targets is not None else sink
    writer = df.writeStream.foreachBatch(function).option("checkpointLocation", checkpoint_location)
    if query_name:
        writer = writer.queryName(query_name)
    if trigger:
        writer = writer.trigger(**trigger)
    return writer


def await_termination(query: Any, timeout: float | None = None) -> bool | None:
    """Wait for ``query`` to stop, raising the twophase error that failed it, by class.

    ``query.awaitTermination()`` raises PySpark's ``StreamingQueryException``,
    which carries the error of ``foreachBatch`` or of a task as text only.
    This raises the twophase error instead -- ``ConfigurationError``,
    ``DataError``, ... with its ``sink``, ``batch_id``, ``partition_id``,
    ``column`` and ``setting`` -- chained to PySpark's exception, on classic
    Spark and under Spark Connect. A failure without a twophase error behind
    it is raised unchanged. See :func:`twophase.errors.find_error`.

    Parameters
    ----------
    query
        A ``StreamingQuery``.
    timeout
        Seconds to wait at most; None waits until the query stops.

    Returns
    -------
    bool or None
        As ``awaitTermination``: None without a timeout, else whether the
        query stopped within it.

    Raises
    ------
    twophase.errors.TwoPhaseError
        The error that failed the query; ``restartable`` says whether a
        restart can cure it.

    Examples
    --------
    >>> query = twophase.write_stream(df, sink, checkpoint_location="/c").start()  # doctest: +SKIP
    >>> try:  # doctest: +SKIP
    ...     twophase.await_termination(query)
    ... except twophase.DataError as exc:
    ...     print(exc.sink, exc.batch_id, exc.column, exc.message)
    """
    try:
        stopped: bool | None = (
            query.awaitTermination() if timeout is None else query.awaitTermination(timeout)
        )
    except Exception as exc:
        # Before PySpark 4.0 a Connect query's failure has no text: the sink left its error.
        found = find_error(exc) or _connect.recorded_failure(query)
        if found is None or found is exc:
            raise
        raise found from exc
    return stopped
