"""Bad input: a clear error naming sink, batch and column or setting, and nothing of it visible.

Every case runs through the production coordinator (``LocalRunner``) against the real broker:
batch 0 is good; batch 1 carries the fault and must fail with a :mod:`twophase.errors` class
naming the sink, the batch and the column or setting at fault, while a ``read_committed``
consumer sees nothing of batch 1. Then the cause is fixed (the bad rows cleared, the topic
created, the setting raised, the broker started), the driver restarts, batch 1 runs again and
every record is in Kafka exactly once.

Schema errors are found on the driver before anything is written. Row errors fail the
partition holding the row; the bad partition comes first here, so that no partition of the
batch commits. The markers protocol commits partition by partition, so a bad row in a later
partition leaves the earlier partitions committed: ``test_a_null_topic_in_a_later_partition...``
shows that the replay then skips them and completes the batch exactly once.
"""

from __future__ import annotations

import os
import pickle
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.admin import AclOperation, ResourceType
from kafka_support import SecuredBroker, read_all

from twophase.connectors.kafka import KafkaSink
from twophase.errors import ConfigurationError, DataError, RetriableError, TwoPhaseError
from twophase.testing import LocalRunner, assert_exactly_once
from twophase_dev import KafkaBroker, free_ports

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SINK = "bad"
ReadTopic = Callable[..., list[Any]]
MakeSink = Callable[..., KafkaSink]
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def rows(ids: Sequence[int] | range, **columns: Any) -> pa.RecordBatch:
    """Records keyed by their id (the key identifies a record when read back)."""
    ids = list(ids)
    data: dict[str, Any] = {
        "key": pa.array([str(i) for i in ids]),
        "value": pa.array([f"v{i}" for i in ids]),
    }
    data.update(columns)
    return pa.record_batch(data)


def keys(records: list[Any]) -> list[int]:
    return [int(r.key) for r in records]


def check_error(exc: TwoPhaseError, batch_id: int, at_fault: tuple[str, str]) -> None:
    """The error names the sink, the batch and the column or setting, and pickles intact."""
    kind, name = at_fault
    text = str(exc)
    assert exc.sink == SINK, text
    assert f"sink={SINK!r}" in text, text
    assert exc.batch_id == batch_id, text
    assert f"batch={batch_id}" in text, text
    assert getattr(exc, kind) == name, text
    assert f"{kind}={name!r}" in text, text
    clone = pickle.loads(pickle.dumps(exc))  # how an executor's error reaches the driver
    assert type(clone) is type(exc)
    assert str(clone) == text


class Scenario:
    """Batch 0 good (keys 0-19 in two partitions); batch 1 fails, is fixed and run again."""

    BATCH0 = range(20)

    def __init__(
        self,
        sink: KafkaSink,
        checkpoint: Path,
        read: Callable[[], list[int]],
        route_to: str | None = None,
    ) -> None:
        self.runner = LocalRunner(sink, checkpoint)
        self.read = read
        parts = [rows(range(10)), rows(range(10, 20))]
        if route_to is not None:  # the sink has no topic option: rows name their topic
            parts = [p.append_column("topic", pa.array([route_to] * p.num_rows)) for p in parts]
        self.runner.run_batch(0, [[p] for p in parts])

    def fail(
        self,
        partitions: list[list[pa.RecordBatch]],
        expected: type[TwoPhaseError],
        at_fault: tuple[str, str],
        match: str,
    ) -> TwoPhaseError:
        with pytest.raises(expected, match=match) as info:
            self.runner.run_batch(1, partitions)
        check_error(info.value, 1, at_fault)
        return info.value

    def assert_nothing_of_batch_1(self) -> None:
        assert_exactly_once(self.read(), self.BATCH0)

    def rerun(self, partitions: list[list[pa.RecordBatch]], expected: Sequence[int]) -> None:
        self.runner.restart()  # a new driver, after the cause was fixed
        metrics = self.runner.run_batch(1, partitions)
        assert metrics.outcome == "committed"
        assert_exactly_once(self.read(), [*self.BATCH0, *expected])


