"""MariaDB through PyMySQL: the connection URL and keywords, the server check, sessions.

PyMySQL is pure Python: it installs from a wheel anywhere Spark runs, with no
compiler and no C library (``docs/mariadb.md`` says why it was chosen).
Its errors are mapped onto :mod:`twophase.errors` by :mod:`._errors`.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

from twophase.errors import (
    ConfigurationError,
)

from .._config import ConnectionConfig
from .._network import NetworkBounds

__all__ = [
    "PYMYSQL",
    "check_server_version",
    "parse_url",
]

#: Keywords a MariaDB connection accepts (passed to ``pymysql.connect``).
CONNECT_KEYS = frozenset(
    {
        "host",
        "port",
        "user",
        "password",
        "database",
        "unix_socket",
        "ssl_ca",
        "ssl_cert",
        "ssl_key",
        "ssl_verify_cert",
        "ssl_verify_identity",
        "ssl_disabled",
        "read_timeout",
        "write_timeout",
    }
)
_INT_KEYS = frozenset({"port", "read_timeout", "write_timeout"})
_BOOL_KEYS = frozenset({"ssl_verify_cert", "ssl_verify_identity", "ssl_disabled"})


def parse_url(url: str) -> dict[str, str]:
    """Read ``mysql://user:password@host:port/database?ssl_ca=...`` (or ``mariadb://``).

    Parameters
    ----------
    url
        The connection URL. User and password are percent-decoded.

    Returns
    -------
    dict
        Connection keywords (strings).

    Raises
    ------
    ConfigurationError
        Another scheme, or an unknown query parameter. The message never quotes
        the URL, which may hold the password.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        raise ConfigurationError(
            "the url is not a valid mysql:// or mariadb:// URL (not quoted: it may hold the "
            "password)",
            setting="url",
        ) from None
    if parts.scheme not in ("mysql", "mariadb"):
        raise ConfigurationError(
            f"the url must start with mysql:// or mariadb://, not {parts.scheme or '(none)'}://",
            setting="url",
        )
    params: dict[str, str] = {}
    if parts.hostname:
        params["host"] = parts.hostname
    if port is not None:
        params["port"] = str(port)
    if parts.username:
        params["user"] = urllib.parse.unquote(parts.username)
    if parts.password is not None:
        params["password"] = urllib.parse.unquote(parts.password)
    database = urllib.parse.unquote(parts.path.lstrip("/"))
    if database:
        params["database"] = database
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        params[key] = value
    check_keys(params)
    return params


def check_keys(params: Iterable[str]) -> None:
    """Refuse connection keywords PyMySQL would not understand.

    Parameters
    ----------
    params
        The keywords.

    Raises
    ------
    ConfigurationError
        Naming the first unknown keyword and the accepted ones.
    """
    for key in params:
        if key not in CONNECT_KEYS:
            raise ConfigurationError(
                f"unknown MariaDB connection parameter {key!r}; accepted: "
                f"{', '.join(sorted(CONNECT_KEYS))}",
                setting=key,
            )


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


_connection_class: Any = None


def _pymysql_connection() -> Any:
    """PyMySQL's connection class, sharing the context of TLS-if-offered between connections.

    PyMySQL (1.2.4 here) builds an SSL context for every connection (TLS when
    the server offers it, no verification: its "preferred" mode), which
    loads the system's CA certificates again each time: 16 ms of a 17 ms
    connect, measured here. Without TLS options that context is always the
    same, so one per process serves; a context built from the user's
    ``ssl_*`` options (files that may be rotated) is still built per
    connection.
    """
    global _connection_class
    if _connection_class is None:
        import pymysql.connections

        base = pymysql.connections.Connection
        preferred: list[Any] = []

        class Connection(base):  # type: ignore[misc, valid-type]
            def _create_ssl_ctx(self, sslp: Any) -> Any:
                if sslp == {}:
                    if not preferred:
                        preferred.append(super()._create_ssl_ctx(sslp))
                    return preferred[0]
                return super()._create_ssl_ctx(sslp)

        _connection_class = Connection if hasattr(base, "_create_ssl_ctx") else base
    return _connection_class


def _connect_within(conn: Any, seconds: float) -> None:
    """Run PyMySQL's connect with its handshake's reads bounded by ``seconds``.

    PyMySQL reads every packet with the timeout its ``read_timeout`` keyword
    set (the attribute ``_read_timeout``, ``None`` by default), and resets the
    socket's timeout whenever that attribute changes: the handshake reads with
    the bound, and later reads with the user's ``read_timeout`` again.
    """
    user = getattr(conn, "_read_timeout", None)
    conn._read_timeout = seconds if user is None else min(user, seconds)
    try:
        conn.connect()
    finally:
        conn._read_timeout = user


