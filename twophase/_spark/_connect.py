"""``foreachBatch`` under Spark Connect: the same protocols, without py4j.

Under Spark Connect the sink runs in the server's ``foreachBatch`` worker, a
Python process started by the Connect server next to the driver JVM, holding a
Connect session attached to the client's. There is no py4j there: no
``sparkContext``, no local properties, no Hadoop file system. So:

- the checkpoint location must be given (``twophase.write_stream(df, sink,
  checkpoint_location=...)`` sends it to the server with the sink, or the sink's
  own ``checkpoint_location``);
- the query id -- the sink's identity -- is read from the checkpoint's
  ``metadata`` file, through a store that needs no JVM (local disk, S3;
  ``docs/storage.md``), and checked against the active queries of the session
  that started the query (``write_stream`` sends its id with the sink; the
  version adapter finds them), whose run id names the run;
- a batch's partition count cannot be asked before the batch runs, so the
  batch is coalesced to at most a known number of participant slots (the
  sink's ``max_transactions_per_batch``, else ``spark.sql.shuffle.partitions``)
  and that number is what the markers protocol's intent records: recovery fences or
  checks every slot below it;
- before PySpark 4.0 the server does not send a batch's error to the client
  (the query fails with no text): :func:`record_failure` leaves a twophase error
  in the session for :func:`recorded_failure` (``twophase.await_termination``).
"""

from __future__ import annotations

import logging
import traceback
from typing import TYPE_CHECKING, Any

from .._engine._coordinator import Coordinator
from .._engine._hooks import AnySink
from .._engine._participant import TaskPlan, TaskResult
from .._engine._runtime import runtime_of
from .._log._identity import read_query_id
from .._pyspark import (
    connect_active_queries,
    connect_loses_batch_errors,
    connect_record_failure,
    connect_recorded_failure,
)
from .._stores._store import LogStore, open_store
from ..errors import ConfigurationError, TwoPhaseError, find_error
from ._dataframe import (
    NO_OPTIONS,
    DataFrameExecution,
    QueryOptions,
    check_speculation,
    current_coordinator,
    has_state_directory,
    new_coordinator,
    session_conf,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "ConnectBatchExecution",
    "is_connect",
    "record_failure",
    "recorded_failure",
    "run_foreach_batch",
]

_log = logging.getLogger("twophase.spark")


def is_connect(df: Any) -> bool:
    """Return whether ``df`` is a Spark Connect DataFrame.

    Parameters
    ----------
    df
        A DataFrame.

    Returns
    -------
    bool
        True for ``pyspark.sql.connect.dataframe.DataFrame``.
    """
    return type(df).__module__.startswith("pyspark.sql.connect.")


def _coordinator_for(
    sink: AnySink, df: DataFrame, batch_id: int, options: QueryOptions
) -> Coordinator:
    checkpoint = options.checkpoint_of(sink)
    if not checkpoint:
        raise ConfigurationError(
            "under Spark Connect the sink must know the query's checkpoint location: start "
            "the query with twophase.write_stream(df, sink, checkpoint_location=...) or pass "
            "checkpoint_location=... to the sink",
            sink=sink.name,
            batch_id=batch_id,
            setting="checkpoint_location",
        )
    spark = df.sparkSession
    query_id = read_query_id(open_store(checkpoint))
    session_id = options.connect_session
    active = connect_active_queries(spark, session_id)
    if query_id is None or query_id not in active:
        hint = (
            ""
            if session_id is not None
            else " (from PySpark 4.3 a batch runs in a clone of the query's session, which "
            "lists no running query: start the query with twophase.write_stream)"
        )
        raise ConfigurationError(
            f"checkpoint_location={checkpoint!r} is not the checkpoint of a running query of "
            f"this session (its metadata names query {query_id}; running: "
            f"{', '.join(sorted(active)) or 'none'}{hint}). Pass the same location as the "
            "query's checkpointLocation",
            sink=sink.name,
            batch_id=batch_id,
            setting="checkpoint_location",
        )
    run_id = active[query_id]
    current = current_coordinator(sink, query_id, run_id)
    if current is not None:
        return current
    check_speculation(spark, sink.name, batch_id)
    return new_coordinator(sink, query_id=query_id, run_id=run_id, checkpoint=checkpoint)


def run_foreach_batch(sink: AnySink, df: DataFrame, batch_id: int, options: QueryOptions) -> None:
    """Run one micro-batch of ``sink`` under Spark Connect.

    Parameters
    ----------
    sink
        The sink (unpickled in the Connect server's ``foreachBatch`` worker).
    df
        The micro-batch DataFrame (a Connect DataFrame).
    batch_id
        The micro-batch id.
    options
        What :func:`twophase.write_stream` knows of the query (pickled with the sink).
    """
    try:
        coordinator = _coordinator_for(sink, df, batch_id, options)
        execution = ConnectBatchExecution(
            df, batch_id, coordinator.log.store, coordinator.context.log_location, sink
        )
        execution.checkpoint = options.checkpoint_of(sink)
        runtime_of(sink).run_batch(sink, execution, otel_environment=options.otel_environment)
    except Exception as exc:
        record_failure(sink, df, exc, options)
        raise


