"""The network bound of the JDBC dialects (``network_timeout``), without a server."""

from __future__ import annotations

import importlib
import socket
import threading
import time

import pytest

from twophase.connectors.jdbc import mariadb_sink, postgres_sink
from twophase.connectors.jdbc._network import NetworkBounds
from twophase.connectors.jdbc._options import JdbcOptions, QualifiedName
from twophase.connectors.jdbc._postgres._dbapi import libpq_bounds
from twophase.errors import ConfigurationError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("seconds", [2, 3, 5, 10, 60, 61.5, 300, 3600])
def test_keepalive_finds_a_dead_peer_within_the_bound(seconds: float) -> None:
    idle, interval, count = NetworkBounds(network_timeout=seconds).keepalive() or (0, 0, 0)
    assert min(idle, interval, count) >= 1
    # Without TCP_USER_TIMEOUT the kernel gives up after idle + interval * count: about the bound.
    assert seconds <= idle + interval * count <= seconds + interval
    # With it, the first probe must leave before the bound ends, or nothing is ever probed.
    assert idle + interval <= max(seconds, 2)


def test_a_bound_of_zero_leaves_the_operating_system_defaults() -> None:
    bounds = NetworkBounds(connect_timeout=7, network_timeout=0)
    assert bounds.keepalive() is None
    assert libpq_bounds(bounds) == {"connect_timeout": "7"}
    assert "off" in bounds.describe()


def test_libpq_gets_keepalives_and_the_user_timeout() -> None:
    assert libpq_bounds(NetworkBounds(connect_timeout=10, network_timeout=60)) == {
        "connect_timeout": "10",
        "keepalives": "1",
        "keepalives_idle": "15",
        "keepalives_interval": "5",
        "keepalives_count": "9",
        "tcp_user_timeout": "60000",
    }


def test_the_bound_goes_on_a_tcp_socket() -> None:
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        client.connect(server.getsockname())
        NetworkBounds(network_timeout=12).apply_to_socket(client)
        assert client.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 3
        assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 1
        assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 9
        assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 12000


def test_a_unix_socket_takes_what_applies_and_no_error() -> None:
    left, right = socket.socketpair()
    with left, right:
        NetworkBounds(network_timeout=5).apply_to_socket(left)


def test_the_server_side_of_the_bound_is_a_session_setting() -> None:
    options = JdbcOptions(table=QualifiedName(None, "t"), network_timeout=20)
    settings = dict(options.session_settings())
    assert settings["tcp_keepalives_idle"] == "5"
    assert settings["tcp_keepalives_interval"] == "2"
    assert settings["tcp_keepalives_count"] == "8"
    assert settings["tcp_user_timeout"] == "20000"
    off = dict(JdbcOptions(table=QualifiedName(None, "t"), network_timeout=0).session_settings())
    assert not {"tcp_user_timeout", "tcp_keepalives_idle"} & set(off)


@pytest.mark.parametrize("value", [-1, 1, 1.5, True, "60", None])
@pytest.mark.parametrize("factory", [postgres_sink, mariadb_sink])
def test_a_bad_network_timeout_is_refused_by_name(value: object, factory: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        factory(  # type: ignore[operator]
            "s", table="t", protocol="markers", host="h", network_timeout=value
        )
    assert caught.value.setting == "network_timeout"


@pytest.mark.parametrize("factory", [postgres_sink, mariadb_sink])
def test_the_factories_default_to_a_minute(factory: object) -> None:
    sink = factory("s", table="t", protocol="markers", host="h")  # type: ignore[operator]
    assert sink.options.bounds == NetworkBounds(connect_timeout=10, network_timeout=60.0)


@pytest.mark.parametrize(
    ("dbapi", "url"),
    [
        ("connectors.jdbc._postgres._dbapi:Psycopg2DbApi", "postgresql://u:p@127.0.0.1:{}/db"),
        ("connectors.jdbc._mariadb._dbapi:PyMySQLDbApi", "mysql://u:p@127.0.0.1:{}/db"),
    ],
    ids=["postgres", "mariadb"],
)
def test_a_server_silent_after_accepting_fails_the_connect_within_connect_timeout(
    dbapi: str, url: str
) -> None:
    """The handshake is part of the connect: a server or proxy that accepts (the kernel does)
    and never greets is a bounded failure, not a task held for ever (PyMySQL bounds only the
    TCP connect with its connect_timeout; the DB-API layer bounds the rest)."""
    module, name = dbapi.split(":")
    connector = getattr(importlib.import_module(f"twophase.{module}"), name)()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        port = silent.getsockname()[1]
        if "postgres" in module:
            sink = postgres_sink("s", table="t", protocol="markers", dsn=url.format(port))
        else:
            sink = mariadb_sink("s", table="t", protocol="markers", url=url.format(port))
        config = sink.connection
        began = time.monotonic()
        outcome: list[BaseException | None] = []

        def connect() -> None:
            try:
                connector.connect(config, (), NetworkBounds(connect_timeout=1, network_timeout=5))
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=connect, daemon=True)
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), "the connect waited for the silent server's greeting"
        took = time.monotonic() - began
        (error,) = outcome
        assert error is not None, "connected to a server that never answered"
        assert took < 4, f"the connect failed only after {took:.1f} s"
