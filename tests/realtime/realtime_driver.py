"""A real Spark driver process running a real-time query into a real target, until told to stop.

Usage: python -m tests.realtime.realtime_driver KIND BOOTSTRAP SOURCE TARGET ADDRESS CHECKPOINT STOP

KIND is ``postgres``, ``mariadb`` or ``kafka``; TARGET the table or topic; ADDRESS the database's
DSN or URL (``-`` for Kafka). The driver prints ``STARTED`` once the query runs, and stops it
cleanly when the file STOP exists (exit 0); a failed query exits 1 with its error. Tests kill it
(its process group: JVM and Python workers) or its Python workers in the middle of an epoch.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import twophase
from twophase_dev import spark_session

#: Long enough that every kill of the tests lands inside an epoch.
EPOCH = "20 seconds"
SINK = "rt"


def build(kind: str, bootstrap: str, target: str, address: str) -> tuple[Any, str]:
    """Return the sink and the columns it takes from the Kafka source."""
    if kind == "postgres":
        from twophase.connectors.jdbc import postgres_sink

        sink = postgres_sink(SINK, table=target, dsn=address, protocol="markers")
        return sink, "CAST(key AS STRING) AS k, CAST(value AS STRING) AS v"
    if kind == "mariadb":
        from twophase.connectors.jdbc import mariadb_sink

        sink = mariadb_sink(SINK, table=target, url=address, protocol="markers")
        return sink, "CAST(key AS STRING) AS k, CAST(value AS STRING) AS v"
    from twophase.connectors.kafka import KafkaSink

    sink = KafkaSink(SINK, bootstrap_servers=bootstrap, topic=target, transaction_timeout_ms=60_000)
    return sink, "key, value"


def main(argv: list[str]) -> int:
    kind, bootstrap, source, target, address, checkpoint, stop = argv[:7]
    spark = spark_session("twophase-realtime-driver", master="local[2,4]")
    sink, columns = build(kind, bootstrap, target, address)
    df = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr(*[c.strip() for c in columns.split(",")])
    )
    query = twophase.write_stream(
        df, sink, checkpoint_location=checkpoint, trigger={"realTime": EPOCH}, commit_interval=0.1
    ).start()
    print("STARTED", flush=True)
    while not Path(stop).exists():
        if not query.isActive:
            print(f"FAILED {query.exception()}", flush=True)
            return 1
        time.sleep(0.1)
    query.stop()
    print("STOPPED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
