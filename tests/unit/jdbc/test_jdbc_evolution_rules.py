"""Schema evolution (``schema_evolution="add_columns"``), written once in the family's core.

End to end on the SQLite test dialect (the core's ``check_schema`` before each batch, the
executor's plan in the same batch), and the core's rules on PostgreSQL's and MariaDB's type
tables; their statements on the real servers are in ``tests/integration/jdbc/``.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlite_dialect import SqliteChecker, sqlite_sink
from test_jdbc_sqlite_dialect import database as database  # the fixture: table events (id, payload)

from twophase.connectors._context import ErrorContext
from twophase.connectors.jdbc import _checks
from twophase.connectors.jdbc._evolution import NewColumn, columns_to_add
from twophase.connectors.jdbc._mariadb._type_map import MARIADB_TYPES
from twophase.connectors.jdbc._options import JdbcOptions, QualifiedName
from twophase.connectors.jdbc._postgres._type_map import POSTGRES_TYPES
from twophase.connectors.jdbc._table import TableColumn, TableInfo
from twophase.errors import ConfigurationError
from twophase.testing import LocalRunner

pytestmark = pytest.mark.unit

WHERE = ErrorContext("events", batch_id=3)


def _columns(database: Path) -> dict[str, tuple[str, bool]]:
    """``name -> (declared type, NOT NULL)`` of the table, as SQLite reads it."""
    with sqlite3.connect(database) as conn:
        rows = conn.execute('PRAGMA table_info("events")').fetchall()
    return {row[1]: (row[2], bool(row[3])) for row in rows}


def _rows(database: Path, columns: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(database) as conn:
        return sorted(conn.execute(f'SELECT {columns} FROM "events"'))


def _batch(**columns: Any) -> pa.RecordBatch:
    return pa.record_batch(columns)


FIRST = {"id": pa.array([1, 2], pa.int64()), "payload": ["a", "b"]}
WITH_SCORE = {**FIRST, "score": pa.array([0.5, None], pa.float64())}


def _with_score(ids: list[int]) -> pa.RecordBatch:
    return _batch(
        id=pa.array(ids, pa.int64()),
        payload=[f"p{i}" for i in ids],
        score=pa.array([i / 10 for i in ids], pa.float64()),
    )


# ------------------------------------------------------------------ end to end, SQLite
def test_by_default_a_new_column_fails_the_batch_by_name_and_the_table_is_left_alone(
    database: Path,
) -> None:
    runner = LocalRunner(sqlite_sink("events", table="events", database=str(database)))
    with pytest.raises(ConfigurationError, match="'score' of the input does not exist") as caught:
        runner.run_batch(0, [[_batch(**WITH_SCORE)]])
    assert (caught.value.sink, caught.value.batch_id, caught.value.column) == ("events", 0, "score")
    assert set(_columns(database)) == {"id", "payload"}
    assert _rows(database, "id") == []


def test_a_new_column_is_added_nullable_before_the_batch_that_first_carries_it_and_its_rows_land(
    database: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink = sqlite_sink(
        "events", table="events", database=str(database), schema_evolution="add_columns"
    )
    runner = LocalRunner(sink)
    runner.run_batch(0, [[_batch(**FIRST)]])
    assert set(_columns(database)) == {"id", "payload"}  # nothing new: nothing added

    with caplog.at_level(logging.INFO, logger="twophase.connectors.jdbc"):
        runner.run_batch(1, [[_with_score([3])], [_with_score([4])]])
    assert _columns(database)["score"] == ("REAL", False)  # the mapped type, nullable
    assert _rows(database, "id, score") == [(1, None), (2, None), (3, 0.3), (4, 0.4)]
    added = [r.getMessage() for r in caplog.records if "added column" in r.getMessage()]
    assert added == [
        "sink events, batch 1: added column 'score' (REAL, nullable) to table events "
        "(schema_evolution='add_columns')"
    ]


def test_a_restart_with_the_new_column_adds_nothing_again(
    database: Path, caplog: pytest.LogCaptureFixture
) -> None:
    options = {"table": "events", "database": str(database), "schema_evolution": "add_columns"}
    LocalRunner(sqlite_sink("events", **options)).run_batch(0, [[_with_score([1])]])
    before = _columns(database)
    assert before["score"] == ("REAL", False)

    with caplog.at_level(logging.INFO, logger="twophase.connectors.jdbc"):
        LocalRunner(sqlite_sink("events", **options)).run_batch(1, [[_with_score([2])]])
    assert _columns(database) == before
    assert not [r for r in caplog.records if "added column" in r.getMessage()]
    assert _rows(database, "id, score") == [(1, 0.1), (2, 0.2)]


def test_a_column_another_sink_added_meanwhile_is_taken_as_added(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sink read the table without the column; another sink adds it before its ADD COLUMN."""
    decided: list[tuple[NewColumn, ...]] = []

    def then_the_other_sink_adds_it(*args: Any) -> tuple[NewColumn, ...]:
        added = columns_to_add(*args)
        if added:
            decided.append(added)
            with sqlite3.connect(database) as other:
                other.execute('ALTER TABLE "events" ADD COLUMN "score" REAL')
        return added

    monkeypatch.setattr(_checks, "columns_to_add", then_the_other_sink_adds_it)
    sink = sqlite_sink(
        "events", table="events", database=str(database), schema_evolution="add_columns"
    )
    LocalRunner(sink).run_batch(0, [[_with_score([7])]])
    assert decided == [(NewColumn("score", "REAL"),)]  # the race happened
    assert _columns(database)["score"] == ("REAL", False)
    assert _rows(database, "id, score") == [(7, 0.7)]


