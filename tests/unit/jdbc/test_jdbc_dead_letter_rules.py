"""Dead letters in the JDBC family's core, without a server: options, the row-error tables, halving.

The SQLite test dialect runs the dead-letter contract (``DeadLetterContract``): the core finds the
bad rows by halves under savepoints and writes them with the partition's transaction; the row-error
tables of PostgreSQL and MariaDB are read as declared; every option reaches the sink by name.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlite_dialect import sqlite_sink

from twophase import DeadLetter
from twophase.connectors.jdbc import mariadb_sink, postgres_sink
from twophase.connectors.jdbc._config import redact_connection_strings
from twophase.connectors.jdbc._mariadb._errors import MARIADB_ERRORS
from twophase.connectors.jdbc._postgres._errors import POSTGRES_ERRORS
from twophase.errors import ConfigurationError, DataError
from twophase.testing import DeadLetterContract, LocalRunner, MarkerSinkContract

pytestmark = pytest.mark.unit

URL = "mysql://u:secret@127.0.0.1:1/db"


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "target.db"
    with sqlite3.connect(path) as conn:
        conn.execute('CREATE TABLE "events" (id INTEGER NOT NULL UNIQUE, payload TEXT NOT NULL)')
    return path


def _read(database: Path, statement: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(database) as conn:
        return list(conn.execute(statement))


class TestSqliteDeadLetterContract(DeadLetterContract, MarkerSinkContract):
    """The dead-letter contract on the SQLite test dialect: the family's core does the work."""

    @pytest.fixture
    def make_sink(self, database: Path) -> Callable[[str], Any]:
        return lambda name: sqlite_sink(
            name, table="events", database=str(database), bad_rows="dead_letter"
        )

    @pytest.fixture
    def read_ids(self, database: Path) -> Callable[[], list[int]]:
        return lambda: [int(r[0]) for r in _read(database, 'SELECT id FROM "events"')]

    @pytest.fixture
    def read_dead_letters(self, database: Path) -> Callable[[], list[DeadLetter]]:
        sink = sqlite_sink("contract", table="events", database=str(database))
        return lambda: list(sink.read_dead_letters())


def _batch(ids: list[int], payloads: list[str | None]) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "payload": pa.array(payloads)})


def test_bad_rows_are_found_by_halves_and_redriven_after_a_fix(database: Path) -> None:
    sink = sqlite_sink("s", table="events", database=str(database), bad_rows="dead_letter")
    ids = list(range(40))
    payloads: list[str | None] = [None if i in (3, 17, 38) else f"p{i}" for i in ids]
    ids[25] = 24  # a duplicate of row 24: refused as unique
    metrics = LocalRunner(sink).run_batch(0, [[_batch(ids, payloads)]])
    assert metrics.dead_lettered == 4
    assert sorted(r[0] for r in _read(database, 'SELECT id FROM "events"')) == sorted(
        i for n, i in enumerate(ids) if n not in (3, 17, 25, 38)
    )
    letters = list(sink.read_dead_letters())
    assert [(d.position, d.error_class, d.column) for d in letters] == [
        (3, "not_null", "payload"),
        (17, "not_null", "payload"),
        (25, "unique", "id"),
        (38, "not_null", "payload"),
    ]
    assert letters[0].values() == {"id": 3, "payload": None}
    assert letters[0].code == "SQLITE_CONSTRAINT_NOTNULL"

    with sqlite3.connect(database) as conn:  # the fix: payload may be null now
        conn.execute('ALTER TABLE "events" RENAME TO old')
        conn.execute('CREATE TABLE "events" (id INTEGER NOT NULL UNIQUE, payload TEXT)')
        conn.execute('INSERT INTO "events" SELECT * FROM old')
    refused = sink.redrive_dead_letters(letters)
    assert [(e.row, e.error_class) for e in refused] == [(2, "unique")]  # still a duplicate
    assert [d.position for d in sink.read_dead_letters()] == [25]
    moved = 'SELECT id FROM "events" WHERE id IN (3, 17, 38)'
    assert sorted(r[0] for r in _read(database, moved)) == [3, 17, 38]
    assert [e.row for e in sink.redrive_dead_letters(letters)] == [2]  # again: nothing twice
    assert sorted(r[0] for r in _read(database, moved)) == [3, 17, 38]


def test_bad_rows_fail_keeps_the_first_bad_row_failing_the_batch(database: Path) -> None:
    sink = sqlite_sink("s", table="events", database=str(database))
    with pytest.raises(DataError) as caught:
        LocalRunner(sink).run_batch(0, [[_batch([1, 2], ["a", None])]])
    assert (caught.value.sink, caught.value.batch_id, caught.value.column) == ("s", 0, "payload")
    assert _read(database, 'SELECT * FROM "events"') == []


