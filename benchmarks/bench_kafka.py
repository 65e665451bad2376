"""Comparison "kafka": twophase's ``KafkaSink`` against Spark's own Kafka sink.

A streaming query reads N records from Parquet (one micro-batch, ``trigger(availableNow=True)``,
2 input files = 2 Spark tasks) and writes them to a fresh 4-partition topic through

* ``spark``            -- ``writeStream.format("kafka")``, Java producer with the same codec and
  acks as twophase (``kafka.compression.type=lz4``, ``kafka.acks=all``); at-least-once;
* ``spark idempotent`` -- the same with ``kafka.enable.idempotence=true`` (the Java client's
  idempotent producer: no duplicates from its own retries, still at-least-once across failures);
* ``twophase``         -- ``twophase.write_stream(df, KafkaSink(...))`` with its defaults (lz4,
  ``acks=all`` and idempotence enforced, ``linger.ms=20``): exactly-once, one transaction per
  partition with a marker.

Records/s = N / wall time of the query (start-up, the micro-batch and, for twophase, the
coordinator's log writes). Every record is checked to be there (``read_committed`` end offsets).
Runs are interleaved (rep 1 of every sink, then rep 2...) so that a change of the machine's load
hits all sinks alike.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from bench_common import Comparison, Env, await_query, fmt_rate, log

NAME = "kafka"
TITLE = "Kafka: KafkaSink vs Spark's format('kafka')"
TOPIC_PARTITIONS = 4
INPUT_FILES = 2
SIZES = (100, 1000)
GOAL = 1.0

SPARK_OPTIONS = {"compression.type": "lz4", "acks": "all"}
SINKS: dict[str, dict[str, str] | None] = {
    "spark": SPARK_OPTIONS,
    "spark idempotent": {**SPARK_OPTIONS, "enable.idempotence": "true"},
    "twophase": None,
}


def make_input(spark: Any, path: Path, records: int, size: int) -> None:
    """N records: key = id, value = ``size`` bytes of hex digits derived from the id."""
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


def _stream(spark: Any, source: Path) -> Any:
    schema = spark.read.parquet(str(source)).schema
    return spark.readStream.schema(schema).parquet(str(source))


def write_once(env: Env, sink: str, source: Path, topic: str) -> None:
    """One query through ``sink`` from ``source`` into ``topic``, to the end."""
    spark = env.spark
    events = _stream(spark, source)
    options = SINKS[sink]
    if options is not None:
        writer = (
            events.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", env.kafka.bootstrap_servers)
            .option("topic", topic)
            .option("checkpointLocation", env.checkpoint())
        )
        for key, value in options.items():
            writer = writer.option(f"kafka.{key}", value)
        await_query(writer.trigger(availableNow=True).start())
        return
    import twophase
    from twophase.connectors.kafka import KafkaSink

    kafka_sink = KafkaSink(
        "bench-kafka", bootstrap_servers=env.kafka.bootstrap_servers, topic=topic
    )
    query = twophase.write_stream(
        events, kafka_sink, checkpoint_location=env.checkpoint(), trigger={"availableNow": True}
    ).start()
    await_query(query)


def committed_records(bootstrap: str, topic: str) -> int:
    """Records visible to ``read_committed`` consumers (transaction markers included: +1 each)."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = [TopicPartition(topic, p) for p in range(TOPIC_PARTITIONS)]
    futures = admin.list_offsets(
        {tp: OffsetSpec.latest() for tp in parts}, isolation_level=IsolationLevel.READ_COMMITTED
    )
    return sum(f.result().offset for f in futures.values())


def delete_topic(bootstrap: str, topic: str) -> None:
    """Free the broker's disk between runs."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result()


def run(env: Env, quick: bool) -> Comparison:
    records = {100: 20_000, 1000: 10_000} if quick else {100: 1_000_000, 1000: 500_000}
    reps = env.reps if quick else max(env.reps, 3)
    cmp = Comparison(NAME, TITLE, quick)
    cmp.params = {
        "records": {f"{s} B": n for s, n in records.items()},
        "repetitions": reps,
        "topic_partitions": TOPIC_PARTITIONS,
        "spark_tasks": INPUT_FILES,
        "spark_options": SPARK_OPTIONS,
        "twophase_defaults": "compression.type=lz4, acks=all, enable.idempotence=true, "
        "linger.ms=20",
    }
    bootstrap = env.kafka.bootstrap_servers
    spark = env.spark
    names = list(SINKS)
    for size in SIZES:
        source = env.work / f"kafka-input-{size}"
        make_input(spark, source, records[size], size)
        warm = env.work / f"kafka-warm-{size}"
        make_input(spark, warm, 20_000, size)
        for sink in [] if quick else names:  # JIT, Python workers, producer pools: not measured
            topic = f"bench-warm-{uuid.uuid4().hex[:8]}"
            env.kafka.create_topic(topic, partitions=TOPIC_PARTITIONS)
            write_once(env, sink, warm, topic)
            delete_topic(bootstrap, topic)
        rates: dict[str, list[float]] = {n: [] for n in names}
        for rep in range(reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for sink in order:
                topic = f"bench-{size}-{uuid.uuid4().hex[:8]}"
                env.kafka.create_topic(topic, partitions=TOPIC_PARTITIONS)
                started = time.perf_counter()
                write_once(env, sink, source, topic)
                seconds = time.perf_counter() - started
                written = committed_records(bootstrap, topic)
                delete_topic(bootstrap, topic)
                if written < records[size]:
                    raise RuntimeError(f"{sink}: only {written} of {records[size]} records")
                rates[sink].append(records[size] / seconds)
                log(
                    f"  kafka {size:>4} B  {sink:<17} rep {rep + 1}: {seconds:6.2f} s "
                    f"{fmt_rate(records[size] / seconds)}"
                )
        case = f"{size} B"
        entries = {n: cmp.measure(case, n, "records/s", rates[n]) for n in names}
        for baseline in ("spark", "spark idempotent"):
            cmp.ratio(
                f"{case}: twophase / {baseline}",
                entries["twophase"],
                entries[baseline],
                goal=GOAL,
            )
    cmp.notes.append(
        "kafka-clients 3.x (Spark's Kafka connector ships 3.9) already turns idempotence on by "
        "default when acks=all and nothing conflicts, so 'spark' and 'spark idempotent' run the "
        "same producer settings; their difference shows the run-to-run noise."
    )
    return cmp