def test_a_table_column_the_batch_lacks_gets_null_and_a_not_null_one_without_default_is_refused(
    database: Path,
) -> None:
    sink = sqlite_sink(
        "events", table="events", database=str(database), schema_evolution="add_columns"
    )
    runner = LocalRunner(sink)
    runner.run_batch(0, [[_batch(id=pa.array([1], pa.int64()))]])
    assert _rows(database, "id, payload") == [(1, None)]
    with pytest.raises(ConfigurationError, match="NOT NULL without a default") as caught:
        runner.run_batch(1, [[_batch(payload=["x"])]])
    assert (caught.value.column, caught.value.batch_id) == ("id", 1)
    assert set(_columns(database)) == {"id", "payload"}


def test_create_table_then_evolution(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    sink = sqlite_sink(
        "events",
        table="events",
        database=str(path),
        create_table=True,
        schema_evolution="add_columns",
    )
    runner = LocalRunner(sink)
    runner.run_batch(0, [[_batch(**FIRST)]])
    runner.run_batch(1, [[_with_score([3])]])
    assert _columns(path) == {
        "id": ("INTEGER", False),
        "payload": ("TEXT", False),
        "score": ("REAL", False),
    }
    assert _rows(path, "id, score") == [(1, None), (2, None), (3, 0.3)]


def test_a_type_without_a_mapping_is_refused_by_name_before_anything_is_added(
    database: Path,
) -> None:
    sink = sqlite_sink(
        "events", table="events", database=str(database), schema_evolution="add_columns"
    )
    batch = _batch(
        id=pa.array([1], pa.int64()),
        score=pa.array([0.5], pa.float64()),
        price=pa.array([1], pa.decimal128(10, 2)),
    )
    with pytest.raises(ConfigurationError, match="no SQLite counterpart") as caught:
        LocalRunner(sink).run_batch(0, [[batch]])
    error = caught.value
    assert (error.sink, error.batch_id, error.column, error.setting) == (
        "events",
        0,
        "price",
        "schema_evolution",
    )
    assert set(_columns(database)) == {"id", "payload"}  # not even the mappable score


def test_an_existing_column_is_never_retyped_and_the_refusal_says_so(database: Path) -> None:
    sink = sqlite_sink(
        "events", table="events", database=str(database), schema_evolution="add_columns"
    )
    batch = _batch(id=pa.array([1], pa.int64()), payload=pa.array([1.5], pa.float64()))
    with pytest.raises(ConfigurationError, match="never changes the type") as caught:
        LocalRunner(sink).run_batch(0, [[batch]])
    assert caught.value.column == "payload"
    assert _columns(database)["payload"] == ("TEXT", False)


# ------------------------------------------------------------------ the core's rules
def _table(*names: str) -> TableInfo:
    return TableInfo(
        0,
        "r",
        tuple(TableColumn(n, "integer", "int4", "N", None, False, False) for n in names),
        (frozenset({"id"}),),
    )


def _options(**given: Any) -> JdbcOptions:
    return JdbcOptions(QualifiedName(None, "events"), schema_evolution="add_columns", **given)


@pytest.mark.parametrize(
    ("types", "created"),
    [(POSTGRES_TYPES, ["bigint", "jsonb"]), (MARIADB_TYPES, ["BIGINT", "JSON"])],
)
def test_the_added_columns_have_the_types_create_table_would_create(
    types: Any, created: list[str]
) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("n", pa.int64(), nullable=False),  # added nullable all the same
            pa.field("tags", pa.struct([pa.field("a", pa.int32())])),
        ]
    )
    added = columns_to_add(schema, _table("id"), _options(), types)
    assert added == (NewColumn("n", created[0]), NewColumn("tags", created[1]))
    none = JdbcOptions(QualifiedName(None, "events"))
    assert columns_to_add(schema, _table("id"), none, types) == ()