def test_more_bad_rows_than_max_bad_rows_fail_the_batch_with_the_count(database: Path) -> None:
    sink = sqlite_sink(
        "s", table="events", database=str(database), bad_rows="dead_letter", max_bad_rows=1
    )
    with pytest.raises(DataError, match=r"2 rows were refused, more than max_bad_rows=1"):
        LocalRunner(sink).run_batch(0, [[_batch([1, 2, 3], ["a", None, None])]])
    assert _read(database, 'SELECT * FROM "events"') == []


# ------------------------------------------------------------------ options
def test_the_options_reach_the_sink_with_their_defaults() -> None:
    sink = mariadb_sink("s", table="events", url=URL)
    assert (sink.bad_rows, sink.max_bad_rows, sink.options.dead_letter_table) == ("fail", 100, None)
    sink = mariadb_sink(
        "s", table="app.events", url=URL, bad_rows="dead_letter", max_bad_rows=7, protocol="markers"
    )
    assert (sink.bad_rows, sink.max_bad_rows) == ("dead_letter", 7)
    assert str(sink.options.dead_letters) == "app.events_dead_letters"
    sink = mariadb_sink("s", table="events", url=URL, dead_letter_table=("dl", "bad"))
    assert str(sink.options.dead_letters) == "dl.bad"


@pytest.mark.parametrize(
    ("options", "setting", "match"),
    [
        ({"bad_rows": "skip"}, "bad_rows", "'fail' or 'dead_letter'"),
        ({"bad_rows": "dead_letter", "mode": "upsert", "key_columns": ["id"]}, "bad_rows",
         "mode='append' only"),
        ({"max_bad_rows": -1}, "max_bad_rows", "max_bad_rows"),
        ({"bad_rows": "dead_letter", "dead_letter_table": "a.b.c"}, "dead_letter_table", "dot"),
    ],
)  # fmt: skip
def test_invalid_dead_letter_options_are_refused_by_name(
    options: dict[str, Any], setting: str, match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match) as caught:
        mariadb_sink("s", table="events", url=URL, **options)
    assert caught.value.setting == setting


def test_a_default_dead_letter_table_over_the_identifier_limit_names_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="default dead_letter_table") as caught:
        mariadb_sink("s", table="t" * 60, url=URL, bad_rows="dead_letter")
    assert caught.value.setting == "dead_letter_table"


# ------------------------------------------------------------------ the row-error tables
class _PgError(Exception):
    def __init__(self, code: str, column: str | None = None, detail: str | None = None) -> None:
        super().__init__(f"error {code}")
        self.pgcode = code
        self.diag = type(
            "Diag",
            (),
            {"column_name": column, "message_primary": f"error {code}", "message_detail": detail},
        )()


@pytest.mark.parametrize(
    ("code", "error_class"),
    [("23502", "not_null"), ("22001", "too_long"), ("22P02", "invalid_value"),
     ("22003", "invalid_value"), ("22007", "invalid_value"), ("23505", "unique"),
     ("23503", "foreign_key"), ("23514", "check")],
)  # fmt: skip
def test_postgres_row_errors_by_sqlstate(code: str, error_class: str) -> None:
    error = POSTGRES_ERRORS.row_error(_PgError(code, "c"), 4)
    assert error is not None
    assert (error.row, error.error_class, error.code, error.column) == (4, error_class, code, "c")


@pytest.mark.parametrize("code", ["42P01", "42703", "42501", "08006", "40001", "55P03", "53100"])
def test_postgres_errors_of_the_batch_are_not_row_errors(code: str) -> None:
    assert POSTGRES_ERRORS.row_error(_PgError(code), 0) is None


def test_postgres_names_the_column_of_a_foreign_key_from_the_detail() -> None:
    exc = _PgError("23503", None, 'Key (ref)=(9) is not present in table "parent".')
    error = POSTGRES_ERRORS.row_error(exc, 0)
    assert error is not None
    assert error.column == "ref"


@pytest.mark.parametrize(
    ("errno", "message", "error_class", "column"),
    [(1048, "Column 'v' cannot be null", "not_null", "v"),
     (1364, "Field 'v' doesn't have a default value", "not_null", None),
     (1406, "Data too long for column 'v' at row 1", "too_long", "v"),
     (1366, "Incorrect integer value: 'x' for column `db`.`t`.`n` at row 1", "invalid_value", "n"),
     (1264, "Out of range value for column 'n' at row 1", "invalid_value", "n"),
     (1062, "Duplicate entry '1' for key 'PRIMARY'", "unique", None),
     (1452, "Cannot add or update a child row: a foreign key constraint fails (`db`.`t`, "
            "CONSTRAINT `fk` FOREIGN KEY (`ref`) REFERENCES `p` (`id`))", "foreign_key", "ref"),
     (4025, "CONSTRAINT `t.amount` failed for `db`.`t`", "check", "amount")],
)  # fmt: skip
def test_mariadb_row_errors_by_number(
    errno: int, message: str, error_class: str, column: str | None
) -> None:
    error = MARIADB_ERRORS.row_error(Exception(errno, message), 2)
    assert error is not None
    assert (error.error_class, error.code, error.column) == (error_class, str(errno), column)


