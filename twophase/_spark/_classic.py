"""Classic Spark's ``foreachBatch``: the query found through py4j, the log in Hadoop's reach.

Runs on the driver, inside Spark's ``foreachBatch`` call, reached from the entry
(:mod:`twophase._spark._entry`) for a classic DataFrame. It finds the
query's id and checkpoint (``docs/protocol.md``), refuses unsafe settings,
keeps one coordinator per run of the query in the sink's runtime, and runs the
participants with ``mapInArrow`` so executors receive Arrow record batches and
the batch is computed once (one Spark job; a second one only when the
markers protocol checks a replay, and then over a persisted copy).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._engine._coordinator import Coordinator
from .._engine._hooks import AnySink
from .._engine._runtime import runtime_of
from .._log._identity import query_id_in_metadata
from .._pyspark import stopped_batch_message
from .._stores._hadoop import HadoopFileStore
from .._stores._store import LogStore, open_store
from ..errors import ConfigurationError
from ._dataframe import (
    STATE_DIRECTORY,
    DataFrameExecution,
    QueryOptions,
    check_speculation,
    current_coordinator,
    new_coordinator,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "LOG_STORE_KEY",
    "BatchStopped",
    "SparkBatchExecution",
    "find_checkpoint",
    "log_store",
    "qualified",
    "run_foreach_batch",
]

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


def qualified(spark: Any, location: str) -> str:
    """Return ``location`` qualified by Spark's file system (``file:/...``, ``hdfs://...``)."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(location)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return str(fs.makeQualified(path).toString())


def _resolve_checkpoint(
    sink: AnySink, spark: Any, query_id: str, batch_id: int, given: str | None
) -> str:
    found = find_checkpoint(spark, query_id)
    if given is not None:
        location = qualified(spark, given)
        metadata_id = _read_metadata_id(spark, location)
        if metadata_id != query_id:
            raise ConfigurationError(
                f"checkpoint_location={given!r} is not the checkpoint of "
                f"the running query (its metadata names query {metadata_id}, the query is "
                f"{query_id}). Pass the same location as the query's checkpointLocation, "
                "or omit it",
                sink=sink.name,
                batch_id=batch_id,
                setting="checkpoint_location",
            )
        return location
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


def _coordinator_for(sink: AnySink, df: DataFrame, batch_id: int, given: str | None) -> Coordinator:
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
    checkpoint = _resolve_checkpoint(sink, spark, query_id, batch_id, given)
    return new_coordinator(
        sink,
        query_id=query_id,
        run_id=run_id,
        checkpoint=checkpoint,
        store=lambda location: log_store(spark, location),
    )


def run_foreach_batch(sink: AnySink, df: DataFrame, batch_id: int, options: QueryOptions) -> None:
    """Run one micro-batch of ``sink`` on classic Spark.

    Parameters
    ----------
    sink
        The sink.
    df
        The micro-batch DataFrame (a classic one: py4j reaches the JVM).
    batch_id
        The micro-batch id.
    options
        What :func:`twophase.write_stream` knows of the query.
    """
    try:
        _coordinator_for(sink, df, batch_id, options.checkpoint_of(sink))
        runtime_of(sink).run_batch(
            sink, SparkBatchExecution(df, batch_id), otel_environment=options.otel_environment
        )
    except Exception:
        if not _stopping(df):
            raise
        # What crosses py4j is the traceback of what this raises: kept short, without the
        # Java stacks of the interrupted calls, so that Spark's check of it cannot overflow.
        raise BatchStopped(stopped_batch_message(sink.name, batch_id)) from None


class BatchStopped(Exception):  # noqa: N818 -- named for what happened, as Spark says it
    """A batch interrupted by ``query.stop()`` (its text is Spark's, see ``_pyspark``)."""


def _stopping(df: DataFrame) -> bool:
    """Return whether the batch's query is being stopped (no longer active, or gone).

    Spark marks the query terminated before it interrupts the stream thread and cancels the
    batch's jobs; anything that goes wrong while asking says no (the error stands).
    """
    try:
        spark = df.sparkSession
        query_id = spark.sparkContext.getLocalProperty(_QUERY_ID_KEY)
        if not query_id:
            return False
        for jsession in _sessions(spark):
            query = jsession.streams().get(query_id)
            if query is not None:
                return not bool(query.isActive())
        return True  # no session lists it any more: it stopped
    except Exception:
        return False


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

    def holds_state(self) -> bool:
        """Return whether the running query's checkpoint has Spark's ``state`` directory.

        Asked of Hadoop's file system, where Spark writes it. A query whose checkpoint cannot
        be found is taken to hold state: computing a batch once more costs a job, leaving a
        stateful batch's state uncommitted fails the query.
        """
        spark = self.df.sparkSession
        query_id = spark.sparkContext.getLocalProperty(_QUERY_ID_KEY)
        checkpoint = find_checkpoint(spark, query_id) if query_id else None
        if checkpoint is None:
            return True
        fs, path = self._fs(f"{checkpoint.rstrip('/')}/{STATE_DIRECTORY}")
        return bool(fs.exists(path))

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
