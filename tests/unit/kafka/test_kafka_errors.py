"""Kafka errors map onto the twophase exception tree, name the context and pickle."""

from __future__ import annotations

import pickle

import pytest
from confluent_kafka import KafkaError, KafkaException

from twophase.connectors.kafka._errors import (
    KafkaErrorContext,
    kafka_error_of,
    map_kafka_error,
    raise_mapped,
    retry_locally,
)
from twophase.errors import (
    AbortRequiredError,
    ConfigurationError,
    DataError,
    FatalError,
    RetriableError,
    TwoPhaseError,
)

pytestmark = pytest.mark.unit

CTX = KafkaErrorContext(
    "orders",
    action="commit",
    batch_id=7,
    partition_id=2,
    topic="events",
    transactional_id="twophase-orders.abc-2",
    transaction_timeout_ms=60_000,
    elapsed=1.5,
)


def err(code: int, **flags: bool) -> KafkaError:
    return KafkaError(code, "broker said no", **flags)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (err(KafkaError._FENCED, fatal=True), FatalError),
        (err(KafkaError.PRODUCER_FENCED), FatalError),
        (err(KafkaError.INVALID_PRODUCER_EPOCH), FatalError),
        (err(KafkaError._STATE, fatal=True), FatalError),
        (err(KafkaError._STATE, txn_requires_abort=True), AbortRequiredError),
        (err(KafkaError._TIMED_OUT, retriable=True), RetriableError),
        (err(KafkaError._TRANSPORT), RetriableError),
        (err(KafkaError.MSG_SIZE_TOO_LARGE), DataError),
        (err(KafkaError.UNKNOWN_TOPIC_OR_PART), ConfigurationError),
        (err(KafkaError._UNKNOWN_TOPIC), ConfigurationError),
        (err(KafkaError._UNKNOWN_PARTITION), DataError),
        (err(KafkaError.TOPIC_AUTHORIZATION_FAILED), ConfigurationError),
        (err(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), ConfigurationError),
        (err(KafkaError.CLUSTER_AUTHORIZATION_FAILED), ConfigurationError),
        (err(KafkaError.INVALID_TRANSACTION_TIMEOUT), ConfigurationError),
        (err(KafkaError.INVALID_RECORD), DataError),
        (err(KafkaError.INVALID_MSG), AbortRequiredError),
    ],
)
def test_kafka_errors_map_onto_the_tree(error: KafkaError, expected: type[Exception]) -> None:
    mapped = map_kafka_error(error, CTX)
    assert type(mapped) is expected
    assert mapped.sink == "orders"
    assert mapped.batch_id == 7
    assert mapped.partition_id == 2
    assert "broker said no" in str(mapped)


def test_every_mapped_error_pickles_with_its_context() -> None:
    for code in (KafkaError._FENCED, KafkaError.MSG_SIZE_TOO_LARGE, KafkaError._TIMED_OUT):
        mapped = map_kafka_error(err(code), CTX)
        clone = pickle.loads(pickle.dumps(mapped))
        assert type(clone) is type(mapped)
        assert str(clone) == str(mapped)
        assert (clone.sink, clone.batch_id, clone.partition_id) == ("orders", 7, 2)


def test_fenced_message_names_zombies_and_shared_identities() -> None:
    text = str(map_kafka_error(err(KafkaError.PRODUCER_FENCED), CTX))
    assert "zombie" in text
    assert "two running queries share this sink identity" in text
    assert "twophase-orders.abc-2" in text


def test_fenced_after_the_timeout_blames_the_timeout() -> None:
    slow = KafkaErrorContext("orders", action="commit", transaction_timeout_ms=1000, elapsed=3.0)
    text = str(map_kafka_error(err(KafkaError.INVALID_PRODUCER_EPOCH), slow))
    assert "longer than transaction.timeout.ms" in text
    assert "zombie" not in text


def test_size_topic_and_acl_errors_name_the_topic_and_the_fix() -> None:
    too_large = map_kafka_error(err(KafkaError.MSG_SIZE_TOO_LARGE), CTX)
    assert "topic 'events'" in str(too_large)
    assert "max.message.bytes" in str(too_large)
    assert too_large.setting == "message.max.bytes"
    invalid = map_kafka_error(err(KafkaError.INVALID_RECORD), CTX)
    assert invalid.column == "key"
    assert "compacted topic" in str(invalid)
    denied = map_kafka_error(err(KafkaError.TOPIC_AUTHORIZATION_FAILED), CTX)
    assert "WRITE" in str(denied)
    assert "topic 'events'" in str(denied)
    tid = map_kafka_error(err(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), CTX)
    assert "PREFIXED" in str(tid)
    assert tid.setting == "transactional_id_prefix"


def test_kafka_error_is_found_behind_a_system_error() -> None:
    cause = KafkaException(err(KafkaError._FENCED, fatal=True))
    try:
        try:
            raise cause
        except KafkaException as exc:
            raise SystemError("returned a result with an exception set") from exc
    except SystemError as outer:
        found = kafka_error_of(outer)
    assert found is not None
    assert found.code() == KafkaError._FENCED
    assert kafka_error_of(ValueError("no")) is None


def test_raise_mapped_chains_the_original() -> None:
    original = KafkaException(err(KafkaError.MSG_SIZE_TOO_LARGE))
    with pytest.raises(DataError) as info:
        raise_mapped(original, CTX)
    assert info.value.__cause__ is original
    with pytest.raises(ValueError, match="other"):
        raise_mapped(ValueError("other"), CTX)


def test_retriable_errors_are_retried_a_bounded_number_of_times() -> None:
    calls: list[int] = []
    sleeps: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise KafkaException(err(KafkaError._TIMED_OUT, retriable=True))
        return "ok"

    assert retry_locally(flaky, CTX, attempts=3, sleep=sleeps.append) == "ok"
    assert len(calls) == 3
    assert sleeps == [0.2, 0.4]

    def always() -> None:
        raise KafkaException(err(KafkaError._TIMED_OUT, retriable=True))

    with pytest.raises(RetriableError, match="gave up after 2 attempts") as info:
        retry_locally(always, CTX, attempts=2, sleep=lambda _s: None)
    assert isinstance(info.value.__cause__, KafkaException)


def test_non_retriable_errors_are_not_retried() -> None:
    calls: list[int] = []

    def fenced() -> None:
        calls.append(1)
        raise KafkaException(err(KafkaError._FENCED, fatal=True))

    with pytest.raises(FatalError):
        retry_locally(fenced, CTX, attempts=5, sleep=lambda _s: None)
    assert len(calls) == 1


def test_errors_that_are_not_from_kafka_pass_through() -> None:
    def boom() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        retry_locally(boom, CTX, attempts=3, sleep=lambda _s: None)
    assert issubclass(FatalError, TwoPhaseError)
