"""The Kafka sink against the real broker: visibility, fencing, recovery, markers, errors.

Each test names the failure it reproduces. Records are read back with real
consumers: ``read_committed`` (what exactly-once promises) and, where it
proves that something really was written and then aborted, ``read_uncommitted``.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer, murmur2
from confluent_kafka.admin import AdminClient

from twophase import Fingerprint, Marker, TaskContext
from twophase.connectors.kafka import KafkaSink, KafkaTransaction
from twophase.connectors.kafka._checks import CONTROL_TOPIC_CONFIG
from twophase.connectors.kafka._compat import ConfigResource, ResourceType
from twophase.errors import ConfigurationError, FatalError
from twophase.testing import LocalRunner, SimulatedCrash, assert_exactly_once

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ReadTopic = Callable[..., list[Any]]
MakeSink = Callable[..., KafkaSink]


def rows(ids: range | list[int]) -> pa.RecordBatch:
    return pa.record_batch(
        {"key": pa.array([str(i) for i in ids]), "value": pa.array([f"{i}" for i in ids])}
    )


def partitions(ids: range, count: int = 3) -> list[list[pa.RecordBatch]]:
    parts = [list(ids)[p::count] for p in range(count)]
    return [[rows(p)] if p else [] for p in parts]


def values(records: list[Any]) -> list[int]:
    return [int(r.value or b"-1") for r in records]


def executor_copy(sink: KafkaSink) -> KafkaSink:
    """What an executor gets: the sink, pickled."""
    copy: KafkaSink = pickle.loads(pickle.dumps(sink))
    return copy


def write_partition(
    sink: KafkaSink, ctx: TaskContext, ids: range | list[int], *, commit: bool = True
) -> KafkaTransaction:
    txn = sink.begin_transaction(ctx)
    batch = rows(ids)
    sink.write(txn, batch)
    marker = Marker(
        ctx.identity, ctx.batch_id, ctx.partition_id, ctx.attempt, Fingerprint(len(ids), 0)
    )
    if commit:
        sink.commit_with_marker(txn, marker)
    else:
        txn.write_marker(marker)  # the marker is in the transaction, which stays open
    return txn


def describe_topic(bootstrap: str, topic: str) -> dict[str, str | None]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result()
    return {name: entry.value for name, entry in entries.items()}


# ------------------------------------------------------------- visibility
def test_read_committed_sees_committed_batches_and_never_an_aborted_transaction(
    kafka_sink: MakeSink, read_topic: ReadTopic, tmp_path: Path
) -> None:
    sink = kafka_sink()
    runner = LocalRunner(sink, tmp_path)
    runner.run_batch(0, partitions(range(30)))
    # A task that fails after writing: its transaction is aborted.
    executor = executor_copy(sink)
    ctx = TaskContext(sink.name, runner.identity.token, 1, 0, 0)
    txn = write_partition(executor, ctx, range(1000, 1010), commit=False)
    txn.flush()  # the records are in the log
    executor.abort(txn)
    runner.run_batch(1, partitions(range(30, 60)))

    assert sink.topic is not None
    assert_exactly_once(values(read_topic(sink.topic)), range(60))
    # The aborted records were really written: a reader ignoring transactions sees them.
    uncommitted = values(read_topic(sink.topic, "read_uncommitted"))
    assert set(range(1000, 1010)) <= set(uncommitted)
    # ...and so was its marker (fingerprint 10:0), which read_markers must not return.
    markers = sink.read_markers(runner.identity.token, 1)
    assert len(markers) == 3
    assert Fingerprint(10, 0) not in [m.fingerprint for m in markers]


def test_keys_partitions_and_headers_reach_kafka_like_sparks_own_sink(
    kafka_sink: MakeSink, read_topic: ReadTopic, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    other = make_topic(1, prefix="kt-other")
    sink = kafka_sink(partitions=4)
    assert sink.topic is not None
    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.record_batch(
        {
            "key": pa.array([f"key-{i}" for i in range(20)] + [None, "x"]),
            "value": pa.array([b"v%d" % i for i in range(22)], pa.binary()),
            "partition": pa.array([None] * 20 + [3, None], pa.int32()),
            "headers": pa.array([None] * 21 + [[{"key": "trace", "value": b"abc"}]], headers),
        }
    )
    routed = pa.record_batch({"topic": pa.array([other]), "value": pa.array(["elsewhere"])})
    runner = LocalRunner(sink, tmp_path)
    runner.run_batch(0, [[batch]])
    got = read_topic(sink.topic)
    assert len(got) == 22
    by_value = {r.value: r for r in got}
    for i in range(20):
        record = by_value[b"v%d" % i]
        # Java-compatible partitioning (murmur2), as with Spark's built-in sink
        assert record.partition == murmur2(f"key-{i}".encode(), 4)
    assert by_value[b"v20"].partition == 3
    assert by_value[b"v20"].key is None
    assert by_value[b"v21"].headers == (("trace", b"abc"),)
    # The topic option overrides a topic column (as in Spark): a sink without the
    # option routes by the column.
    column_sink = kafka_sink(topic=other)
    column_sink.topic = None
    LocalRunner(column_sink, tmp_path / "2").run_batch(0, [[routed]])
    assert [r.value for r in read_topic(other)] == [b"elsewhere"]


# ---------------------------------------------------------------- fencing
def test_zombie_attempt_is_fenced_by_the_retry_of_its_partition(
    kafka_sink: MakeSink, read_topic: ReadTopic
) -> None:
    sink = kafka_sink(open_it=True)
    identity = "k.00000000000000aa"
    zombie, retry = executor_copy(sink), executor_copy(sink)
    z_ctx = TaskContext(sink.name, identity, 4, 1, 0)
    z_txn = zombie.begin_transaction(z_ctx)
    zombie.write(z_txn, rows(range(0, 10)))
    # Spark gave up on attempt 0 and runs attempt 1 of the same partition.
    write_partition(retry, TaskContext(sink.name, identity, 4, 1, 1), range(0, 10))
    # The zombie wakes up and tries to finish: it is fenced.
    with pytest.raises(FatalError, match="zombie") as info:
        zombie.commit_with_marker(z_txn, Marker(identity, 4, 1, 0, Fingerprint(10, 0)))
    assert info.value.partition_id == 1
    zombie.abort(z_txn)  # what the framework does next: must not raise
    assert sink.topic is not None
    assert_exactly_once(values(read_topic(sink.topic)), range(10))
    assert [m.attempt for m in sink.read_markers(identity, 4)] == [1]


def test_pooled_producer_fenced_by_another_worker_is_replaced_transparently(
    kafka_sink: MakeSink,
    kafka_broker: Any,
    read_topic: ReadTopic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = kafka_sink()
    runner = LocalRunner(sink, tmp_path)
    runner.run_batch(0, partitions(range(30)))
    # Slot 1 runs batch 1 in another worker, whose producer fences ours...
    other = Producer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "transactional.id": sink.transactional_id(runner.identity.token, 1),
        }
    )
    other.init_transactions(15)
    # ...and comes back here for batch 2: the pooled producer must be replaced, not fail.
    with caplog.at_level(logging.INFO, logger="twophase.connectors.kafka"):
        runner.run_batch(1, partitions(range(30, 60)))
    assert "was fenced by a newer instance" in caplog.text
    assert sink.topic is not None
    assert_exactly_once(values(read_topic(sink.topic)), range(60))
    other.close()


# --------------------------------------------------------------- recovery
def test_crashed_task_transaction_is_fenced_at_recovery_not_left_to_the_timeout(
    kafka_sink: MakeSink, read_topic: ReadTopic, tmp_path: Path
) -> None:
    sink = kafka_sink(transaction_timeout_ms=900_000)  # the broker would wait 15 min
    runner = LocalRunner(sink, tmp_path)
    runner.run_batch(0, partitions(range(30)))
    runner.crash_at("intent_recorded", 1)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(1, partitions(range(30, 60)))
    # The driver died while the task of partition 0 had written half its rows.
    executor = executor_copy(sink)
    ctx = TaskContext(sink.name, runner.identity.token, 1, 0, 0)
    orphan = executor.begin_transaction(ctx)
    executor.write(orphan, rows(range(30, 60, 3)))
    orphan.producer.producer.flush(10)
    assert sink.topic is not None
    assert set(range(30, 60, 3)) <= set(values(read_topic(sink.topic, "read_uncommitted")))

    started = time.monotonic()
    runner.restart()
    metrics = runner.run_batch(1, partitions(range(30, 60)))
    # every lane of every slot the identity used was fenced
    assert metrics.recovered_aborted == 3 * sink.options.producer_lanes
    assert_exactly_once(values(read_topic(sink.topic)), range(60))
    assert time.monotonic() - started < 30, "recovery waited for the transaction timeout"
    # The orphan's producer is a zombie now: it cannot commit.
    with pytest.raises(FatalError):
        executor.commit_with_marker(orphan, Marker(ctx.identity, 1, 0, 0, Fingerprint(10, 0)))
    executor.abort(orphan)
    assert_exactly_once(values(read_topic(sink.topic)), range(60))


# ---------------------------------------------------------------- markers
def test_markers_round_trip_and_other_identities_are_ignored(
    kafka_sink: MakeSink,
) -> None:
    sink = kafka_sink(open_it=True)
    me, other = "k.00000000000000b1", "k.00000000000000b2"
    for batch in (7, 8):
        for part in range(3):
            write_partition(
                executor_copy(sink), TaskContext(sink.name, me, batch, part, 0), [batch * 10 + part]
            )
    write_partition(executor_copy(sink), TaskContext(sink.name, other, 8, 0, 0), [999])
    aborted = write_partition(
        executor_copy(sink), TaskContext(sink.name, me, 8, 5, 0), [555], commit=False
    )
    aborted.flush()
    sink.abort(aborted)
    markers = sink.read_markers(me, 8)
    assert [(m.identity, m.batch_id, m.partition_id) for m in markers] == [
        (me, 8, 0),
        (me, 8, 1),
        (me, 8, 2),
    ]
    assert markers[0].fingerprint == Fingerprint(1, 0)
    assert sink.read_markers(me, 9) == []
    assert [m.identity for m in sink.read_markers(other, 8)] == [other]


def test_marker_scan_reads_only_the_tail_of_a_long_control_topic(
    kafka_sink: MakeSink, kafka_broker: Any
) -> None:
    sink = kafka_sink(open_it=True)
    me = "k.00000000000000c1"
    write_partition(executor_copy(sink), TaskContext(sink.name, me, 1, 0, 0), [1])
    filler = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "linger.ms": 20})
    for i in range(20_000):  # other sinks' history
        filler.produce(sink.control_topic, b"{}", b"other.%d/0/0/0/x" % i, 0)
    filler.flush(30)
    write_partition(executor_copy(sink), TaskContext(sink.name, me, 2, 0, 0), [2])
    for i in range(6_000):  # more than one read window between two markers of batch 3
        filler.produce(sink.control_topic, b"{}", b"other2.%d/0/0/0/x" % i, 0)
    filler.flush(30)
    write_partition(executor_copy(sink), TaskContext(sink.name, me, 3, 0, 0), [3])
    for i in range(6_000):
        filler.produce(sink.control_topic, b"{}", b"other3.%d/0/0/0/x" % i, 0)
    filler.flush(30)
    write_partition(executor_copy(sink), TaskContext(sink.name, me, 3, 1, 0), [4])

    from twophase.connectors.kafka._marker_reader import MarkerReader

    reader = MarkerReader(
        sink.options.client_config,
        sink.control_topic,
        sink=sink.name,
        stable_timeout=30,
        operation_timeout=30,
    )
    markers = reader.read(me, 3)
    assert [m.partition_id for m in markers] == [0, 1]
    # It went back to batch 2's marker, not to the beginning (32 000+ records).
    assert reader.records_read < 30_000
    assert [m.batch_id for m in reader.read(me, 1)] == [1]


def test_read_markers_waits_for_a_transaction_open_on_the_control_partition(
    kafka_sink: MakeSink, kafka_broker: Any
) -> None:
    sink = kafka_sink(open_it=True)
    me = "k.00000000000000d1"
    # A sibling task has written its marker but not committed yet...
    sibling = executor_copy(sink)
    s_txn = write_partition(sibling, TaskContext(sink.name, me, 5, 0, 0), [1], commit=False)
    s_txn.flush()
    # ...while another partition commits after it: its marker is behind the open transaction.
    write_partition(executor_copy(sink), TaskContext(sink.name, me, 5, 1, 0), [2])
    found: list[list[Marker]] = []
    reader = threading.Thread(target=lambda: found.append(sink.read_markers(me, 5)))
    started = time.monotonic()
    reader.start()
    time.sleep(1.5)
    assert not found, "read_markers returned while the control partition was unstable"
    s_txn.commit()
    reader.join(30)
    assert time.monotonic() - started >= 1.5
    assert [m.partition_id for m in found[0]] == [0, 1]


# ---------------------------------------------------- open and configuration
def test_control_topic_is_created_compacted(
    kafka_sink: MakeSink, kafka_broker: Any, tmp_path: Path
) -> None:
    sink = kafka_sink()
    LocalRunner(sink, tmp_path).run_batch(0, partitions(range(3)))
    config = describe_topic(kafka_broker.bootstrap_servers, sink.control_topic)
    assert config["cleanup.policy"] == "compact"
    for key, value in CONTROL_TOPIC_CONFIG.items():
        assert config[key] == value


def test_a_control_topic_that_may_delete_markers_is_refused(
    kafka_sink: MakeSink, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    control = make_topic(1, prefix="ctl-delete")  # cleanup.policy=delete (the default)
    sink = kafka_sink(control_topic=control)
    with pytest.raises(ConfigurationError, match=r"cleanup\.policy=compact") as info:
        LocalRunner(sink, tmp_path).run_batch(0, partitions(range(3)))
    assert info.value.setting == "control_topic"


def test_a_missing_control_topic_without_create_is_refused(
    kafka_sink: MakeSink, read_topic: ReadTopic, tmp_path: Path
) -> None:
    sink = kafka_sink(create_control_topic=False)
    with pytest.raises(ConfigurationError, match=r"kafka-topics\.sh --create"):
        LocalRunner(sink, tmp_path).run_batch(0, partitions(range(3)))
    assert sink.topic is not None
    assert read_topic(sink.topic) == []


def test_a_transaction_timeout_above_the_broker_maximum_is_refused_at_open(
    kafka_sink: MakeSink, tmp_path: Path
) -> None:
    sink = kafka_sink(transaction_timeout_ms=900_001)
    with pytest.raises(ConfigurationError, match=r"transaction\.max\.timeout\.ms=900000") as info:
        LocalRunner(sink, tmp_path).run_batch(0, partitions(range(3)))
    assert info.value.setting == "transaction_timeout_ms"


def test_a_missing_default_topic_is_refused_at_open(kafka_sink: MakeSink, tmp_path: Path) -> None:
    sink = kafka_sink(topic=f"missing-{uuid.uuid4().hex[:8]}")
    with pytest.raises(ConfigurationError, match="does not exist"):
        LocalRunner(sink, tmp_path).run_batch(0, partitions(range(3)))


def test_a_librdkafka_setting_typo_is_refused_when_the_sink_is_built(kafka_sink: MakeSink) -> None:
    # librdkafka is asked when the sink is built: no batch, no task, no broker reached.
    with pytest.raises(ConfigurationError, match=r"'linger\.msec', a property librdkafka"):
        kafka_sink(producer_config={"linger.msec": 5})


# ---------------------------------------------------------- compaction
def test_markers_of_finished_batches_are_tombstoned_for_compaction(
    kafka_sink: MakeSink, read_topic: ReadTopic, tmp_path: Path
) -> None:
    sink = kafka_sink()
    runner = LocalRunner(sink, tmp_path)
    for batch_id in range(3):
        runner.run_batch(batch_id, partitions(range(batch_id * 30, batch_id * 30 + 30)))
    control = read_topic(sink.control_topic)
    markers = {r.key for r in control if r.value is not None}
    tombstones = {r.key for r in control if r.value is None}
    assert len(markers) == 9
    # batches 1 and 2 deleted the markers of batches 0 and 1 (same worker, same slots)
    assert len(tombstones) == 6
    assert tombstones < markers
    assert {key.split(b"/")[1] for key in tombstones} == {b"0", b"1"}  # never the live batch
