"""What the Connect tests send to the server's ``foreachBatch`` worker (pickled by reference).

The server runs with this checkout on its ``PYTHONPATH``, so these classes unpickle there.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import twophase
from tests.spark.helpers import SCHEMA
from twophase.testing import install_step_listener


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
    """``foreachBatch`` function: the sink, with a step listener installed in the worker."""

    def __init__(self, sink: Any, listener: Any) -> None:
        self.sink = sink
        self.listener = listener

    def __call__(self, df: Any, batch_id: int) -> None:
        install_step_listener(self.sink, self.listener)
        self.sink(df, batch_id)


def start_query(
    spark: Any,
    source: Path,
    checkpoint: Path,
    sink: Any,
    transform: Any = lambda df: df,
    listener: Any = None,
) -> Any:
    """Start the file-source query of ``tests.spark.helpers`` on a Connect session."""
    df = transform(
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    )
    if listener is None:
        writer = twophase.write_stream(df, sink, checkpoint_location=str(checkpoint))
    else:
        sink.checkpoint_location = str(checkpoint)
        writer = df.writeStream.foreachBatch(WithListener(sink, listener)).option(
            "checkpointLocation", str(checkpoint)
        )
    return writer.trigger(availableNow=True).start()
