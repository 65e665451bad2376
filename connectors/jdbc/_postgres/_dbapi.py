"""PostgreSQL through psycopg2: connection strings, sessions bounded on the network, pooled.

The dialect's :class:`~.._pool.DbApi`: a libpq DSN or URI is parsed into
keywords (:func:`postgres_connection`), a connection gets libpq's keepalive and
user timeout from the sink's network bounds (:func:`libpq_bounds`) and the
session settings, and the pool asks it whether a session is idle.
"""

from __future__ import annotations

import re
from typing import Any

from twophase.errors import ConfigurationError

from .._config import ConnectionConfig
from .._network import NetworkBounds

__all__ = [
    "LIBPQ_KEYWORDS",
    "PSYCOPG2",
    "Psycopg2DbApi",
    "libpq_bounds",
    "libpq_keyword",
    "parse_dsn",
    "postgres_connection",
]

#: libpq's usual connection keywords, to name the closest to a misspelt one
#: (which keywords are valid, the linked libpq itself says: :func:`libpq_keyword`).
LIBPQ_KEYWORDS = frozenset(
    {
        "application_name",
        "channel_binding",
        "client_encoding",
        "connect_timeout",
        "dbname",
        "gssencmode",
        "host",
        "hostaddr",
        "keepalives",
        "keepalives_count",
        "keepalives_idle",
        "keepalives_interval",
        "options",
        "passfile",
        "password",
        "port",
        "service",
        "sslcert",
        "sslcrl",
        "sslkey",
        "sslmode",
        "sslpassword",
        "sslrootcert",
        "target_session_attrs",
        "tcp_user_timeout",
        "user",
    }
)


def libpq_keyword(keyword: str) -> bool:
    """Tell whether the libpq psycopg2 links takes ``keyword`` as a connection option."""
    import psycopg2

    if keyword in LIBPQ_KEYWORDS:
        return True
    try:
        psycopg2.extensions.make_dsn(**{keyword: "0"})
    except psycopg2.ProgrammingError:
        return False
    return True


def postgres_connection(dsn: str | None = None, **params: object) -> ConnectionConfig:
    """Build the connection parameters of a PostgreSQL sink.

    Any libpq parameter is passed through unchanged (``sslmode``,
    ``sslrootcert``, ``sslcert``, ``sslkey``, ``target_session_attrs``,
    ``keepalives_idle``, ...). Keywords win over the DSN. Parameters not given
    fall back to libpq's own defaults and environment (``PGHOST``,
    ``PGPASSWORD``, ``~/.pgpass``), which is the way to keep a password out of
    the pickled sink altogether.

    Parameters
    ----------
    dsn
        A libpq connection string (``"host=db dbname=app"``) or URI
        (``"postgresql://user@db/app?sslmode=verify-full"``).
    **params
        libpq keywords (``host``, ``port``, ``dbname``, ``user``,
        ``password``, ``sslmode``, ...). ``None`` values are ignored.

    Returns
    -------
    ConnectionConfig
        The parameters.

    Raises
    ------
    ConfigurationError
        The DSN cannot be parsed. The message never quotes the DSN, which may
        hold the password.
    """
    return ConnectionConfig(parse_dsn(dsn) if dsn else None, **params)


def parse_dsn(dsn: str) -> dict[str, str]:
    """Parse a libpq DSN or URI into keywords, withholding what may be the password."""
    import psycopg2.extensions

    try:
        parsed: dict[str, str] = psycopg2.extensions.parse_dsn(dsn)
    except Exception as exc:
        # libpq quotes fragments of the DSN in its message: they may be the
        # password, so every quoted fragment is withheld.
        reason = re.sub(r'"[^"]*"', '"…"', str(exc).strip().splitlines()[0])
        raise ConfigurationError(
            f"the dsn is not a valid libpq connection string or URI ({reason}); "
            "quoted parts of the message are withheld because they may contain the password",
            setting="dsn",
        ) from None
    return parsed


class Psycopg2DbApi:
    """PostgreSQL through psycopg2 (libpq)."""

    name = "psycopg2"

    def connect(
        self, config: ConnectionConfig, settings: tuple[tuple[str, str], ...], bounds: NetworkBounds
    ) -> Any:
        """Connect with libpq, bounded by libpq's keepalive and user timeout; set the settings."""
        import psycopg2

        kwargs = config.connect_kwargs()
        for key, value in libpq_bounds(bounds).items():
            kwargs.setdefault(key, value)  # the user's own keywords win
        conn = psycopg2.connect(**kwargs)
        try:
            conn.autocommit = True
            if conn.server_version < 120000:  # tcp_user_timeout is a setting since 12
                settings = tuple(pair for pair in settings if pair[0] != "tcp_user_timeout")
            if settings:
                with conn.cursor() as cur:
                    # Values go as parameters; names are fixed by the connector.
                    cur.execute(
                        "SELECT " + ", ".join("set_config(%s, %s, false)" for _ in settings),
                        [part for pair in settings for part in pair],
                    )
        except BaseException:
            conn.close()
            raise
        return conn

    def is_closed(self, conn: Any) -> bool:
        """Whether libpq closed the connection."""
        return bool(conn.closed)

    def is_idle(self, conn: Any) -> bool:
        """Autocommit and ``TRANSACTION_STATUS_IDLE``."""
        import psycopg2.extensions as ext

        return bool(
            not conn.closed
            and conn.autocommit
            and conn.info.transaction_status == ext.TRANSACTION_STATUS_IDLE
        )

    def rollback(self, conn: Any) -> None:
        """``ROLLBACK`` unless the session is idle."""
        import psycopg2.extensions as ext

        if not conn.closed and conn.info.transaction_status != ext.TRANSACTION_STATUS_IDLE:
            with conn.cursor() as cur:
                cur.execute("ROLLBACK")


PSYCOPG2 = Psycopg2DbApi()


def libpq_bounds(bounds: NetworkBounds) -> dict[str, str]:
    """Return libpq's keywords for the bounds (``connect_timeout``, ``keepalives*``, ...).

    Parameters
    ----------
    bounds
        The sink's bounds.

    Returns
    -------
    dict
        libpq keywords; ``tcp_user_timeout`` in milliseconds.
    """
    found = {"connect_timeout": str(bounds.connect_timeout)}
    values = bounds.keepalive()
    if values is not None:
        idle, interval, count = values
        found.update(
            keepalives="1",
            keepalives_idle=str(idle),
            keepalives_interval=str(interval),
            keepalives_count=str(count),
            tcp_user_timeout=str(bounds.user_timeout_ms),
        )
    return found