@pytest.fixture
def scenario(
    kafka_sink: MakeSink, read_topic: ReadTopic, tmp_path: Path
) -> Callable[..., Scenario]:
    """``scenario(**sink_kwargs)``: a ``Scenario`` writing to the sink's topic."""

    def make(**kwargs: Any) -> Scenario:
        sink = kafka_sink(SINK, **kwargs)
        topic = sink.topic
        assert topic is not None
        return Scenario(sink, tmp_path / "checkpoint", lambda: keys(read_topic(topic)))

    return make


@pytest.fixture
def routed(kafka_sink: MakeSink, read_topic: ReadTopic, tmp_path: Path) -> tuple[Scenario, str]:
    """A ``Scenario`` whose sink has no topic option: every row names its topic."""
    sink = kafka_sink(SINK)
    topic = sink.topic
    assert topic is not None
    sink.topic = None
    case = Scenario(sink, tmp_path / "checkpoint", lambda: keys(read_topic(topic)), route_to=topic)
    return case, topic


# ------------------------------------------------------------------- too large
def test_a_record_over_the_producers_message_max_bytes(
    kafka_sink: MakeSink, read_topic: ReadTopic, tmp_path: Path
) -> None:
    sink = kafka_sink(SINK, producer_config={"message.max.bytes": 10_000})
    topic = sink.topic
    assert topic is not None
    case = Scenario(sink, tmp_path / "checkpoint", lambda: keys(read_topic(topic)))
    huge = rows([102], value=pa.array([os.urandom(20_000)]))
    batch1 = [[rows([100, 101]), huge], [rows([110])]]
    case.fail(batch1, DataError, ("setting", "message.max.bytes"), "too large for topic")
    case.assert_nothing_of_batch_1()
    # The fix: raise the limit. A new sink with the same name and checkpoint is the same
    # sink identity: the restarted query completes batch 1.
    raised = KafkaSink(
        SINK,
        bootstrap_servers=sink.producer_config["bootstrap.servers"],
        topic=topic,
        control_topic=sink.control_topic,
        producer_config={"message.max.bytes": 100_000},
    )
    runner = LocalRunner(raised, case.runner.checkpoint, query_id=case.runner.query_id)
    runner.run_batch(1, batch1)
    assert_exactly_once(case.read(), [*Scenario.BATCH0, 100, 101, 102, 110])
    by_key = {r.key: r.value for r in read_topic(topic)}
    assert by_key[b"102"] == huge.column(1)[0].as_py()


def test_a_record_over_the_topics_max_message_bytes(
    kafka_sink: MakeSink, make_topic: Callable[..., str], read_topic: ReadTopic, tmp_path: Path
) -> None:
    # The producer's limit (1 MB) lets it through; the broker refuses it at delivery.
    topic = make_topic(3, prefix="kt-small", config={"max.message.bytes": "10000"})
    case = Scenario(
        kafka_sink(SINK, topic=topic), tmp_path / "checkpoint", lambda: keys(read_topic(topic))
    )
    huge = rows([102], value=pa.array([os.urandom(20_000)]))  # lz4 cannot shrink it
    case.fail(
        [[rows([100, 101]), huge], [rows([110])]],
        DataError,
        ("setting", "message.max.bytes"),
        "Broker: Message size too large",
    )
    case.assert_nothing_of_batch_1()
    case.rerun([[rows([100, 101])], [rows([110])]], [100, 101, 110])  # the bad row cleared


# ------------------------------------------------------------------------ value
def test_a_null_value_is_a_tombstone_as_in_sparks_sink(
    kafka_sink: MakeSink, read_topic: ReadTopic, tmp_path: Path
) -> None:
    sink = kafka_sink(SINK)
    assert sink.topic is not None
    batch = rows([1, 2, 3], value=pa.array(["v1", None, None]))
    no_key = pa.record_batch(
        {"key": pa.array([None], pa.string()), "value": pa.array([None], pa.string())}
    )
    LocalRunner(sink, tmp_path).run_batch(0, [[batch], [no_key]])
    records = read_topic(sink.topic)
    assert sorted((r.key or b"", r.value) for r in records) == [
        (b"", None),
        (b"1", b"v1"),
        (b"2", None),
        (b"3", None),
    ]


