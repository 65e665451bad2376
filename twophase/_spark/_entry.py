"""The entry of the Spark glue: the public calls, and the one dispatch to classic or Connect.

``twophase.write_stream``, ``twophase.await_termination`` and a sink's
``__call__`` (``foreachBatch(sink)``) start here; each micro-batch DataFrame is
sent once, by its kind, to the classic path (:mod:`twophase._spark._classic`)
or the Spark Connect path (:mod:`twophase._spark._connect`), which import
neither each other nor this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from .._engine._hooks import AnySink
from .._engine._realtime import RealtimeSettings
from .._pyspark import connect_session_id
from ..errors import ConfigurationError, find_error
from . import _classic, _connect
from ._connect import recorded_failure
from ._dataframe import NO_OPTIONS, QueryOptions, check_speculation
from ._realtime import (
    DEFAULT_ARROW_BATCH_ROWS,
    DEFAULT_COMMIT_INTERVAL,
    DEFAULT_COMMIT_ROWS,
    realtime_writer,
)
from ._targets import Projection, Target, as_targets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter  # types only, never imported

__all__ = ["QueryBatches", "await_termination", "run_foreach_batch", "write_stream"]


def run_foreach_batch(
    sink: AnySink, df: DataFrame, batch_id: int, options: QueryOptions = NO_OPTIONS
) -> None:
    """Run one micro-batch of ``sink`` on the path of its DataFrame (the body of ``sink.__call__``).

    Parameters
    ----------
    sink
        The sink.
    df
        The micro-batch DataFrame: classic, or Spark Connect's (then the sink
        runs in the Connect server's ``foreachBatch`` worker, without py4j).
    batch_id
        The micro-batch id.
    options
        What :func:`write_stream` knows of the query (nothing for a sink passed
        to ``foreachBatch`` directly).
    """
    path = _connect if _connect.is_connect(df) else _classic
    path.run_foreach_batch(sink, df, batch_id, options)


class QueryBatches:
    """The ``foreachBatch`` function :func:`write_stream` gives Spark. Picklable.

    Runs each sink, in order, with the query's options beside it, never on it.

    Parameters
    ----------
    pairs
        Each sink with the projection it writes (None: the whole batch).
    options
        What :func:`write_stream` knows of the query.
    shared
        Whether the sinks share the batch (a list of targets): it is then
        persisted, computed once, and unpersisted after the last sink.
    """

    def __init__(
        self,
        pairs: Sequence[tuple[AnySink, Projection | None]],
        options: QueryOptions,
        *,
        shared: bool,
    ) -> None:
        self.pairs = list(pairs)
        self.options = options
        self.shared = shared

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Run every sink on the micro-batch ``batch_id``."""
        if not self.shared:
            sink, _ = self.pairs[0]
            run_foreach_batch(sink, df, batch_id, self.options)
            return
        batch = df.persist()
        try:
            for sink, project in self.pairs:
                part = project(batch) if project is not None else batch
                run_foreach_batch(sink, part, batch_id, self.options)
        finally:
            batch.unpersist()

    @classmethod
    def for_query(
        cls,
        df: DataFrame,
        sink: AnySink | Sequence[Target],
        *,
        checkpoint_location: str,
        otel_environment: Mapping[str, str] | None = None,
    ) -> QueryBatches:
        """Check what :func:`write_stream` is given and return its ``foreachBatch`` function."""
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
        options = QueryOptions(
            checkpoint_location,
            # Pickled with the sinks to wherever their driver side runs (the runtime configures it).
            {str(k): str(v) for k, v in otel_environment.items()} if otel_environment else None,
            # Under Spark Connect, the session that starts the query (from PySpark 4.3 the batches
            # run in a clone of it, which lists no running query).
            connect_session_id(df.sparkSession),
        )
        pairs = targets.pairs if targets is not None else [(cast("AnySink", sink), None)]
        return cls(pairs, options, shared=targets is not None)

    def __repr__(self) -> str:
        return f"QueryBatches({', '.join(sink.name for sink, _ in self.pairs)})"


