"""Options, connection parameters and password hygiene, without a server."""

from __future__ import annotations

import logging
import pickle
import socket
import traceback

import pytest

from twophase import SinkContext
from twophase.connectors._context import ErrorContext
from twophase.connectors.jdbc import PostgresMarkerSink, PostgresTwoPhaseSink, postgres_sink
from twophase.connectors.jdbc._config import ConnectionConfig
from twophase.connectors.jdbc._options import JdbcOptions, QualifiedName
from twophase.connectors.jdbc._postgres._dbapi import postgres_connection
from twophase.connectors.jdbc._postgres._prepared_capacity import partition_limit, share_slots
from twophase.connectors.jdbc._postgres._prepared_store import PostgresHandle
from twophase.errors import ConfigurationError, RetriableError

pytestmark = pytest.mark.unit

SECRET = "Tr0ub4dor&3-very-secret"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_keywords_win_over_the_dsn_and_libpq_options_pass_through() -> None:
    config = postgres_connection(
        f"host=db port=5432 dbname=app user=etl password={SECRET} sslmode=require",
        port=6543,
        sslrootcert="/etc/ca.pem",
        target_session_attrs="read-write",
    )
    kwargs = config.connect_kwargs()
    assert kwargs["port"] == "6543"
    assert kwargs["host"] == "db"
    assert kwargs["sslmode"] == "require"
    assert kwargs["sslrootcert"] == "/etc/ca.pem"
    assert kwargs["target_session_attrs"] == "read-write"
    assert kwargs["password"] == SECRET
    assert config.get("sslmode") == "require"
    with pytest.raises(KeyError):
        config.get("password")


def test_uri_dsn_is_understood() -> None:
    config = postgres_connection(f"postgresql://etl:{SECRET}@db:5433/app?sslmode=verify-full")
    assert config.describe() == "etl@db:5433/app"
    assert config.get("sslmode") == "verify-full"


@pytest.mark.parametrize(
    "render", [repr, str, lambda c: c.describe(), lambda c: f"{c}", lambda c: f"{c!r}"]
)
def test_connection_config_never_shows_secrets(render: object) -> None:
    config = ConnectionConfig(password=SECRET, sslpassword=SECRET + "2", host="h", user="u")
    text = render(config)  # type: ignore[operator]
    assert SECRET not in text


def test_connection_config_pickles_and_compares() -> None:
    config = ConnectionConfig(host="h", password=SECRET)
    again = pickle.loads(pickle.dumps(config))
    assert again == config
    assert hash(again) == hash(config)
    assert again.connect_kwargs()["password"] == SECRET


def test_bad_dsn_error_withholds_quoted_fragments() -> None:
    with pytest.raises(ConfigurationError) as info:
        postgres_connection(f"host=db password {SECRET}")
    text = "".join(traceback.format_exception(info.value))
    assert SECRET not in text
    assert info.value.setting == "dsn"
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_sink_repr_and_pickle_never_show_the_password() -> None:
    options = JdbcOptions(table=QualifiedName(None, "t"))
    for cls in (PostgresTwoPhaseSink, PostgresMarkerSink):
        sink = cls("s", options, ConnectionConfig(host="h", password=SECRET))
        assert SECRET not in repr(sink)
        assert SECRET not in str(vars(sink))
        copy = pickle.loads(pickle.dumps(sink))
        assert copy.connection == sink.connection
        assert SECRET not in repr(copy)


