"""Spark / Arrow types to PostgreSQL types: the DDL mapping and the compatibility rules.

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

from .._plan import TypeRules
from .._table import TableColumn, unwrap

__all__ = [
    "POSTGRES_TYPES",
    "ColumnKind",
    "column_kind",
    "compatibility_problem",
    "postgres_type",
]


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


def _is_list(arrow_type: pa.DataType) -> bool:
    return bool(pa.types.is_list(unwrap(arrow_type)))


def _is_nested(arrow_type: pa.DataType) -> bool:
    t = unwrap(arrow_type)
    return bool(pa.types.is_list(t) or pa.types.is_struct(t) or pa.types.is_map(t))


def _scalar_type(arrow_type: pa.DataType) -> str | None:
    """Return the PostgreSQL type of a scalar Arrow type, or None for nested types."""
    t = unwrap(arrow_type)
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "smallint"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "bigint"
    if pa.types.is_uint64(t):
        return "numeric(20,0)"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "real"
    if pa.types.is_float64(t):
        return "double precision"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    if pa.types.is_string(t):
        return "text"
    if pa.types.is_binary(t):
        return "bytea"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp with time zone" if t.tz is not None else "timestamp without time zone"
    if pa.types.is_time(t):
        return "time without time zone"
    if pa.types.is_duration(t):
        return "interval"
    if pa.types.is_null(t):
        return "text"
    return None


def postgres_type(arrow_type: pa.DataType) -> str:
    """Return the PostgreSQL type a column of this Arrow type is created as.

    Parameters
    ----------
    arrow_type
        The Arrow type of the input column.

    Returns
    -------
    str
        A PostgreSQL type name usable in ``CREATE TABLE``.

    Raises
    ------
    TypeError
        The Arrow type has no PostgreSQL counterpart (unions, extension types).

    Examples
    --------
    >>> import pyarrow as pa
    >>> postgres_type(pa.list_(pa.int64()))
    'bigint[]'
    >>> postgres_type(pa.struct([("a", pa.int32())]))
    'jsonb'
    """
    scalar = _scalar_type(arrow_type)
    if scalar is not None:
        return scalar
    t = unwrap(arrow_type)
    if pa.types.is_list(t):
        element = t.value_type
        if not _is_nested(element) and not pa.types.is_null(unwrap(element)):
            inner = _scalar_type(element)
            if inner is not None:
                return f"{inner}[]"
        return "jsonb"
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return "jsonb"
    raise TypeError(f"no PostgreSQL type for Arrow type {arrow_type}")


# --------------------------------------------------------------- compatibility
_INTEGERS = frozenset({"int2", "int4", "int8"})
_FLOATS = frozenset({"float4", "float8"})
_NUMBERS = _INTEGERS | _FLOATS | {"numeric"}
_JSON = frozenset({"json", "jsonb"})
_STRING_TARGETS = frozenset(
    {
        "text",
        "varchar",
        "bpchar",
        "name",
        "citext",
        "json",
        "jsonb",
        "uuid",
        "xml",
        "inet",
        "cidr",
        "macaddr",
        "macaddr8",
    }
)


def _scalar_targets(arrow_type: pa.DataType) -> frozenset[str] | None:
    """Return the base types a scalar Arrow type may be written into (None: nested)."""
    t = unwrap(arrow_type)
    if pa.types.is_boolean(t):
        return frozenset({"bool"})
    if pa.types.is_integer(t):
        return _NUMBERS
    if pa.types.is_floating(t):
        return _FLOATS | {"numeric"}
    if pa.types.is_decimal(t):
        return _NUMBERS if t.scale == 0 else _FLOATS | {"numeric"}
    if pa.types.is_string(t):
        return _STRING_TARGETS
    if pa.types.is_binary(t):
        return frozenset({"bytea"})
    if pa.types.is_date32(t):
        return frozenset({"date", "timestamp"})
    if pa.types.is_timestamp(t):
        return frozenset({"timestamptz"}) if t.tz is not None else frozenset({"timestamp"})
    if pa.types.is_time(t):
        return frozenset({"time"})
    if pa.types.is_duration(t):
        return frozenset({"interval"})
    return None


def _timestamp_hint(arrow_type: pa.DataType, column: TableColumn) -> str:
    t = unwrap(arrow_type)
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


def compatibility_problem(arrow_type: pa.DataType, column: TableColumn) -> str | None:
    """Why values of ``arrow_type`` cannot be written into ``column`` (None: they can).

    Parameters
    ----------
    arrow_type
        The Arrow type of the input column.
    column
        The target column from the catalog.

    Returns
    -------
    str or None
        A sentence naming both types, or ``None`` when compatible.
    """
    if column.generated:
        return (
            f"column {column.name!r} is generated (or an identity column GENERATED ALWAYS) "
            "and cannot be written; drop it from the input"
        )
    t = unwrap(arrow_type)
    if pa.types.is_null(t):
        return None
    targets = _scalar_targets(t)
    ok: bool
    if targets is not None:
        ok = column.base_type in targets or (pa.types.is_string(t) and column.category == "E")
    elif pa.types.is_list(t):
        element = t.value_type
        if column.base_type in _JSON:
            ok = True
        elif column.category == "A" and not _is_nested(element):
            element_targets = _scalar_targets(element)
            ok = element_targets is not None and (
                column.element_type in element_targets or pa.types.is_null(unwrap(element))
            )
        else:
            ok = False
    elif pa.types.is_struct(t) or pa.types.is_map(t):
        ok = column.base_type in _JSON
    else:
        return f"Arrow type {arrow_type} is not supported by the PostgreSQL sink"
    if ok:
        return None
    return (
        f"column {column.name!r} is {column.type_name} but the input column is "
        f"{arrow_type} (written as {_describe(t)}){_timestamp_hint(t, column)}"
    )


def _describe(arrow_type: pa.DataType) -> str:
    try:
        return postgres_type(arrow_type)
    except TypeError:
        return "nothing"


def column_kind(arrow_type: pa.DataType, column: TableColumn | None) -> str:
    """How the values of one input column are rendered for ``COPY``.

    Parameters
    ----------
    arrow_type
        The Arrow type of the input column.
    column
        The target column (``None`` when creating the table: the created type).

    Returns
    -------
    str
        One of the :class:`ColumnKind` constants.
    """
    t = unwrap(arrow_type)
    if pa.types.is_binary(t):
        return ColumnKind.BYTEA
    if pa.types.is_duration(t):
        return ColumnKind.INTERVAL
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return ColumnKind.JSON
    if pa.types.is_list(t):
        if column is not None:
            return ColumnKind.JSON if column.base_type in _JSON else ColumnKind.ARRAY
        return ColumnKind.JSON if postgres_type(t) == "jsonb" else ColumnKind.ARRAY
    return ColumnKind.PLAIN


#: PostgreSQL's rules, as the write plan uses them.
POSTGRES_TYPES = TypeRules(
    "PostgreSQL",
    compatibility_problem,
    column_kind,
    lambda arrow_type, _key: postgres_type(arrow_type),
)