def test_a_null_key_into_a_compacted_topic(
    kafka_sink: MakeSink, make_topic: Callable[..., str], read_topic: ReadTopic, tmp_path: Path
) -> None:
    topic = make_topic(3, prefix="kt-compacted", config={"cleanup.policy": "compact"})
    case = Scenario(
        kafka_sink(SINK, topic=topic), tmp_path / "checkpoint", lambda: keys(read_topic(topic))
    )
    keyless = rows([102], key=pa.array([None], pa.string()))
    case.fail(
        [[rows([100, 101]), keyless], [rows([110])]],
        DataError,
        ("column", "key"),
        "compacted topic",
    )
    case.assert_nothing_of_batch_1()
    case.rerun([[rows([100, 101, 102])], [rows([110])]], [100, 101, 102, 110])  # keyed now


@pytest.mark.parametrize("name", ["Value", "payload"])
def test_an_absent_value_column(scenario: Callable[..., Scenario], name: str) -> None:
    case = scenario()
    bad = pa.record_batch({"key": pa.array(["100"]), name: pa.array(["v100"])})
    error = case.fail([[bad]], ConfigurationError, ("column", "value"), "no 'value' column")
    assert ("case-sensitive" in str(error)) is (name == "Value")
    case.assert_nothing_of_batch_1()
    case.rerun([[bad.rename_columns(["key", "value"])]], [100])


# ------------------------------------------------------------------ column types
@pytest.mark.parametrize(
    ("column", "bad_values", "fixed_values"),
    [
        ("value", pa.array([100, 101]), pa.array(["100", "101"])),
        ("key", pa.array([{"id": 100}, {"id": 101}]), pa.array(["100", "101"])),
        ("partition", pa.array(["0", "1"]), pa.array([0, 1], pa.int32())),
        ("headers", pa.array([["a"], ["b"]]), pa.array([[], []], HEADERS)),
    ],
    ids=["int-value", "struct-key", "string-partition", "string-array-headers"],
)
def test_a_column_of_the_wrong_type_is_refused_before_writing(
    scenario: Callable[..., Scenario],
    column: str,
    bad_values: pa.Array,
    fixed_values: pa.Array,
) -> None:
    case = scenario()
    base = rows([100, 101])
    rest = base.drop_columns([column]) if column in base.schema.names else base
    case.fail(
        [[rest.append_column(column, bad_values)]],
        ConfigurationError,
        ("column", column),
        f"column '{column}' has type",
    )
    case.assert_nothing_of_batch_1()
    case.rerun([[rest.append_column(column, fixed_values)]], [100, 101])


def test_a_topic_column_of_the_wrong_type(routed: tuple[Scenario, str]) -> None:
    case, topic = routed
    bad = rows([100], topic=pa.array([7]))
    case.fail([[bad]], ConfigurationError, ("column", "topic"), "column 'topic' has type int64")
    case.assert_nothing_of_batch_1()
    case.rerun([[rows([100], topic=pa.array([topic]))]], [100])


# --------------------------------------------------------------------- headers
@pytest.mark.parametrize(
    "bad_headers",
    [
        pa.array([[("trace", b"t1")]], pa.map_(pa.string(), pa.binary())),
        pa.array([[{"key": "trace", "value": 1}]]),
        pa.array([[{"name": "trace", "value": b"t1"}]]),
        pa.array([{"key": "trace", "value": b"t1"}]),
    ],
    ids=["map", "int-values", "no-key-field", "struct-not-array"],
)
def test_headers_of_the_wrong_shape(
    scenario: Callable[..., Scenario], read_topic: ReadTopic, bad_headers: pa.Array
) -> None:
    case = scenario()
    case.fail(
        [[rows([100], headers=bad_headers)]],
        ConfigurationError,
        ("column", "headers"),
        r"array<struct<key: string, value: binary>>",
    )
    case.assert_nothing_of_batch_1()
    good = pa.array([[{"key": "trace", "value": b"t1"}]], HEADERS)
    case.rerun([[rows([100], headers=good)]], [100])