def test_a_key_column_the_table_lacks_is_refused_by_name() -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("region", pa.string())])
    options = _options(mode="upsert", key_columns=("id", "region"))
    with pytest.raises(ConfigurationError, match="it is a key column") as caught:
        columns_to_add(schema, _table("id"), options, POSTGRES_TYPES)
    assert (caught.value.column, caught.value.setting) == ("region", "key_columns")


def test_the_cdc_operation_column_is_never_added() -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("op", pa.string())])
    options = _options(mode="cdc", key_columns=("id",))
    assert columns_to_add(schema, _table("id"), options, POSTGRES_TYPES) == ()


def test_a_name_differing_only_in_case_is_refused_by_name() -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("Score", pa.float64())])
    with pytest.raises(ConfigurationError, match="'score'") as caught:
        columns_to_add(schema, _table("id", "score"), _options(), MARIADB_TYPES)
    assert (caught.value.column, caught.value.setting) == ("Score", "schema_evolution")


def test_a_duration_has_no_mariadb_type_and_is_refused_by_name() -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("took", pa.duration("us"))])
    with pytest.raises(ConfigurationError, match="no MariaDB counterpart") as caught:
        columns_to_add(schema, _table("id"), _options(), MARIADB_TYPES)
    assert caught.value.column == "took"
    assert columns_to_add(schema, _table("id"), _options(), POSTGRES_TYPES) == (
        NewColumn("took", "interval"),
    )


def test_a_repeated_name_adds_nothing_and_is_left_to_the_plan() -> None:
    schema = pa.schema([pa.field("x", pa.int64()), pa.field("x", pa.int64())])
    assert columns_to_add(schema, _table("id"), _options(), POSTGRES_TYPES) == ()


# ------------------------------------------------------------------ the option
def test_the_option_is_checked_and_the_format_option_reaches_it(database: Path) -> None:
    with pytest.raises(ConfigurationError, match="'none' or 'add_columns'") as caught:
        sqlite_sink("events", table="events", database=str(database), schema_evolution="yes")
    assert (caught.value.sink, caught.value.setting) == ("events", "schema_evolution")
    assert sqlite_sink(
        "events", table="events", database=str(database)
    ).options.schema_evolution == ("none")
    from twophase.connectors.jdbc._mariadb import FORMAT

    url = {"name": "orders", "table": "shop.orders", "url": "mysql://etl@db.invalid/shop"}
    sink = FORMAT.sink_from_options({**url, "schemaEvolution": "add_columns"})
    assert sink.options.schema_evolution == "add_columns"
    assert FORMAT.sink_from_options(url).options.schema_evolution == "none"


# ------------------------------------------------------------------ the dialects' statements
@pytest.mark.parametrize(("lock_timeout", "wait"), [(2.5, " WAIT 3"), (0.0, "")])
def test_mariadb_adds_with_wait_bounding_the_metadata_lock(lock_timeout: float, wait: str) -> None:
    from twophase.connectors.jdbc._mariadb._checks import MariaDBChecker
    from twophase.connectors.jdbc._mariadb._dialect import MARIADB

    options = JdbcOptions(QualifiedName("db", "ev`x"), lock_timeout=lock_timeout)
    checker = MariaDBChecker(options, MARIADB.connection("mysql://etl@db:3306/db", {}))
    statement = checker.add_column_statement(NewColumn("a`b; DROP TABLE x; --", "DOUBLE"))
    assert statement == (
        f"ALTER TABLE `db`.`ev``x`{wait} ADD COLUMN IF NOT EXISTS `a``b; DROP TABLE x; --` "
        "DOUBLE NULL"
    )


def test_a_dialect_without_the_statement_refuses_evolution_by_name(database: Path) -> None:
    from twophase.connectors.jdbc._checks import TableChecks

    class Silent(SqliteChecker):
        add_column_statement = TableChecks.add_column_statement

    sink = sqlite_sink(
        "events", table="events", database=str(database), schema_evolution="add_columns"
    )
    checker = Silent(sink.options, sink.connection)
    with pytest.raises(ConfigurationError, match="not supported by the SQLite sink") as caught:
        checker.check_schema(pa.schema([("id", pa.int64()), ("score", pa.float64())]), WHERE)
    error = caught.value
    assert (error.sink, error.batch_id, error.column, error.setting) == (
        "events",
        3,
        "score",
        "schema_evolution",
    )
    assert set(_columns(database)) == {"id", "payload"}
