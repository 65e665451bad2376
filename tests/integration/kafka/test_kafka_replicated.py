"""The KafkaSink on a replicated 3-broker cluster while its brokers go away (issue 40, item 2).

Every Kafka test elsewhere runs one broker, where no leader and no transaction coordinator ever
moves. Here the ``kafka_cluster`` fixture runs three (replication factor 3, ``min.insync.replicas``
2, the transaction state log likewise) and each test takes one broker away at the worst moment:

- a rolling restart of every broker, one by one with the replicas back in sync in between, under
  a running Spark streaming query (what MSK and Confluent Cloud do every month);
- the broker that coordinates a slot's transaction killed (``SIGKILL``) between the flush of its
  records and its commit;
- the leader of a partition killed while a transaction is producing to it;
- the leader of the control topic's partition killed between two marker reads of one process.

Each asserts that its fault fired on the broker it meant (a new pid, the coordinator's own log,
the leader moved) and that a ``read_committed`` consumer sees every id exactly once with no
transaction left open.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kafka_support import read_all, unstable_partitions

import twophase
from tests.summaries import add_line
from twophase.connectors.kafka import KafkaSink, KafkaTransaction
from twophase.errors import find_error
from twophase.testing import LocalRunner, assert_exactly_once
from twophase_dev import DevInfraError, KafkaCluster
from twophase_dev._host._wait import wait_until

#: The end-of-run section that tells what each fault did (tests/summaries.py).
SECTION = "Kafka on a 3-broker cluster"

# 420 s: on a loaded machine (another suite beside this one) the cluster's start took 52 s and a
# batch with a broker killed 30 s or more.
# Extended, all four: the cluster's start (18 s quiet, 52 s loaded) and the kills (about 65 s
# quiet) are beyond the suite's budget; run them with `pytest -m kafka_cluster`
# (docs/guarantees.md has the results). The single broker's freeze fault stays in the default run.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.chaos,
    pytest.mark.slow,
    pytest.mark.extended,
    pytest.mark.timeout(420),
]

#: Set by a test, fired once by the sink copy of partition 1 (LocalRunner: same process).
_FAULT: dict[str, Callable[[KafkaTransaction], None]] = {}
#: (batch, partition, attempt) of every transaction a FaultySink began, for the summary.
_BEGUN: list[tuple[int, int, int]] = []


@pytest.fixture
def cluster(kafka_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The session's cluster, every broker back and every replica in sync after the test."""
    kafka_cluster.wait_in_sync()
    try:
        yield kafka_cluster
    finally:
        _FAULT.clear()
        _BEGUN.clear()
        kafka_cluster.start()
        kafka_cluster.wait_in_sync(timeout=90)


def new_topic(cluster: KafkaCluster, prefix: str, partitions: int = 3) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    cluster.create_topic(name, partitions=partitions)
    return name


def new_sink(cls: type[KafkaSink], name: str, cluster: KafkaCluster, topic: str) -> KafkaSink:
    return cls(
        name,
        bootstrap_servers=cluster.bootstrap_servers,
        topic=topic,
        control_topic=f"ctl-{uuid.uuid4().hex[:12]}",
    )


def assert_exact(cluster: KafkaCluster, sink: KafkaSink, expected: Sequence[int]) -> None:
    """``read_committed``: every id once; no transaction open on the topic or the markers."""
    bootstrap = cluster.bootstrap_servers
    assert_exactly_once([int(r.value) for r in read_all(bootstrap, sink.topic or "")], expected)
    assert unstable_partitions(bootstrap, [sink.topic or "", sink.control_topic]) == []


def halves(ids: range) -> list[pa.RecordBatch]:
    """A partition's rows as two record batches (a fault can fire between them)."""
    values = [str(i) for i in ids]
    half = len(values) // 2
    return [
        pa.record_batch({"key": pa.array(part), "value": pa.array(part)})
        for part in (values[:half], values[half:])
    ]


def batch_of(batch_id: int) -> list[list[pa.RecordBatch]]:
    """Three partitions of 60 ids each: ids ``batch_id * 1000 + partition * 100 + 0..59``."""
    base = batch_id * 1000
    return [halves(range(base + p * 100, base + p * 100 + 60)) for p in range(3)]


def ids_of(batches: int) -> list[int]:
    return [b * 1000 + p * 100 + i for b in range(batches) for p in range(3) for i in range(60)]


def retries() -> list[tuple[int, int, int]]:
    """The (batch, partition, attempt) of every retried task (attempt > 0)."""
    return [begun for begun in _BEGUN if begun[2] > 0]