def test_unreachable_server_at_start_is_retriable_and_secret_free(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    port = closed_port()
    with pytest.raises(RetriableError) as info:
        postgres_sink(
            "s", table="t", host="127.0.0.1", port=port, password=SECRET, connect_timeout=2
        )
    assert f"127.0.0.1:{port}" in str(info.value)
    assert SECRET not in "".join(traceback.format_exception(info.value))
    assert SECRET not in caplog.text
    sink = postgres_sink(
        "s", table="t", host="127.0.0.1", port=port, password=SECRET, protocol="markers"
    )
    with pytest.raises(RetriableError) as again:
        sink.open(SinkContext("s", "ident", "q", "r", "/tmp/log"))
    assert "sink='s'" in str(again.value)
    assert SECRET not in "".join(traceback.format_exception(again.value))
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"mode": "merge"}, "mode"),
        ({"mode": "upsert"}, "key_columns"),
        ({"mode": "cdc", "key_columns": ["op"]}, "cdc_op_column"),
        ({"order_column": "ts"}, "order_column"),
        ({"key_columns": ["a", "a"], "mode": "upsert"}, "key_columns"),
        ({"lock_timeout": -1}, "lock_timeout"),
        ({"max_partitions": 0}, "max_partitions"),
        ({"marker_retention": 1}, "marker_retention"),
        # bool is an int to Python, and a string is not a number: both are refused by name
        ({"marker_retention": "100"}, "marker_retention"),
        ({"marker_retention": True}, "marker_retention"),
        ({"lock_timeout": "30"}, "lock_timeout"),
        ({"statement_timeout": float("nan")}, "statement_timeout"),
        ({"connect_timeout": "10"}, "connect_timeout"),
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"max_partitions": "8"}, "max_partitions"),
        ({"max_partitions": True}, "max_partitions"),
        ({"table": "a.b.c"}, "table"),
        ({"table": "x" * 64}, "table"),
        ({"protocol": "xa"}, "protocol"),
    ],
)
def test_invalid_options_name_the_setting(kwargs: dict[str, object], setting: str) -> None:
    kwargs = {"table": "t", **kwargs}
    with pytest.raises(ConfigurationError) as info:
        postgres_sink(
            "s", host="nowhere.invalid", protocol=kwargs.pop("protocol", "markers"), **kwargs
        )  # type: ignore[arg-type]
    assert info.value.setting == setting


def test_qualified_names_are_literal() -> None:
    assert QualifiedName.parse("Events", "table").parts() == ("Events",)
    assert QualifiedName.parse("app.Events", "table").parts() == ("app", "Events")
    assert QualifiedName.parse(("my.schema", "t.x"), "table").parts() == ("my.schema", "t.x")


def test_handles_are_frozen_and_pickle() -> None:
    handle = PostgresHandle("tp:q:1:2:3", 1, 2, 3, xid=12345, rows=10)
    assert pickle.loads(pickle.dumps(handle)) == handle
    with pytest.raises(AttributeError):
        handle.xid = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("max_prepared", "cap", "limit"),
    [
        (64, None, 48),
        (10, None, 8),
        (4, None, 2),
        (2, None, 1),
        (1, None, 1),
        (64, 8, 8),
        (64, 100, 48),
    ],
)
def test_partition_limit_leaves_headroom(max_prepared: int, cap: int | None, limit: int) -> None:
    assert partition_limit(max_prepared, cap) == limit


def test_the_slots_are_shared_by_the_active_sinks_and_the_arithmetic_is_said() -> None:
    alone = share_slots(64, None, (), ErrorContext("s"))
    assert alone.limit == 48
    assert alone.describe() == "max_prepared_transactions=64, 16 kept free"
    three = share_slots(64, None, ("b", "a"), ErrorContext("s"))
    assert three.limit == 16
    assert "48 shared by 3 coordinated sinks (this one and b, a): 16 each" in three.describe()
    assert share_slots(64, 30, ("a",), ErrorContext("s")).limit == 30  # a cap is the user's


def test_more_active_sinks_than_shareable_slots_fail_at_open_with_the_arithmetic() -> None:
    with pytest.raises(ConfigurationError) as info:
        share_slots(4, None, ("a", "b"), ErrorContext("s"))
    text = str(info.value)
    assert info.value.setting == "max_prepared_transactions"
    assert "max_prepared_transactions=4, 2 kept free, 2 shared by 3 coordinated sinks" in text
    assert "sink='s'" in text
    with pytest.raises(ConfigurationError, match="max_partitions=65 is more than") as capped:
        share_slots(64, 65, (), ErrorContext("s"))
    assert capped.value.setting == "max_partitions"


def test_forced_markers_protocol_does_not_connect(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="twophase.connectors.jdbc")
    sink = postgres_sink(
        "s", table="t", host="nowhere.invalid", protocol="markers", password=SECRET
    )
    assert isinstance(sink, PostgresMarkerSink)
    assert "protocol 'markers' (forced)" in caplog.text
    assert SECRET not in caplog.text
