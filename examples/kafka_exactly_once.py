"""Kafka -> Spark -> Kafka, exactly once: enrich order events and publish them with KafkaSink.

What it does: reads JSON order events from a source topic with Spark's Kafka source, adds a
``total_cents`` field, and writes each event to a target topic through
:class:`twophase.connectors.kafka.KafkaSink`. The query runs until the input is consumed
(``availableNow``), is stopped, more events arrive, and it is started again from the same
checkpoint. A ``read_committed`` consumer then checks that the target holds every event exactly
once.

Assumptions: a Kafka broker (``--bootstrap-servers``) where the example may create its two topics
(new names every run), or ``--dev`` for a throwaway local one, which needs the checkout's
development tools (``twophase_dev``, set up by ``scripts/setup.sh``); Spark's Kafka connector,
which ``_spark.py`` fetches from Maven unless ``spark-submit --packages`` provides it.

Guarantees, and their limits: consumers reading with ``isolation.level=read_committed`` see every
enriched event exactly once, even if the driver or a task dies mid-batch and the query is
restarted from its checkpoint. Partitions of one micro-batch may become visible one after another
(each commits its own Kafka transaction). The enrichment is deterministic -- a replayed batch
computes the same rows -- which the marker protocol needs; see ``kafka_routing_and_staging.py`` for
a pipeline that is not. Consumers with the default ``read_uncommitted`` may also see records of
aborted attempts.

Run it in the checkout: ``.venv/bin/python examples/kafka_exactly_once.py --dev``. Elsewhere:
``pip install 'twophase[all]'`` (or the wheel), copy this file and ``_spark.py`` into one folder,
then ``python kafka_exactly_once.py --bootstrap-servers HOST:PORT``, or ``spark-submit --packages
org.apache.spark:spark-sql-kafka-0-10_2.13:<PySpark version> kafka_exactly_once.py
--bootstrap-servers HOST:PORT`` (``_2.12`` for PySpark 3.5).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from _spark import require_dev_tools, spark_session
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import twophase
from twophase.connectors.kafka import KafkaSink
from twophase.errors import ConfigurationError, NondeterministicBatchError, TwoPhaseError


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    """Create the run's topics (brokers may refuse to create topics on first use)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=n) for t, n in partitions.items()])
    for future in futures.values():
        future.result(timeout=60)  # raises with the broker's reason (ACL, policy...)


def produce_orders(bootstrap: str, topic: str, first: int, count: int) -> None:
    """Send ``count`` order events; fail if any is not acknowledged."""
    # Idempotence: a retried send is not duplicated in the source topic.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failed: list[str] = []
    for order_id in range(first, first + count):
        event = {"order_id": order_id, "quantity": 1 + order_id % 5, "unit_cents": 250}
        producer.produce(
            topic,
            key=str(order_id).encode(),
            value=json.dumps(event).encode(),
            on_delivery=lambda err, _msg: failed.append(str(err)) if err else None,
        )
        producer.poll(0)
    if producer.flush(60) or failed:
        raise RuntimeError(f"could not send the orders: {failed[:3]}")


def run_once(spark: Any, bootstrap: str, source: str, sink: KafkaSink, checkpoint: Path) -> None:
    """Run the query until the available input is consumed."""
    orders = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        # The first run starts at the beginning; restarts resume from the checkpoint.
        .option("startingOffsets", "earliest")
        # Bounded micro-batches: each is small, and a replay reads the same offsets again,
        # so the batch is deterministic (the marker protocol relies on that).
        .option("maxOffsetsPerTrigger", 500)
        .load()
    )
    enriched = orders.selectExpr(
        "key",  # keep the key: records of one order land in the same partition
        "to_json(named_struct("
        "  'order_id', get_json_object(CAST(value AS STRING), '$.order_id') + 0,"
        "  'total_cents', (get_json_object(CAST(value AS STRING), '$.quantity') + 0)"
        "               * (get_json_object(CAST(value AS STRING), '$.unit_cents') + 0)"
        ")) AS value",
    )
    # write_stream = foreachBatch(sink) + checkpointLocation, and refuses unsafe settings
    # (speculative execution) before starting.
    seen = len(twophase.batch_metrics(sink))
    query = twophase.write_stream(
        enriched, sink, checkpoint_location=str(checkpoint), trigger={"availableNow": True}
    ).start()
    try:
        twophase.await_termination(query)
    finally:
        query.stop()
    for metrics in twophase.batch_metrics(sink)[seen:]:
        print(f"  batch {metrics.batch_id}: {metrics.outcome}, {metrics.rows} rows")


