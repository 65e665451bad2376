"""Smoke test: the local PostgreSQL clusters really support (or refuse) prepared transactions."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
from psycopg2 import errorcodes

from twophase_dev import PostgresServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

GID_PREFIX = "twophase-smoke-"


def _prepared(server: PostgresServer) -> list[str]:
    return [gid for gid, _db in server.prepared_transactions() if gid.startswith(GID_PREFIX)]


def _count(conn: Any, table: str) -> int:
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        row = cur.fetchone()
    conn.rollback()  # end the read's transaction so later reads see new commits
    assert row is not None
    return int(row[0])


def _execute(server: PostgresServer, sql: str) -> None:
    conn = server.connect()
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


@pytest.fixture
def table(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh table; prepared transactions of this test are cleaned before and after."""
    postgres_server.rollback_prepared(GID_PREFIX)
    name = f"smoke_{uuid.uuid4().hex[:12]}"
    _execute(
        postgres_server, f"CREATE TABLE {name} (id integer PRIMARY KEY, payload text NOT NULL)"
    )
    yield name
    # A new connection: the test may have restarted the server.
    postgres_server.rollback_prepared(GID_PREFIX)
    _execute(postgres_server, f"DROP TABLE IF EXISTS {name}")


def _prepare_rows(server: PostgresServer, table: str, gid: str, ids: range) -> None:
    """Insert rows on a dedicated connection and PREPARE the transaction; close the connection."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {table} (id, payload) VALUES (%s, %s)",
                [(i, f"row-{i}") for i in ids],
            )
            cur.execute("PREPARE TRANSACTION %s", (gid,))
    finally:
        conn.close()


def _finish(server: PostgresServer, command: str, gid: str) -> None:
    """Run COMMIT PREPARED / ROLLBACK PREPARED from yet another connection."""
    conn = server.connect()
    try:
        conn.autocommit = True  # these commands cannot run inside a transaction block
        with conn.cursor() as cur:
            cur.execute(f"{command} %s", (gid,))
    finally:
        conn.close()


def test_prepared_transaction_is_invisible_until_commit_prepared(
    postgres_server: PostgresServer, table: str
) -> None:
    gid = f"{GID_PREFIX}{uuid.uuid4().hex}"
    reader = postgres_server.connect()
    try:
        _prepare_rows(postgres_server, table, gid, range(10))
        # Phase 1 done: prepared, durable, invisible to everyone else.
        assert _prepared(postgres_server) == [gid]
        assert _count(reader, table) == 0

        _finish(postgres_server, "COMMIT PREPARED", gid)

        assert _prepared(postgres_server) == []
        assert _count(reader, table) == 10
    finally:
        reader.close()


def test_rolled_back_prepared_transaction_never_becomes_visible(
    postgres_server: PostgresServer, table: str
) -> None:
    gid = f"{GID_PREFIX}{uuid.uuid4().hex}"
    reader = postgres_server.connect()
    try:
        _prepare_rows(postgres_server, table, gid, range(5))
        assert _prepared(postgres_server) == [gid]
        assert _count(reader, table) == 0

        _finish(postgres_server, "ROLLBACK PREPARED", gid)

        assert _prepared(postgres_server) == []
        assert _count(reader, table) == 0
        # The rolled-back keys are free again: nothing of that transaction is left behind.
        _prepare_rows(postgres_server, table, f"{gid}-again", range(5))
        _finish(postgres_server, "COMMIT PREPARED", f"{gid}-again")
        assert _count(reader, table) == 5
    finally:
        reader.close()


@pytest.mark.chaos
def test_prepared_transaction_survives_a_server_restart(
    postgres_server: PostgresServer, table: str
) -> None:
    if not postgres_server.managed:
        pytest.skip("the server at $TWOPHASE_PG_DSN was not started by twophase_dev")
    gid = f"{GID_PREFIX}{uuid.uuid4().hex}"
    _prepare_rows(postgres_server, table, gid, range(3))

    postgres_server.kill()  # crash between prepare and commit
    postgres_server.start()

    assert _prepared(postgres_server) == [gid]
    _finish(postgres_server, "COMMIT PREPARED", gid)
    reader = postgres_server.connect()
    try:
        assert _count(reader, table) == 3
    finally:
        reader.close()


def test_prepare_fails_when_max_prepared_transactions_is_zero(
    postgres_server_no_prepared: PostgresServer,
) -> None:
    name = f"smoke_{uuid.uuid4().hex[:12]}"
    conn = postgres_server_no_prepared.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW max_prepared_transactions")
            assert cur.fetchone() == ("0",)
            cur.execute(f"CREATE TABLE {name} (id integer)")
            cur.execute(f"INSERT INTO {name} VALUES (1)")
            with pytest.raises(psycopg2.Error) as excinfo:
                cur.execute("PREPARE TRANSACTION %s", (f"{GID_PREFIX}{uuid.uuid4().hex}",))
        conn.rollback()
        # The failed PREPARE rolled the whole transaction back: the table was never created.
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (name,))
            assert cur.fetchone() == (None,)
    finally:
        conn.close()
    assert excinfo.value.pgcode == errorcodes.OBJECT_NOT_IN_PREREQUISITE_STATE
    assert "prepared transactions are disabled" in str(excinfo.value)


def test_password_role_needs_its_password(postgres_server: PostgresServer) -> None:
    if not postgres_server.managed:
        pytest.skip("the server at $TWOPHASE_PG_DSN was not started by twophase_dev")
    conn = postgres_server.connect(superuser=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT current_user")
            assert cur.fetchone() == ("twophase_test",)
    finally:
        conn.close()
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        postgres_server.connect(superuser=False, password="wrong")
