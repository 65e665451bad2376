"""Secrets in the producer configuration are never shown: repr, str, vars, pool keys."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from twophase.connectors.kafka import KafkaSink
from twophase.connectors.kafka._config import (
    SecretConfig,
    client_config,
    config_key,
    is_secret,
)
from twophase.connectors.kafka._spark_options import translate_spark_options

pytestmark = pytest.mark.unit

BS = "127.0.0.1:9"
#: A plugin's properties are librdkafka's only with the plugin's path set.
PLUGIN = {"plugin.library.paths": "/opt/plugins/libsecret.so"}
SECRETS = {
    "sasl.password": "Sasl-Pa55-A1",
    "ssl.key.password": "Key-Pa55-B2",
    "ssl.keystore.password": "Keystore-Pa55-C3",
    "sasl.oauthbearer.client.secret": "Client-Secret-D4",
    "ssl.key.pem": "-----BEGIN PRIVATE KEY-----E5",
    "sasl.oauthbearer.config": "principal=me secret=F6",
    "plugin.api.secret.token": "Plugin-Secret-G7",  # a plugin's (PLUGIN below loads it)
}


def everything_about(sink: KafkaSink) -> str:
    options = sink.options
    return " ".join(
        [
            repr(sink),
            str(sink),
            str(vars(sink)),
            repr(options),
            str(options),
            str(vars(options)),
            repr(sink.producer_config),
            str(sink.producer_config),
            f"{sink.producer_config}",
            repr(options.client_config),
            repr(options.conf_key),
        ]
    )


@pytest.mark.parametrize(
    "key",
    [*SECRETS, "ssl.truststore.password", "sasl.jaas.config", "My.Custom.PASSWORD"],
)
def test_secret_properties_are_recognised(key: str) -> None:
    assert is_secret(key)


@pytest.mark.parametrize(
    "key", ["bootstrap.servers", "sasl.username", "sasl.mechanism", "ssl.key.location"]
)
def test_ordinary_properties_are_shown(key: str) -> None:
    assert not is_secret(key)


def test_no_secret_in_the_repr_str_or_vars_of_the_sink_and_its_options() -> None:
    sink = KafkaSink(
        "s", bootstrap_servers=BS, producer_config={"sasl.username": "alice", **PLUGIN, **SECRETS}
    )
    shown = everything_about(sink)
    for secret in SECRETS.values():
        assert secret not in shown
    assert "'sasl.username': 'alice'" in shown  # the rest stays readable
    assert "'sasl.password': '***'" not in shown  # masked without quotes: not a value
    assert "'sasl.password': ***" in shown
    # librdkafka and the executors get the real values.
    copy = pickle.loads(pickle.dumps(sink))
    assert dict(copy.producer_config) == dict(sink.producer_config)
    assert copy.producer_config["sasl.password"] == SECRETS["sasl.password"]
    assert copy.options.conf_key == sink.options.conf_key  # the executors' pool key
    assert type(copy.producer_config) is SecretConfig
    for secret in SECRETS.values():
        assert secret not in everything_about(copy)


def test_secrets_given_as_spark_options_are_never_shown() -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="Jaas-Pa55-H8";'
    )
    sink = KafkaSink.from_spark_options(
        "s",
        {
            "kafka.bootstrap.servers": BS,
            "kafka.sasl.jaas.config": jaas,
            "kafka.ssl.key.password": "Key-Pa55-I9",
            "topic": "events",
        },
    )
    assert sink.producer_config["sasl.password"] == "Jaas-Pa55-H8"
    shown = everything_about(sink)
    assert "Jaas-Pa55-H8" not in shown
    assert "Key-Pa55-I9" not in shown


def test_the_pool_key_tells_passwords_apart_without_holding_them() -> None:
    one = config_key({"bootstrap.servers": BS, "sasl.password": "pw-1"})
    two = config_key({"bootstrap.servers": BS, "sasl.password": "pw-2"})
    assert one != two
    assert one == config_key({"bootstrap.servers": BS, "sasl.password": "pw-1"})
    assert "pw-1" not in repr(one)


def test_client_config_keeps_the_secrets_masked() -> None:
    shared = client_config({"bootstrap.servers": BS, "sasl.password": "Sasl-Pa55-J1"})
    assert isinstance(shared, SecretConfig)
    assert shared["sasl.password"] == "Sasl-Pa55-J1"
    assert "Sasl-Pa55-J1" not in repr(shared)


@pytest.mark.parametrize(
    ("quoted", "password"),
    [
        ('"päss wörd"', "päss wörd"),
        (r'"a\"b\\c"', 'a"b\\c'),
        ('"tab\tand\nnewline"', "tab\tand\nnewline"),
    ],
)
def test_jaas_passwords_are_unquoted_exactly(quoted: str, password: str) -> None:
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password={quoted};'
    )
    producer: dict[str, Any]
    producer, _ = translate_spark_options("s", {"kafka.sasl.jaas.config": jaas})
    assert producer == {"sasl.username": "alice", "sasl.password": password}
