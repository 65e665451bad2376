"""Migrating a ``format("kafka")`` query: per-row topics, headers, and staging for replays.

What it does: a streaming query that used Spark's Kafka sink with an option map keeps that map
and writes through :meth:`KafkaSink.from_spark_options` instead. It reads payment events from a
source topic; each row chooses its target topic (``topic`` column: accepted payments vs. rejects)
and carries a header with the time it was processed -- ``current_timestamp()``, which makes the
pipeline *non-deterministic*: a replayed micro-batch would compute other header values.
``staging=True`` makes that safe (see below).

Assumptions: a broker at ``--bootstrap-servers`` where the example may create its three topics
(new names every run), or ``--dev`` for a throwaway local one, which needs the checkout's
development tools (``twophase_dev``); Spark's Kafka connector (see ``_spark.py``).

Guarantees, and their limits: ``read_committed`` consumers see every row exactly once in the
topic the row chose. Without staging, a batch replayed after a crash would be refused with
``NondeterministicBatchError`` (it never duplicates silently); with ``staging=True`` the sink
writes each micro-batch once to the checkpoint location and publishes from that copy, so the
replay matches. Staging costs one extra write and read of every batch.

Run it in the checkout: ``.venv/bin/python examples/kafka_routing_and_staging.py --dev``.
Elsewhere, after ``pip install 'twophase[all]'`` (or the wheel), with ``_spark.py`` beside it:
``python kafka_routing_and_staging.py --bootstrap-servers HOST:PORT``, or the same with
``spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<PySpark version>`` in place
of ``python`` (``_2.12`` for PySpark 3.5).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path

from _spark import require_dev_tools, spark_session
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import twophase
from twophase.connectors.kafka import KafkaSink
from twophase.errors import ConfigurationError, TwoPhaseError


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    """Create the run's topics (brokers may refuse to create topics on first use)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=n) for t, n in partitions.items()])
    for future in futures.values():
        future.result(timeout=60)  # raises with the broker's reason (ACL, policy...)


def produce_payments(bootstrap: str, topic: str, count: int) -> None:
    """Send ``count`` payment events; fail if any is not acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for payment_id in range(count):
        event = {"id": payment_id, "amount": (payment_id * 37) % 1000}
        producer.produce(topic, key=str(payment_id).encode(), value=json.dumps(event).encode())
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("could not send the payments")


def committed_ids(bootstrap: str, topic: str) -> list[int]:
    """Return the payment ids a read_committed consumer sees in ``topic`` (duplicates kept)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"count-{uuid.uuid4().hex}",  # never commits offsets: any unique name
            "isolation.level": "read_committed",  # only committed transactions
            "enable.partition.eof": True,  # tells when a partition is read to its end
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    ids: list[int] = []
    done: set[int] = set()
    try:
        while len(done) < len(partitions):
            msg = consumer.poll(5.0)
            if msg is None:
                raise RuntimeError("the counting consumer timed out")
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(msg.error().str())
                done.add(msg.partition())
            else:
                ids.append(json.loads(msg.value())["id"])
    finally:
        consumer.close()
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", help="host:port of an existing broker")
    parser.add_argument("--dev", action="store_true", help="start a throwaway local broker")
    parser.add_argument("--payments", type=int, default=2000)
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
    source, payments, rejects = f"payments-in-{run}", f"payments-{run}", f"rejected-{run}"
    spark = None
    try:
        create_topics(bootstrap, {source: 2, payments: 2, rejects: 1})
        produce_payments(bootstrap, source, args.payments)
        spark = spark_session("kafka-routing", kafka=True)
        rows = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 400)  # several micro-batches
            .load()
            .selectExpr(
                "key",
                "value",
                # Route per row; the sink has no 'topic' option, so the column decides.
                "IF(get_json_object(CAST(value AS STRING), '$.amount') + 0 >= 900, "
                f"'{rejects}', '{payments}') AS topic",
                # Non-deterministic: differs on every evaluation (hence staging=True).
                "array(named_struct('key', 'processed_at',"
                "      'value', CAST(CAST(current_timestamp() AS STRING) AS BINARY))) AS headers",
            )
        )
        # The option map the query used with .format("kafka").options(**spark_options):
        spark_options = {
            "kafka.bootstrap.servers": bootstrap,
            # Java client properties with a librdkafka equivalent pass through unchanged.
            "kafka.linger.ms": "20",
        }
        sink = KafkaSink.from_spark_options(
            f"router-{run}",
            spark_options,
            # Publish each batch from a copy staged in the checkpoint: replays are then
            # deterministic although current_timestamp() is not.
            staging=True,
        )
        checkpoint = Path(tempfile.mkdtemp(prefix="twophase-example-")) / "checkpoint"
        query = twophase.write_stream(
            rows, sink, checkpoint_location=str(checkpoint), trigger={"availableNow": True}
        ).start()
        try:
            twophase.await_termination(query)
        finally:
            query.stop()
        accepted = committed_ids(bootstrap, payments)
        rejected = committed_ids(bootstrap, rejects)
        print(
            f"{len(twophase.batch_metrics(sink))} batches: "
            f"{len(accepted)} accepted + {len(rejected)} rejected "
            f"= {len(accepted) + len(rejected)} of {args.payments} payments"
        )
        # Exactly once, in the topic the row chose: amount = id * 37 % 1000 (see the producer).
        expected_rejects = sorted(i for i in range(args.payments) if i * 37 % 1000 >= 900)
        expected_accepted = sorted(set(range(args.payments)) - set(expected_rejects))
        if sorted(rejected) != expected_rejects or sorted(accepted) != expected_accepted:
            print("FAILED: a payment is missing, duplicated or in the wrong topic")
            return 1
        print("OK: every payment exactly once, in the topic it chose")
        return 0
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
