"""Helpers shared by the JDBC connector's integration tests (imported by name).

A module of its own, not ``conftest``: several test folders have a ``conftest.py``, so
``from conftest import ...`` could pick another folder's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from twophase.connectors.jdbc import postgres_sink

PROTOCOLS = ("coordinated", "markers")
#: Each database under each protocol, as fixture params carrying the database's marker.
EACH_DATABASE_AND_PROTOCOL = [
    pytest.param((db, p), marks=getattr(pytest.mark, mark), id=f"{db}-{p}")
    for db, mark in (("PostgreSQL", "postgres"), ("MariaDB", "mariadb"))
    for p in PROTOCOLS
]


def server_fixture(database: str, protocol: str) -> str:
    """The session fixture of a database's server for a protocol (PostgreSQL: two clusters)."""
    if database == "MariaDB":
        return "mariadb_server"
    return "postgres_server" if protocol == "coordinated" else "postgres_server_no_prepared"


def mariadb_sql(server: Any, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement in autocommit on a MariaDB server (``twophase_dev``); its rows."""
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return list(cur.fetchall())
    finally:
        conn.close()


class PgTarget:
    """One server plus helpers to inspect what a reader sees."""

    def __init__(self, server: Any, protocol: str) -> None:
        self.server = server
        self.protocol = protocol
        self.dsn: str = server.dsn

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        conn = self.server.connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(statement, params)
                return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    def rows(self, table: str, order_by: str = "id") -> list[tuple[Any, ...]]:
        return self.sql(f'SELECT * FROM "{table}" ORDER BY "{order_by}"')

    def ids(self, table: str) -> list[int]:
        if not self.sql("SELECT to_regclass(%s)", (f'"{table}"',))[0][0]:
            return []
        return [r[0] for r in self.sql(f'SELECT id FROM "{table}"')]

    def prepared(self) -> list[str]:
        return [g for g, _db in self.server.prepared_transactions() if g.startswith("tp:")]

    def clean_prepared(self) -> None:
        self.server.rollback_prepared(r"tp:")
        self.server.forget_fences()  # no other sink active: the server's slots are this test's

    def sink(self, name: str, table: str, **kwargs: Any) -> Any:
        kwargs.setdefault("protocol", self.protocol)
        kwargs.setdefault("lock_timeout", 5.0)
        kwargs.setdefault("dsn", self.dsn)
        return postgres_sink(name, table=table, **kwargs)


def id_batch(
    ids: list[int], payload: Callable[[int], str | None] = lambda i: f"row-{i}"
) -> pa.RecordBatch:
    """Rows ``(id bigint, payload text)``."""
    return pa.record_batch(
        {
            "id": pa.array(ids, pa.int64()),
            "payload": pa.array([payload(i) for i in ids], pa.string()),
        }
    )


def part(batch: int, p: int) -> list[Any]:
    """Partition ``p`` of a LocalRunner batch: three rows, ids ``batch*100 + p*10 + i``."""
    return [id_batch([batch * 100 + p * 10 + i for i in range(3)])]


def batch_rows(batch: int) -> list[list[Any]]:
    """The three partitions of a LocalRunner batch."""
    return [part(batch, p) for p in range(3)]


def every_id(*batches: int) -> Counter[int]:
    """Each id of these batches, counted once per time it is in them."""
    return Counter(i for b in batches for p in batch_rows(b) for i in p[0].column(0).to_pylist())


def three_partitions(batch_id: int) -> list[list[pa.RecordBatch]]:
    """Batch ``batch_id`` of the failover tests: three partitions of three ids each."""
    return [[id_batch([batch_id * 100 + p * 10 + i for i in range(3)])] for p in range(3)]


def three_partition_ids(*batch_ids: int) -> list[int]:
    """Every id :func:`three_partitions` writes for these batches."""
    return [batch * 100 + p * 10 + i for batch in batch_ids for p in range(3) for i in range(3)]
