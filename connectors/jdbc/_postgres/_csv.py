r"""Arrow record batches to PostgreSQL ``COPY ... (FORMAT csv)`` input, in memory.

The bulk of the work is Arrow's C++ CSV writer: numbers, booleans, decimals,
strings, dates, times and timestamps already come out in a syntax PostgreSQL
reads. Columns it cannot render, or renders differently from what PostgreSQL
expects, are turned into text columns first, vectorised where it matters:

* binary -> bytea hex (``\x4142``), with numpy, no Python loop per row;
* durations -> ``"<n> microseconds"`` (also seconds / milliseconds);
* lists of scalars -> array literals (``{"1","2",NULL}``), with Arrow kernels;
* structs, maps and nested lists -> JSON text (a Python loop per row).

CSV quoting follows PostgreSQL's rules: an unquoted empty field is ``NULL``,
a quoted empty field (``""``) is the empty string; Arrow quotes every string.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..._arrow import number_values, numbers, text_scalar
from .._encode import ColumnPlan, hex_text, json_text, rendered_columns
from .._table import is_type
from ._type_map import ColumnKind

__all__ = ["encode_csv", "render_column"]

_WRITE_OPTIONS = pacsv.WriteOptions(
    include_header=False, batch_size=8192, delimiter=",", quoting_style="needed"
)


def encode_csv(
    batch: pa.RecordBatch, plans: Sequence[ColumnPlan], extra: Sequence[pa.Array] = ()
) -> pa.Buffer:
    """Render the planned columns of ``batch`` (then ``extra``) as CSV rows.

    Parameters
    ----------
    batch
        The input record batch.
    plans
        The columns to send, in the order of the ``COPY`` column list.
    extra
        Arrays appended after the planned columns (the CDC operation and the
        row sequence), as long as the batch.

    Returns
    -------
    pyarrow.Buffer
        CSV without a header, ready for ``COPY ... FROM STDIN (FORMAT csv)``.

    Raises
    ------
    DataError
        A value cannot be rendered (NaN inside a JSON column), naming the column.
    """
    arrays = rendered_columns(batch, plans, render_column, extra)
    table = pa.Table.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink, _WRITE_OPTIONS)
    return sink.getvalue()


def render_column(array: pa.Array, kind: str, name: str = "?") -> pa.Array:
    """Turn one column into an array that Arrow's CSV writer renders for PostgreSQL.

    Parameters
    ----------
    array
        The input column.
    kind
        How to render it (a ``ColumnKind`` constant).
    name
        The column name, for error messages.

    Returns
    -------
    pyarrow.Array
        An array of a type the CSV writer supports.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if kind == ColumnKind.BYTEA:
        return _bytea_hex(array)
    if kind == ColumnKind.INTERVAL:
        return _interval_text(array)
    if kind == ColumnKind.ARRAY:
        return _array_literal(array)
    if kind == ColumnKind.JSON:
        return json_text(array, name)
    return _plain(array)


# ------------------------------------------------------------------ scalars
def _plain(array: pa.Array) -> pa.Array:
    t = array.type
    if pa.types.is_timestamp(t) and t.tz is not None:
        return _utc_text(array)
    if is_type("is_string_view", t):
        return array.cast(pa.string())
    if pa.types.is_date64(t):
        return array.cast(pa.date32())
    if pa.types.is_float16(t):
        return array.cast(pa.float32())
    return array


def _utc_text(array: pa.Array) -> pa.Array:
    """Render zoned timestamps as UTC text with a ``Z`` suffix.

    Arrow stores zoned timestamps as UTC instants; dropping the zone gives the
    UTC wall-clock time, which renders ten times faster than Arrow's own
    zone-aware formatting. The ``Z`` keeps the value independent of the
    session's ``TimeZone``.
    """
    wall = array.cast(pa.timestamp(array.type.unit)).cast(pa.string())
    return pc.utf8_replace_slice(wall, start=1 << 20, stop=1 << 20, replacement="Z")


def _bytea_hex(array: pa.Array) -> pa.Array:
    r"""Render binary values in bytea hex format, ``\x`` then two digits per byte."""
    return hex_text(array, b"\\x")


_INTERVAL_UNITS = {
    unit: text_scalar(name, pa.string())
    for unit, name in {"s": " seconds", "ms": " milliseconds", "us": " microseconds"}.items()
}
_EMPTY = text_scalar("", pa.string())
_QUOTE = text_scalar('"', pa.string())
_NULL = text_scalar("NULL", pa.string())
_COMMA = text_scalar(",", pa.string())
_OPEN = text_scalar("{", pa.string())
_CLOSE = text_scalar("}", pa.string())


def _interval_text(array: pa.Array) -> pa.Array:
    """Durations to interval input: ``"<n> microseconds"`` (ns rounded down to us)."""
    unit = array.type.unit
    if unit == "ns":
        array = array.cast(pa.duration("us"), safe=False)
        unit = "us"
    digits = array.cast(pa.int64()).cast(pa.string())
    return pc.binary_join_element_wise(digits, _INTERVAL_UNITS[unit], _EMPTY)


def _element_text(values: pa.Array) -> pa.Array:
    """Array elements as text, before quoting (nulls stay null)."""
    t = values.type
    if pa.types.is_dictionary(t):
        return _element_text(values.dictionary_decode())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _bytea_hex(values).cast(pa.string())
    if is_type("is_binary_view", t):
        return _bytea_hex(values.cast(pa.binary())).cast(pa.string())
    if pa.types.is_duration(t):
        return _interval_text(values)
    if pa.types.is_string(t):
        return values
    if pa.types.is_null(t):
        return pa.nulls(len(values), pa.string())
    return _plain(values).cast(pa.string())


def _array_literal(array: pa.Array) -> pa.Array:
    r"""Render lists of scalars as PostgreSQL array literals: ``{"a","b \"c\"",NULL}``."""
    t = array.type
    if not pa.types.is_list(t):  # large, fixed-size and view lists
        array = array.cast(pa.list_(t.value_type))
    offsets = number_values(array.offsets).astype(np.int32)
    first = int(offsets[0])
    values = array.values.slice(first, int(offsets[-1]) - first)
    text = _element_text(values)
    text = pc.replace_substring(text, "\\", "\\\\")
    text = pc.replace_substring(text, '"', '\\"')
    quoted = pc.binary_join_element_wise(_QUOTE, text, _QUOTE, _EMPTY)
    quoted = pc.fill_null(quoted, _NULL)
    lists = pa.ListArray.from_arrays(
        numbers(offsets - first, pa.int32()), quoted, mask=array.is_null()
    )
    joined = pc.binary_join(lists, _COMMA)
    return pc.binary_join_element_wise(_OPEN, joined, _CLOSE, _EMPTY)


# --------------------------------------------------------------------- JSON
