"""Dead letters on the real broker: refused records set aside exactly once, in the transaction.

The core's dead-letter contract (records too large for the target topic's
``max.message.bytes`` as the poison) under the markers protocol, then each row error the
connector knows mixed with good records, the batch errors that still fail, and the
topic-level limit that would otherwise abort the whole transaction on the brokers.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka_support import Record

from twophase import DeadLetter
from twophase.connectors.kafka import KafkaSink
from twophase.errors import AbortRequiredError, ConfigurationError, DataError
from twophase.testing import DeadLetterContract, LocalRunner, MarkerSinkContract, SimulatedCrash
from twophase_dev import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: The target topics' max.message.bytes, and the producer's batch.size under it.
TOPIC_LIMIT = 20_000
SMALL = {"max.message.bytes": str(TOPIC_LIMIT)}
PRODUCER = {"batch.size": 16_000}
#: Incompressible: the brokers hold the compressed record set to the topic's limit.
BIG = random.Random(52).randbytes(TOPIC_LIMIT + 1000)


def letters_of(records: list[Record], sink: str | None = None) -> list[DeadLetter]:
    from twophase.connectors.kafka._dead_letters import decode

    found = [decode(r.value) for r in records if r.value is not None]
    return [d for d in found if sink is None or d.sink == sink]


class TestKafkaDeadLetterContract(DeadLetterContract, MarkerSinkContract):
    def make_batch(self, ids: Sequence[int]) -> pa.RecordBatch:
        return pa.record_batch(
            {
                "id": pa.array(list(ids), pa.int64()),
                "payload": pa.array([f"p{i}" for i in ids], pa.string()),
                "key": pa.array([str(i) for i in ids], pa.string()),
                "value": pa.array([str(i).encode() for i in ids], pa.binary()),
            }
        )

    def make_poisoned_batch(self, ids: Sequence[int], bad: Collection[int]) -> pa.RecordBatch:
        batch = super().make_poisoned_batch(ids, bad)  # payload null: what the contract checks
        values = [BIG if i in bad else str(i).encode() for i in ids]
        return batch.set_column(3, "value", pa.array(values, pa.binary()))

    @pytest.fixture
    def topic(self, make_topic: Callable[..., str]) -> str:
        return make_topic(3, prefix="dlc", config=SMALL)

    @pytest.fixture
    def dead_topic(self, make_topic: Callable[..., str]) -> str:
        return make_topic(1, prefix="dlq")

    @pytest.fixture
    def make_sink(
        self, kafka_sink: Callable[..., KafkaSink], topic: str, dead_topic: str
    ) -> Callable[[str], KafkaSink]:
        return lambda name: kafka_sink(
            name,
            topic=topic,
            bad_rows="dead_letter",
            dead_letter_topic=dead_topic,
            producer_config=PRODUCER,
        )

    @pytest.fixture
    def read_ids(
        self, read_topic: Callable[..., list[Record]], topic: str
    ) -> Callable[[], list[int]]:
        return lambda: [int(r.value or b"-1") for r in read_topic(topic)]

    @pytest.fixture
    def read_dead_letters(
        self, read_topic: Callable[..., list[Record]], dead_topic: str
    ) -> Callable[[], list[DeadLetter]]:
        return lambda: letters_of(read_topic(dead_topic))


# ------------------------------------------------------------ every row error class
@pytest.fixture
def routed(make_topic: Callable[..., str]) -> dict[str, str]:
    return {
        "small": make_topic(2, prefix="dls", config=SMALL),
        "other": make_topic(2, prefix="dlo"),
        "dead": make_topic(1, prefix="dlq"),
    }


def poisoned(topics: dict[str, str]) -> pa.RecordBatch:
    """Twelve rows: six good, and one of each row error the connector sets aside."""
    rows: list[dict[str, Any]] = [
        {"topic": topics["small"], "value": b"g0", "partition": None, "headers": []},
        {"topic": topics["small"], "value": BIG, "partition": None, "headers": []},  # 1 too large
        {"topic": topics["other"], "value": b"g2", "partition": 1, "headers": []},
        {"topic": None, "value": b"b3", "partition": None, "headers": []},  # 3 null topic
        {"topic": topics["other"], "value": b"b4", "partition": 9, "headers": []},  # 4 partition
        {"topic": "no-such-topic-dl", "value": b"b5", "partition": None, "headers": []},  # 5
        {"topic": "bad name!", "value": b"b6", "partition": None, "headers": []},  # 6 topic name
        {"topic": topics["other"], "value": b"g7", "partition": None, "headers": [("h", b"v")]},
        {"topic": topics["other"], "value": b"b8", "partition": None, "headers": [(None, b"v")]},
        {"topic": topics["other"], "value": b"g9", "partition": -1, "headers": None},  # 9 neg.
        {"topic": topics["small"], "value": b"g10", "partition": 0, "headers": None},
        {"topic": topics["other"], "value": b"g11", "partition": 0, "headers": None},
    ]
    rows[9]["value"] = b"b9"
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.record_batch(
        {
            "topic": pa.array([r["topic"] for r in rows], pa.string()),
            "value": pa.array([r["value"] for r in rows], pa.binary()),
            "partition": pa.array([r["partition"] for r in rows], pa.int32()),
            "headers": pa.array(
                [
                    None
                    if r["headers"] is None
                    else [{"key": k, "value": v} for k, v in r["headers"]]
                    for r in rows
                ],
                pa.list_(header),
            ),
        }
    )


EXPECTED = {
    1: ("too_large", "MSG_SIZE_TOO_LARGE", "value"),
    3: ("invalid_value", None, "topic"),
    4: ("invalid_value", "_UNKNOWN_PARTITION", "partition"),
    5: ("invalid_value", "UNKNOWN_TOPIC_OR_PART", "topic"),
    6: ("invalid_value", "TOPIC_EXCEPTION", "topic"),
    8: ("invalid_value", None, "headers"),
    9: ("invalid_value", "_UNKNOWN_PARTITION", "partition"),
}


def routing_sink(kafka_broker: KafkaBroker, name: str, dead: str, **kwargs: Any) -> KafkaSink:
    return KafkaSink(
        name,
        bootstrap_servers=kafka_broker.bootstrap_servers,
        control_topic=f"{dead}-ctl",
        operation_timeout=15.0,
        producer_config=PRODUCER,
        **kwargs,
    )


def test_each_row_error_class_is_set_aside_once_and_the_good_records_written_once(
    kafka_broker: KafkaBroker, routed: dict[str, str], read_topic: Callable[..., list[Record]]
) -> None:
    sink = routing_sink(
        kafka_broker,
        "dl-classes",
        routed["dead"],
        bad_rows="dead_letter",
        dead_letter_topic=routed["dead"],
    )
    runner = LocalRunner(sink)
    metrics = runner.run_batch(0, [[poisoned(routed)]])
    assert metrics.dead_lettered == len(EXPECTED)
    good = sorted(r.value for t in ("small", "other") for r in read_topic(routed[t]) if r.value)
    assert good == [b"g0", b"g10", b"g11", b"g2", b"g7"]
    records = read_topic(routed["dead"])
    letters = letters_of(records)
    assert sorted(d.position for d in letters) == sorted(EXPECTED)
    for record, letter in zip(records, letters, strict=True):
        assert (letter.error_class, letter.code, letter.column) == EXPECTED[letter.position]
        assert (letter.sink, letter.batch_id, letter.partition_id) == ("dl-classes", 0, 0)
        assert record.key == f"dl-classes/0/0/{letter.position}".encode()
        headers = dict(record.headers)
        assert headers["twophase.error.class"] == letter.error_class.encode()
        assert headers["twophase.position"] == str(letter.position).encode()
        assert json.loads(record.value or b"")["row"]["value"] == letter.values()["value"]
    big = next(d for d in letters if d.position == 1)
    assert "max.message.bytes=20000" in big.message


def test_a_replay_after_a_driver_crash_writes_neither_records_nor_letters_twice(
    kafka_broker: KafkaBroker, routed: dict[str, str], read_topic: Callable[..., list[Record]]
) -> None:
    sink = routing_sink(
        kafka_broker,
        "dl-crash",
        routed["dead"],
        bad_rows="dead_letter",
        dead_letter_topic=routed["dead"],
    )
    runner = LocalRunner(sink)
    batch = poisoned(routed)
    halves = [[batch.slice(0, 6)], [batch.slice(6)]]
    crash = runner.crash_at("phase1_done", 0)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, halves)
    assert crash.fired
    runner.restart()
    runner.run_batch(0, halves)
    good = sorted(r.value for t in ("small", "other") for r in read_topic(routed[t]) if r.value)
    assert good == [b"g0", b"g10", b"g11", b"g2", b"g7"]
    assert len(letters_of(read_topic(routed["dead"]))) == len(EXPECTED)


def test_bad_rows_fail_is_unchanged(
    kafka_broker: KafkaBroker, routed: dict[str, str], read_topic: Callable[..., list[Record]]
) -> None:
    sink = routing_sink(kafka_broker, "dl-fail", routed["dead"])
    with pytest.raises(DataError, match="null topic") as failed:
        LocalRunner(sink).run_batch(0, [[poisoned(routed).slice(0, 4)]])
    assert failed.value.column == "topic"
    assert read_topic(routed["other"]) == []
    assert read_topic(routed["dead"]) == []


def test_a_batch_error_still_fails_the_batch(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: Callable[..., list[Record]],
) -> None:
    dead = make_topic(1, prefix="dlq")
    sink = routing_sink(
        kafka_broker,
        "dl-batch",
        dead,
        topic="no-such-default-topic",
        bad_rows="dead_letter",
        dead_letter_topic=dead,
    )
    batch = pa.record_batch({"value": pa.array([b"a"], pa.binary())})
    with pytest.raises(ConfigurationError, match="no-such-default-topic"):
        LocalRunner(sink).run_batch(0, [[batch]])
    assert read_topic(dead) == []


def test_a_topic_limit_below_the_producer_batch_size_is_refused_at_open(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(1, prefix="dls", config=SMALL)
    sink = routing_sink(kafka_broker, "dl-open", topic, topic=topic, bad_rows="dead_letter")
    sink.options = sink.options.replace(
        producer_config={**sink.producer_config, "batch.size": 1_000_000}
    )
    batch = pa.record_batch({"value": pa.array([b"a"], pa.binary())})
    with pytest.raises(ConfigurationError, match=r"batch\.size") as failed:
        LocalRunner(sink).run_batch(0, [[batch]])
    assert failed.value.setting == "batch.size"


def test_a_record_over_the_topic_limit_without_dead_letters_fails_on_the_brokers(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: Callable[..., list[Record]],
) -> None:
    # What the screen prevents: the brokers refuse the record set and the transaction dies.
    topic = make_topic(1, prefix="dls", config=SMALL)
    sink = routing_sink(kafka_broker, "dl-topic", topic, topic=topic)
    batch = pa.record_batch({"value": pa.array([b"good", BIG], pa.binary())})
    # Found on the brokers' side, after write() returned: the transaction is aborted.
    with pytest.raises((DataError, AbortRequiredError)):
        LocalRunner(sink).run_batch(0, [[batch]])
    assert read_topic(topic) == []
    # The same with dead letters: the big record is set aside, the good one written.
    name = f"dl-{uuid.uuid4().hex[:8]}"  # its dead-letter topic is created: a new one
    dead_sink = routing_sink(kafka_broker, name, topic, topic=topic, bad_rows="dead_letter")
    LocalRunner(dead_sink).run_batch(0, [[batch]])
    assert [r.value for r in read_topic(topic)] == [b"good"]
    letters = letters_of(read_topic(f"{name}-dead-letters"))
    assert [(d.position, d.error_class) for d in letters] == [(1, "too_large")]


def test_over_max_bad_rows_fails_with_the_count_and_first_errors(
    kafka_broker: KafkaBroker, routed: dict[str, str], read_topic: Callable[..., list[Record]]
) -> None:
    sink = routing_sink(
        kafka_broker,
        "dl-max",
        routed["dead"],
        bad_rows="dead_letter",
        dead_letter_topic=routed["dead"],
        max_bad_rows=3,
    )
    with pytest.raises(DataError, match="max_bad_rows=3") as failed:
        LocalRunner(sink).run_batch(0, [[poisoned(routed)]])
    assert "7 rows were refused" in str(failed.value)
    assert "too_large MSG_SIZE_TOO_LARGE" in str(failed.value)
    assert read_topic(routed["dead"]) == []


# ------------------------------------------------------------------------ redrive
def test_redrive_after_the_topic_limit_is_raised_moves_each_record_exactly_once(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: Callable[..., list[Record]],
) -> None:
    topic = make_topic(2, prefix="dlr", config=SMALL)
    dead = make_topic(1, prefix="dlq")
    sink = routing_sink(
        kafka_broker,
        "dl-redrive",
        dead,
        topic=topic,
        bad_rows="dead_letter",
        dead_letter_topic=dead,
    )
    values = [b"a", BIG, b"b", BIG[::-1], b"c"]
    batch = pa.record_batch(
        {"key": pa.array(["k0", "k1", "k2", "k3", "k4"]), "value": pa.array(values, pa.binary())}
    )
    LocalRunner(sink).run_batch(0, [[batch]])
    letters = list(sink.read_dead_letters())
    assert [d.position for d in letters] == [1, 3]

    # Not fixed yet: both refused again, set aside again (new letters), nothing moved.
    still = sink.redrive_dead_letters(letters)
    assert [(e.row, e.error_class) for e in still] == [(0, "too_large"), (1, "too_large")]
    assert sorted(r.value for r in read_topic(topic)) == [b"a", b"b", b"c"]
    letters = list(sink.read_dead_letters())
    assert [d.position for d in letters] == [1, 3]
    with pytest.raises(ValueError, match="oldest pending"):
        sink.redrive_dead_letters(letters[1:])

    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})  # kept alive
    admin.incremental_alter_configs(
        [
            ConfigResource(
                ResourceType.TOPIC,
                topic,
                incremental_configs=[
                    ConfigEntry(
                        "max.message.bytes", "100000", incremental_operation=AlterConfigOpType.SET
                    )
                ],
            )
        ]
    )[ConfigResource(ResourceType.TOPIC, topic)].result()
    assert sink.redrive_dead_letters(letters[:1]) == []
    assert [d.position for d in sink.read_dead_letters()] == [3]
    assert sink.redrive_dead_letters(list(sink.read_dead_letters())) == []
    assert list(sink.read_dead_letters()) == []
    records = read_topic(topic)
    assert sorted((r.key, r.value) for r in records) == sorted(
        (f"k{i}".encode(), v) for i, v in enumerate(values)
    )
    # Done is done: a redrive of the same letters again is refused, writes nothing.
    with pytest.raises(ValueError, match="pending"):
        sink.redrive_dead_letters(letters[:1])
    assert len(read_topic(topic)) == len(values)


def test_the_twophase_command_lists_and_redrives_a_kafka_sinks_dead_letters(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: Callable[..., list[Record]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from twophase._cli._commands import main

    topic = make_topic(1, prefix="dlr", config=SMALL)
    dead = make_topic(1, prefix="dlq")
    sink = routing_sink(
        kafka_broker, "dl-cli", dead, topic=topic, bad_rows="dead_letter", dead_letter_topic=dead
    )
    batch = pa.record_batch({"value": pa.array([b"a", BIG, b"b"], pa.binary())})
    LocalRunner(sink).run_batch(0, [[batch]])
    options = {
        "bootstrap_servers": kafka_broker.bootstrap_servers,
        "topic": topic,
        "bad_rows": "dead_letter",
        "dead_letter_topic": dead,
        "control_topic": sink.control_topic,
        "producer_config": json.dumps(PRODUCER),
    }
    args = ["--sink", "dl-cli", "--target", "twophase.connectors.kafka:KafkaSink"]
    for key, value in options.items():
        args += ["-o", f"{key}={value}"]
    assert main(["dead-letters", "list", *args]) == 0
    assert "too_large" in capsys.readouterr().out
    assert main(["dead-letters", "redrive", *args, "--yes"]) == 1  # still refused
    assert sorted(r.value for r in read_topic(topic)) == [b"a", b"b"]
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "100000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result()
    assert main(["dead-letters", "redrive", *args, "--yes"]) == 0
    assert sorted(r.value for r in read_topic(topic)) == sorted([b"a", b"b", BIG])
    assert main(["dead-letters", "redrive", *args, "--yes"]) == 0
    assert "no dead letters to redrive" in capsys.readouterr().out
    assert len(read_topic(topic)) == 3


def test_a_redrive_that_fails_before_its_commit_moves_nothing_and_a_second_moves_all_once(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: Callable[..., list[Record]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from twophase.connectors.kafka import _redrive

    topic = make_topic(1, prefix="dlr")
    dead = make_topic(1, prefix="dlq")
    sink = routing_sink(
        kafka_broker, "dl-atomic", dead, bad_rows="dead_letter", dead_letter_topic=dead
    )
    # Rows with a null topic: set aside; the redriving sink has the topic option.
    batch = pa.record_batch(
        {"topic": pa.array([topic, None, None], pa.string()), "value": [b"a", b"b", b"c"]}
    )
    LocalRunner(sink).run_batch(0, [[batch]])
    fixed = routing_sink(
        kafka_broker, "dl-atomic", dead, topic=topic, bad_rows="dead_letter", dead_letter_topic=dead
    )
    letters = list(fixed.read_dead_letters())
    assert [d.position for d in letters] == [1, 2]
    fired = []

    def crash(*args: Any, **kwargs: Any) -> None:
        fired.append(1)
        raise RuntimeError("killed before the commit")

    with monkeypatch.context() as patch:
        patch.setattr(_redrive, "retry_locally", crash)  # send_offsets, then the commit
        with pytest.raises(RuntimeError, match="killed"):
            fixed.redrive_dead_letters(letters)
    assert fired, "the fault did not fire"
    assert [r.value for r in read_topic(topic)] == [b"a"]
    assert list(fixed.read_dead_letters()) == letters
    assert fixed.redrive_dead_letters(letters) == []
    assert sorted(r.value for r in read_topic(topic)) == [b"a", b"b", b"c"]
    assert list(fixed.read_dead_letters()) == []


# ------------------------------------------------------------------ a compacted topic
def test_a_null_key_into_a_compacted_topic_is_set_aside_not_the_whole_transaction(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: Callable[..., list[Record]],
) -> None:
    """The brokers refuse a record without a key in a ``cleanup.policy=compact`` topic, and
    the transaction with it: the screen sets the row aside first. A key in another topic
    may be null."""
    compacted = make_topic(2, prefix="dlc", config={"cleanup.policy": "compact,delete"})
    other = make_topic(1, prefix="dlo")
    dead = make_topic(1, prefix="dlq")
    sink = routing_sink(
        kafka_broker, "dl-compact", dead, bad_rows="dead_letter", dead_letter_topic=dead
    )
    batch = pa.record_batch(
        {
            "topic": pa.array([compacted, compacted, other, compacted], pa.string()),
            "key": pa.array([b"k0", None, None, b"k3"], pa.binary()),
            "value": pa.array([b"g0", b"b1", b"g2", b"g3"], pa.binary()),
        }
    )
    metrics = LocalRunner(sink).run_batch(0, [[batch]])
    assert metrics.dead_lettered == 1
    assert sorted((r.key, r.value) for r in read_topic(compacted)) == [
        (b"k0", b"g0"),
        (b"k3", b"g3"),
    ]
    assert [(r.key, r.value) for r in read_topic(other)] == [(None, b"g2")]
    letters = letters_of(read_topic(dead))
    assert [(d.position, d.error_class, d.column) for d in letters] == [(1, "invalid_value", "key")]
    assert "cleanup.policy" in letters[0].message
    assert compacted in letters[0].message


def test_a_wrapper_that_drops_the_refused_rows_fails_the_partition_and_loses_nothing(
    kafka_broker: KafkaBroker, routed: dict[str, str], read_topic: Callable[..., list[Record]]
) -> None:
    """A wrapper of write() that forgets its return value: the screened records would be
    neither produced nor dead letters; the transaction is refused before it commits."""
    sink = routing_sink(
        kafka_broker,
        "dl-dropped",
        routed["dead"],
        bad_rows="dead_letter",
        dead_letter_topic=routed["dead"],
    )
    inner = KafkaSink.write

    def write(self: Any, txn: Any, batch: pa.RecordBatch) -> None:
        inner(self, txn, batch)  # the refused rows it returns are dropped

    sink.__class__ = type("Dropping", (KafkaSink,), {"write": write})
    with pytest.raises(ConfigurationError, match=r"refused \d+ row.* but 0 reached") as caught:
        LocalRunner(sink, max_task_failures=1).run_batch(0, [[poisoned(routed)]])
    assert (caught.value.sink, caught.value.setting) == ("dl-dropped", "bad_rows")
    assert read_topic(routed["small"]) == read_topic(routed["other"]) == []  # nothing committed
    assert read_topic(routed["dead"]) == []