def test_a_header_without_a_key(scenario: Callable[..., Scenario]) -> None:
    case = scenario()
    nameless = pa.array([[{"key": "a", "value": b"1"}, {"key": None, "value": b"2"}]], HEADERS)
    error = case.fail(
        [[rows([100], headers=nameless)], [rows([110])]],
        DataError,
        ("column", "headers"),
        "header with a null key",
    )
    assert error.partition_id == 0
    case.assert_nothing_of_batch_1()
    named = pa.array([[{"key": "a", "value": b"1"}, {"key": "b", "value": b"2"}]], HEADERS)
    case.rerun([[rows([100], headers=named)], [rows([110])]], [100, 110])


# ------------------------------------------------------------------- partition
def test_a_partition_the_topic_does_not_have(scenario: Callable[..., Scenario]) -> None:
    case = scenario()  # 3 partitions
    error = case.fail(
        [[rows([100, 101], partition=pa.array([1, 7], pa.int32()))], [rows([110])]],
        DataError,
        ("column", "partition"),
        "names a partition that topic",
    )
    assert error.partition_id == 0
    case.assert_nothing_of_batch_1()
    fixed = rows([100, 101], partition=pa.array([1, None], pa.int32()))
    case.rerun([[fixed], [rows([110])]], [100, 101, 110])


# ----------------------------------------------------------------------- topic
def test_a_null_topic_in_a_later_partition_with_no_default_topic(
    routed: tuple[Scenario, str],
) -> None:
    case, topic = routed
    first = rows([100, 101], topic=pa.array([topic, topic]))
    error = case.fail(
        [[first], [rows([110, 111], topic=pa.array([topic, None]))]],
        DataError,
        ("column", "topic"),
        "row 1 of the record batch has a null topic",
    )
    assert error.partition_id == 1
    # The markers protocol: the partition before the bad one committed; the bad one did not.
    assert_exactly_once(case.read(), [*Scenario.BATCH0, 100, 101])
    case.runner.restart()
    metrics = case.runner.run_batch(1, [[first], [rows([110, 111], topic=pa.array([topic] * 2))]])
    assert metrics.skipped_partitions == 1  # found committed by its marker: not written again
    assert_exactly_once(case.read(), [*Scenario.BATCH0, 100, 101, 110, 111])


def test_an_unknown_topic_in_the_topic_column_fails_within_seconds_naming_it(
    routed: tuple[Scenario, str], kafka_broker: KafkaBroker, read_topic: ReadTopic
) -> None:
    case, topic = routed
    missing = f"kt-missing-{uuid.uuid4().hex[:8]}"
    batch1 = [
        [rows([100, 101], topic=pa.array([topic, missing]))],
        [rows([110], topic=pa.array([topic]))],
    ]
    started = time.monotonic()
    error = case.fail(batch1, ConfigurationError, ("column", "topic"), f"{missing}.*does not exist")
    assert time.monotonic() - started < 10, "waited for librdkafka's metadata propagation"
    assert "row 1" in str(error)
    case.assert_nothing_of_batch_1()
    kafka_broker.create_topic(missing, partitions=1)  # the fix
    case.rerun(batch1, [100, 110])
    assert keys(read_topic(missing)) == [101]


