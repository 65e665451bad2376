"""Spark / Arrow types to MariaDB types: the DDL mapping, the compatibility rules, the rendering.

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

Values travel as SQL literals of multi-row ``INSERT`` statements, rendered
column by column with Arrow kernels (:func:`render_literals`).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from twophase.errors import DataError

from ..._arrow import first_true, text_scalar
from .._encode import hex_text, json_text
from .._plan import TypeRules
from .._table import TableColumn, unwrap

__all__ = [
    "MARIADB_TYPES",
    "Kind",
    "column_kind",
    "compatibility_problem",
    "mariadb_type",
    "render_fields",
    "render_literals",
]

_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
_FLOATS = frozenset({"float", "double"})
_NUMBERS = _INTEGERS | _FLOATS | {"decimal"}
_TEXT = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json"})
_STRING_TARGETS = _TEXT | {"enum", "set", "uuid", "inet4", "inet6"}
_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_MAX_PRECISION = 65


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


def _scalar_type(t: pa.DataType, key: bool) -> str | None:
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_int8(t):
        return "TINYINT"
    if pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "SMALLINT"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "INT"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "BIGINT"
    if pa.types.is_uint64(t):
        return "BIGINT UNSIGNED"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_decimal(t):
        if t.precision > _MAX_PRECISION:
            return None
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_string(t):
        return "VARCHAR(255)" if key else "LONGTEXT"
    if pa.types.is_binary(t):
        return "VARBINARY(255)" if key else "LONGBLOB"
    if pa.types.is_date32(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "DATETIME(6)"
    if pa.types.is_time(t):
        return "TIME(6)"
    if pa.types.is_null(t):
        return "LONGTEXT"
    return None


def mariadb_type(arrow_type: pa.DataType, key: bool = False) -> str:
    """Return the MariaDB type a column of this Arrow type is created as.

    Parameters
    ----------
    arrow_type
        The Arrow type of the input column.
    key
        The column is part of the primary key (text and binary get a length).

    Returns
    -------
    str
        A type usable in ``CREATE TABLE``.

    Raises
    ------
    TypeError
        No counterpart (durations, unions, decimals over 65 digits).
    """
    t = unwrap(arrow_type)
    scalar = _scalar_type(t, key)
    if scalar is not None:
        return scalar
    if pa.types.is_list(t) or pa.types.is_struct(t) or pa.types.is_map(t):
        return "JSON"
    raise TypeError(f"no MariaDB type for Arrow type {arrow_type}")


def _targets(t: pa.DataType) -> frozenset[str] | None:
    if pa.types.is_boolean(t):
        return _INTEGERS | {"bit"}
    if pa.types.is_integer(t):
        return _NUMBERS
    if pa.types.is_floating(t):
        return _FLOATS | {"decimal"}
    if pa.types.is_decimal(t):
        return _NUMBERS if t.scale == 0 else _FLOATS | {"decimal"}
    if pa.types.is_string(t):
        return _STRING_TARGETS
    if pa.types.is_binary(t):
        return _BINARY
    if pa.types.is_date32(t) or pa.types.is_timestamp(t):
        return frozenset({"date", "datetime", "timestamp"}) - (
            frozenset({"date"}) if pa.types.is_timestamp(t) else frozenset()
        )
    if pa.types.is_time(t):
        return frozenset({"time"})
    if pa.types.is_list(t) or pa.types.is_struct(t) or pa.types.is_map(t):
        return _TEXT
    return None


def compatibility_problem(arrow_type: pa.DataType, column: TableColumn) -> str | None:
    """Why values of ``arrow_type`` cannot be written into ``column`` (None: they can).

    Parameters
    ----------
    arrow_type
        The Arrow type of the input column.
    column
        The target column from ``information_schema``.

    Returns
    -------
    str or None
        A sentence naming both types, or ``None`` when compatible.
    """
    if column.generated:
        return f"column {column.name!r} is generated and cannot be written; drop it from the input"
    t = unwrap(arrow_type)
    if pa.types.is_null(t):
        return None
    targets = _targets(t)
    if targets is None:
        return f"Arrow type {arrow_type} is not supported by the MariaDB sink"
    if column.base_type in targets:
        return None
    try:
        written = mariadb_type(t)
    except TypeError:
        written = "nothing"
    return (
        f"column {column.name!r} is {column.type_name} but the input column is "
        f"{arrow_type} (written as {written})"
    )


def column_kind(arrow_type: pa.DataType, column: TableColumn | None) -> str:
    """How the values of one input column are rendered.

    Parameters
    ----------
    arrow_type
        The Arrow type of the input column.
    column
        The target column (unused: MariaDB parses every literal by the column's type).

    Returns
    -------
    str
        One of the :class:`Kind` constants.
    """
    t = unwrap(arrow_type)
    if pa.types.is_boolean(t):
        return Kind.BOOL
    if pa.types.is_floating(t):
        return Kind.FLOAT
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return Kind.NUMBER
    if pa.types.is_binary(t):
        return Kind.BINARY
    if pa.types.is_timestamp(t) and t.tz is not None:
        return Kind.UTC
    if pa.types.is_list(t) or pa.types.is_struct(t) or pa.types.is_map(t):
        return Kind.JSON
    if pa.types.is_null(t):
        return Kind.NULL
    return Kind.TEXT


#: The dialect's type mapping, as the write plan uses it.
MARIADB_TYPES = TypeRules("MariaDB", compatibility_problem, column_kind, mariadb_type)

# ------------------------------------------------------------------ rendering
_NULL = text_scalar("NULL", pa.large_string())
_NULL_FIELD = text_scalar(b"\\N", pa.large_binary())
_QUOTE = text_scalar("'", pa.large_string())
_EMPTY = text_scalar("", pa.large_string())
_HEX_OPEN = text_scalar("X'", pa.large_string())


def _values(array: pa.Array, kind: str, name: str) -> tuple[pa.Array, bool]:
    """Turn a column into text (or bytes) with nulls kept, and say whether it needs quoting.

    Raises
    ------
    DataError
        NaN or infinity in a float column, naming the column and the first row.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if kind == Kind.NULL:
        return pa.nulls(len(array), pa.large_string()), False
    if kind == Kind.BOOL:
        return array.cast(pa.int8()).cast(pa.large_string()), False
    if kind == Kind.NUMBER:
        return array.cast(pa.large_string()), False
    if kind == Kind.FLOAT:
        if pa.types.is_float16(array.type):
            array = array.cast(pa.float32())
        bad = pc.and_(pc.invert(pc.is_finite(array)), pc.is_valid(array))
        if pc.any(bad).as_py():
            row = first_true(bad)
            raise DataError(
                f"row {row} has {array[row].as_py()!r}: MariaDB FLOAT and DOUBLE columns "
                "cannot store NaN or infinity; map them to NULL (or a sentinel) in Spark",
                column=name,
            )
        return array.cast(pa.large_string()), False
    if kind == Kind.BINARY:
        return array.cast(pa.large_binary()), True
    if kind == Kind.UTC:
        array = array.cast(pa.timestamp(array.type.unit))
    elif kind == Kind.JSON:
        array = json_text(array, name)
    return array.cast(pa.large_string()), True


def render_literals(array: pa.Array, kind: str, name: str) -> pa.Array:
    """Render one column as SQL literals (a string array without nulls: ``NULL`` is a literal).

    Parameters
    ----------
    array
        The input column.
    kind
        A :class:`Kind` constant from :func:`column_kind`.
    name
        The column name, for errors.

    Returns
    -------
    pyarrow.Array
        One literal per row: numbers as they are, text quoted with backslash,
        quote and NUL escaped (the sessions run with backslash escapes), binary
        as ``X'hex'``.

    Raises
    ------
    DataError
        NaN or infinity in a float column, naming the column and the first row.
    """
    values, quoted = _values(array, kind, name)
    if kind == Kind.BINARY:
        text = pc.binary_join_element_wise(_HEX_OPEN, hex_text(values), _QUOTE, _EMPTY)
    elif quoted:
        escaped = pc.replace_substring(values, "\\", "\\\\")
        escaped = pc.replace_substring(escaped, "'", "\\'")
        escaped = pc.replace_substring(escaped, "\x00", "\\0")
        text = pc.binary_join_element_wise(_QUOTE, escaped, _QUOTE, _EMPTY)
    else:
        text = values
    return pc.fill_null(text.cast(pa.large_string()), _NULL)


def render_fields(array: pa.Array, kind: str, name: str) -> pa.Array:
    r"""Render one column as ``LOAD DATA`` fields (tab-separated, backslash escapes).

    Parameters
    ----------
    array
        The input column.
    kind
        A :class:`Kind` constant from :func:`column_kind`.
    name
        The column name, for errors.

    Returns
    -------
    pyarrow.Array
        One field per row, as bytes: ``\N`` for NULL (an empty field is the
        empty string); in text and binary, backslash, tab and newline escaped
        and every other byte as it is (the file is read ``CHARACTER SET binary``).

    Raises
    ------
    DataError
        NaN or infinity in a float column, naming the column and the first row.
    """
    values, quoted = _values(array, kind, name)
    values = values.cast(pa.large_binary())
    if quoted:
        values = pc.replace_substring(values, b"\\", b"\\\\")
        values = pc.replace_substring(values, b"\t", b"\\t")
        values = pc.replace_substring(values, b"\n", b"\\n")
    return pc.fill_null(values, _NULL_FIELD)
