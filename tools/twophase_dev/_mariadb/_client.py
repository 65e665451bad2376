"""Talking to a MariaDB server from the tests: its URLs, and the prepared XA transactions.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit

from twophase_dev._host._ports import LOOPBACK

__all__ = ["parse_url", "prepared_xids", "rollback_prepared"]

#: URL schemes accepted by :meth:`MariaDBServer.external`.
_SCHEMES = ("mysql", "mariadb")


def prepared_xids(recovered: list[tuple[Any, ...]]) -> list[str]:
    """Return the gtrids of the rows of ``XA RECOVER`` (the branch qualifier cut off), sorted."""
    xids = []
    for _format_id, gtrid_length, _bqual_length, data in recovered:
        raw = data if isinstance(data, bytes) else str(data).encode()
        xids.append(raw[: int(gtrid_length)].decode(errors="replace"))
    return sorted(xids)


def rollback_prepared(conn: Any, xid_pattern: str) -> list[str]:
    """Roll back the prepared XA transactions whose gtrid matches ``xid_pattern``; return them.

    Every format id and branch qualifier is matched (``XA ROLLBACK X'gtrid', X'bqual',
    formatID``), on autocommit connection ``conn``, which is closed after.
    """
    pattern = re.compile(xid_pattern)
    done = []
    try:
        with conn.cursor() as cur:
            cur.execute("XA RECOVER")
            for format_id, gtrid_length, _bqual_length, data in cur.fetchall():
                raw = data if isinstance(data, bytes) else str(data).encode()
                gtrid, bqual = raw[: int(gtrid_length)], raw[int(gtrid_length) :]
                name = gtrid.decode(errors="replace")
                if pattern.match(name):
                    cur.execute(f"XA ROLLBACK X'{gtrid.hex()}', X'{bqual.hex()}', {int(format_id)}")
                    done.append(name)
    finally:
        conn.close()
    return done


def parse_url(url: str) -> dict[str, Any]:
    """Split a ``mysql://`` or ``mariadb://`` URL into ``pymysql.connect`` arguments.

    Parameters
    ----------
    url : str
        ``mysql://user[:password]@host[:port]/database``.

    Returns
    -------
    dict
        ``host``, ``port`` (3306 if absent), ``user``, ``password`` (empty if absent),
        ``database``.

    Raises
    ------
    ValueError
        If the scheme is not ``mysql`` or ``mariadb``, or the user or database is missing.
    """
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise ValueError(f"a MariaDB URL must start with mysql:// or mariadb://, got {url!r}")
    database = parts.path.lstrip("/")
    if not parts.username or not database:
        raise ValueError(
            f"a MariaDB URL needs a user and a database (mysql://user@host/db): {url!r}"
        )
    return {
        "host": parts.hostname or LOOPBACK,
        "port": parts.port or 3306,
        "user": unquote(parts.username),
        "password": unquote(parts.password or ""),
        "database": unquote(database),
    }
