"""The network bound reaches real sessions: libpq's keywords, the server's settings, the socket."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from twophase.connectors.jdbc._config import ConnectionConfig
from twophase.connectors.jdbc._mariadb._client import MariaDBClient
from twophase.connectors.jdbc._mariadb._dbapi import parse_url
from twophase.connectors.jdbc._options import JdbcOptions, QualifiedName
from twophase.connectors.jdbc._postgres._client import PostgresClient
from twophase.connectors.jdbc._postgres._dbapi import postgres_connection

pytestmark = pytest.mark.integration


def _options(**kwargs: Any) -> JdbcOptions:
    return JdbcOptions(table=QualifiedName(None, "t"), **kwargs)


def _first_session(client: Any) -> Any:
    conn, _ = client.pool().acquire()
    return conn


def test_postgres_sessions_are_bounded_on_both_ends(postgres_server: Any) -> None:
    client = PostgresClient(_options(network_timeout=20), postgres_connection(postgres_server.dsn))
    conn = _first_session(client)
    try:
        libpq = conn.get_dsn_parameters()
        assert libpq["keepalives"] == "1"
        assert (libpq["keepalives_idle"], libpq["keepalives_interval"]) == ("5", "2")
        assert libpq["tcp_user_timeout"] == "20000"
        with conn.cursor() as cur:
            cur.execute(
                "SELECT current_setting('tcp_user_timeout'), "
                "current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_count')"
            )
            assert cur.fetchone() == ("20000", "5", "8")
    finally:
        conn.close()


def test_the_users_libpq_keywords_win(postgres_server: Any) -> None:
    config = postgres_connection(postgres_server.dsn, keepalives_idle=33, tcp_user_timeout=90000)
    conn = _first_session(PostgresClient(_options(network_timeout=20), config))
    try:
        libpq = conn.get_dsn_parameters()
        assert (libpq["keepalives_idle"], libpq["tcp_user_timeout"]) == ("33", "90000")
        assert libpq["keepalives_interval"] == "2"  # the rest is still the sink's
    finally:
        conn.close()


def test_mariadb_sockets_are_bounded(mariadb_server: Any) -> None:
    config = ConnectionConfig(**parse_url(mariadb_server.url))
    conn = _first_session(MariaDBClient(_options(network_timeout=20), config))
    try:
        sock = conn._sock
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 20000
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 5
    finally:
        conn.close()


def test_a_bound_of_zero_leaves_sessions_as_the_driver_makes_them(postgres_server: Any) -> None:
    client = PostgresClient(_options(network_timeout=0), postgres_connection(postgres_server.dsn))
    conn = _first_session(client)
    try:
        assert "tcp_user_timeout" not in conn.get_dsn_parameters()
    finally:
        conn.close()
