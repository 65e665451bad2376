"""A misspelt keyword or librdkafka property is refused by name when the Kafka sink is built."""

from __future__ import annotations

from typing import Any

import pytest

from twophase.connectors.kafka import KafkaSink
from twophase.errors import ConfigurationError, RetriableError

pytestmark = pytest.mark.unit

BASE: dict[str, Any] = {"bootstrap_servers": "localhost:1", "topic": "events"}


@pytest.mark.parametrize(
    ("keyword", "closest"),
    [("bad_row", "bad_rows"), ("topci", "topic"), ("max_partition", "max_partitions")],
)
def test_an_unknown_keyword_is_a_configuration_error_naming_it(
    keyword: str, closest: str | None
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        KafkaSink("events", **BASE, **{keyword: "x"})
    error = caught.value
    assert not isinstance(error, RetriableError)
    assert (error.sink, error.setting) == ("events", keyword)
    assert ("did you mean" in error.message) is (closest is not None)
    if closest is not None:
        assert f"did you mean {closest!r}?" in error.message


def test_a_property_librdkafka_does_not_know_is_refused_when_the_sink_is_built() -> None:
    with pytest.raises(ConfigurationError, match=r"'linger\.mss', a property librdkafka") as caught:
        KafkaSink("events", **BASE, producer_config={"linger.mss": 5})
    assert caught.value.setting == "linger.mss"


def test_a_value_librdkafka_refuses_names_the_property_and_withholds_the_value() -> None:
    with pytest.raises(ConfigurationError) as caught:
        KafkaSink(
            "events", **BASE, producer_config={"compression.type": "zipp", "sasl.password": "s3"}
        )
    assert caught.value.setting == "compression.codec"  # librdkafka's name of the alias
    assert "zipp" not in str(caught.value)
    assert "s3" not in str(caught.value)


def test_valid_properties_are_taken() -> None:
    sink = KafkaSink("events", **BASE, producer_config={"linger.ms": 5, "compression.type": "lz4"})
    assert sink.options.producer_config["linger.ms"] == 5