@pytest.mark.parametrize("errno", [1146, 1054, 1142, 2013, 1213, 1205, 1021])
def test_mariadb_errors_of_the_batch_are_not_row_errors(errno: int) -> None:
    assert MARIADB_ERRORS.row_error(Exception(errno, "x"), 0) is None


def test_a_row_error_message_never_carries_a_password() -> None:
    text = "invalid input: 'postgresql://bob:hunter2@db/x' and 'host=h password=hunter2'"
    assert "hunter2" not in redact_connection_strings(text)
    error = MARIADB_ERRORS.row_error(Exception(1366, text), 0, secrets=["hunter2"])
    assert error is not None
    assert "hunter2" not in error.message


def test_postgres_options_come_through_format_names() -> None:
    from twophase.connectors.jdbc._postgres import FORMAT

    assert {"badrows", "deadlettertable", "maxbadrows"} <= set(FORMAT.options)
    assert postgres_sink.__signature__.parameters["bad_rows"].default == "fail"  # type: ignore[attr-defined]


def test_one_bad_row_in_a_thousand_costs_a_few_halves_not_a_thousand_writes(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlite_dialect import SqliteWriter

    loads: list[int] = []
    load = SqliteWriter.load

    def counted(self: Any, txn: Any, batch: pa.RecordBatch, *, settle: bool) -> None:
        loads.append(batch.num_rows)
        load(self, txn, batch, settle=settle)

    monkeypatch.setattr(SqliteWriter, "load", counted)
    sink = sqlite_sink("s", table="events", database=str(database), bad_rows="dead_letter")
    payloads: list[str | None] = [f"p{i}" for i in range(1000)]
    payloads[613] = None
    metrics = LocalRunner(sink).run_batch(0, [[_batch(list(range(1000)), payloads)]])
    assert (metrics.rows, metrics.dead_lettered) == (999, 1)
    assert len(loads) <= 1 + 2 * 10, loads  # the batch, then two halves per level of 1000 -> 1
    assert sum(loads) <= 3000, "each level writes the refused half's rows once more"


def test_a_redrive_into_a_table_without_a_letters_column_rolls_back_naming_it(
    database: Path,
) -> None:
    sink = sqlite_sink("s", table="events", database=str(database), bad_rows="dead_letter")
    LocalRunner(sink).run_batch(0, [[_batch([1, 2], ["a", None])]])
    letters = list(sink.read_dead_letters())
    with sqlite3.connect(database) as conn:  # the "fix" renames the column the row needs
        conn.execute('ALTER TABLE "events" RENAME COLUMN payload TO body')
    with pytest.raises(ConfigurationError, match="has no column 'payload'") as caught:
        sink.redrive_dead_letters(letters)
    assert (caught.value.sink, caught.value.column) == ("s", "payload")
    assert list(sink.read_dead_letters()) == letters, "nothing was moved"


def test_a_reset_checkpoint_meeting_its_old_letters_is_refused_by_name(
    database: Path, tmp_path: Path
) -> None:
    """Batch ids start again under a new checkpoint: a letter's place is another run's."""
    sink = sqlite_sink("s", table="events", database=str(database), bad_rows="dead_letter")
    LocalRunner(sink, tmp_path / "a").run_batch(0, [[_batch([1, 2], ["a", None])]])
    reset = LocalRunner(sink, tmp_path / "b")  # a new checkpoint: a new query id
    with pytest.raises(ConfigurationError, match="holds a letter of another run") as caught:
        reset.run_batch(0, [[_batch([3, 4], ["c", None])]])
    assert (caught.value.sink, caught.value.setting) == ("s", "dead_letter_table")
    assert [d.values()["id"] for d in sink.read_dead_letters()] == [2]


def test_a_wrapper_that_drops_the_refused_rows_fails_the_partition_and_loses_nothing(
    database: Path,
) -> None:
    """Found by the cluster tests' probe, whose write() returned None: the refused rows were
    rolled back under their savepoint, and no letter was built of them."""
    sink = sqlite_sink("s", table="events", database=str(database), bad_rows="dead_letter")
    inner = type(sink).write

    def write(self: Any, txn: Any, batch: pa.RecordBatch) -> None:
        inner(self, txn, batch)  # the refused rows it returns are dropped

    dropping = type("Dropping", (type(sink),), {"write": write})
    sink.__class__ = dropping
    batch = _batch([1, 2, 3], ["a", None, "c"])
    with pytest.raises(ConfigurationError, match=r"refused 1 row.* but 0 reached") as caught:
        LocalRunner(sink, max_task_failures=1).run_batch(0, [[batch]])
    assert (caught.value.sink, caught.value.batch_id, caught.value.setting) == ("s", 0, "bad_rows")
    assert _read(database, 'SELECT id FROM "events"') == []  # rolled back: nothing committed
