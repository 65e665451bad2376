"""Smoke test: Spark's Kafka source reads a real topic, and a restart resumes from the checkpoint.

The sink here is a plain ``foreachBatch`` appending to a file. ``foreachBatch`` alone is
at-least-once: a crash after the append but before Spark writes ``commits/N`` replays batch N. The
queries below stop only between batches, so every record must arrive exactly once in total; this
checks the infrastructure (jars, broker, checkpointing), not twophase's guarantees.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from twophase_dev import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

PARTITIONS = 2
MAX_OFFSETS_PER_TRIGGER = 10


def _produce(bootstrap: str, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, key=str(value).encode(), value=f"v{value}".encode())
    assert producer.flush(30) == 0


def _file_sink(path: Path) -> Callable[[Any, int], None]:
    """``foreachBatch`` function appending (batch, partition, offset, value) rows as JSON lines."""

    def write(batch_df: Any, batch_id: int) -> None:
        rows = batch_df.selectExpr(
            "partition", "offset", "CAST(value AS STRING) AS value"
        ).collect()
        with path.open("a") as out:
            for row in rows:
                record = {
                    "batch": batch_id,
                    "partition": row["partition"],
                    "offset": row["offset"],
                    "value": row["value"],
                }
                out.write(json.dumps(record) + "\n")

    return write


def _start(spark: Any, bootstrap: str, topic: str, checkpoint: Path, sink: Path) -> Any:
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", MAX_OFFSETS_PER_TRIGGER)
        .load()
    )
    return source.writeStream.option("checkpointLocation", str(checkpoint)).foreachBatch(
        _file_sink(sink)
    )


def _read_sink(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_kafka_source_resumes_from_checkpoint_without_loss_or_duplicates(
    spark: Any,
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    checkpoint_dir: Path,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_topic(PARTITIONS, prefix="smoke-spark")
    sink = tmp_path / "sink.jsonl"
    sink.touch()

    # Run 1: everything available now, in several rate-limited batches, then the query stops.
    _produce(bootstrap, topic, range(30))
    first = _start(spark, bootstrap, topic, checkpoint_dir, sink).trigger(availableNow=True).start()
    first.awaitTermination(300)
    assert not first.isActive
    assert first.exception() is None
    after_first = _read_sink(sink)
    first_batches = {r["batch"] for r in after_first}
    assert len(after_first) == 30
    assert len(first_batches) >= 30 // MAX_OFFSETS_PER_TRIGGER

    # More data arrives while the query is down; run 2 restarts from the same checkpoint.
    _produce(bootstrap, topic, range(30, 55))
    second = _start(spark, bootstrap, topic, checkpoint_dir, sink).start()
    try:
        second.processAllAvailable()
    finally:
        second.stop()
    assert second.exception() is None

    rows = _read_sink(sink)
    second_rows = rows[len(after_first) :]
    positions = [(r["partition"], r["offset"]) for r in rows]
    assert len(positions) == len(set(positions)), "a record was delivered twice"
    assert sorted(r["value"] for r in rows) == sorted(f"v{i}" for i in range(55))
    assert sorted(r["value"] for r in second_rows) == sorted(f"v{i}" for i in range(30, 55))
    # Batch ids continue across the restart instead of starting over.
    assert min(r["batch"] for r in second_rows) > max(first_batches)
    assert (checkpoint_dir / "commits").is_dir()
