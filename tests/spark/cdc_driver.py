"""A real Spark driver process for the keyed CDC kill tests: runs the CDC query once.

Usage: python -m tests.spark.cdc_driver SOURCE CHECKPOINT DSN PROTOCOL TABLE [STEP BATCH]

Reads the JSON change files in SOURCE (one file per micro-batch), scatters them round robin
over three partitions (``repartition(3)``: the rows of a key land anywhere, and somewhere else
on a replay) and writes them with ``postgres_sink(mode="cdc", key_columns=["id"],
order_column="seq")``. With STEP, the driver SIGKILLs itself at that coordinator step of BATCH.
"""

from __future__ import annotations

import sys

import twophase
from twophase.connectors.jdbc import postgres_sink
from twophase.testing import CrashAt, install_step_listener
from twophase_dev import spark_session

CHANGES = "id long, op string, seq long, v string"


def main(argv: list[str]) -> None:
    source, checkpoint, dsn, protocol, table = argv[:5]
    sink = postgres_sink(
        "cdc_killed",
        table=table,
        dsn=dsn,
        protocol=protocol,
        mode="cdc",
        key_columns=["id"],
        cdc_op_column="op",
        order_column="seq",
        lock_timeout=5.0,
        create_table=True,
    )
    if len(argv) > 5:
        install_step_listener(sink, CrashAt(argv[5], int(argv[6]), None, hard=True))
    spark = spark_session("twophase-cdc-killed", master="local[2,2]", kafka=False)
    df = spark.readStream.schema(CHANGES).option("maxFilesPerTrigger", 1).json(source)
    query = twophase.write_stream(
        df.repartition(3), sink, checkpoint_location=checkpoint, trigger={"availableNow": True}
    ).start()
    finished = query.awaitTermination(180)
    if query.isActive:
        query.stop()
    assert finished, "the query did not finish in time"
    error = query.exception()
    if error is not None:
        raise SystemExit(f"the query failed: {error}")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