def write_stream(
    df: DataFrame,
    sink: AnySink | Sequence[Target],
    *,
    checkpoint_location: str,
    query_name: str | None = None,
    trigger: dict[str, Any] | None = None,
    otel_environment: Mapping[str, str] | None = None,
    commit_interval: float | None = None,
    commit_rows: int | None = None,
    arrow_batch_rows: int | None = None,
) -> DataStreamWriter:
    """Return a ``DataStreamWriter`` wired to ``sink`` -- call ``.start()`` on it.

    Sets ``foreachBatch`` (running ``sink``) and the checkpoint location together
    (so the sink's coordinator log is always stored with the query's checkpoint)
    and refuses unsafe settings before the query starts. The sink objects are
    not changed: what the query adds to them travels beside them.

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
        ``{"realTime": "5 minutes"}`` runs the sink in Spark's real-time mode
        (PySpark 4.1 or later, classic, a Kafka source, a sink of the markers
        protocol): each partition commits every ``commit_interval`` as its rows
        arrive, exactly once (``docs/realtime.md``).
    otel_environment
        ``OTEL_*`` settings for the process that runs the sink's driver side
        -- under Spark Connect, the server's, which the client cannot reach
        otherwise: with ``OTEL_METRICS_EXPORTER`` (``otlp``, ``prometheus``)
        and no OpenTelemetry SDK set up there, twophase installs one that
        exports its metrics (needs the ``otel`` extra there). A setting
        already in that process's environment wins. See
        ``docs/monitoring.md``.
    commit_interval
        Real-time mode only: seconds from a row's arrival to the commit that
        makes it visible, at most, plus the commit's own time (default 0.2).
    commit_rows
        Real-time mode only: rows of a partition that make it commit at once
        (default 20,000).
    arrow_batch_rows
        Real-time mode only: rows of a partition that cross from Spark's JVM to
        Python together (default 1: each row as it arrives). More is faster
        under load (100: about 4x the rows per second), but a row then waits
        until that many rows of its partition have arrived, or the epoch ends
        (``docs/realtime.md``).

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
    realtime = {
        "commit_interval": commit_interval,
        "commit_rows": commit_rows,
        "arrow_batch_rows": arrow_batch_rows,
    }
    if trigger and "realTime" in trigger:
        writer = _realtime_writer(df, sink, checkpoint_location, trigger, realtime)
        return writer.queryName(query_name) if query_name else writer
    given = [name for name, value in realtime.items() if value is not None]
    if given:
        setting = given[0]
        raise ConfigurationError(
            f"{setting} is a setting of real-time mode (trigger={{'realTime': ...}}); a "
            "micro-batch query commits once per batch",
            sink=_names(sink),
            setting=setting,
        )
    function = QueryBatches.for_query(
        df, sink, checkpoint_location=checkpoint_location, otel_environment=otel_environment
    )
    writer = df.writeStream.foreachBatch(function).option("checkpointLocation", checkpoint_location)
    if query_name:
        writer = writer.queryName(query_name)
    if trigger:
        writer = writer.trigger(**trigger)
    return writer


def _names(sink: AnySink | Sequence[Target]) -> str:
    targets = as_targets(sink)
    sinks: list[AnySink] = targets.sinks if targets is not None else [sink]  # type: ignore[list-item]
    return ",".join(s.name for s in sinks)


def _realtime_writer(
    df: DataFrame,
    sink: AnySink | Sequence[Target],
    checkpoint_location: str,
    trigger: dict[str, Any],
    settings: dict[str, Any],
) -> DataStreamWriter:
    """Refuse what real-time mode cannot take here, then build its query (``_realtime``)."""
    name = _names(sink)
    if as_targets(sink) is not None:
        raise ConfigurationError(
            "real-time mode writes one sink per query; start one query per target",
            sink=name,
            setting="trigger",
        )
    if not getattr(df, "isStreaming", False):
        raise ConfigurationError(
            "write_stream needs a streaming DataFrame (spark.readStream...)", sink=name
        )
    if not checkpoint_location:
        raise ConfigurationError(
            "checkpoint_location is required", sink=name, setting="checkpoint_location"
        )
    if _connect.is_connect(df):
        raise ConfigurationError(
            "real-time mode: not under Spark Connect: twophase checks the query's plan "
            "before it starts through the JVM, which a Connect client has not; start the "
            "query from classic PySpark",
            sink=name,
            setting="trigger",
        )
    defaults = {
        "commit_interval": DEFAULT_COMMIT_INTERVAL,
        "commit_rows": DEFAULT_COMMIT_ROWS,
        "arrow_batch_rows": DEFAULT_ARROW_BATCH_ROWS,
    }
    values = {k: defaults[k] if v is None else v for k, v in settings.items()}
    for key, value in values.items():
        whole = key != "commit_interval"
        fit = isinstance(value, int) if whole else isinstance(value, (int, float))
        if isinstance(value, bool) or not fit or not value > 0:
            kind = "a positive integer" if whole else "a positive number of seconds"
            raise ConfigurationError(f"{key} must be {kind}, not {value!r}", sink=name, setting=key)
    return realtime_writer(
        df,
        cast("AnySink", sink),
        checkpoint_location=checkpoint_location,
        trigger=trigger,
        settings=RealtimeSettings(float(values["commit_interval"]), int(values["commit_rows"])),
        arrow_batch_rows=int(values["arrow_batch_rows"]),
    )


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
        found = find_error(exc) or recorded_failure(query)
        if found is None or found is exc:
            raise
        raise found from exc
    return stopped
