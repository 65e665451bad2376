"""Secrets never shown: not in errors, their causes and notes, log records or pickled errors.

Every test sets each kind of secret librdkafka takes -- ``sasl.password``, ``ssl.key.password``,
``ssl.keystore.password``, ``sasl.oauthbearer.client.secret`` and other ``*password*`` /
``*secret*`` properties -- then provokes an error whose path carries the configuration: brokers
that refuse the password, brokers that cannot be reached, a setting librdkafka refuses, a
failure inside a task. The error must say what went wrong and contain none of the secrets
(``repr``, ``str``, traceback with chained causes and notes, the pickled copy), and neither
may any log record, at DEBUG, librdkafka's own included.
"""

from __future__ import annotations

import logging
import pickle
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.admin import AclOperation
from kafka_support import SASL_PASSWORD, SASL_USER, SecuredBroker

from twophase.connectors.kafka import KafkaSink
from twophase.errors import ConfigurationError, RetriableError, TwoPhaseError
from twophase.testing import LocalRunner
from twophase_dev import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WRONG_PASSWORD = "Wr0ng-Kafka-Pa55word-Z9"
KEY_PASSWORD = "Key-Pa55-Q7-ssl-key"
KEYSTORE_PASSWORD = "Keystore-Pa55-R2"
CLIENT_SECRET = "OAuth-Client-Secret-X4"
CUSTOM_SECRET = "Custom-Secret-W8"
SECRETS = (WRONG_PASSWORD, SASL_PASSWORD, KEY_PASSWORD, KEYSTORE_PASSWORD, CLIENT_SECRET)

#: Secret properties librdkafka accepts without using them on a SASL_PLAINTEXT connection.
IDLE_SECRETS = {
    "ssl.key.password": KEY_PASSWORD,
    "ssl.keystore.password": KEYSTORE_PASSWORD,
    "sasl.oauthbearer.client.secret": CLIENT_SECRET,
}


def everything(exc: BaseException) -> str:
    """All an error can show: the traceback with causes and notes, its state, its pickled copy."""
    clone = pickle.loads(pickle.dumps(exc))
    return (
        "".join(traceback.format_exception(exc))
        + repr(exc)
        + repr(exc.__dict__)
        + str(clone)
        + repr(clone)
        + "".join(traceback.format_exception(clone))
    )


def assert_no_secret(text: str, *secrets: str) -> None:
    for secret in secrets or SECRETS:
        assert secret not in text, f"a secret leaked: ...{text[max(0, text.find(secret) - 80) :]}"


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every log record at DEBUG, librdkafka's own included (``librdkafka_logger``)."""
    caplog.set_level(logging.DEBUG)
    return caplog


def librdkafka_logging() -> dict[str, Any]:
    """Route librdkafka's log, configuration dump included, into Python logging."""
    return {"debug": "conf,security,broker", "logger": logging.getLogger("librdkafka")}


def run_one_batch(sink: KafkaSink, tmp_path: Path, **columns: Any) -> LocalRunner:
    runner = LocalRunner(sink, tmp_path / "checkpoint")
    batch = pa.record_batch({"key": pa.array(["1"]), "value": pa.array(["v1"]), **columns})
    runner.run_batch(0, [[batch]])
    return runner


def test_a_wrong_sasl_password_fails_at_once_without_showing_it(
    secured_broker: SecuredBroker, tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    sink = KafkaSink(
        "pw",
        producer_config={
            **secured_broker.client_config(password=WRONG_PASSWORD),
            **IDLE_SECRETS,
            **librdkafka_logging(),
        },
        topic="events",
        operation_timeout=20,
    )
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match="refused the credentials") as info:
        run_one_batch(sink, tmp_path)
    assert time.monotonic() - started < 10, "waited for the timeout instead of the auth error"
    assert "Authentication failed" in str(info.value)
    assert info.value.setting == "sasl.username/sasl.password"
    assert secured_broker.sasl_bootstrap in str(info.value)
    assert_no_secret(everything(info.value))
    assert "sasl.password = [redacted]" in logs.text  # librdkafka's log reached the capture
    assert_no_secret(logs.text)
    assert_no_secret(repr(sink) + str(vars(sink)) + repr(sink.options) + str(vars(sink.options)))
    # ...while the executors still get the real one.
    copy = pickle.loads(pickle.dumps(sink))
    assert copy.producer_config["sasl.password"] == WRONG_PASSWORD


