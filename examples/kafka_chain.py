"""A chain Kafka -> Spark -> Kafka -> Spark -> Kafka, exactly once end to end.

What it does: two Structured Streaming queries in a row, joined by a Kafka topic.

* stage 1 reads JSON orders from ``orders`` with Spark's Kafka source, prices them, and writes
  them to ``priced`` with :class:`twophase.connectors.kafka.KafkaSink`. Once, the Python worker
  committing a partition dies in the middle of its commit: its records are already on the broker,
  in a transaction that never commits (a lost executor). Spark retries the task, the retry fences
  the dead attempt's producer, and the broker aborts its transaction: ``priced`` now holds those
  records twice, once aborted, once committed;
* stage 2 reads ``priced`` with Spark's Kafka source and ``kafka.isolation.level=read_committed``,
  so it never sees the aborted copy, flags large orders, and writes them to ``checked`` with a
  second ``KafkaSink``.

Both stages run until their input is consumed, then more orders arrive and both restart from
their checkpoints. The example then counts every order in ``checked`` as a ``read_committed``
consumer (each must be there exactly once) and reads ``priced`` as a ``read_uncommitted``
consumer, to show the aborted copy that a reader without ``read_committed`` would have taken.

Assumptions: a Kafka broker -- ``--bootstrap-servers``; else, in the checkout (its development
tools, ``twophase_dev``, set up by ``scripts/setup.sh``), ``$TWOPHASE_KAFKA_BOOTSTRAP`` or a
throwaway local one. Spark's Kafka connector: see ``_spark.py``.
Both stages are deterministic per micro-batch (a replay reads the same offsets and computes the
same rows), which the Kafka sink's marker protocol needs.

Guarantees, and their limits: every order is in ``checked`` exactly once for ``read_committed``
consumers, through task failures and restarts, because each link is exactly-once: the sink
commits each partition's records with a marker in one Kafka transaction (replays skip what is
committed), and the next stage reads committed records only. Drop ``read_committed`` from stage 2
and the chain is at-least-once again: it would forward the aborted copies. Records of one Spark
partition keep their order; a micro-batch becomes visible partition by partition.

Run: ``.venv/bin/python examples/kafka_chain.py`` in the checkout. Elsewhere, ``pip install
'twophase[all]'`` (or the wheel), put ``_spark.py`` beside this file, and run ``python
kafka_chain.py --bootstrap-servers HOST:PORT``; with spark-submit, ``spark-submit --master
'local[2,4]' --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<PySpark version>
kafka_chain.py --bootstrap-servers HOST:PORT`` (the master retries the lost task; ``_2.12`` for
PySpark 3.5).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _spark import require_dev_tools, spark_session

import twophase
from twophase import Marker
from twophase.connectors.kafka import KafkaSink, KafkaTransaction
from twophase.errors import ConfigurationError, NondeterministicBatchError, TwoPhaseError


class KafkaSinkLosingAWorker(KafkaSink):
    """A ``KafkaSink`` whose Python worker dies once, mid-commit (the demonstration's fault).

    The first partition to commit in batch ``crash_batch`` or later (attempt 0) waits until its
    records are on the broker, then SIGKILLs its own process before committing. ``crash_flag`` is a
    file whose exclusive creation makes the crash happen once, whichever worker gets there first.
    """

    def __init__(self, *args: Any, crash_batch: int, crash_flag: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.crash_batch, self.crash_flag = crash_batch, crash_flag

    def commit_with_marker(self, txn: KafkaTransaction, marker: Marker) -> None:
        """Commit, unless this is the one partition that dies first."""
        if marker.attempt == 0 and marker.batch_id >= self.crash_batch:
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.crash_flag, os.O_CREAT | os.O_EXCL))
                txn.flush()  # the records are on the broker, in the open transaction
                os.kill(os.getpid(), signal.SIGKILL)  # the worker dies: Spark retries the task
        super().commit_with_marker(txn, marker)


def produce_orders(bootstrap: str, topic: str, first: int, count: int) -> None:
    """Write ``count`` orders; fail if any is not acknowledged."""
    from confluent_kafka import Producer

    # Idempotence: a client retry does not write an order twice into the first topic.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failed: list[str] = []
    for order_id in range(first, first + count):
        order = {
            "order_id": order_id,
            "quantity": 1 + order_id % 7,
            "unit_cents": 199 + order_id % 5,
        }
        producer.produce(
            topic,
            key=str(order_id).encode(),
            value=json.dumps(order).encode(),
            on_delivery=lambda err, _m: failed.append(str(err)) if err else None,
        )
        producer.poll(0)
    if producer.flush(60) or failed:
        raise RuntimeError(f"could not write the orders: {failed[:3]}")


def read_all(bootstrap: str, topic: str, isolation: str) -> dict[int, int]:
    """Read ``topic`` to its end with ``isolation.level=isolation``: order_id -> copies."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chain-check-{uuid.uuid4().hex}",  # never commits offsets
            "isolation.level": isolation,
            "enable.partition.eof": True,  # tells when a partition is read to its end
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        copies: dict[int, int] = {}
        done: set[int] = set()
        while len(done) < len(partitions):
            msg = consumer.poll(10.0)
            if msg is None:
                raise RuntimeError(f"{topic}: no record nor end of partition within 10 s")
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


def kafka_source(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    """Spark's Kafka source over ``topic``, in small micro-batches, values parsed as JSON."""
    from pyspark.sql import functions as f

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")  # a new checkpoint starts at the beginning
        .option("maxOffsetsPerTrigger", 100)  # a few micro-batches, each replayable
        # Missing input must stop the query. Offsets taken by transaction markers and aborted
        # records are not missing data: Spark's source steps over them.
        .option("failOnDataLoss", "true")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    schema = "order_id long, quantity int, unit_cents int, total_cents long, review boolean"
    return reader.load().select(
        "key", f.from_json(f.col("value").cast("string"), schema).alias("o")
    )


def stage1(spark: Any, bootstrap: str, topics: dict[str, str], work: Path) -> Any:
    """Start stage 1, ``orders`` -> ``priced``: compute each order's total."""
    priced = kafka_source(spark, bootstrap, topics["orders"]).selectExpr(
        "key",  # the order id: an order stays in one partition of every topic of the chain
        "to_json(named_struct('order_id', o.order_id, 'quantity', o.quantity,"
        " 'unit_cents', o.unit_cents, 'total_cents', o.quantity * o.unit_cents)) AS value",
    )
    sink = KafkaSinkLosingAWorker(
        "chain_priced",
        bootstrap_servers=bootstrap,
        topic=topics["priced"],
        control_topic=f"{topics['priced']}-twophase-markers",  # one control topic per sink
        crash_batch=1,
        crash_flag=str(work / "worker-crashed"),
    )
    return twophase.write_stream(
        priced, sink, checkpoint_location=str(work / "stage1"), trigger={"availableNow": True}
    ).start()


def stage2(spark: Any, bootstrap: str, topics: dict[str, str], work: Path) -> Any:
    """Start stage 2, ``priced`` -> ``checked``, reading committed records only."""
    # read_committed: records of aborted transactions (the dead attempt's) are never read, and
    # records of open ones only once they commit. Without it the chain is at-least-once.
    source = kafka_source(
        spark, bootstrap, topics["priced"], **{"kafka.isolation.level": "read_committed"}
    )
    checked = source.selectExpr(
        "key",
        "to_json(named_struct('order_id', o.order_id, 'total_cents', o.total_cents,"
        " 'review', o.total_cents >= 1000)) AS value",
    )
    sink = KafkaSink(
        "chain_checked",
        bootstrap_servers=bootstrap,
        topic=topics["checked"],
        control_topic=f"{topics['checked']}-twophase-markers",
    )
    return twophase.write_stream(
        checked, sink, checkpoint_location=str(work / "stage2"), trigger={"availableNow": True}
    ).start()


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """Yield a broker address: the given one, the environment's, or a throwaway local broker."""
    if bootstrap:
        yield bootstrap
        return
    require_dev_tools("a throwaway Kafka broker", instead="--bootstrap-servers")
    from twophase_dev import ENV_KAFKA_BOOTSTRAP, KafkaBroker

    if os.environ.get(ENV_KAFKA_BOOTSTRAP):  # servers of 'twophase-dev up'
        yield os.environ[ENV_KAFKA_BOOTSTRAP]
        return
    with KafkaBroker() as local:
        yield local.bootstrap_servers


def main(argv: list[str] | None = None) -> int:
    """Run the chain twice; return 0 if every order is in the last topic exactly once."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", help="Kafka broker (default: see the docstring)")
    parser.add_argument("--orders", type=int, default=400, help="orders in the first wave")
    args = parser.parse_args(argv)
    if args.orders < 200:
        parser.error("--orders must be at least 200 (the crash happens in batch 1 or later)")

    from confluent_kafka.admin import AdminClient, NewTopic

    run = uuid.uuid4().hex[:8]
    topics = {name: f"chain-{name}-{run}" for name in ("orders", "priced", "checked")}
    work = Path(tempfile.mkdtemp(prefix="twophase-chain-"))
    spark = None
    try:
        with broker(args.bootstrap_servers) as bootstrap:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            created = admin.create_topics([NewTopic(t, num_partitions=3) for t in topics.values()])
            for future in created.values():
                future.result(timeout=60)
            # local[2,4]: task retries on (the worker crash is a task failure Spark retries).
            spark = spark_session("kafka-chain-example", kafka=True, master="local[2,4]")
            total = 0
            for wave, count in ((1, args.orders), (2, args.orders // 2)):
                produce_orders(bootstrap, topics["orders"], total, count)
                total += count
                print(f"wave {wave}: {count} new orders; stage 1, then stage 2")
                if wave == 1:
                    print(
                        "  stage 1 loses a Python worker mid-commit on purpose: Spark logs the lost"
                        " task (ERROR ... Python worker exited unexpectedly) and retries it"
                    )
                twophase.await_termination(stage1(spark, bootstrap, topics, work))
                if wave == 1 and not (work / "worker-crashed").exists():
                    print("  (the worker crash did not happen: too few batches)")
                twophase.await_termination(stage2(spark, bootstrap, topics, work))
            checked = read_all(bootstrap, topics["checked"], "read_committed")
            priced_all = read_all(bootstrap, topics["priced"], "read_uncommitted")
    except NondeterministicBatchError as exc:  # a replay differs: cannot happen here
        print(f"a replayed batch differs from what was committed: {exc}", file=sys.stderr)
        return 2
    except ConfigurationError as exc:  # topic, ACL, timeout...: nothing was written
        print(f"configuration problem: {exc}", file=sys.stderr)
        return 2
    except TwoPhaseError as exc:  # e.g. brokers unreachable: rerun, the checkpoints resume
        print(f"a sink failed, rerun to resume from the checkpoints: {exc}", file=sys.stderr)
        return 1
    finally:
        if spark is not None:
            spark.stop()
    missing = total - len(checked.keys() & set(range(total)))
    duplicated = sum(n - 1 for n in checked.values())
    aborted = sum(priced_all.values()) - total
    print(
        f"{topics['priced']}: a read_uncommitted reader sees {sum(priced_all.values())} records "
        f"for {total} orders ({aborted} from the aborted attempt)"
    )
    print(
        f"{topics['checked']}, read_committed: {len(checked)} orders, {missing} missing, "
        f"{duplicated} duplicated"
    )
    if missing or duplicated:
        print("FAILED: the chain is not exactly-once")
        return 1
    print("OK: every order went through both stages exactly once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
