r"""MariaDB's rendering of a column by kind: SQL literals for ``INSERT``, fields for ``LOAD DATA``.

Both renderings take the input column, its :class:`~._type_map.Kind` (from the
type rules) and its name (for errors), work column by column with Arrow
kernels, and raise :class:`~twophase.errors.DataError` naming the column and
the first row for NaN or infinity in a float column (MariaDB's ``FLOAT`` and
``DOUBLE`` cannot hold them). A row's rendered columns are then joined by
:func:`join_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from twophase.errors import DataError

from ..._arrow import first_true, text_scalar
from .._encode import hex_text, json_text
from ._type_map import Kind

__all__ = ["join_rows", "render_fields", "render_literals"]

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
    """Render one column as SQL literals, without nulls (``NULL`` is a literal).

    Numbers are as they are, text is quoted with backslash, quote and NUL
    escaped (the sessions run with backslash escapes), binary is ``X'hex'``.
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
    r"""Render one column as ``LOAD DATA`` fields (tab-separated, backslash escapes), as bytes.

    NULL is ``\N`` (an empty field is the empty string); in text and binary,
    backslash, tab and newline are escaped and every other byte is as it is
    (the file is read ``CHARACTER SET binary``).
    """
    values, quoted = _values(array, kind, name)
    values = values.cast(pa.large_binary())
    if quoted:
        values = pc.replace_substring(values, b"\\", b"\\\\")
        values = pc.replace_substring(values, b"\t", b"\\t")
        values = pc.replace_substring(values, b"\n", b"\\n")
    return pc.fill_null(values, _NULL_FIELD)


def join_rows(
    columns: Sequence[pa.Array], type_: pa.DataType, separator: str, opening: str, ending: str
) -> pa.Array:
    """Join each row's rendered columns with ``separator``, between ``opening`` and ``ending``.

    Parameters
    ----------
    columns
        The rendered columns (without nulls), cast to ``type_``.
    type_
        ``pa.large_string()`` or ``pa.large_binary()``: what the rows are.
    separator, opening, ending
        Text put between two columns, before the first and after the last.

    Returns
    -------
    pyarrow.Array
        One joined row per row, back to back in one buffer.
    """

    def scalar(text: str) -> pa.Scalar:
        return text_scalar(text.encode() if pa.types.is_large_binary(type_) else text, type_)

    joined = pc.binary_join_element_wise(*(c.cast(type_) for c in columns), scalar(separator))
    return pc.binary_join_element_wise(scalar(opening), joined, scalar(ending), scalar(""))
