"""The MariaDB driver's PyMySQL connection class."""

from __future__ import annotations

import ssl

import pytest

pytest.importorskip("pymysql")

from twophase.connectors.jdbc._mariadb._driver import _pymysql_connection


def test_the_tls_if_offered_context_is_built_once_and_the_users_tls_options_each_time() -> None:
    cls = _pymysql_connection()
    conn = object.__new__(cls)  # no server needed: only the context factory is exercised
    first = conn._create_ssl_ctx({})
    assert isinstance(first, ssl.SSLContext)
    assert conn._create_ssl_ctx({}) is first
    assert object.__new__(cls)._create_ssl_ctx({}) is first  # shared by every connection
    options = {"ca": None, "check_hostname": False, "verify_mode": False}
    assert conn._create_ssl_ctx(options) is not conn._create_ssl_ctx(options)
