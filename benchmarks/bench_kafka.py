"""Throughput of twophase's KafkaSink beside Spark's built-in Kafka sink.

What it measures: records/s of a streaming query that reads N records from
Parquet (one micro-batch, ``trigger(availableNow=True)``) and writes them to a
fresh Kafka topic, through

* ``spark``    -- Spark's own ``writeStream.format("kafka")`` (at-least-once, JVM producer);
* ``twophase`` -- ``twophase.write_stream(df, KafkaSink(...))`` (exactly-once: one Kafka
  transaction per partition with a marker, Arrow to Python workers, librdkafka producer).

Same input files, same broker, same Spark session (``local[2]``), same topic layout; each
measurement is the median of ``--runs`` runs, a fresh topic and checkpoint per run. The wall time
includes query start-up, the micro-batch, and (twophase) the coordinator's log writes.

Run it (a few minutes on 2 cores; starts its own broker unless $TWOPHASE_KAFKA_BOOTSTRAP is set)::

    .venv/bin/python benchmarks/bench_kafka.py                    # 1M x 100 B and 1M x 1 KB
    .venv/bin/python benchmarks/bench_kafka.py --records 200000 --sizes 100
    .venv/bin/python benchmarks/bench_kafka.py --spark-option compression.type=lz4  # same codec
    .venv/bin/python benchmarks/bench_kafka.py --producer-config compression.type=none

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import twophase
from twophase.connectors.kafka import KafkaSink
from twophase_dev import ENV_KAFKA_BOOTSTRAP, KafkaBroker, attach_kafka, spark_session

PARTITIONS = 4  # target topic partitions
INPUT_FILES = 2  # = Spark tasks of the micro-batch (local[2])


def make_input(spark: Any, path: Path, records: int, size: int) -> None:
    """N records, key = id, value = `size` bytes of hex digits derived from the id."""
    repeats = size // 64 + 1
    (
        spark.range(records, numPartitions=INPUT_FILES)
        .selectExpr(
            "CAST(id AS STRING) AS key",
            f"substring(repeat(sha2(CAST(id AS STRING), 256), {repeats}), 1, {size}) AS value",
        )
        .write.mode("overwrite")
        .parquet(str(path))
    )


def run_spark_sink(
    spark: Any,
    bootstrap: str,
    source: Path,
    topic: str,
    chk: Path,
    spark_options: dict[str, Any],
) -> None:
    schema = spark.read.parquet(str(source)).schema
    writer = (
        spark.readStream.schema(schema)
        .parquet(str(source))
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", str(chk))
    )
    for key, value in spark_options.items():
        writer = writer.option(f"kafka.{key}", value)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(query.exception())


def run_twophase_sink(
    spark: Any,
    bootstrap: str,
    source: Path,
    topic: str,
    chk: Path,
    producer_config: dict[str, Any],
) -> None:
    schema = spark.read.parquet(str(source)).schema
    events = spark.readStream.schema(schema).parquet(str(source))
    sink = KafkaSink(
        f"bench-{uuid.uuid4().hex[:8]}",
        bootstrap_servers=bootstrap,
        topic=topic,
        producer_config=producer_config,
    )
    query = twophase.write_stream(
        events, sink, checkpoint_location=str(chk), trigger={"availableNow": True}
    ).start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(query.exception())


def count_records(bootstrap: str, topic: str) -> int:
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient

    from twophase.connectors.kafka._compat import latest_offset

    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    futures = admin.list_offsets(
        {tp: latest_offset() for tp in parts}, isolation_level=IsolationLevel.READ_COMMITTED
    )
    # Transaction markers take one offset per partition per transaction: an upper bound that
    # is exact for the non-transactional Spark sink and within a few for twophase.
    return sum(f.result().offset for f in futures.values())


def parse_config(items: list[str]) -> dict[str, Any]:
    conf: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        conf[key] = value
    return conf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--producer-config", nargs="*", default=[], help="extra librdkafka settings key=value"
    )
    parser.add_argument(
        "--spark-option",
        nargs="*",
        default=[],
        help="extra Java producer settings for Spark's sink key=value (without 'kafka.')",
    )
    parser.add_argument("--only", choices=["spark", "twophase"], default=None)
    args = parser.parse_args()
    producer_config = parse_config(args.producer_config)
    spark_options = parse_config(args.spark_option)

    bootstrap_env = os.environ.get(ENV_KAFKA_BOOTSTRAP)
    broker = attach_kafka(bootstrap_env) if bootstrap_env else KafkaBroker(heap="1g").start()
    work = Path(tempfile.mkdtemp(prefix="twophase-bench-"))
    spark = spark_session(
        "bench-kafka",
        extra_conf={"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    results: dict[tuple[int, str], float] = {}
    try:
        bootstrap = broker.bootstrap_servers
        for size in args.sizes:
            source = work / f"input-{size}"
            make_input(spark, source, args.records, size)
            sinks = ["spark", "twophase"] if args.only is None else [args.only]
            # warm-up: JIT, Python workers, jars (not measured)
            for name in sinks:
                topic = f"bench-warm-{name}-{uuid.uuid4().hex[:6]}"
                broker.create_topic(topic, partitions=PARTITIONS)
                chk = work / f"chk-{uuid.uuid4().hex}"
                if name == "spark":
                    run_spark_sink(spark, bootstrap, source, topic, chk, spark_options)
                else:
                    run_twophase_sink(spark, bootstrap, source, topic, chk, producer_config)
            for name in sinks:
                rates = []
                for _ in range(args.runs):
                    topic = f"bench-{name}-{size}-{uuid.uuid4().hex[:6]}"
                    broker.create_topic(topic, partitions=PARTITIONS)
                    chk = work / f"chk-{uuid.uuid4().hex}"
                    started = time.perf_counter()
                    if name == "spark":
                        run_spark_sink(spark, bootstrap, source, topic, chk, spark_options)
                    else:
                        run_twophase_sink(spark, bootstrap, source, topic, chk, producer_config)
                    seconds = time.perf_counter() - started
                    written = count_records(bootstrap, topic)
                    if written < args.records:
                        raise RuntimeError(f"{name}: only {written} of {args.records} records")
                    rates.append(args.records / seconds)
                    print(
                        f"  {name:8s} {size:5d} B  run {len(rates)}: {seconds:6.2f} s  "
                        f"{args.records / seconds:10,.0f} rec/s",
                        flush=True,
                    )
                results[(size, name)] = statistics.median(rates)
        print()
        print(
            f"records={args.records:,} runs={args.runs} (median) producer_config={producer_config}"
        )
        print(f"{'size':>6}  {'spark rec/s':>12}  {'twophase rec/s':>14}  {'twophase/spark':>14}")
        for size in args.sizes:
            s = results.get((size, "spark"))
            t = results.get((size, "twophase"))
            ratio = f"{t / s:14.2f}" if s and t else f"{'-':>14}"
            s_text = f"{s:12,.0f}" if s else f"{'-':>12}"
            t_text = f"{t:14,.0f}" if t else f"{'-':>14}"
            print(f"{size:5d}B  {s_text}  {t_text}  {ratio}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if not bootstrap_env:
            broker.stop()


if __name__ == "__main__":
    main()
