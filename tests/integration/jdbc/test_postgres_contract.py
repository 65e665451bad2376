"""The core contract suites, run against the real PostgreSQL servers: one per protocol."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

from twophase.connectors.jdbc import PostgresMarkerSink, PostgresTwoPhaseSink, postgres_sink
from twophase.testing import MarkerSinkContract, TwoPhaseSinkContract

pytestmark = pytest.mark.integration


class _PostgresFixtures:
    """``make_sink`` and ``read_ids`` over a fresh table of one server, for one protocol."""

    server_fixture: ClassVar[str]
    protocol_name: ClassVar[str]

    @pytest.fixture
    def target(self, request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any, str]]:
        server = request.getfixturevalue(self.server_fixture)
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
    def make_sink(self, target: tuple[Any, Any, str]) -> Callable[[str], Any]:
        server, _conn, table = target

        def make(name: str) -> Any:
            return postgres_sink(
                name, table=table, dsn=server.dsn, protocol=self.protocol_name, lock_timeout=5.0
            )

        return make

    @pytest.fixture
    def read_ids(self, target: tuple[Any, Any, str]) -> Callable[[], list[int]]:
        _server, conn, table = target

        def read() -> list[int]:
            with conn.cursor() as cur:
                cur.execute(f'SELECT id FROM "{table}"')
                return [r[0] for r in cur.fetchall()]

        return read


@pytest.mark.postgres  # server_fixture, fetched by name
class TestCoordinatedContract(_PostgresFixtures, TwoPhaseSinkContract):
    """The coordinated protocol: PREPARE TRANSACTION / COMMIT PREPARED."""

    server_fixture = "postgres_server"
    protocol_name = "coordinated"

    def test_sink_is_the_coordinated_one(self, make_sink: Callable[[str], Any]) -> None:
        assert isinstance(make_sink("contract"), PostgresTwoPhaseSink)


@pytest.mark.postgres  # server_fixture, fetched by name
class TestMarkersContract(_PostgresFixtures, MarkerSinkContract):
    """The markers protocol: local commit plus a marker row."""

    server_fixture = "postgres_server_no_prepared"
    protocol_name = "markers"

    def test_sink_is_the_markers_one(self, make_sink: Callable[[str], Any]) -> None:
        assert isinstance(make_sink("contract"), PostgresMarkerSink)