def record_failure(
    sink: AnySink, df: DataFrame, error: BaseException, options: QueryOptions = NO_OPTIONS
) -> None:
    """Leave the twophase error behind a failed batch where the client finds it.

    Only where the server does not send it (``connect_loses_batch_errors``): under the run id of
    the sink's query -- the query of its checkpoint, else the session's only running query; with
    several and no checkpoint to tell them apart, nothing is recorded.

    Parameters
    ----------
    sink
        The sink whose batch failed.
    df
        The micro-batch DataFrame.
    error
        What the batch raised.
    options
        What :func:`twophase.write_stream` knows of the query.
    """
    found = find_error(error) if connect_loses_batch_errors() else None
    if found is None:
        return
    spark = df.sparkSession
    try:
        active = connect_active_queries(spark, options.connect_session)
        checkpoint = options.checkpoint_of(sink)
        query_id = read_query_id(open_store(checkpoint)) if checkpoint else None
        if query_id is not None and query_id in active:
            run_id: str | None = active[query_id]
        else:
            run_id = next(iter(active.values())) if len(active) == 1 else None
        if run_id is not None:
            text = "".join(traceback.format_exception_only(type(found), found)).strip()
            connect_record_failure(spark, run_id, text)
    except Exception:  # the batch's own error is what matters
        _log.debug("could not record the error of a failed batch", exc_info=True)


def recorded_failure(query: Any) -> TwoPhaseError | None:
    """Return the twophase error :func:`record_failure` left for ``query``, if any.

    Parameters
    ----------
    query
        A ``StreamingQuery`` that failed.

    Returns
    -------
    TwoPhaseError or None
        The error, rebuilt with its class and context.
    """
    text = connect_recorded_failure(query)
    # find_error reads an error from its text, as it reads PySpark's exceptions.
    return find_error(RuntimeError(text)) if text else None


#: The slots of a batch when ``spark.sql.shuffle.partitions`` is not a number
#: (Databricks accepts ``auto``), as Spark's own default.
DEFAULT_SLOTS = 200


def _shuffle_partitions(spark: Any) -> int:
    """Read ``spark.sql.shuffle.partitions`` as the batch's participant slots.

    A value that is not a positive integer (Databricks' ``auto``) gives
    :data:`DEFAULT_SLOTS`, said once per process in the log: the sink's
    ``max_transactions_per_batch`` (``max_partitions``) is the way to choose.
    """
    raw = session_conf(spark, "spark.sql.shuffle.partitions", str(DEFAULT_SLOTS))
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value > 0:
        return value
    if raw not in _SAID:
        _SAID.add(raw)
        _log.info(
            "spark.sql.shuffle.partitions=%r is not a number of partitions: a batch under Spark "
            "Connect is bounded to %d participant slots; set max_partitions on the sink to choose",
            raw,
            DEFAULT_SLOTS,
        )
    return DEFAULT_SLOTS


_SAID: set[str] = set()


class ConnectBatchExecution(DataFrameExecution):
    """A Spark Connect micro-batch; staged copies are checked and removed through the log's store.

    Parameters
    ----------
    df
        The micro-batch DataFrame.
    batch_id
        The micro-batch id.
    store
        The coordinator log's store (staged copies live below it).
    log_location
        The location of that store's root, as Spark must be given it.
    sink
        The sink (its ``max_transactions_per_batch`` bounds the slots).
    """

    def __init__(
        self, df: DataFrame, batch_id: int, store: LogStore, log_location: str, sink: AnySink
    ) -> None:
        super().__init__(df, batch_id)
        self._store = store
        self._root = log_location.rstrip("/")
        self._slots: int | None = None
        self._ran: int | None = None
        limit = sink.max_transactions_per_batch
        self._limit = limit
        #: The query's checkpoint location (where Spark keeps its state); None: not known.
        self.checkpoint: str | None = None

    def num_partitions(self) -> int:
        """Return the participant slots: partitions run, or the bound the batch is coalesced to."""
        if self._ran is not None:
            return self._ran
        if self._slots is None:
            bound = self._limit
            if bound is None:
                bound = _shuffle_partitions(self.df.sparkSession)
            self._slots = max(1, bound)
            self.df = self.df.coalesce(self._slots)
        return self._slots

    def limit_partitions(self, limit: int) -> None:
        """Coalesce the batch to at most ``limit`` partitions."""
        self._limit = limit if self._limit is None else min(self._limit, limit)
        self._slots = None
        self.num_partitions()

    def _routed(self, partitions: int) -> None:
        self._slots = partitions

    def holds_state(self) -> bool:
        """Return whether the checkpoint has Spark's ``state`` directory (read without the JVM).

        An unknown checkpoint is taken to hold state (see the classic path's reason).
        """
        if not self.checkpoint:
            return True
        return has_state_directory(open_store(self.checkpoint))

    def _relative(self, location: str) -> str:
        if not location.startswith(self._root + "/"):
            raise ValueError(f"{location} is not below the log at {self._root}")
        return location[len(self._root) + 1 :]

    def stage(self, location: str) -> None:
        """Write the batch once to ``location`` (Parquet) and read it from there."""
        self.num_partitions()  # the slots are fixed before the copy is read back
        done = self._store.read(f"{self._relative(location)}/_SUCCESS") is not None
        self._read_staged(location, done)
        self.df = self.df.coalesce(self.num_partitions())

    def drop_staged(self, location: str) -> None:
        """Delete the staged copy of a committed batch."""
        self._store.delete_tree(self._relative(location))

    def run_participants(self, sink: AnySink, plan: TaskPlan) -> list[TaskResult]:
        """Run phase 1 over at most the recorded slots."""
        self.num_partitions()
        results = super().run_participants(sink, plan)
        self._ran = len(results)
        return results