@pytest.mark.parametrize(
    ("granted", "match"),
    [((), "may not describe"), ((AclOperation.DESCRIBE,), "may describe but not write")],
    ids=["no-acl", "describe-only"],
)
def test_an_unauthorized_topic_in_the_topic_column_fails_within_seconds_naming_it(
    secured_broker: SecuredBroker,
    tmp_path: Path,
    granted: tuple[AclOperation, ...],
    match: str,
) -> None:
    allowed = secured_broker.create_topic(3, prefix="allowed")
    forbidden = secured_broker.create_topic(1, prefix="forbidden")
    sink = KafkaSink(
        SINK,
        producer_config=secured_broker.client_config(),
        control_topic=f"ctl-{uuid.uuid4().hex[:12]}",
        operation_timeout=15,
    )
    secured_broker.grant_sink(sink, allowed)
    if granted:
        secured_broker.grant(ResourceType.TOPIC, forbidden, *granted)
        secured_broker.wait_allowed(forbidden, *granted)
    secured_broker.wait_allowed(allowed, AclOperation.WRITE)

    def read(topic: str) -> list[int]:
        return keys(read_all(secured_broker.admin_bootstrap, topic))

    case = Scenario(sink, tmp_path / "checkpoint", lambda: read(allowed), route_to=allowed)
    batch1 = [[rows([100, 101], topic=pa.array([allowed, forbidden]))]]
    started = time.monotonic()
    error = case.fail(batch1, ConfigurationError, ("column", "topic"), f"{forbidden}.*{match}")
    assert time.monotonic() - started < 10
    assert "WRITE" in str(error)
    case.assert_nothing_of_batch_1()
    assert read(forbidden) == []
    secured_broker.grant(ResourceType.TOPIC, forbidden, AclOperation.WRITE, AclOperation.DESCRIBE)
    secured_broker.wait_allowed(forbidden, AclOperation.WRITE)
    case.rerun(batch1, [100])
    assert read(forbidden) == [101]


@pytest.mark.parametrize(
    ("withheld", "setting"),
    [(AclOperation.WRITE, "topic"), (AclOperation.READ, "control_topic")],
    ids=["topic-write", "control-topic-read"],
)
def test_a_missing_acl_on_the_sinks_own_topics_is_refused_at_open(
    secured_broker: SecuredBroker, tmp_path: Path, withheld: AclOperation, setting: str
) -> None:
    topic = secured_broker.create_topic(2, prefix="own")
    sink = KafkaSink(
        SINK,
        producer_config=secured_broker.client_config(),
        topic=topic,
        control_topic=f"ctl-{uuid.uuid4().hex[:12]}",
        operation_timeout=15,
    )
    resource = sink.topic if setting == "topic" else sink.control_topic
    assert resource is not None
    secured_broker.grant_sink(sink, topic, withhold=(resource, withheld))
    secured_broker.wait_allowed(topic)
    runner = LocalRunner(sink, tmp_path / "checkpoint")
    batch0 = [[rows(range(10))], [rows(range(10, 20))]]
    with pytest.raises(ConfigurationError, match=f"may not {withheld.name} topic") as info:
        runner.run_batch(0, batch0)
    check_error(info.value, 0, ("setting", setting))
    assert resource in str(info.value)
    assert read_all(secured_broker.admin_bootstrap, topic) == []
    secured_broker.grant(ResourceType.TOPIC, resource, withheld)  # the fix
    secured_broker.wait_allowed(resource, withheld)
    runner.restart()
    runner.run_batch(0, batch0)
    assert_exactly_once(keys(read_all(secured_broker.admin_bootstrap, topic)), range(20))


# ---------------------------------------------------------------------- broker
def test_a_broker_down_at_start_fails_open_within_its_timeout_naming_bootstrap_servers(
    tmp_path: Path,
) -> None:
    port = free_ports(1)[0]
    servers = f"127.0.0.1:{port}"
    sink = KafkaSink(
        SINK,
        bootstrap_servers=servers,
        topic="events",
        control_topic="events-ctl",
        operation_timeout=3,
    )
    runner = LocalRunner(sink, tmp_path / "checkpoint")
    started = time.monotonic()
    with pytest.raises(RetriableError, match=r"no broker at bootstrap\.servers") as info:
        runner.run_batch(0, [[rows(range(10))], [rows(range(10, 20))]])
    elapsed = time.monotonic() - started
    assert elapsed < 8, f"open() took {elapsed:.1f} s with operation_timeout=3"
    check_error(info.value, 0, ("setting", "bootstrap.servers"))
    assert servers in str(info.value)

    broker = KafkaBroker(port=port, log_dir=tmp_path / "kafka-logs")  # the fix
    broker.start()
    try:
        broker.create_topic("events", partitions=2)
        runner.restart()
        runner.run_batch(0, [[rows(range(10))], [rows(range(10, 20))]])
        assert_exactly_once(keys(read_all(servers, "events")), range(20))
    finally:
        broker.stop()
