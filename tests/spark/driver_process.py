"""A real Spark driver process for SIGKILL tests: runs the fake-sink query once.

Usage: python -m tests.spark.driver_process SOURCE CHECKPOINT TARGET PROTOCOL [STEP BATCH INDEX]

PROTOCOL is ``coordinated`` or ``markers`` (fake sinks over the directory TARGET). STEP is a
coordinator step at which the driver SIGKILLs itself, or ``phase1`` to have an
executor SIGKILL the driver in the middle of phase 1. (Real drivers of the real
connectors are killed by the chaos harness: ``tests/chaos``.)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from tests.spark.helpers import run_query
from twophase.testing import CrashAt, FakeMarkerSink, FakeSink, FakeTarget, install_step_listener
from twophase_dev import spark_session


def main(argv: list[str]) -> None:
    source, checkpoint, target_spec, protocol = argv[:4]
    target = FakeTarget(target_spec)
    sink: Any = (
        FakeSink("killed", target)
        if protocol == "coordinated"
        else FakeMarkerSink("killed", target)
    )
    if len(argv) > 4:
        step, batch = argv[4], int(argv[5])
        index = int(argv[6]) if len(argv) > 6 and argv[6] != "-" else None
        if step == "phase1":
            target.fail(
                "write", batch_id=batch, partition_id=1, error="kill-pid", message=str(os.getpid())
            )
        else:
            install_step_listener(sink, CrashAt(step, batch, index, hard=True))
    spark = spark_session("twophase-killed-driver", master="local[2,2]", kafka=False)
    run_query(spark, Path(source), Path(checkpoint), sink, lambda df: df.repartition(2))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
