"""format("twophase-postgres") options: bad ones are refused by name before any connection."""

from __future__ import annotations

import pytest

from twophase.connectors.jdbc._postgres import FORMAT as POSTGRES_FORMAT
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
        POSTGRES_FORMAT.sink_from_options(options)
    assert caught.value.setting == setting
    assert caught.value.sink == "orders"
    assert text in str(caught.value)


MARIA = {"name": "orders", "table": "shop.orders", "url": "mysql://etl@db.invalid/shop"}


@pytest.mark.parametrize(
    ("options", "setting", "text"),
    [
        ({"name": "orders", "table": "t"}, "url", "needs .option('url'"),
        ({**MARIA, "dsn": "host=x"}, "dsn", "unknown option(s) dsn"),
        ({**MARIA, "mergeSchema": "s"}, "mergeSchema", "unknown option(s) mergeSchema"),
        ({**MARIA, "url": "postgresql://x/y"}, "url", "mysql:// or mariadb://"),
        ({**MARIA, "maxPartitions": "x"}, "maxPartitions", "maxPartitions='x'"),
    ],
)
def test_a_bad_mariadb_option_is_refused_with_its_name(
    options: dict[str, str], setting: str, text: str
) -> None:
    from twophase.connectors.jdbc._mariadb import FORMAT

    with pytest.raises(ConfigurationError) as caught:
        FORMAT.sink_from_options(options)
    assert caught.value.setting == setting
    assert caught.value.sink == "orders"
    assert text in str(caught.value)


def test_the_mariadb_format_builds_the_coordinated_sink_from_strings() -> None:
    from twophase.connectors.jdbc import MariaDBTwoPhaseSink
    from twophase.connectors.jdbc._mariadb import FORMAT

    sink = FORMAT.sink_from_options(
        {**MARIA, "MODE": "upsert", "keyColumns": "id, region", "lockTimeout": "2.5"}
    )
    assert isinstance(sink, MariaDBTwoPhaseSink)
    assert sink.options.key_columns == ("id", "region")
    assert sink.options.lock_timeout == 2.5
    assert sink.options.table.parts() == ("shop", "orders")


def test_the_dead_letter_options_come_through_the_format_as_strings() -> None:
    from twophase.connectors.jdbc._mariadb import FORMAT

    sink = FORMAT.sink_from_options(
        {**MARIA, "badRows": "dead_letter", "deadLetterTable": "dl.bad", "maxBadRows": "7"}
    )
    assert (sink.bad_rows, sink.max_bad_rows) == ("dead_letter", 7)
    assert sink.options.dead_letters.parts() == ("dl", "bad")
    with pytest.raises(ConfigurationError, match="maxBadRows") as caught:
        FORMAT.sink_from_options({**MARIA, "maxBadRows": "many"})
    assert caught.value.setting == "maxBadRows"