#: The oldest MariaDB that keeps a prepared XA branch when its session ends.
OLDEST_MARIADB = (10, 5)


def check_server_version(version: str, where: str) -> None:
    """Refuse MySQL, and MariaDB older than 10.5, by name, before any statement.

    Parameters
    ----------
    version
        The server's version from the handshake: ``"5.5.5-10.11.19-MariaDB-..."``
        (MariaDB before 11 prefixes ``5.5.5-``), ``"11.4.2-MariaDB"``, or
        MySQL's ``"8.0.36"``.
    where
        The server, for the message (no secret).

    Raises
    ------
    ConfigurationError
        Not MariaDB, or too old. Not restartable: a restart would meet the
        same server.
    """
    if "mariadb" not in version.lower():
        raise ConfigurationError(
            f"the server at {where} is not MariaDB (version {version!r}: MySQL or another "
            "server of the MySQL protocol); the sink supports MariaDB 10.5 or newer only, "
            "because its sessions rely on MariaDB's own variables and XA behaviour "
            "(docs/mariadb.md, 'MySQL is not supported')",
            setting="url",
        )
    found = re.search(r"(\d+)\.(\d+)\.\d+-MariaDB", version, re.IGNORECASE)
    if found is not None:
        release = (int(found.group(1)), int(found.group(2)))
        if release < OLDEST_MARIADB:
            raise ConfigurationError(
                f"the server at {where} is MariaDB {release[0]}.{release[1]} (version "
                f"{version!r}); the sink needs MariaDB 10.5 or newer, the oldest that keeps a "
                "prepared XA branch when the session that prepared it ends",
                setting="url",
            )


class PyMySQLDbApi:
    """MariaDB through PyMySQL (the :class:`~.._pool.DbApi` of the dialect)."""

    name = "pymysql"

    def connect(
        self, config: ConnectionConfig, settings: tuple[tuple[str, str], ...], bounds: NetworkBounds
    ) -> Any:
        """Connect (utf8mb4, autocommit, ``READ COMMITTED``), bound the socket, set the settings.

        The whole handshake -- the server's greeting, TLS, authentication and
        PyMySQL's first statements -- must answer within ``connect_timeout``,
        as libpq's ``connect_timeout`` bounds PostgreSQL's: PyMySQL bounds
        only the TCP connect with it, and reads the handshake with its
        ``read_timeout``, which is no bound at all unless the user set one. A
        server (or a proxy in a failover) that accepts and then stays silent
        would hold the task for ever. PyMySQL has no keepalive keywords: that
        bound goes on its socket, once connected (keepalive and
        ``TCP_USER_TIMEOUT``). Its ``read_timeout`` and ``write_timeout``, when
        given, apply as well.
        """
        kwargs: dict[str, Any] = {}
        for key, value in config.connect_kwargs().items():
            if key in _INT_KEYS:
                kwargs[key] = int(value)
            elif key in _BOOL_KEYS:
                kwargs[key] = _truthy(value)
            else:
                kwargs[key] = value
        conn = _pymysql_connection()(
            **kwargs,
            charset="utf8mb4",
            autocommit=True,
            connect_timeout=bounds.connect_timeout,
            local_infile=True,  # the bulk path (docs/mariadb.md: which servers to trust)
            defer_connect=True,
        )
        _connect_within(conn, bounds.connect_timeout)
        try:
            check_server_version(conn.get_server_info(), config.describe())
            sock = getattr(conn, "_sock", None)  # PyMySQL's socket (a private attribute)
            if sock is not None:
                bounds.apply_to_socket(sock)
            with conn.cursor() as cur:
                # Names and values come from the dialect, never from the user or the data.
                if settings:
                    cur.execute(
                        "SET SESSION " + ", ".join(f"{name} = {value}" for name, value in settings)
                    )
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        except BaseException:
            conn.close()
            raise
        return conn

    def is_closed(self, conn: Any) -> bool:
        """Whether PyMySQL closed the connection (a lost one is found at its next use)."""
        return not conn.open

    def is_idle(self, conn: Any) -> bool:
        """Open, autocommit, and no transaction in progress (the server's status flag)."""
        from pymysql.constants import SERVER_STATUS

        if not conn.open:
            return False
        status = conn.server_status
        return bool(
            status & SERVER_STATUS.SERVER_STATUS_AUTOCOMMIT
            and not status & SERVER_STATUS.SERVER_STATUS_IN_TRANS
        )

    def rollback(self, conn: Any) -> None:
        """``ROLLBACK`` when a transaction is open; an XA branch is left to its owner."""
        from pymysql.constants import SERVER_STATUS

        if conn.open and conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS:
            conn.rollback()


PYMYSQL = PyMySQLDbApi()