class FaultySink(KafkaSink):
    """Partition 1 fires ``_FAULT["write"]`` after its first rows, ``_FAULT["commit"]`` after
    its flush and before its commit."""

    def begin_transaction(self, context: twophase.TaskContext) -> KafkaTransaction:
        _BEGUN.append((context.batch_id, context.partition_id, context.attempt))
        return super().begin_transaction(context)

    def write(self, txn: KafkaTransaction, batch: pa.RecordBatch) -> None:
        super().write(txn, batch)
        if txn.context.partition_id == 1 and "write" in _FAULT:
            _FAULT.pop("write")(txn)

    def commit_with_marker(self, txn: KafkaTransaction, marker: twophase.Marker) -> None:
        if txn.context.partition_id == 1 and "commit" in _FAULT:
            txn.write_marker(marker)
            txn.flush()  # the records and the marker are on the brokers: only the commit is left
            _FAULT.pop("commit")(txn)
            txn.commit()
            return
        super().commit_with_marker(txn, marker)


def test_killing_the_coordinator_of_a_slot_mid_commit_loses_and_duplicates_nothing(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    sink = new_sink(FaultySink, "coord", cluster, new_topic(cluster, "coord"))
    runner = LocalRunner(sink, tmp_path, max_task_failures=3)
    runner.run_batch(0, batch_of(0))
    killed: list[tuple[str, int]] = []

    def kill_coordinator(txn: KafkaTransaction) -> None:
        tid = txn.transactional_id
        node = cluster.coordinator_of(tid)
        cluster.broker(node).kill()
        killed.append((tid, node))

    _FAULT["commit"] = kill_coordinator
    started = time.monotonic()
    runner.run_batch(1, batch_of(1))
    commit_seconds = time.monotonic() - started
    runner.run_batch(2, batch_of(2))

    assert len(killed) == 1, "the coordinator was never killed"
    tid, node = killed[0]
    # The killed broker did coordinate the slot: its own log says it initialised the id.
    log = cluster.broker(node).log_file.read_text(errors="replace")
    assert f"Initialized transactionalId {tid} " in log, f"broker {node} never coordinated {tid}"
    assert not cluster.broker(node).is_running()
    assert cluster.coordinator_of(tid) != node, "the coordinator did not move"
    # Within the documented bound: operation_timeout x local_retries.
    assert commit_seconds < sink.options.operation_timeout * sink.options.local_retries
    add_line(
        SECTION,
        f"coordinator {node} of {tid} killed mid-commit: batch {commit_seconds:.1f} s, "
        f"task retries {retries()}",
    )
    assert_exact(cluster, sink, ids_of(3))


def test_killing_a_partition_leader_mid_produce_loses_and_duplicates_nothing(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    topic = new_topic(cluster, "leader")
    sink = new_sink(FaultySink, "leader", cluster, topic)
    runner = LocalRunner(sink, tmp_path, max_task_failures=3)
    runner.run_batch(0, batch_of(0))
    killed: list[int] = []

    def kill_leader(txn: KafkaTransaction) -> None:
        assert txn.records > 0, "nothing produced yet"
        node = cluster.leader_of(topic, 0)
        cluster.broker(node).kill()
        killed.append(node)

    _FAULT["write"] = kill_leader
    started = time.monotonic()
    runner.run_batch(1, batch_of(1))
    seconds = time.monotonic() - started
    runner.run_batch(2, batch_of(2))

    assert len(killed) == 1, "the leader was never killed"
    assert not cluster.broker(killed[0]).is_running()
    assert cluster.leader_of(topic, 0) != killed[0], "the leader did not move"
    add_line(
        SECTION,
        f"leader {killed[0]} of {topic}[0] killed mid-produce: batch {seconds:.1f} s, "
        f"task retries {retries()}",
    )
    assert_exact(cluster, sink, ids_of(3))


def test_a_marker_read_after_the_control_leader_died_answers_at_once(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    # A process keeps its marker reader's clients between reads (connectors/kafka/_marker_reader);
    # kept clients whose metadata still names the dead leader of the control partition used to
    # queue the next read's offsets request for that broker until the reader's bound (65 s)
    # ran out. Kept clients must now answer for that partition within a second, or be replaced.
    sink = new_sink(KafkaSink, "reader", cluster, new_topic(cluster, "reader"))
    runner = LocalRunner(sink, tmp_path)
    runner.run_batch(0, batch_of(0))
    token = runner.identity.token
    before = sink.read_markers(token, 0)  # the clients are kept after this read
    assert len(before) == 3, before
    leader = cluster.leader_of(sink.control_topic, 0)
    cluster.broker(leader).kill()

    def moved() -> bool:
        try:
            return cluster.leader_of(sink.control_topic, 0) != leader
        except DevInfraError:  # no leader for a moment
            return False

    assert wait_until(moved, timeout=60), f"{sink.control_topic}[0] kept no leader but {leader}"
    assert not cluster.broker(leader).is_running()
    started = time.monotonic()
    after = sink.read_markers(token, 0)
    seconds = time.monotonic() - started
    assert after == before
    assert seconds < 15, f"the read took {seconds:.1f} s: the kept clients were not replaced"
    add_line(SECTION, f"marker read after the control leader {leader} died: {seconds:.1f} s")


class Feeder:
    """Writes JSON files of ``rows`` ids each into ``directory``, one a second in a thread."""

    def __init__(self, directory: Path, rows: int) -> None:
        self.directory = directory
        self.staging = directory.parent / f"{directory.name}-staging"
        self.directory.mkdir()
        self.staging.mkdir()
        self.rows = rows
        self.files = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def write(self) -> None:
        start = self.files * self.rows
        path = self.staging / f"part-{self.files:05d}.json"
        path.write_text(
            "".join(json.dumps({"id": i}) + "\n" for i in range(start, start + self.rows))
        )
        os.rename(path, self.directory / path.name)  # whole files only
        self.files += 1

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.write()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


class Stream:
    """The streaming query, restarted from its checkpoint when it fails with a restartable error."""

    def __init__(self, spark: Any, source: Path, sink: KafkaSink, checkpoint: Path) -> None:
        self.spark, self.source, self.sink, self.checkpoint = spark, source, sink, checkpoint
        self.restarts: list[str] = []
        self.batches_before = 0
        self.query = self._start()

    def _start(self) -> Any:
        events = (
            self.spark.readStream.schema("id LONG")
            .option("maxFilesPerTrigger", 1)
            .json(str(self.source))
            .selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
        )
        return twophase.write_stream(
            events,
            self.sink,
            checkpoint_location=str(self.checkpoint),
            trigger={"processingTime": "1 second"},
        ).start()

    def count(self) -> int:
        """Batches committed so far, across restarts of the query."""
        return self.batches_before + len(twophase.batch_metrics(self.sink))

    def batches(self) -> int:
        """:meth:`count`, after restarting a query that failed with a restartable error."""
        if not self.query.isActive:
            error = self.query.exception()
            found = find_error(error)
            assert found is not None, f"not a twophase error: {error}"
            assert found.restartable, f"not restartable: {error}"
            self.restarts.append(repr(found))
            self.batches_before += len(twophase.batch_metrics(self.sink))
            self.sink = KafkaSink(
                self.sink.name,
                bootstrap_servers=self.sink.options.brokers,
                topic=self.sink.topic,
                control_topic=self.sink.control_topic,
            )
            self.query = self._start()
        return self.count()

    def wait_batches(self, count: int, timeout: float) -> None:
        assert wait_until(lambda: self.batches() >= count, timeout=timeout, interval=0.5), (
            f"only {self.batches()} batches of {count} in {timeout} s"
        )


# About 60 s of its own: three broker restarts of 13-15 s, each waited out until every replica is
# in sync, under a Spark query.
@pytest.mark.timeout(600)
def test_rolling_restart_of_every_broker_under_a_streaming_query_is_exact(
    spark: Any, cluster: KafkaCluster, tmp_path: Path
) -> None:
    topic = new_topic(cluster, "rolling")
    sink = new_sink(KafkaSink, "rolling", cluster, topic)
    feeder = Feeder(tmp_path / "source", rows=20)
    for _ in range(2):
        feeder.write()
    stream = Stream(spark, feeder.directory, sink, tmp_path / "checkpoint")
    try:
        stream.wait_batches(2, timeout=120)
        feeder.start()
        during: dict[int, int] = {}
        for node, broker in sorted(cluster.brokers.items()):
            before, pid, started = stream.batches(), broker.pid, time.monotonic()
            broker.restart()
            cluster.wait_in_sync(timeout=90)
            assert broker.pid != pid, f"broker {node} was not restarted"
            assert broker.is_running(), f"broker {node} is not running"
            during[node] = stream.batches() - before
            add_line(
                SECTION,
                f"rolling restart: broker {node} restarted and in sync in "
                f"{time.monotonic() - started:.1f} s, {during[node]} batches meanwhile",
            )
            stream.wait_batches(before + during[node] + 1, timeout=60)
        feeder.stop()
        # Every file read and committed: each batch reads one file.
        stream.wait_batches(feeder.files, timeout=120)
        stream.query.processAllAvailable()
    finally:
        feeder.stop()
        stream.query.stop()
    assert stream.query.exception() is None, stream.query.exception()
    # Batches committed while each broker was away or catching up: the query kept writing.
    assert sorted(during) == [1, 2, 3], during
    assert all(n >= 1 for n in during.values()), during
    add_line(
        SECTION,
        f"rolling restart: {stream.count()} batches, {feeder.files * feeder.rows} rows, "
        f"query restarts {stream.restarts or 'none'}",
    )
    assert_exact(cluster, stream.sink, range(feeder.files * feeder.rows))
