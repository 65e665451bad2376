"""A real Spark driver process for SIGKILL tests: runs the fake-sink query once.

Usage: python -m tests.spark.driver_process SOURCE CHECKPOINT TARGET PROTOCOL [STEP BATCH INDEX]

PROTOCOL is ``A`` or ``B`` (fake sinks over the directory TARGET) or
``pg-A`` / ``pg-B`` (the PostgreSQL connector; TARGET is then
``<dsn>|<table>``) or ``kafka-B`` (the Kafka connector; TARGET is
``<bootstrap>|<topic>``). STEP is a coordinator step at which the driver SIGKILLs
itself, or ``phase1`` to have an executor SIGKILL the driver in the middle of
phase 1 (fake sinks only).
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
    sink: Any
    transform: Any = lambda df: df.repartition(2)  # noqa: E731
    if protocol.startswith("pg-"):
        from twophase.connectors.jdbc import postgres_sink

        dsn, table = target_spec.split("|")
        mode = "coordinated" if protocol == "pg-A" else "markers"
        sink = postgres_sink("killed", table=table, dsn=dsn, protocol=mode, create_table=True)
    elif protocol == "kafka-B":
        from twophase.connectors.kafka import KafkaSink

        bootstrap, topic = target_spec.split("|")
        sink = KafkaSink("killed", bootstrap_servers=bootstrap, topic=topic)
        transform = lambda df: df.repartition(2).selectExpr("CAST(id AS STRING) AS value")  # noqa: E731
    else:
        target = FakeTarget(target_spec)
        sink = FakeSink("killed", target) if protocol == "A" else FakeMarkerSink("killed", target)
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
    run_query(spark, Path(source), Path(checkpoint), sink, transform)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
