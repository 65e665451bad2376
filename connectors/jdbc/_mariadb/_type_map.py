"""Spark / Arrow types to MariaDB types: the table the family's type rules read.

=================================  ============================  ===============================
Spark type (Arrow type)            created as                    also accepted by
=================================  ============================  ===============================
BooleanType (bool)                 ``BOOLEAN`` (``tinyint(1)``)  any integer type, bit
ByteType .. LongType (int8..64)    ``TINYINT`` .. ``BIGINT``     any integer, decimal, float,
(uint64)                           ``BIGINT UNSIGNED``           double
FloatType, DoubleType              ``FLOAT``, ``DOUBLE``         decimal, double / float
DecimalType(p, s) (decimal)        ``DECIMAL(p,s)`` (p <= 65)    float, double; integers if s=0
StringType (string)                ``LONGTEXT``                  char, varchar, text types, enum,
                                   (``VARCHAR(255)`` as a key)   set, json, uuid, inet4/6
BinaryType (binary)                ``LONGBLOB``                  binary, varbinary, blob types
                                   (``VARBINARY(255)`` as a key)
DateType (date32)                  ``DATE``                      datetime, timestamp
TimestampType (timestamp, tz)      ``DATETIME(6)`` (UTC)         timestamp (1970-2038)
TimestampNTZType (timestamp)       ``DATETIME(6)``               timestamp
(time32 / time64)                  ``TIME(6)``
ArrayType, StructType, MapType     ``JSON``                      longtext, text (JSON text)
NullType (null)                    ``LONGTEXT``                  any column
=================================  ============================  ===============================

MariaDB's ``DATETIME`` has no zone: a zoned timestamp is written as its UTC
wall-clock time (the sessions run with ``time_zone = '+00:00'``, so a
``TIMESTAMP`` column stores the same instant). ``FLOAT`` and ``DOUBLE`` cannot
hold NaN or infinity: such a value fails the batch with a
:class:`~twophase.errors.DataError` that names the column. Durations have no
counterpart (``TIME`` stops at 838 hours) and are refused.

Values travel as SQL literals of multi-row ``INSERT`` statements or as
``LOAD DATA`` fields, rendered by kind (``_render.py``).
"""

from __future__ import annotations

from .._type_rules import TypeRow, TypeRules

__all__ = ["MARIADB_TYPES", "Kind"]


class Kind:
    """How a column's values are rendered as SQL literals (one of the constants)."""

    NUMBER = "number"
    FLOAT = "float"
    BOOL = "bool"
    TEXT = "text"
    UTC = "utc"
    BINARY = "binary"
    JSON = "json"
    NULL = "null"


_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
_FLOATS = frozenset({"float", "double"})
_REALS = _FLOATS | {"decimal"}
_NUMBERS = _INTEGERS | _REALS
_TEXT = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json"})
_STRING_TARGETS = _TEXT | {"enum", "set", "uuid", "inet4", "inet6"}
_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_DATETIME = frozenset({"datetime", "timestamp"})
_MAX_PRECISION = 65

#: MariaDB's rules, as the write plan uses them; key columns get a bounded text or binary type.
MARIADB_TYPES = TypeRules(
    "MariaDB",
    (
        TypeRow("boolean", "BOOLEAN", _INTEGERS | {"bit"}, Kind.BOOL),
        TypeRow("int8", "TINYINT", _NUMBERS, Kind.NUMBER),
        TypeRow("int16 uint8", "SMALLINT", _NUMBERS, Kind.NUMBER),
        TypeRow("int32 uint16", "INT", _NUMBERS, Kind.NUMBER),
        TypeRow("int64 uint32", "BIGINT", _NUMBERS, Kind.NUMBER),
        TypeRow("uint64", "BIGINT UNSIGNED", _NUMBERS, Kind.NUMBER),
        TypeRow("float16 float32", "FLOAT", _REALS, Kind.FLOAT),
        TypeRow("float64", "DOUBLE", _REALS, Kind.FLOAT),
        TypeRow(
            "decimal",
            lambda t: (
                f"DECIMAL({t.precision},{t.scale})" if t.precision <= _MAX_PRECISION else None
            ),
            lambda t: _NUMBERS if t.scale == 0 else _REALS,
            Kind.NUMBER,
        ),
        TypeRow("string", "LONGTEXT", _STRING_TARGETS, Kind.TEXT, key_created="VARCHAR(255)"),
        TypeRow("binary", "LONGBLOB", _BINARY, Kind.BINARY, key_created="VARBINARY(255)"),
        TypeRow("date32", "DATE", _DATETIME | {"date"}, Kind.TEXT),
        TypeRow("timestamp_tz", "DATETIME(6)", _DATETIME, Kind.UTC),
        TypeRow("timestamp_ntz", "DATETIME(6)", _DATETIME, Kind.TEXT),
        TypeRow("time", "TIME(6)", frozenset({"time"}), Kind.TEXT),
        TypeRow("null", "LONGTEXT", None, Kind.NULL),
        TypeRow("list struct map", "JSON", _TEXT, Kind.JSON),
    ),
    other_kind=Kind.TEXT,
)
