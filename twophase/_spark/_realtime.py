"""Real-time mode (``trigger(realTime=...)``): the query that :func:`twophase.write_stream` builds.

Spark refuses ``foreachBatch`` in real-time mode, and its only prompt path to
Python is ``mapInArrow`` (``docs/development.md``, "Real-time mode: how rows reach
Python"). So the sink runs inside a ``mapInArrow`` function whose tasks commit
as rows arrive (:mod:`twophase._engine._realtime`), into Spark's ``noop`` sink.
On the driver, before the query starts, this module checks the plan (Spark's own
check is turned off for the query, so twophase does it), opens the sink,
claims its identity and recovers, as a micro-batch run's first batch does.
Classic PySpark only: the plan is read through the JVM.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .._engine._hooks import AnySink
from .._engine._participant import TaskPlan
from .._engine._realtime import RealtimeSettings, run_realtime_partition
from .._log._identity import read_query_id
from .._pyspark import require_feature
from .._values import CommitProtocol
from ..errors import ConfigurationError
from ._classic import log_store, qualified
from ._dataframe import arrow_schema_of, check_speculation, new_coordinator, renamed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter  # types only, never imported

__all__ = [
    "DEFAULT_ARROW_BATCH_ROWS",
    "DEFAULT_COMMIT_INTERVAL",
    "DEFAULT_COMMIT_ROWS",
    "REALTIME_OPERATORS",
    "realtime_refusal",
    "realtime_writer",
]

_log = logging.getLogger("twophase.spark")

#: Seconds between a partition's commits: a row waits at most this long, plus the commit.
DEFAULT_COMMIT_INTERVAL = 0.2
#: Rows that make a partition commit at once.
DEFAULT_COMMIT_ROWS = 20_000

#: Rows that cross from Spark's JVM to Python together, by default: one, at once.
DEFAULT_ARROW_BATCH_ROWS = 1

#: The session settings a real-time query starts with (a query keeps the values it
#: started with; the session gets its own back), but ``maxRecordsPerBatch``, which is
#: the query's ``arrow_batch_rows``.
QUERY_CONF = {
    # Spark's allowlist has no Python operator: twophase checks the plan instead. Spark reads
    # it from the session at every epoch, so it stays set on the session (docs/realtime.md).
    "spark.sql.streaming.realTimeMode.allowlistCheck": "false",
    # Each Arrow batch crosses to Python at once: no byte buffer waits to fill.
    "spark.sql.execution.pandas.udf.buffer.size": "64",
}
_ARROW_BATCH_KEY = "spark.sql.execution.arrow.maxRecordsPerBatch"
_EPOCH_KEY = "streaming.sql.batchId"
_ALLOWLIST_KEY = "spark.sql.streaming.realTimeMode.allowlistCheck"


#: Logical operators a real-time query may hold over its stream: each keeps a partition's rows
#: in the order the source gives them, and none holds state (``docs/realtime.md``).
REALTIME_OPERATORS = frozenset(
    {"Project", "Filter", "Generate", "Union", "EventTimeWatermark", "SubqueryAlias"}
)


def realtime_refusal(df: Any) -> str | None:
    """Say what in a classic streaming DataFrame's plan real-time mode cannot write exactly once.

    Walks the analyzed logical plan (a streaming plan cannot be optimized before it
    starts) through the JVM, over the operators above the stream only (a static side
    is not looked at): every one must be of :data:`REALTIME_OPERATORS`, with no
    Python UDF in its expressions, and every source Kafka.

    Parameters
    ----------
    df
        A classic streaming DataFrame.

    Returns
    -------
    str or None
        What is refused, for the message; None when the plan is fit.
    """
    found: list[str] = []

    def walk(node: Any) -> None:
        if not node.isStreaming():
            return
        name = str(node.nodeName())
        children = node.children()
        if name == "StreamingRelationV2":
            source = str(node.sourceName())
            if source.lower() != "kafka":
                found.append(f"the source {source!r} (only Kafka replays a partition in order)")
            return
        if name not in REALTIME_OPERATORS:
            found.append(f"the operator {name}")
        elif _has_python_udf(node.expressions()):
            found.append(f"a Python UDF in {name}")
        for i in range(children.size()):
            walk(children.apply(i))

    walk(df._jdf.queryExecution().analyzed())  # no public API names a plan's operators
    return ", ".join(dict.fromkeys(found)) or None


def _has_python_udf(expressions: Any) -> bool:
    pending = [expressions.apply(i) for i in range(expressions.size())]
    while pending:
        expression = pending.pop()
        if "Python" in str(expression.getClass().getSimpleName()):
            return True
        children = expression.children()
        pending.extend(children.apply(i) for i in range(children.size()))
    return False


def _refuse(sink: str, message: str, setting: str) -> ConfigurationError:
    return ConfigurationError(f"real-time mode: {message}", sink=sink, setting=setting)


def check_realtime_sink(sink: AnySink) -> None:
    """Refuse a sink real-time mode cannot run exactly once, by name.

    Raises
    ------
    ConfigurationError
        The coordinated protocol, rows routed by key (upsert, CDC), staging.
    """
    name = sink.name
    if sink.protocol is not CommitProtocol.MARKERS:
        raise _refuse(
            name,
            "the coordinated protocol commits once per batch from the driver, which an epoch "
            "of real-time mode never reaches before it ends; use a sink of the markers "
            "protocol (postgres_sink(..., protocol='markers'), mariadb_sink, kafka_sink, a "
            "MarkerCommitSink)",
            "protocol",
        )
    if sink.key_by:
        raise _refuse(
            name,
            f"the sink routes rows by key {list(sink.key_by)} (upsert, CDC), which needs a "
            "shuffle real-time mode does not run; write the rows in append mode",
            "key_by",
        )
    if getattr(sink, "staging", False):
        raise _refuse(name, "staging=True copies whole batches; an epoch never ends", "staging")


def _query_id(spark: Any, checkpoint: str, sink: str) -> str:
    """Return the query's id from its checkpoint, writing Spark's ``metadata`` on a first start.

    The sink's identity needs the id before the query starts (its tasks commit from
    the first row on). Spark keeps a checkpoint's id in ``<checkpoint>/metadata``
    (``{"id": ...}``) and adopts the file it finds there, so on a first start
    twophase writes it, with a new id, as Spark would.
    """
    store = log_store(spark, checkpoint)
    found = read_query_id(store)
    if found:
        return found
    new = str(uuid.uuid4())
    store.write("metadata", json.dumps({"id": new}).encode(), overwrite=False)
    found = read_query_id(store)
    if not found:
        raise ConfigurationError(
            f"could not read the query id back from {checkpoint}/metadata",
            sink=sink,
            setting="checkpoint_location",
        )
    return found


def _next_epoch(spark: Any, checkpoint: str) -> int:
    names = log_store(spark, checkpoint).list("commits")
    done = [int(n) for n in names if n.isdigit()]
    return max(done) + 1 if done else 0


def _partition_fn(
    sink: AnySink, plan: TaskPlan, settings: RealtimeSettings, names: list[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from dataclasses import replace

        from pyspark import TaskContext as SparkTaskContext

        task = SparkTaskContext.get()
        assert task is not None
        epoch_text = task.getLocalProperty(_EPOCH_KEY)
        if not epoch_text:  # every epoch's tasks carry it (Spark 4.1 and 4.2)
            raise ConfigurationError(
                f"real-time mode: the task has no epoch (Spark's local property {_EPOCH_KEY}); "
                "this Spark runs real-time queries differently from the ones twophase knows",
                sink=plan.sink_name,
                setting="trigger",
            )
        epoch = int(epoch_text)
        run_realtime_partition(
            sink,
            replace(plan, batch_id=epoch),
            task.partitionId(),
            task.attemptNumber(),
            batches,
            settings,
            prepare=lambda batch: renamed(batch, names),
        )
        return iter(())

    return run


def _starting_with_conf(
    writer: DataStreamWriter, spark: Any, arrow_batch_rows: int
) -> DataStreamWriter:
    """Make ``writer.start`` start the query with :data:`QUERY_CONF`, then restore the session's."""
    start = writer.start
    conf = {**QUERY_CONF, _ARROW_BATCH_KEY: str(arrow_batch_rows)}

    def start_with_conf(*args: Any, **kwargs: Any) -> Any:
        before = {key: spark.conf.get(key, None) for key in conf}
        for key, value in conf.items():
            spark.conf.set(key, value)
        try:
            return start(*args, **kwargs)
        finally:
            for key, value in before.items():
                if key == _ALLOWLIST_KEY:
                    continue
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)

    writer.start = start_with_conf  # type: ignore[method-assign]
    return writer


