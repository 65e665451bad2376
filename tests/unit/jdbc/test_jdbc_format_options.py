"""format("twophase-postgres") options: bad ones are refused by name before any connection."""

from __future__ import annotations

import pytest

from twophase.connectors.jdbc._format import postgres_sink_from_options
from twophase.errors import ConfigurationError

pytestmark = pytest.mark.unit

BASE = {"name": "orders", "table": "public.orders", "dsn": "host=db.invalid"}


@pytest.mark.parametrize(
    ("options", "setting", "text"),
    [
        ({"name": "orders", "table": "t"}, "dsn", "needs .option('dsn'"),
        ({**BASE, "colour": "red"}, "colour", "unknown option(s) colour"),
        ({**BASE, "LOCKTIMEOUT": "soon"}, "lockTimeout", "lockTimeout='soon'"),
        ({**BASE, "createTable": "yes"}, "createTable", "expected true or false"),
        ({**BASE, "maxPartitions": "4.5"}, "maxPartitions", "maxPartitions='4.5'"),
    ],
)
def test_a_bad_option_is_refused_with_its_name(
    options: dict[str, str], setting: str, text: str
) -> None:
    with pytest.raises(ConfigurationError, match="format") as caught:
        postgres_sink_from_options(options)
    assert caught.value.setting == setting
    assert caught.value.sink == "orders"
    assert text in str(caught.value)
