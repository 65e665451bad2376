"""Every mapped type goes in through COPY and comes back equal, in created and existing tables."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid

import pyarrow as pa
import pytest
from jdbc_support import PgTarget

from twophase.testing import LocalRunner

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc

# (column, arrow type, values, created type, values read back by psycopg2)
CASES = [
    ("b", pa.bool_(), [True, False, None], "boolean", [True, False, None]),
    ("i8", pa.int8(), [-128, 127, None], "smallint", [-128, 127, None]),
    ("i16", pa.int16(), [-32768, 32767, None], "smallint", [-32768, 32767, None]),
    ("i32", pa.int32(), [-(2**31), 2**31 - 1, None], "integer", [-(2**31), 2**31 - 1, None]),
    ("i64", pa.int64(), [-(2**63), 2**63 - 1, None], "bigint", [-(2**63), 2**63 - 1, None]),
    ("u64", pa.uint64(), [2**64 - 1, 0, None], "numeric", [decimal.Decimal(2**64 - 1), 0, None]),
    ("f32", pa.float32(), [0.5, -1.25, None], "real", [0.5, -1.25, None]),
    ("f64", pa.float64(), [0.1, 1e300, None], "double precision", [0.1, 1e300, None]),
    (
        "dec",
        pa.decimal128(20, 4),
        [decimal.Decimal("12345678901234.5678"), decimal.Decimal("-0.0001"), None],
        "numeric",
        [decimal.Decimal("12345678901234.5678"), decimal.Decimal("-0.0001"), None],
    ),
    ("s", pa.string(), ['héllo, "wörld"\n', "", None], "text", ['héllo, "wörld"\n', "", None]),
    ("bin", pa.binary(), [b"\x00\x01\xff", b"", None], "bytea", [b"\x00\x01\xff", b"", None]),
    (
        "day",
        pa.date32(),
        [dt.date(2024, 2, 29), dt.date(1, 1, 1), None],
        "date",
        [dt.date(2024, 2, 29), dt.date(1, 1, 1), None],
    ),
    (
        "ts",
        pa.timestamp("us", tz="UTC"),
        [
            dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
            dt.datetime(1970, 1, 1, tzinfo=UTC),
            None,
        ],
        "timestamp with time zone",
        [
            dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
            dt.datetime(1970, 1, 1, tzinfo=UTC),
            None,
        ],
    ),
    (
        "ts_paris",
        pa.timestamp("us", tz="Europe/Paris"),
        [dt.datetime(2024, 7, 1, 12, 0, tzinfo=UTC), None, None],
        "timestamp with time zone",
        [dt.datetime(2024, 7, 1, 12, 0, tzinfo=UTC), None, None],
    ),
    (
        "ntz",
        pa.timestamp("us"),
        [dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.datetime(9999, 12, 31, 23, 59, 59), None],
        "timestamp without time zone",
        [dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.datetime(9999, 12, 31, 23, 59, 59), None],
    ),
    (
        "tm",
        pa.time64("us"),
        [dt.time(1, 2, 3, 4), None, None],
        "time without time zone",
        [dt.time(1, 2, 3, 4), None, None],
    ),
    (
        "dur",
        pa.duration("us"),
        [90_061_000_001, -1, None],
        "interval",
        [
            dt.timedelta(days=1, hours=1, minutes=1, seconds=1, microseconds=1),
            dt.timedelta(microseconds=-1),
            None,
        ],
    ),
    ("ints", pa.list_(pa.int64()), [[1, None, 3], [], None], "ARRAY", [[1, None, 3], [], None]),
    (
        "strs",
        pa.list_(pa.string()),
        [["a,b", 'q"t', "back\\slash", "{}", "NULL", None], [""], None],
        "ARRAY",
        [["a,b", 'q"t', "back\\slash", "{}", "NULL", None], [""], None],
    ),
    (
        "st",
        pa.struct([("x", pa.int32()), ("y", pa.list_(pa.string()))]),
        [{"x": 1, "y": ["a"]}, {"x": None, "y": None}, None],
        "jsonb",
        [{"x": 1, "y": ["a"]}, {"x": None, "y": None}, None],
    ),
    (
        "mp",
        pa.map_(pa.string(), pa.float64()),
        [[("k", 1.5)], [], None],
        "jsonb",
        [{"k": 1.5}, {}, None],
    ),
    (
        "nested",
        pa.list_(pa.list_(pa.int32())),
        [[[1], [2, 3]], [], None],
        "jsonb",
        [[[1], [2, 3]], [], None],
    ),
    ("nul", pa.null(), [None, None, None], "text", [None, None, None]),
]


def test_every_mapped_type_round_trips_through_a_created_table(pg: PgTarget, table: str) -> None:
    columns = {"id": pa.array([0, 1, 2], pa.int64())}
    for name, arrow_type, values, _created, _back in CASES:
        columns[name] = pa.array(values, arrow_type)
    batch = pa.record_batch(columns)
    LocalRunner(pg.sink("types", table, create_table=True)).run_batch(0, [[batch]])
    created = dict(
        pg.sql(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s",
            (table,),
        )
    )
    rows = pg.rows(table)
    names = ["id", *(c[0] for c in CASES)]
    for index, (name, _t, _v, created_type, back) in enumerate(CASES, start=1):
        assert created[name] == created_type, name
        got = [row[index] for row in rows]
        if name == "bin":
            got = [None if g is None else bytes(g) for g in got]
        if name == "f32":
            got = [None if g is None else float(g) for g in got]
        assert got == back, f"{name}: {got!r} != {back!r} ({names[index]})"


def test_nan_and_infinities_round_trip_in_float_columns(pg: PgTarget, table: str) -> None:
    batch = pa.record_batch(
        {"id": pa.array([0, 1, 2], pa.int64()), "f": [float("nan"), float("inf"), -float("inf")]}
    )
    LocalRunner(pg.sink("types", table, create_table=True)).run_batch(0, [[batch]])
    values = [r[1] for r in pg.rows(table)]
    assert math.isnan(values[0])
    assert values[1:] == [float("inf"), -float("inf")]


def test_compatible_existing_column_types_are_written(pg: PgTarget, table: str) -> None:
    pg.sql(
        "DO $$ BEGIN CREATE TYPE twophase_mood AS ENUM ('happy', 'sad'); "
        "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    )
    pg.sql(
        f'CREATE TABLE "{table}" (id bigint, small integer, code varchar(8), doc jsonb, '
        "ref uuid, mood twophase_mood, ip inet, amount numeric(12,2), day_ts timestamp, "
        "tags jsonb, nums double precision[], big_from_dec bigint, note text DEFAULT 'dflt')"
    )
    ref = uuid.uuid4()
    batch = pa.record_batch(
        {
            "id": pa.array([1], pa.int64()),
            "small": pa.array([42], pa.int64()),
            "code": ["abc"],
            "doc": ['{"a": [1, 2]}'],
            "ref": [str(ref)],
            "mood": ["sad"],
            "ip": ["10.0.0.1"],
            "amount": pa.array([3.25], pa.float64()),
            "day_ts": pa.array([dt.date(2024, 5, 6)], pa.date32()),
            "tags": pa.array([["x", "y"]], pa.list_(pa.string())),
            "nums": pa.array([[1.5, None]], pa.list_(pa.float32())),
            "big_from_dec": pa.array([decimal.Decimal("12")], pa.decimal128(10, 0)),
        }
    )
    LocalRunner(pg.sink("types", table)).run_batch(0, [[batch]])
    assert pg.rows(table) == [
        (
            1,
            42,
            "abc",
            {"a": [1, 2]},
            str(ref),  # psycopg2 reads uuid as text unless registered
            "sad",
            "10.0.0.1",
            decimal.Decimal("3.25"),
            dt.datetime(2024, 5, 6),
            ["x", "y"],
            [1.5, None],
            12,
            "dflt",
        )
    ]


def test_large_batches_with_many_record_batches(pg: PgTarget, table: str) -> None:
    ids = list(range(30_000))
    batches = [
        pa.record_batch(
            {
                "id": pa.array(ids[i : i + 7_000], pa.int64()),
                "v": [f"v{j}" for j in ids[i : i + 7_000]],
            }
        )
        for i in range(0, len(ids), 7_000)
    ]
    LocalRunner(pg.sink("types", table, create_table=True)).run_batch(0, [batches[:3], batches[3:]])
    assert pg.sql(f'SELECT count(*), count(DISTINCT id), min(v), max(id) FROM "{table}"') == [
        (30_000, 30_000, "v0", 29_999)
    ]