def test_a_jaas_config_from_spark_options_is_never_shown(
    secured_broker: SecuredBroker, tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{SASL_USER}" password="{WRONG_PASSWORD}";'
    )
    options = {
        "kafka.bootstrap.servers": secured_broker.sasl_bootstrap,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": jaas,
        "kafka.ssl.key.password": KEY_PASSWORD,
        "topic": "events",
    }
    sink = KafkaSink.from_spark_options("jaas", options, operation_timeout=20)
    assert sink.producer_config["sasl.password"] == WRONG_PASSWORD  # translated
    assert_no_secret(repr(sink) + str(vars(sink)) + repr(sink.options) + str(vars(sink.options)))
    with pytest.raises(ConfigurationError, match="refused the credentials") as info:
        run_one_batch(sink, tmp_path)
    assert_no_secret(everything(info.value))
    assert_no_secret(logs.text)


def test_an_unreachable_broker_with_passwords_set(
    tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    servers = f"127.0.0.1:{free_ports(1)[0]}"
    sink = KafkaSink(
        "down",
        bootstrap_servers=servers,
        producer_config={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": SASL_USER,
            "sasl.password": WRONG_PASSWORD,
            **IDLE_SECRETS,
        },
        topic="events",
        operation_timeout=2,
    )
    with pytest.raises(RetriableError, match="no broker at bootstrap") as info:
        run_one_batch(sink, tmp_path)
    assert info.value.setting == "bootstrap.servers"
    assert servers in str(info.value)
    assert_no_secret(everything(info.value))
    assert_no_secret(logs.text)


def test_a_misspelt_secret_property_is_named_without_its_value(
    tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    # Refused when the sink is built (librdkafka is asked then), before any batch.
    with pytest.raises(ConfigurationError, match="a property librdkafka does not know") as info:
        KafkaSink(
            "typo",
            bootstrap_servers=f"127.0.0.1:{free_ports(1)[0]}",
            producer_config={"sasl.oauthbearer.client.secrett": CUSTOM_SECRET, **IDLE_SECRETS},
            topic="events",
        )
    assert info.value.setting == "sasl.oauthbearer.client.secrett"  # the key, not its value
    assert_no_secret(everything(info.value), CUSTOM_SECRET, *SECRETS)
    assert_no_secret(logs.text, CUSTOM_SECRET, *SECRETS)


def test_a_setting_librdkafka_refuses_names_the_setting_not_the_secrets(
    tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    sink = KafkaSink(
        "mech",
        bootstrap_servers=f"127.0.0.1:{free_ports(1)[0]}",
        producer_config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "NO-SUCH-MECHANISM",
            "sasl.username": SASL_USER,
            "sasl.password": WRONG_PASSWORD,
            **IDLE_SECRETS,
        },
        topic="events",
    )
    with pytest.raises(ConfigurationError, match="Unsupported SASL mechanism") as info:
        run_one_batch(sink, tmp_path)
    assert info.value.sink == "mech"
    assert_no_secret(everything(info.value))
    assert_no_secret(logs.text)


def test_errors_raised_inside_a_task_do_not_show_the_secrets(
    secured_broker: SecuredBroker, tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    topic = secured_broker.create_topic(1, prefix="sec-task")
    sink = KafkaSink(
        "task",
        producer_config={
            **secured_broker.client_config(),
            **IDLE_SECRETS,
            "message.max.bytes": 10_000,
        },
        control_topic=f"ctl-{uuid.uuid4().hex[:12]}",
        operation_timeout=15,
    )
    secured_broker.grant_sink(sink, topic)
    secured_broker.wait_allowed(topic, AclOperation.WRITE)
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ConfigurationError, match=missing) as unknown:
        run_one_batch(sink, tmp_path, topic=pa.array([missing]))
    sink.topic = topic
    with pytest.raises(TwoPhaseError, match="too large") as too_large:
        LocalRunner(sink, tmp_path / "2").run_batch(
            0, [[pa.record_batch({"value": pa.array([b"x" * 20_000])})]]
        )
    for error in (unknown.value, too_large.value):
        assert error.partition_id == 0  # raised in the task
        assert_no_secret(everything(error))
    assert_no_secret(logs.text)