def realtime_writer(
    df: DataFrame,
    sink: AnySink,
    *,
    checkpoint_location: str,
    trigger: dict[str, Any],
    settings: RealtimeSettings,
    arrow_batch_rows: int = DEFAULT_ARROW_BATCH_ROWS,
) -> DataStreamWriter:
    """Check, open and recover ``sink`` for real-time mode; return the query's writer.

    Parameters
    ----------
    df
        A classic streaming DataFrame (the entry refuses Spark Connect's).
    sink
        A sink of the markers protocol.
    checkpoint_location
        The query's checkpoint location.
    trigger
        ``{"realTime": "..."}``.
    settings
        How often each partition commits.
    arrow_batch_rows
        Rows of a partition that cross to Python together (Spark's
        ``maxRecordsPerBatch`` for this query).

    Returns
    -------
    pyspark.sql.streaming.DataStreamWriter
        Ready to ``.start()`` (which starts the query with :data:`QUERY_CONF`).
    """
    name = sink.name
    require_feature("realtime", name)
    check_realtime_sink(sink)
    spark = df.sparkSession
    check_speculation(spark, name)
    refused = realtime_refusal(df)
    if refused:
        raise _refuse(
            name,
            f"the query holds {refused}; a real-time query may only project, filter, "
            "explode, union and set a watermark over a Kafka source, so that a replayed "
            "epoch gives each partition the same rows in the same order",
            "trigger",
        )
    checkpoint = qualified(spark, checkpoint_location)
    query_id = _query_id(spark, checkpoint, name)
    coordinator = new_coordinator(
        sink,
        query_id=query_id,
        run_id=f"realtime:{uuid.uuid4()}",
        checkpoint=checkpoint,
        store=lambda location: log_store(spark, location),
    )
    epoch = _next_epoch(spark, checkpoint)
    coordinator.plan(sink, epoch)
    schema = arrow_schema_of(df)
    sink.check_schema(schema, epoch)
    plan = TaskPlan(
        name, coordinator.context.identity, -1, sink.protocol, epoch=coordinator.log.epoch or 0
    )
    names = list(df.columns)
    positional = [f"_{i}" for i in range(len(names))]
    fn = _partition_fn(sink, plan, settings, names)
    _log.info(
        "sink %s: real-time mode from epoch %d, a commit every %.3f s or %d rows per partition",
        name,
        epoch,
        settings.commit_interval,
        settings.commit_rows,
    )
    writer = (
        df.toDF(*positional)
        .mapInArrow(fn, "committed long")
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", checkpoint_location)
        .trigger(**trigger)
    )
    return _starting_with_conf(writer, spark, arrow_batch_rows)
