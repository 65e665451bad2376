"""Producer settings: enforced, owned and default values; Spark option translation."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from twophase.connectors.kafka import KafkaSink
from twophase.connectors.kafka._config import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    PRODUCER_DEFAULTS,
    client_config,
    config_key,
    normalise_producer_config,
    validate_topic_name,
)
from twophase.connectors.kafka._spark_options import translate_spark_options
from twophase.errors import ConfigurationError

pytestmark = pytest.mark.unit

BS = "127.0.0.1:9"


def normalise(**conf: Any) -> dict[str, Any]:
    timeout = conf.pop("_timeout", None)
    return normalise_producer_config(
        "s", bootstrap_servers=None, producer_config=conf, transaction_timeout_ms=timeout
    )


def test_defaults_and_enforced_settings_are_applied() -> None:
    conf = normalise(**{"bootstrap.servers": BS})
    assert conf["enable.idempotence"] is True
    assert conf["acks"] == "all"
    assert conf["transaction.timeout.ms"] == DEFAULT_TRANSACTION_TIMEOUT_MS == 60_000
    for key, value in PRODUCER_DEFAULTS.items():
        assert conf[key] == value
    assert "transactional.id" not in conf


def test_user_settings_override_defaults() -> None:
    conf = normalise(**{"bootstrap.servers": BS, "linger.ms": 1, "compression.type": "zstd"})
    assert conf["linger.ms"] == 1
    assert conf["compression.type"] == "zstd"


@pytest.mark.parametrize("value", [False, "false", "0"])
def test_idempotence_off_is_refused(value: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"enable\.idempotence") as info:
        normalise(**{"bootstrap.servers": BS, "enable.idempotence": value})
    assert info.value.setting == "enable.idempotence"


@pytest.mark.parametrize("key", ["acks", "request.required.acks"])
@pytest.mark.parametrize("value", ["1", 0, "0", 1])
def test_acks_other_than_all_are_refused(key: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match="acks=all") as info:
        normalise(**{"bootstrap.servers": BS, key: value})
    assert info.value.setting == key


@pytest.mark.parametrize("value", ["all", "-1", -1])
def test_acks_all_spellings_are_accepted(value: Any) -> None:
    assert normalise(**{"bootstrap.servers": BS, "acks": value})["acks"] == "all"


@pytest.mark.parametrize(
    "key", ["transactional.id", "on_delivery", "delivery.report.only.error", "dr_msg_cb"]
)
def test_settings_owned_by_the_sink_are_refused(key: str) -> None:
    with pytest.raises(ConfigurationError, match="cannot be set") as info:
        normalise(**{"bootstrap.servers": BS, key: "x"})
    assert info.value.setting == key


def test_missing_bootstrap_servers_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no brokers"):
        normalise()


def test_bootstrap_servers_given_twice_must_agree() -> None:
    with pytest.raises(ConfigurationError, match="disagrees"):
        normalise_producer_config(
            "s",
            bootstrap_servers="a:1",
            producer_config={"bootstrap.servers": "b:1"},
            transaction_timeout_ms=None,
        )


def test_transaction_timeout_from_argument_or_config() -> None:
    assert (
        normalise(**{"bootstrap.servers": BS, "_timeout": 5000})["transaction.timeout.ms"] == 5000
    )
    conf = normalise(**{"bootstrap.servers": BS, "transaction.timeout.ms": "7000"})
    assert conf["transaction.timeout.ms"] == 7000
    with pytest.raises(ConfigurationError, match="disagrees"):
        normalise(**{"bootstrap.servers": BS, "transaction.timeout.ms": 7000, "_timeout": 5000})


@pytest.mark.parametrize("value", [0, 999, "soon"])
def test_unusable_transaction_timeouts_are_refused(value: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"transaction\.timeout\.ms") as info:
        normalise(**{"bootstrap.servers": BS, "_timeout": value})
    assert info.value.setting == "transaction.timeout.ms"


def test_client_config_keeps_connection_and_security_only() -> None:
    conf = normalise(
        **{
            "bootstrap.servers": BS,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "ssl.ca.location": "/ca.pem",
            "client.id": "me",
            "compression.type": "lz4",
        }
    )
    shared = client_config(conf)
    assert shared == {
        "bootstrap.servers": BS,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "ssl.ca.location": "/ca.pem",
        "client.id": "me",
    }


def _error_cb(err: Any) -> None:
    pass


def test_config_key_is_stable_across_pickling() -> None:
    conf = {"bootstrap.servers": BS, "error_cb": _error_cb, "linger.ms": 5}
    assert config_key(conf) == config_key(pickle.loads(pickle.dumps(conf)))
    assert config_key(conf) != config_key({**conf, "linger.ms": 6})


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "x" * 250, "a/b", 5])
def test_invalid_topic_names_are_refused(name: Any) -> None:
    with pytest.raises(ConfigurationError, match="not a valid Kafka topic name"):
        validate_topic_name(name, "topic")


def test_spark_options_translate_to_librdkafka() -> None:
    producer, topic = translate_spark_options(
        "s",
        {
            "kafka.bootstrap.servers": BS,
            "kafka.linger.ms": "10",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="alice" password="s\\"cret";',
            "topic": "events",
        },
    )
    assert topic == "events"
    assert producer == {
        "bootstrap.servers": BS,
        "linger.ms": "10",
        "sasl.username": "alice",
        "sasl.password": 's"cret',
    }


@pytest.mark.parametrize(
    ("option", "hint"),
    [
        ("kafka.ssl.truststore.location", "ssl.ca.location"),
        ("kafka.value.serializer", "remove the option"),
        ("kafka.buffer.memory", "queue.buffering.max.kbytes"),
        ("kafka.max.request.size", "message.max.bytes"),
    ],
)
def test_java_only_options_are_refused_with_the_replacement(option: str, hint: str) -> None:
    with pytest.raises(ConfigurationError, match=hint) as info:
        translate_spark_options("s", {option: "x"})
    assert info.value.setting == option


def test_unknown_sink_options_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="checkpointLocation"):
        translate_spark_options("s", {"checkpointLocation": "/chk"})


def test_oauth_jaas_config_is_refused_with_a_hint() -> None:
    jaas = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    with pytest.raises(ConfigurationError, match="oauthbearer"):
        translate_spark_options("s", {"kafka.sasl.jaas.config": jaas})


def test_from_spark_options_is_the_one_line_switch() -> None:
    sink = KafkaSink.from_spark_options(
        "events", {"kafka.bootstrap.servers": BS, "topic": "events"}
    )
    assert sink.topic == "events"
    assert sink.producer_config["bootstrap.servers"] == BS
    assert sink.control_topic == "events-twophase-markers"


def test_from_spark_options_refuses_settings_given_twice() -> None:
    with pytest.raises(ConfigurationError, match="set them once"):
        KafkaSink.from_spark_options(
            "s",
            {"kafka.bootstrap.servers": BS, "kafka.linger.ms": "5"},
            producer_config={"linger.ms": 1},
        )
    with pytest.raises(ConfigurationError, match="set it once"):
        KafkaSink.from_spark_options("s", {"kafka.bootstrap.servers": BS, "topic": "a"}, topic="b")


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"topic": "bad topic"}, "topic"),
        ({"control_topic": "x/y"}, "control_topic"),
        ({"topic": "same", "control_topic": "same"}, "control_topic"),
        ({"transactional_id_prefix": "has space"}, "transactional_id_prefix"),
        ({"control_topic_partitions": 0}, "control_topic_partitions"),
        ({"control_topic_replication_factor": 0}, "control_topic_replication_factor"),
        ({"operation_timeout": 0}, "operation_timeout"),
        ({"local_retries": 0}, "local_retries"),
        # bool is an int to Python, and a string is not a number: both are refused by name
        ({"producer_lanes": True}, "producer_lanes"),
        ({"producer_lanes": "4"}, "producer_lanes"),
        ({"producer_lanes": 0}, "producer_lanes"),
        ({"producer_lanes": 2.0}, "producer_lanes"),
        ({"control_topic_partitions": "3"}, "control_topic_partitions"),
        ({"control_topic_replication_factor": "-1"}, "control_topic_replication_factor"),
        ({"control_topic_replication_factor": True}, "control_topic_replication_factor"),
        ({"operation_timeout": "30"}, "operation_timeout"),
        ({"operation_timeout": float("nan")}, "operation_timeout"),
        ({"local_retries": "3"}, "local_retries"),
        ({"local_retries": None}, "local_retries"),
        ({"max_partitions": 0}, "max_partitions"),
        ({"max_partitions": "16"}, "max_partitions"),
    ],
)
def test_sink_arguments_are_validated(kwargs: dict[str, Any], setting: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        KafkaSink("s", bootstrap_servers=BS, **kwargs)
    assert info.value.setting == setting
    assert info.value.sink == "s"


def test_transactional_ids_are_per_identity_and_slot() -> None:
    sink = KafkaSink("orders", bootstrap_servers=BS, transactional_id_prefix="team-a-")
    assert sink.transactional_id("orders.0123456789abcdef", 3) == "team-a-orders.0123456789abcdef-3"
    assert sink.transactional_id("orders.0123456789abcdef", 3) != sink.transactional_id(
        "orders.0123456789abcdef", 4
    )


def test_max_partitions_bounds_the_transactions_of_a_batch() -> None:
    assert KafkaSink("s", bootstrap_servers=BS).max_transactions_per_batch is None
    sink = KafkaSink.from_spark_options(
        "s", {"kafka.bootstrap.servers": BS, "topic": "t"}, max_partitions=16
    )
    assert sink.max_transactions_per_batch == 16
