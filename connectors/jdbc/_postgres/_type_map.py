"""Spark / Arrow types to PostgreSQL types: the table the family's type rules read.

Spark hands the executors Arrow record batches, so the mapping is stated on
Arrow types (the Spark type each comes from is in the table below and in
``docs/jdbc.md``).

=================================  ===========================  ==============================
Spark type (Arrow type)            created as                   also accepted by
=================================  ===========================  ==============================
BooleanType (bool)                 ``boolean``
ByteType (int8)                    ``smallint``                 any integer type, numeric,
ShortType (int16)                  ``smallint``                 real, double precision
IntegerType (int32)                ``integer``
LongType (int64)                   ``bigint``
(uint8 / uint16 / uint32)          ``smallint/integer/bigint``
(uint64)                           ``numeric(20,0)``
FloatType (float32), (float16)     ``real``                     double precision, numeric
DoubleType (float64)               ``double precision``         real, numeric
DecimalType(p, s) (decimal)        ``numeric(p,s)``             real, double; integers if s=0
StringType (string)                ``text``                     varchar, char, citext, name,
                                                                json(b), uuid, xml, inet, cidr,
                                                                macaddr, enums
BinaryType (binary)                ``bytea``
DateType (date32)                  ``date``                     timestamp
TimestampType (timestamp, tz)      ``timestamp with time zone``
TimestampNTZType (timestamp)       ``timestamp``
(time32 / time64)                  ``time``
DayTimeIntervalType (duration)     ``interval``
ArrayType of a type above (list)   ``<element>[]``              json, jsonb
ArrayType of arrays/structs/maps   ``jsonb``                    json
StructType (struct)                ``jsonb``                    json
MapType (map)                      ``jsonb``                    json
NullType (null)                    ``text``                     any column
=================================  ===========================  ==============================

Integer narrowing (``bigint`` data into an ``integer`` column) is accepted;
values out of range fail the batch with a :class:`~twophase.errors.DataError`.
A timestamp with a time zone is never written into ``timestamp without time
zone`` (the zone would be dropped silently), nor the reverse.
"""

from __future__ import annotations

import pyarrow as pa

from .._table import TableColumn, unwrap
from .._type_rules import TypeRow, TypeRules

__all__ = ["POSTGRES_TYPES", "ColumnKind"]


class ColumnKind:
    r"""How a column's values are sent to the server (one of the constants).

    Attributes
    ----------
    PLAIN
        Arrow's own CSV rendering is already PostgreSQL input syntax.
    BYTEA
        Binary data, sent in bytea hex format (``\x...``).
    INTERVAL
        Durations, sent as ``"<n> microseconds"``.
    ARRAY
        Lists of scalars, sent as PostgreSQL array literals (``{...}``).
    JSON
        Structs, maps and nested lists (and lists written into json columns),
        sent as JSON text.
    """

    PLAIN = "plain"
    BYTEA = "bytea"
    INTERVAL = "interval"
    ARRAY = "array"
    JSON = "json"


_INTEGERS = frozenset({"int2", "int4", "int8"})
_FLOATS = frozenset({"float4", "float8"})
_NUMBERS = _INTEGERS | _FLOATS | {"numeric"}
_REALS = _FLOATS | {"numeric"}
_JSON = frozenset({"json", "jsonb"})
_STRING_TARGETS = _JSON | {
    "text", "varchar", "bpchar", "name", "citext", "uuid", "xml", "inet", "cidr", "macaddr",
    "macaddr8",
}  # fmt: skip


def _scalar_element(list_type: pa.DataType) -> pa.DataType | None:
    """Return the element type of a list that becomes a PostgreSQL array (None: nested, null)."""
    element = unwrap(list_type.value_type)
    nested = pa.types.is_list(element) or pa.types.is_struct(element) or pa.types.is_map(element)
    return None if nested or pa.types.is_null(element) else element


def _list_type(t: pa.DataType) -> str:
    element = _scalar_element(t)
    inner = POSTGRES_TYPES.created(element) if element is not None else None
    return "jsonb" if inner is None else f"{inner}[]"


def _list_kind(t: pa.DataType, column: TableColumn | None) -> str:
    json = column.base_type in _JSON if column is not None else _list_type(t) == "jsonb"
    return ColumnKind.JSON if json else ColumnKind.ARRAY


def _also_accepts(t: pa.DataType, column: TableColumn) -> bool:
    """Enums take text; an array column takes a list of an element type it accepts."""
    if pa.types.is_string(t):
        return column.category == "E"
    element = _scalar_element(t) if pa.types.is_list(t) else None
    if element is None or column.category != "A":
        return False
    return column.element_type in (POSTGRES_TYPES.accepted(element) or ())


def _timestamp_hint(t: pa.DataType, column: TableColumn) -> str:
    if pa.types.is_timestamp(t) and t.tz is not None and column.base_type == "timestamp":
        return (
            ": the data has a time zone (Spark TimestampType) and the column has none, so "
            "the zone would be lost. ALTER the column to timestamptz, or cast the column to "
            "TIMESTAMP_NTZ in Spark"
        )
    if pa.types.is_timestamp(t) and t.tz is None and column.base_type == "timestamptz":
        return (
            ": the data has no time zone (Spark TimestampNTZType) and the column has one. "
            "Cast the column to TIMESTAMP in Spark, or ALTER the column to timestamp"
        )
    return ""


_PLAIN = ColumnKind.PLAIN
#: PostgreSQL's rules, as the write plan uses them: Arrow families, created, accepted, kind.
POSTGRES_TYPES = TypeRules(
    "PostgreSQL",
    (
        TypeRow("boolean", "boolean", frozenset({"bool"}), _PLAIN),
        TypeRow("int8 int16 uint8", "smallint", _NUMBERS, _PLAIN),
        TypeRow("int32 uint16", "integer", _NUMBERS, _PLAIN),
        TypeRow("int64 uint32", "bigint", _NUMBERS, _PLAIN),
        TypeRow("uint64", "numeric(20,0)", _NUMBERS, _PLAIN),
        TypeRow("float16 float32", "real", _REALS, _PLAIN),
        TypeRow("float64", "double precision", _REALS, _PLAIN),
        TypeRow(
            "decimal",
            lambda t: f"numeric({t.precision},{t.scale})",
            lambda t: _NUMBERS if t.scale == 0 else _REALS,
            _PLAIN,
        ),
        TypeRow("string", "text", _STRING_TARGETS, _PLAIN),
        TypeRow("binary", "bytea", frozenset({"bytea"}), ColumnKind.BYTEA),
        TypeRow("date32", "date", frozenset({"date", "timestamp"}), _PLAIN),
        TypeRow("timestamp_tz", "timestamp with time zone", frozenset({"timestamptz"}), _PLAIN),
        TypeRow("timestamp_ntz", "timestamp without time zone", frozenset({"timestamp"}), _PLAIN),
        TypeRow("time", "time without time zone", frozenset({"time"}), _PLAIN),
        TypeRow("duration", "interval", frozenset({"interval"}), ColumnKind.INTERVAL),
        TypeRow("null", "text", None, _PLAIN),
        TypeRow("list", _list_type, _JSON, _list_kind),
        TypeRow("struct map", "jsonb", _JSON, ColumnKind.JSON),
    ),
    other_kind=_PLAIN,
    generated_note=" (or an identity column GENERATED ALWAYS)",
    also_accepts=_also_accepts,
    hint=_timestamp_hint,
)
