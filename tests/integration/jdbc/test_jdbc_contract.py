"""The core contract suite, run against the real PostgreSQL server with both protocols."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from twophase.connectors.jdbc import PostgresMarkerSink, PostgresTwoPhaseSink
from twophase.testing import SinkContract

pytestmark = pytest.mark.integration


class _PostgresContract(SinkContract):
    fixture_name = ""

    @pytest.fixture
    def target(self, request: pytest.FixtureRequest) -> Any:
        server = request.getfixturevalue(self.fixture_name)
        table = f"contract_{uuid.uuid4().hex[:12]}"
        conn = server.connect()
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE TABLE "{table}" (id bigint NOT NULL, payload text)')
        server.rollback_prepared(r"tp:")
        yield server, conn, table
        server.rollback_prepared(r"tp:")
        conn.close()

    @pytest.fixture
    def make_sink(self, target: Any) -> Callable[[str], Any]:
        server, _conn, table = target
        protocol = "coordinated" if self.fixture_name == "postgres_server" else "markers"

        def make(name: str) -> Any:
            from twophase.connectors.jdbc import postgres_sink

            return postgres_sink(
                name, table=table, dsn=server.dsn, protocol=protocol, lock_timeout=5.0
            )

        return make

    @pytest.fixture
    def read_ids(self, target: Any) -> Callable[[], list[int]]:
        _server, conn, table = target

        def read() -> list[int]:
            with conn.cursor() as cur:
                cur.execute(f'SELECT id FROM "{table}"')
                return [r[0] for r in cur.fetchall()]

        return read


class TestCoordinatedContract(_PostgresContract):
    """Protocol A: PREPARE TRANSACTION / COMMIT PREPARED."""

    fixture_name = "postgres_server"

    def test_sink_is_protocol_a(self, make_sink: Callable[[str], Any]) -> None:
        assert isinstance(make_sink("contract"), PostgresTwoPhaseSink)


class TestMarkersContract(_PostgresContract):
    """Protocol B: local commit plus a marker row."""

    fixture_name = "postgres_server_no_prepared"

    def test_sink_is_protocol_b(self, make_sink: Callable[[str], Any]) -> None:
        assert isinstance(make_sink("contract"), PostgresMarkerSink)
