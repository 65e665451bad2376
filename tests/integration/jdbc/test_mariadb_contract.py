"""The core contract suites, run against the real MariaDB server: one per protocol."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

from twophase.connectors.jdbc import MariaDBMarkerSink, MariaDBTwoPhaseSink, mariadb_sink
from twophase.testing import MarkerSinkContract, TwoPhaseSinkContract

pytestmark = pytest.mark.integration


class _MariaDBFixtures:
    """``make_sink`` and ``read_ids`` over a fresh InnoDB table, for one protocol."""

    protocol_name: ClassVar[str]

    @pytest.fixture
    def target(self, mariadb_server: Any) -> Iterator[tuple[Any, Any, str]]:
        table = f"contract_{uuid.uuid4().hex[:12]}"
        conn = mariadb_server.connect(autocommit=True)
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE `{table}` (id BIGINT NOT NULL, payload TEXT) ENGINE=InnoDB")
        mariadb_server.rollback_prepared(r"tp:")
        yield mariadb_server, conn, table
        mariadb_server.rollback_prepared(r"tp:")
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{table}`")
        conn.close()

    @pytest.fixture
    def make_sink(self, target: tuple[Any, Any, str]) -> Callable[[str], Any]:
        server, _conn, table = target

        def make(name: str) -> Any:
            return mariadb_sink(
                name,
                table=table,
                url=server.password_url,
                protocol=self.protocol_name,
                lock_timeout=5.0,
            )

        return make

    @pytest.fixture
    def read_ids(self, target: tuple[Any, Any, str]) -> Callable[[], list[int]]:
        _server, conn, table = target

        def read() -> list[int]:
            with conn.cursor() as cur:
                cur.execute(f"SELECT id FROM `{table}`")
                return [int(r[0]) for r in cur.fetchall()]

        return read


class TestMariaDBCoordinatedContract(_MariaDBFixtures, TwoPhaseSinkContract):
    """The coordinated protocol: XA PREPARE on the executor, XA COMMIT by xid from the driver."""

    protocol_name = "coordinated"

    def test_sink_is_the_coordinated_one(self, make_sink: Callable[[str], Any]) -> None:
        assert isinstance(make_sink("contract"), MariaDBTwoPhaseSink)


class TestMariaDBMarkersContract(_MariaDBFixtures, MarkerSinkContract):
    """The markers protocol: local commit plus a marker row."""

    protocol_name = "markers"

    def test_sink_is_the_markers_one(self, make_sink: Callable[[str], Any]) -> None:
        assert isinstance(make_sink("contract"), MariaDBMarkerSink)
