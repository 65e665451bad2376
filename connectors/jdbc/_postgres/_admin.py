"""Inspection helpers for operators: the prepared transactions twophase left.

The same can be done in SQL (``docs/jdbc.md``, "Resolving in-doubt
transactions by hand"); these helpers parse the gids for you.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

import psycopg2

from .._gid import GID_PREFIX, parse_gid
from .._network import NetworkBounds
from ._dbapi import libpq_bounds, postgres_connection
from ._errors import connection_error, map_error

__all__ = ["PreparedTransaction", "list_prepared_transactions"]


@dataclass(frozen=True)
class PreparedTransaction:
    """One row of ``pg_prepared_xacts`` written by this connector.

    Attributes
    ----------
    gid
        The global transaction id.
    identity
        The sink identity it belongs to.
    batch_id, partition_id, attempt
        Where it came from.
    prepared_at
        When it was prepared.
    owner
        The role that prepared it.
    database
        Its database.
    """

    gid: str
    identity: str
    batch_id: int
    partition_id: int
    attempt: int
    prepared_at: _dt.datetime
    owner: str
    database: str


def list_prepared_transactions(
    dsn: str | None = None, *, identity: str | None = None, **params: str | int
) -> list[PreparedTransaction]:
    """List the prepared transactions of twophase sinks on a server, oldest first.

    Runs wherever it is called (a notebook, an operator's shell). Read only.

    Parameters
    ----------
    dsn
        libpq connection string or URI.
    identity
        Only this sink identity's transactions (default: every twophase sink).
    **params
        libpq keywords.

    Returns
    -------
    list of PreparedTransaction
        In all databases of the server.
    """
    config = postgres_connection(dsn, **params)
    try:
        conn = psycopg2.connect(**{**libpq_bounds(NetworkBounds()), **config.connect_kwargs()})
    except psycopg2.Error as exc:
        raise connection_error(exc, config.describe(), secrets=config.secrets) from None
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT gid, prepared, owner, database FROM pg_catalog.pg_prepared_xacts "
                "WHERE left(gid, %s) = %s ORDER BY prepared",
                (len(GID_PREFIX), GID_PREFIX),
            )
            rows = cur.fetchall()
    except psycopg2.Error as exc:
        raise map_error(exc, "listing prepared transactions", secrets=config.secrets) from exc
    finally:
        conn.close()
    found = []
    for gid, prepared, owner, database in rows:
        parsed = parse_gid(gid, identity)
        if parsed is not None:
            found.append(
                PreparedTransaction(
                    gid,
                    parsed.identity,
                    parsed.batch_id,
                    parsed.partition_id,
                    parsed.attempt,
                    prepared,
                    owner,
                    database,
                )
            )
    return found
