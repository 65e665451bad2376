"""MariaDB: every mapped type goes in through multi-row INSERT and comes back equal, value by value.

Also what MariaDB cannot store (NaN, infinity) fails with an error naming the column, and text
that would break a hand-built statement (quotes, backslashes, NUL, newlines) arrives unchanged.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from twophase.connectors.jdbc import mariadb_sink
from twophase.errors import DataError
from twophase.testing import LocalRunner

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
NASTY = ["it's", 'a "quote"', "back\\slash", "nul\x00byte", "tab\tnew\nline\r", "\\'", "é€😀", ""]

# (column, arrow type, values, created DATA_TYPE, values read back by PyMySQL)
CASES: list[tuple[str, pa.DataType, list[Any], str, list[Any]]] = [
    ("b", pa.bool_(), [True, False, None], "tinyint", [1, 0, None]),
    ("i8", pa.int8(), [-128, 127, None], "tinyint", [-128, 127, None]),
    ("i16", pa.int16(), [-32768, 32767, None], "smallint", [-32768, 32767, None]),
    ("i32", pa.int32(), [-(2**31), 2**31 - 1, None], "int", [-(2**31), 2**31 - 1, None]),
    ("i64", pa.int64(), [-(2**63), 2**63 - 1, None], "bigint", [-(2**63), 2**63 - 1, None]),
    ("u64", pa.uint64(), [2**64 - 1, 0, None], "bigint", [2**64 - 1, 0, None]),
    ("f32", pa.float32(), [0.5, -1.25, None], "float", [0.5, -1.25, None]),
    ("f64", pa.float64(), [0.1, 1e300, None], "double", [0.1, 1e300, None]),
    (
        "dec",
        pa.decimal128(20, 4),
        [decimal.Decimal("12345678901234.5678"), decimal.Decimal("-0.0001"), None],
        "decimal",
        [decimal.Decimal("12345678901234.5678"), decimal.Decimal("-0.0001"), None],
    ),
    ("s", pa.string(), ['it\'s \\ "x"\n', "", None], "longtext", ['it\'s \\ "x"\n', "", None]),
    ("ls", pa.large_string(), ["nul\x00", "x", None], "longtext", ["nul\x00", "x", None]),
    (
        "bin",
        pa.binary(),
        [b"\x00\x01'\\\xff", b"", None],
        "longblob",
        [b"\x00\x01'\\\xff", b"", None],
    ),
    (
        "day",
        pa.date32(),
        [dt.date(2024, 2, 29), dt.date(1000, 1, 1), None],
        "date",
        [dt.date(2024, 2, 29), dt.date(1000, 1, 1), None],
    ),
    (
        "ts",
        pa.timestamp("us", tz="UTC"),
        [dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), dt.datetime(1969, 7, 20), None],
        "datetime",
        [dt.datetime(2024, 1, 2, 3, 4, 5, 678901), dt.datetime(1969, 7, 20), None],
    ),
    (
        "ts_paris",
        pa.timestamp("us", tz="Europe/Paris"),
        [dt.datetime(2024, 6, 1, 12, 0, tzinfo=UTC), None, None],
        "datetime",
        [dt.datetime(2024, 6, 1, 12, 0), None, None],
    ),
    (
        "ntz",
        pa.timestamp("us"),
        [dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(2000, 1, 1), None],
        "datetime",
        [dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(2000, 1, 1), None],
    ),
    (
        "lst",
        pa.list_(pa.int64()),
        [[1, None, 3], [], None],
        "longtext",
        [[1, None, 3], [], None],
    ),
    (
        "st",
        pa.struct([("x", pa.int32()), ("y", pa.string())]),
        [{"x": 1, "y": "it's"}, {"x": None, "y": None}, None],
        "longtext",
        [{"x": 1, "y": "it's"}, {"x": None, "y": None}, None],
    ),
    ("nul", pa.null(), [None, None, None], "longtext", [None, None, None]),
]


@pytest.fixture
def table(mariadb_server: Any) -> Iterator[str]:
    name = f"types_{uuid.uuid4().hex[:12]}"
    yield name
    conn = mariadb_server.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")
    conn.close()


def _rows(server: Any, table: str) -> list[tuple[Any, ...]]:
    conn = server.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}` ORDER BY id")
        rows = list(cur.fetchall())
    conn.close()
    return rows


@pytest.mark.parametrize("protocol", ["coordinated", "markers"])
def test_every_mapped_type_round_trips_through_a_created_table(
    mariadb_server: Any, table: str, protocol: str
) -> None:
    columns = {"id": pa.array([0, 1, 2], pa.int64())}
    for name, arrow_type, values, _created, _back in CASES:
        columns[name] = pa.array(values, arrow_type)
    batch = pa.record_batch(columns)
    sink = mariadb_sink(
        "types", table=table, url=mariadb_server.password_url, protocol=protocol, create_table=True
    )
    LocalRunner(sink).run_batch(0, [[batch]])
    conn = mariadb_server.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
            (table,),
        )
        created = dict(cur.fetchall())
    conn.close()
    rows = _rows(mariadb_server, table)
    for index, (name, _t, _v, created_type, back) in enumerate(CASES, start=1):
        assert created[name] == created_type, name
        got = [row[index] for row in rows]
        if name in ("lst", "st"):
            got = [None if g is None else json.loads(g) for g in got]
        assert got == back, f"{name}: {got!r} != {back!r}"


def test_text_that_breaks_hand_built_sql_arrives_unchanged(mariadb_server: Any, table: str) -> None:
    conn = mariadb_server.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, t TEXT, v VARCHAR(40), b BLOB) "
            "ENGINE=InnoDB"
        )
    conn.close()
    n = len(NASTY)
    batch = pa.record_batch(
        {
            "id": pa.array(range(n), pa.int64()),
            "t": NASTY,
            "v": NASTY,
            "b": [s.encode() for s in NASTY],
        }
    )
    LocalRunner(mariadb_sink("nasty", table=table, url=mariadb_server.password_url)).run_batch(
        0, [[batch]]
    )
    rows = _rows(mariadb_server, table)
    assert [r[1] for r in rows] == NASTY
    assert [r[2] for r in rows] == NASTY
    assert [bytes(r[3]) for r in rows] == [s.encode() for s in NASTY]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_infinity_fail_naming_the_column_and_write_nothing(
    mariadb_server: Any, table: str, value: float
) -> None:
    batch = pa.record_batch({"id": pa.array([0, 1], pa.int64()), "ratio": [1.5, value]})
    sink = mariadb_sink("nan", table=table, url=mariadb_server.password_url, create_table=True)
    with pytest.raises(DataError) as info:
        LocalRunner(sink).run_batch(0, [[batch]])
    assert info.value.column == "ratio"
    assert "row 1" in str(info.value)
    assert _rows(mariadb_server, table) == []


def test_a_timestamp_column_out_of_its_range_fails_naming_the_column(
    mariadb_server: Any, table: str
) -> None:
    conn = mariadb_server.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` (id BIGINT, at TIMESTAMP(6) NULL) ENGINE=InnoDB")
    conn.close()
    batch = pa.record_batch(
        {
            "id": pa.array([0], pa.int64()),
            "at": pa.array([dt.datetime(2100, 1, 1, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
        }
    )
    sink = mariadb_sink("range", table=table, url=mariadb_server.password_url)
    with pytest.raises(DataError) as info:
        LocalRunner(sink).run_batch(0, [[batch]])
    assert info.value.column == "at"
    assert _rows(mariadb_server, table) == []


def test_many_record_batches_are_cut_into_statements(mariadb_server: Any, table: str) -> None:
    """30,000 rows of 1 KB, more than one 4 MB statement: every row arrives once."""
    payload = "x" * 1000
    batches = [
        pa.record_batch(
            {
                "id": pa.array(range(i * 10_000, (i + 1) * 10_000), pa.int64()),
                "p": [payload] * 10_000,
            }
        )
        for i in range(3)
    ]
    sink = mariadb_sink("many", table=table, url=mariadb_server.password_url, create_table=True)
    LocalRunner(sink).run_batch(0, [batches])
    rows = _rows(mariadb_server, table)
    assert [r[0] for r in rows] == list(range(30_000))
    assert {r[1] for r in rows} == {payload}


def test_a_duplicate_key_is_an_error_not_a_skipped_row(mariadb_server: Any, table: str) -> None:
    """LOAD DATA skips a duplicate key with a warning only: the sink counts rows and warnings."""
    conn = mariadb_server.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, v TEXT) ENGINE=InnoDB")
        cur.execute(f"INSERT INTO `{table}` VALUES (2, 'there')")
    conn.close()
    batch = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]})
    sink = mariadb_sink("dup", table=table, url=mariadb_server.password_url)
    with pytest.raises(DataError, match="loaded 2 of 3 rows"):
        LocalRunner(sink).run_batch(0, [[batch]])
    assert _rows(mariadb_server, table) == [(2, "there")]


def test_a_server_without_local_infile_gets_insert_statements(
    mariadb_server: Any, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    from twophase.connectors.jdbc import close_connections
    from twophase.connectors.jdbc._mariadb._writer import MariaDBWriter

    admin = mariadb_server.connect(autocommit=True)
    with admin.cursor() as cur:
        cur.execute("SET GLOBAL local_infile = 0")
    try:
        close_connections()
        batch = pa.record_batch({"id": pa.array([0, 1], pa.int64()), "t": NASTY[:2]})
        sink = mariadb_sink(
            "noinfile", table=table, url=mariadb_server.password_url, create_table=True
        )
        with caplog.at_level("WARNING", logger="twophase.connectors.jdbc"):
            LocalRunner(sink).run_batch(0, [[batch]])
        assert "refuses LOAD DATA LOCAL INFILE" in caplog.text
        assert MariaDBWriter.load_data is False
        assert [r[1] for r in _rows(mariadb_server, table)] == NASTY[:2]
    finally:
        with admin.cursor() as cur:
            cur.execute("SET GLOBAL local_infile = 1")
        admin.close()
        MariaDBWriter.load_data = True
