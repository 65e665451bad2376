"""``bad_rows``, ``dead_letter_topic`` and ``max_bad_rows`` on ``KafkaSink`` and its option map."""

from __future__ import annotations

import pickle

import pytest

from twophase.connectors.kafka import KafkaSink
from twophase.errors import ConfigurationError

pytestmark = pytest.mark.unit

BASE = {"bootstrap_servers": "localhost:1", "topic": "events"}


def test_fail_is_the_default_and_has_no_dead_letter_topic() -> None:
    sink = KafkaSink("events", **BASE)
    assert (sink.bad_rows, sink.options.dead_letter_topic) == ("fail", None)
    assert "message.max.bytes" not in sink.producer_config


def test_dead_letter_defaults_to_a_topic_named_after_the_sink_and_doubles_the_producer_limit() -> (
    None
):
    sink = KafkaSink("events", **BASE, bad_rows="dead_letter", max_bad_rows=7)
    assert sink.options.dead_letter_topic == "events-dead-letters"
    assert sink.max_bad_rows == 7
    assert sink.options.record_max_bytes == 1_000_000
    assert sink.producer_config["message.max.bytes"] == 2_065_536
    assert pickle.loads(pickle.dumps(sink)).options == sink.options


def test_a_dead_letter_topic_without_dead_letters_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match="bad_rows='dead_letter'") as caught:
        KafkaSink("events", **BASE, dead_letter_topic="dlq")
    assert (caught.value.sink, caught.value.setting) == ("events", "dead_letter_topic")


@pytest.mark.parametrize("topic", ["events", "events-twophase-markers", "bad name"])
def test_a_dead_letter_topic_that_is_the_target_the_control_topic_or_invalid_is_refused(
    topic: str,
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        KafkaSink("events", **BASE, bad_rows="dead_letter", dead_letter_topic=topic)
    assert caught.value.setting == "dead_letter_topic"


def test_the_option_map_takes_the_three_options_as_strings() -> None:
    sink = KafkaSink.from_spark_options(
        "events",
        {
            "kafka.bootstrap.servers": "localhost:1",
            "topic": "events",
            "bad_rows": "dead_letter",
            "dead_letter_topic": "dlq",
            "max_bad_rows": "12",
        },
    )
    assert (sink.bad_rows, sink.options.dead_letter_topic, sink.max_bad_rows) == (
        "dead_letter",
        "dlq",
        12,
    )
    with pytest.raises(ConfigurationError, match="whole number") as caught:
        KafkaSink.from_spark_options(
            "events", {"kafka.bootstrap.servers": "b:1", "max_bad_rows": "many"}
        )
    assert caught.value.setting == "max_bad_rows"
