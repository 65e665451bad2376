"""The documented Spark/Arrow -> PostgreSQL type mapping, and the compatibility rules."""

from __future__ import annotations

import pyarrow as pa
import pytest

from twophase.connectors.jdbc._postgres._type_map import POSTGRES_TYPES, ColumnKind
from twophase.connectors.jdbc._table import TableColumn

pytestmark = pytest.mark.unit

postgres_type = POSTGRES_TYPES.sql_type
compatibility_problem = POSTGRES_TYPES.compatibility_problem
column_kind = POSTGRES_TYPES.column_kind

# The table of docs/jdbc.md and _postgres/_type_map.py, row by row.
MAPPING = [
    (pa.bool_(), "boolean"),
    (pa.int8(), "smallint"),
    (pa.int16(), "smallint"),
    (pa.int32(), "integer"),
    (pa.int64(), "bigint"),
    (pa.uint8(), "smallint"),
    (pa.uint16(), "integer"),
    (pa.uint32(), "bigint"),
    (pa.uint64(), "numeric(20,0)"),
    (pa.float16(), "real"),
    (pa.float32(), "real"),
    (pa.float64(), "double precision"),
    (pa.decimal128(10, 2), "numeric(10,2)"),
    (pa.decimal128(38, 0), "numeric(38,0)"),
    (pa.decimal256(50, 10), "numeric(50,10)"),
    (pa.string(), "text"),
    (pa.large_string(), "text"),
    (pa.dictionary(pa.int32(), pa.string()), "text"),
    (pa.binary(), "bytea"),
    (pa.large_binary(), "bytea"),
    (pa.binary(16), "bytea"),
    (pa.date32(), "date"),
    (pa.date64(), "date"),
    (pa.timestamp("us", tz="UTC"), "timestamp with time zone"),
    (pa.timestamp("ns", tz="Europe/Paris"), "timestamp with time zone"),
    (pa.timestamp("us"), "timestamp without time zone"),
    (pa.time64("us"), "time without time zone"),
    (pa.duration("us"), "interval"),
    (pa.null(), "text"),
    (pa.list_(pa.int64()), "bigint[]"),
    (pa.large_list(pa.string()), "text[]"),
    (pa.list_(pa.timestamp("us", tz="UTC")), "timestamp with time zone[]"),
    (pa.list_(pa.list_(pa.int32())), "jsonb"),
    (pa.list_(pa.struct([("a", pa.int32())])), "jsonb"),
    (pa.struct([("a", pa.int32()), ("b", pa.string())]), "jsonb"),
    (pa.map_(pa.string(), pa.int64()), "jsonb"),
]


@pytest.mark.parametrize(("arrow_type", "expected"), MAPPING, ids=[str(t) for t, _ in MAPPING])
def test_created_type_follows_the_documented_mapping(
    arrow_type: pa.DataType, expected: str
) -> None:
    assert postgres_type(arrow_type) == expected


def test_union_has_no_postgres_type() -> None:
    with pytest.raises(TypeError, match="no PostgreSQL type"):
        postgres_type(pa.dense_union([pa.field("a", pa.int32())]))


def col(
    base: str, *, category: str = "N", element: str | None = None, name: str = "c"
) -> TableColumn:
    return TableColumn(name, base, base, category, element, False, False)