def count_committed(bootstrap: str, topic: str) -> dict[int, int]:
    """Read the whole target topic as a read_committed consumer: order_id -> copies."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"verify-{uuid.uuid4().hex}",
            # What exactly-once is promised to: records of committed transactions only.
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        copies: dict[int, int] = {}
        done: set[int] = set()
        while len(done) < len(partitions):
            msg = consumer.poll(5.0)
            if msg is None:
                raise RuntimeError("the verification consumer timed out")
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(msg.error().str())
                done.add(msg.partition())
                continue
            order_id = json.loads(msg.value())["order_id"]
            copies[order_id] = copies.get(order_id, 0) + 1
        return copies
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", help="host:port of an existing broker")
    parser.add_argument("--dev", action="store_true", help="start a throwaway local broker")
    parser.add_argument("--orders", type=int, default=2000)
    args = parser.parse_args()
    if not args.dev and not args.bootstrap_servers:
        parser.error("pass --bootstrap-servers or --dev")

    broker = None
    if args.dev:
        require_dev_tools("--dev", instead="--bootstrap-servers")
        from twophase_dev import KafkaBroker

        broker = KafkaBroker().start()
    bootstrap = broker.bootstrap_servers if broker else args.bootstrap_servers
    run = uuid.uuid4().hex[:8]
    source, target = f"orders-{run}", f"orders-enriched-{run}"
    spark = None
    try:
        create_topics(bootstrap, {source: 2, target: 3})
        spark = spark_session("kafka-exactly-once", kafka=True)
        checkpoint = Path(tempfile.mkdtemp(prefix="twophase-example-")) / "checkpoint"
        sink = KafkaSink(
            f"enriched-{run}",
            bootstrap_servers=bootstrap,
            topic=target,
            # Short transactions: a crashed task blocks read_committed readers of its
            # partitions at most this long (recovery usually fences it sooner).
            transaction_timeout_ms=60_000,
            producer_config={
                # Bigger produce requests; the sink's default, spelled out here.
                "linger.ms": 20,
                # Smaller records on the wire and on disk, for some CPU.
                "compression.type": "lz4",
            },
        )
        produce_orders(bootstrap, source, 0, args.orders)
        print("first run:")
        run_once(spark, bootstrap, source, sink, checkpoint)

        produce_orders(bootstrap, source, args.orders, args.orders // 2)
        print("restarted from the same checkpoint:")
        run_once(spark, bootstrap, source, sink, checkpoint)

        copies = count_committed(bootstrap, target)
        expected = int(args.orders * 1.5)
        duplicated = sum(1 for n in copies.values() if n > 1)
        missing = expected - len(copies)
        print(f"{len(copies)} orders in {target}: {missing} missing, {duplicated} duplicated")
        return 0 if missing == 0 and duplicated == 0 else 1
    except NondeterministicBatchError as exc:
        print(f"a replayed batch differs from what was committed: {exc}", file=sys.stderr)
        return 2
    except ConfigurationError as exc:
        print(f"configuration problem (nothing was written): {exc}", file=sys.stderr)
        return 2
    except TwoPhaseError as exc:
        print(f"the sink failed: {exc}; restart from the checkpoint to finish", file=sys.stderr)
        return 1
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
