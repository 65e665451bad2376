"""The JDBC family's seam, held by a third dialect: SQLite, built from the family's parts alone.

``sqlite_dialect.py`` declares what SQLite does its own way and nothing else; the family's core
builds its sink (``build_sink``), its writer, checks and marker table. The markers contract
suite runs against it, as against PostgreSQL and MariaDB on their real servers.
"""

from __future__ import annotations

import pickle
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlite_dialect import SQLITE, SqliteMarkerSink, sqlite_sink

from twophase.errors import ConfigurationError, DataError
from twophase.testing import LocalRunner, MarkerSinkContract

pytestmark = pytest.mark.unit


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "target.db"
    with sqlite3.connect(path) as conn:
        conn.execute('CREATE TABLE "events" (id INTEGER NOT NULL, payload TEXT)')
    return path


def _ids(database: Path) -> list[int]:
    with sqlite3.connect(database) as conn:
        return [int(row[0]) for row in conn.execute('SELECT id FROM "events"')]


class TestSqliteDialectMarkersContract(MarkerSinkContract):
    """The markers protocol's contract, on a dialect the family's core builds from its parts."""

    @pytest.fixture
    def make_sink(self, database: Path) -> Callable[[str], Any]:
        return lambda name: sqlite_sink(name, table="events", database=str(database))

    @pytest.fixture
    def read_ids(self, database: Path) -> Callable[[], list[int]]:
        return lambda: _ids(database)


def test_the_factory_builds_the_markers_sink_and_it_pickles_with_its_dialect_by_name(
    database: Path,
) -> None:
    sink = sqlite_sink("events", table="events", database=str(database), lock_timeout=2.0)
    assert isinstance(sink, SqliteMarkerSink)
    assert sink.options.database == "SQLite"
    assert sink.options.lock_timeout == 2.0
    assert pickle.loads(pickle.dumps(sink)).dialect is SQLITE
    assert sink.metrics_target == "sqlite"


def test_the_coordinated_protocol_is_refused_by_name(database: Path) -> None:
    with pytest.raises(ConfigurationError, match="use protocol='markers'") as caught:
        sqlite_sink("events", table="events", database=str(database), protocol="coordinated")
    assert (caught.value.sink, caught.value.setting) == ("events", "protocol")


def test_an_unknown_keyword_is_refused_by_the_family_not_the_dialect(database: Path) -> None:
    with pytest.raises(ConfigurationError, match="did you mean 'database'") as caught:
        sqlite_sink("events", table="events", database=str(database), databse="x")
    assert caught.value.setting == "databse"


def test_a_row_the_table_refuses_fails_its_partition_with_the_column_named(
    database: Path,
) -> None:
    sink = sqlite_sink("events", table="events", database=str(database))
    runner = LocalRunner(sink)
    bad = pa.record_batch({"id": pa.array([1, None], pa.int64()), "payload": ["a", "b"]})
    with pytest.raises(DataError, match="NOT NULL") as caught:
        runner.run_batch(0, [[bad]])
    assert caught.value.column == "id"
    assert _ids(database) == []  # nothing of the partition committed


def test_create_table_makes_the_table_from_the_first_batch(tmp_path: Path) -> None:
    path = tmp_path / f"{uuid.uuid4().hex}.db"
    sink = sqlite_sink("created", table="made", database=str(path), create_table=True)
    batch = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "ratio": [0.5, None]})
    LocalRunner(sink).run_batch(0, [[batch]])
    with sqlite3.connect(path) as conn:
        assert sorted(conn.execute('SELECT id, ratio FROM "made"')) == [(1, 0.5), (2, None)]
        declared = {row[1]: row[2] for row in conn.execute('PRAGMA table_info("made")')}
    assert declared == {"id": "INTEGER", "ratio": "REAL"}