ACCEPTED = [
    (pa.int64(), col("int4")),  # narrowing: out-of-range values fail as DataError at write time
    (pa.int32(), col("int8")),
    (pa.int8(), col("numeric")),
    (pa.int16(), col("float8")),
    (pa.float32(), col("float8")),
    (pa.float64(), col("numeric")),
    (pa.decimal128(10, 0), col("int8")),
    (pa.decimal128(10, 2), col("float8")),
    (pa.string(), col("varchar", category="S")),
    (pa.string(), col("bpchar", category="S")),
    (pa.string(), col("jsonb", category="U")),
    (pa.string(), col("uuid", category="U")),
    (pa.string(), col("inet", category="I")),
    (pa.string(), col("mood", category="E")),  # a user-defined enum
    (pa.large_string(), col("text", category="S")),
    (pa.binary(), col("bytea", category="U")),
    (pa.date32(), col("timestamp", category="D")),
    (pa.timestamp("us", tz="UTC"), col("timestamptz", category="D")),
    (pa.timestamp("us"), col("timestamp", category="D")),
    (pa.duration("s"), col("interval", category="T")),
    (pa.list_(pa.int32()), col("_int8", category="A", element="int8")),
    (pa.list_(pa.string()), col("_varchar", category="A", element="varchar")),
    (pa.list_(pa.int32()), col("jsonb", category="U")),
    (pa.struct([("a", pa.int32())]), col("json", category="U")),
    (pa.map_(pa.string(), pa.string()), col("jsonb", category="U")),
    (pa.null(), col("int4")),
]


@pytest.mark.parametrize(
    ("arrow_type", "column"), ACCEPTED, ids=[f"{t}->{c.base_type}" for t, c in ACCEPTED]
)
def test_compatible_types_are_accepted(arrow_type: pa.DataType, column: TableColumn) -> None:
    assert compatibility_problem(arrow_type, column) is None


REFUSED = [
    (pa.string(), col("int4"), "is int4 but the input column is string"),
    (pa.float64(), col("int8"), "double precision"),
    (pa.decimal128(10, 2), col("int4"), "numeric(10,2)"),
    (pa.int64(), col("text", category="S"), "bigint"),
    (pa.bool_(), col("int4"), "boolean"),
    (pa.binary(), col("text", category="S"), "bytea"),
    (pa.string(), col("bytea", category="U"), "text"),
    (pa.string(), col("date", category="D"), "text"),
    (pa.timestamp("us", tz="UTC"), col("timestamp", category="D"), "the zone would be lost"),
    (pa.timestamp("us"), col("timestamptz", category="D"), "TimestampNTZType"),
    (pa.list_(pa.string()), col("_int4", category="A", element="int4"), "text[]"),
    (pa.list_(pa.list_(pa.int32())), col("_int4", category="A", element="int4"), "jsonb"),
    (pa.struct([("a", pa.int32())]), col("text", category="S"), "jsonb"),
    (pa.int32(), col("_int4", category="A", element="int4"), "integer"),
]


@pytest.mark.parametrize(
    ("arrow_type", "column", "reason"), REFUSED, ids=[f"{t}->{c.base_type}" for t, c, _ in REFUSED]
)
def test_incompatible_types_are_refused_naming_the_column(
    arrow_type: pa.DataType, column: TableColumn, reason: str
) -> None:
    problem = compatibility_problem(arrow_type, column)
    assert problem is not None
    assert "'c'" in problem
    assert reason in problem


def test_generated_column_cannot_be_written() -> None:
    generated = TableColumn("g", "integer", "int4", "N", None, False, True, generated=True)
    problem = compatibility_problem(pa.int32(), generated)
    assert problem is not None
    assert "generated" in problem


@pytest.mark.parametrize(
    ("arrow_type", "column", "kind"),
    [
        (pa.int64(), None, ColumnKind.PLAIN),
        (pa.binary(), None, ColumnKind.BYTEA),
        (pa.duration("ms"), None, ColumnKind.INTERVAL),
        (pa.list_(pa.int64()), None, ColumnKind.ARRAY),
        (pa.list_(pa.list_(pa.int64())), None, ColumnKind.JSON),
        (pa.list_(pa.int64()), col("jsonb", category="U"), ColumnKind.JSON),
        (pa.list_(pa.int64()), col("_int8", category="A", element="int8"), ColumnKind.ARRAY),
        (pa.struct([("a", pa.int8())]), None, ColumnKind.JSON),
        (pa.string(), col("jsonb", category="U"), ColumnKind.PLAIN),
    ],
)
def test_column_kind_follows_the_target_column(
    arrow_type: pa.DataType, column: TableColumn | None, kind: str
) -> None:
    assert column_kind(arrow_type, column) == kind
