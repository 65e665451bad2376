"""What the Connect tests send to the server's ``foreachBatch`` worker (pickled by reference).

The server runs with this checkout on its ``PYTHONPATH``, so these classes unpickle there.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import twophase
from tests.spark.helpers import SCHEMA
from twophase._spark._entry import QueryBatches
from twophase.testing import install_step_listener
from twophase_dev import SparkConnectServer
from twophase_dev._host._wait import wait_until


class KillServerAt:
    """A step listener that crashes the Connect server -- the driver -- at one protocol step.

    Runs in the server's ``foreachBatch`` worker, a child of the server's JVM: it SIGKILLs the
    JVM, then itself.
    """

    def __init__(self, step: str, batch_id: int, index: int | None = None) -> None:
        self.step = step
        self.batch_id = batch_id
        self.index = index

    def __call__(self, step: str, batch_id: int, index: int | None) -> None:
        if (step, batch_id) != (self.step, self.batch_id):
            return
        if self.index is not None and index != self.index:
            return
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


class WithListener:
    """``foreachBatch`` function: ``write_stream``'s, with a step listener installed in the worker.

    ``function`` is what ``write_stream`` gives ``foreachBatch`` for ``sink`` (the sink with the
    query's settings beside it): pickled together, its sink is ``sink`` in the worker too.
    """

    def __init__(self, function: QueryBatches, sink: Any, listener: Any) -> None:
        self.function = function
        self.sink = sink
        self.listener = listener

    @classmethod
    def of(cls, df: Any, sink: Any, listener: Any, checkpoint: str, **options: Any) -> WithListener:
        """The function that write_stream(df, sink, checkpoint_location=checkpoint, ...) sets."""
        function = QueryBatches.for_query(df, sink, checkpoint_location=checkpoint, **options)
        return cls(function, sink, listener)

    def __call__(self, df: Any, batch_id: int) -> None:
        install_step_listener(self.sink, self.listener)
        self.function(df, batch_id)


def start_query(
    spark: Any,
    source: Path,
    checkpoint: Path | str,
    sink: Any,
    transform: Any = lambda df: df,
    listener: Any = None,
    output_mode: str | None = None,
    **options: Any,
) -> Any:
    """Start the file-source query of ``tests.spark.helpers`` on a Connect session.

    ``options`` go to ``twophase.write_stream`` (``otel_environment=``); ``output_mode`` to the
    writer (``"update"`` for an aggregation).
    """
    df = transform(
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    )
    writer = twophase.write_stream(df, sink, checkpoint_location=str(checkpoint), **options)
    if listener is not None:  # the same function, called through the listener's wrapper
        writer = writer.foreachBatch(
            WithListener.of(df, sink, listener, str(checkpoint), **options)
        )
    if output_mode is not None:
        writer = writer.outputMode(output_mode)
    return writer.trigger(availableNow=True).start()


def run_to_end(server: SparkConnectServer, start: Callable[[Any], Any]) -> None:
    """Start a query on a new session of ``server`` and wait until it finished without error."""
    spark = server.session()
    try:
        query = start(spark)
        assert query.awaitTermination(180), "the query did not finish in time"
        assert query.exception() is None, query.exception()
    finally:
        spark.stop()


def crash_server(server: SparkConnectServer, start: Callable[[Any], Any], step: str) -> None:
    """Start a query that crashes the server, wait until the server died, start it again.

    The client is not asked anything once the server is gone (its calls would retry for
    minutes): the test watches the server's process, then closes the channel.
    """
    pid = server.pid
    spark = server.session()
    try:
        start(spark)
        died = wait_until(lambda: server.pid is None, timeout=180)
    finally:
        spark.client.close()
    assert pid is not None, "the server was not running"
    assert died, f"the server was not killed at {step}"
    server.restart()
