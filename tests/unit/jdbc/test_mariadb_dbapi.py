"""The MariaDB dialect's DB-API layer: PyMySQL's connection class, the server check."""

from __future__ import annotations

import ssl

import pytest

pytest.importorskip("pymysql")

from twophase.connectors.jdbc._mariadb._dbapi import _pymysql_connection, check_server_version
from twophase.errors import ConfigurationError

pytestmark = pytest.mark.unit


def test_the_tls_if_offered_context_is_built_once_and_the_users_tls_options_each_time() -> None:
    cls = _pymysql_connection()
    conn = object.__new__(cls)  # no server needed: only the context factory is exercised
    first = conn._create_ssl_ctx({})
    assert isinstance(first, ssl.SSLContext)
    assert conn._create_ssl_ctx({}) is first
    assert object.__new__(cls)._create_ssl_ctx({}) is first  # shared by every connection
    options = {"ca": None, "check_hostname": False, "verify_mode": False}
    assert conn._create_ssl_ctx(options) is not conn._create_ssl_ctx(options)


@pytest.mark.parametrize(
    ("version", "refused"),
    [
        ("5.5.5-10.11.19-MariaDB-0+deb12u1", None),
        ("11.4.2-MariaDB-log", None),
        ("5.5.5-10.5.0-MariaDB", None),
        ("5.5.5-10.4.34-MariaDB", "MariaDB 10.4"),
        ("8.0.36", "is not MariaDB"),
        ("5.7.44-log", "is not MariaDB"),
    ],
)
def test_the_server_version_is_checked_by_name(version: str, refused: str | None) -> None:
    if refused is None:
        check_server_version(version, "u@h:3306/db")
        return
    with pytest.raises(ConfigurationError, match=refused) as info:
        check_server_version(version, "u@h:3306/db")
    assert info.value.setting == "url"
    assert "u@h:3306/db" in str(info.value)
