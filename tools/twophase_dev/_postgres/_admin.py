"""What the tests do to a PostgreSQL server: list or roll back prepared transactions, forget fences.

Each function takes a new connection of the superuser (and closes it).

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["forget_fences", "prepared_transactions", "rollback_prepared"]


def prepared_transactions(conn: Any) -> list[tuple[str, str]]:
    """Return ``(gid, database)`` of every prepared transaction of the cluster, by gid."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT gid, database FROM pg_prepared_xacts ORDER BY gid")
            return [(str(gid), str(db)) for gid, db in cur.fetchall()]
    finally:
        conn.close()


def forget_fences(conn: Any) -> int:
    """Empty every ``twophase_fences`` table of the connection's database; return the rows gone."""
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(
                "SELECT format('%I.%I', schemaname, tablename) FROM pg_catalog.pg_tables "
                "WHERE tablename = 'twophase_fences'"
            )
            deleted = 0
            for (name,) in cur.fetchall():
                # A row a prepared transaction holds (a test that failed half-way) stays:
                # waiting for it would hang the next test's setup.
                cur.execute(
                    f"DELETE FROM {name} WHERE ctid = ANY(ARRAY("
                    f"SELECT ctid FROM {name} FOR UPDATE SKIP LOCKED))"
                )
                deleted += cur.rowcount
            return deleted
    finally:
        conn.close()


def rollback_prepared(
    connect: Callable[..., Any], prepared: list[tuple[str, str]], gid_pattern: str
) -> list[str]:
    """Roll back each of ``prepared`` whose gid matches ``gid_pattern``; return their gids.

    ``connect(dbname=...)`` opens a superuser connection to a database (a prepared transaction
    can only be finished from its own).
    """
    pattern = re.compile(gid_pattern)
    done = []
    for gid, database in prepared:
        if not pattern.match(gid):
            continue
        # A prepared transaction can only be finished from the database it belongs to.
        conn = connect(dbname=database)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("ROLLBACK PREPARED %s", (gid,))
        finally:
            conn.close()
        done.append(gid)
    return done
