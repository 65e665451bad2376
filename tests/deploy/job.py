"""A user's streaming job, as ``spark-submit`` runs it: Kafka -> Kafka and Kafka -> PostgreSQL.

It imports only what a job on a real cluster has: PySpark (the cluster's own, put on the path by
``spark-submit``), twophase and its connectors (installed from the wheel into the environment
shipped with ``--archives``). Nothing from the checkout: no ``tests``, no ``twophase_dev``.

Two queries read one input topic with Spark's Kafka source (``--packages``) and write every id,
one through :class:`~twophase.connectors.kafka.KafkaSink` to a topic, one through
:func:`~twophase.connectors.jdbc.postgres_sink` (prepared transactions, appends) to a table, each
with a checkpoint of its own, in batches of ``--rows-per-batch`` rows until the topic's end
(``availableNow``). Before they start, one task per executor core reports where the executors'
Python imports twophase from; the driver writes that to ``--report``, and at the end whether both
queries finished.

Usage: ``spark-submit --packages ... --archives env.tar.gz#environment job.py --bootstrap ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

import twophase
from twophase.connectors.jdbc import postgres_sink
from twophase.connectors.kafka import KafkaSink


def where_python_runs(_rows: Any) -> Any:
    """Report an executor's interpreter and where it imports twophase and its dependencies from."""
    import confluent_kafka
    import psycopg2
    import pyarrow

    yield {
        "cwd": os.getcwd(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "twophase": twophase.__file__,
        "modules": [m.__file__ for m in (confluent_kafka, psycopg2, pyarrow)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sinks", required=True, help="prefix of the two sinks' names")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source-topic", required=True)
    parser.add_argument("--target-topic", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--checkpoints", required=True, help="a directory for both checkpoints")
    parser.add_argument("--rows-per-batch", type=int, default=25)
    parser.add_argument("--report", required=True)
    args = parser.parse_args()

    spark = SparkSession.builder.appName("twophase-deploy-job").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    cores = int(spark.conf.get("spark.cores.max", "2"))
    report: dict[str, Any] = {
        "driver": {"executable": sys.executable, "twophase": twophase.__file__},
        "executors": spark.sparkContext.parallelize(range(cores), cores)
        .mapPartitions(where_python_runs)
        .collect(),
        "finished": {},
    }
    Path(args.report).write_text(json.dumps(report, indent=1))

    ids = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.source_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.rows_per_batch))
        .load()
        .selectExpr("CAST(CAST(value AS STRING) AS BIGINT) AS id")
    )
    kafka = KafkaSink(
        f"{args.sinks}-kafka", bootstrap_servers=args.bootstrap, topic=args.target_topic
    )
    postgres = postgres_sink(
        f"{args.sinks}-pg",
        table=args.table,
        dsn=args.dsn,
        protocol="coordinated",
        create_table=True,
    )
    checkpoints = Path(args.checkpoints)
    queries = {
        "kafka": twophase.write_stream(
            ids.selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value"),
            kafka,
            checkpoint_location=str(checkpoints / "kafka"),
            trigger={"availableNow": True},
        ).start(),
        "postgres": twophase.write_stream(
            ids.selectExpr("id", "CONCAT('row-', CAST(id AS STRING)) AS payload"),
            postgres,
            checkpoint_location=str(checkpoints / "postgres"),
            trigger={"availableNow": True},
        ).start(),
    }
    for name, query in queries.items():
        query.awaitTermination()  # raises if the query failed
        report["finished"][name] = query.exception() is None
    Path(args.report).write_text(json.dumps(report, indent=1))
    spark.stop()
    return 0 if all(report["finished"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
