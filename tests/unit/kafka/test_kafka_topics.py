"""The up-front check of a ``topic`` column: missing, forbidden and unwritable topics, caching."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclOperation

from twophase import TaskContext
from twophase.connectors.kafka import KafkaSink, _topics
from twophase.connectors.kafka._topics import check_topic_column
from twophase.errors import ConfigurationError, DataError, RetriableError

pytestmark = pytest.mark.unit

ALL = [AclOperation.DESCRIBE, AclOperation.WRITE]


class Described:
    def __init__(self, name: str, operations: list[AclOperation] | None) -> None:
        self.name = name
        self.authorized_operations = operations


class Future:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    def result(self) -> Any:
        if isinstance(self.outcome, KafkaError):
            raise KafkaException(self.outcome)
        return self.outcome


class StubAdmin:
    """Answers describe_topics from ``topics``: name -> operations, or a KafkaError."""

    topics: ClassVar[dict[str, Any]] = {}
    requests: ClassVar[list[str]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf

    def describe_topics(self, topics: Any, **kwargs: Any) -> dict[str, Future]:
        assert kwargs["include_authorized_operations"] is True
        out = {}
        for name in topics.topic_names:
            StubAdmin.requests.append(name)
            answer = StubAdmin.topics.get(
                name, KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic")
            )
            found = answer if isinstance(answer, KafkaError) else Described(name, answer)
            out[name] = Future(found)
        return out


@pytest.fixture(autouse=True)
def stub_admin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    _topics.clear()
    StubAdmin.topics = {"a": ALL, "b": ALL}
    StubAdmin.requests = []
    monkeypatch.setattr(_topics, "AdminClient", StubAdmin)
    yield
    _topics.clear()


SINK = KafkaSink("s", bootstrap_servers="127.0.0.1:9")


def check(topics: list[str | None], batch_id: int = 4, partition_id: int = 1) -> None:
    context = TaskContext("s", "s.0123456789abcdef", batch_id, partition_id, 0)
    check_topic_column(pa.array(topics, pa.string()), options=SINK.options, context=context)


def test_topics_that_exist_and_may_be_written_pass() -> None:
    check(["a", "b", "a", None])
    assert sorted(StubAdmin.requests) == ["a", "b"]  # once per distinct topic


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "unknown"), "which does not exist"),
        (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied"), "may not describe"),
        ([AclOperation.DESCRIBE, AclOperation.READ], "may describe but not write"),
    ],
    ids=["missing", "not-describable", "not-writable"],
)
def test_a_topic_that_cannot_be_written_is_named_with_the_column(answer: Any, match: str) -> None:
    StubAdmin.topics["bad"] = answer
    with pytest.raises(ConfigurationError, match=match) as info:
        check(["a", None, "bad"])
    error = info.value
    assert (error.column, error.sink, error.batch_id, error.partition_id) == ("topic", "s", 4, 1)
    assert "topic 'bad' (first at row 2 of the record batch)" in str(error)


def test_brokers_that_do_not_report_operations_are_trusted() -> None:
    StubAdmin.topics["old"] = None
    check(["old"])


def test_an_invalid_topic_name_is_a_data_error_without_a_request() -> None:
    with pytest.raises(DataError, match="not a valid Kafka topic name") as info:
        check(["a b"])
    assert info.value.column == "topic"
    assert StubAdmin.requests == []


def test_a_failed_request_is_mapped() -> None:
    StubAdmin.topics["slow"] = KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)
    with pytest.raises(RetriableError, match="describing the topic"):
        check(["slow"])


def test_topics_found_are_remembered_for_the_batch_only() -> None:
    check(["a"], batch_id=4, partition_id=0)
    check(["a", "b"], batch_id=4, partition_id=1)
    assert StubAdmin.requests == ["a", "b"]
    check(["a"], batch_id=5)
    assert StubAdmin.requests == ["a", "b", "a"]


def test_a_missing_topic_is_looked_up_again_once_created() -> None:
    StubAdmin.topics.pop("b")
    with pytest.raises(ConfigurationError):
        check(["b"])
    StubAdmin.topics["b"] = ALL  # created
    check(["b"])
    assert StubAdmin.requests == ["b", "b"]


def test_a_column_of_nulls_asks_nothing() -> None:
    check([None, None])
    check_topic_column(
        pa.nulls(2),
        options=SINK.options,
        context=TaskContext("s", "s.0123456789abcdef", 4, 1, 0),
    )
    assert StubAdmin.requests == []
