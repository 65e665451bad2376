"""Arrow values as text any dialect sends: which column goes where, hex for binary, JSON.

A dialect's bulk path (PostgreSQL's ``COPY`` CSV, MariaDB's ``LOAD DATA``)
renders most types its own way; binary as hex digits and nested values
(structs, maps, nested lists) as JSON text are the same everywhere and live
here.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from twophase.errors import DataError

from .._arrow import text_array
from ._table import is_type

__all__ = ["ColumnPlan", "hex_text", "json_text", "rendered_columns"]

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


@dataclass(frozen=True)
class ColumnPlan:
    """One input column to send: where it is in the batch, and how to render it.

    Attributes
    ----------
    index
        Position of the column in the input record batch.
    name
        The column name (used in error messages).
    kind
        How the dialect renders it (one of its column kinds, e.g.
        PostgreSQL's ``ColumnKind``).
    """

    index: int
    name: str
    kind: str


def rendered_columns(
    batch: pa.RecordBatch,
    plans: Sequence[ColumnPlan],
    render: Callable[[pa.Array, str, str], pa.Array],
    extra: Sequence[pa.Array] = (),
) -> list[pa.Array]:
    """Render the planned columns of ``batch`` the dialect's way, then append ``extra``.

    Parameters
    ----------
    batch
        The input record batch.
    plans
        The columns to send, in the order of the statement's column list.
    render
        ``(array, kind, name) -> array``: the dialect's rendering of one column.
    extra
        Arrays appended after the planned columns (the CDC operation and the
        row sequence), as long as the batch.

    Returns
    -------
    list of pyarrow.Array
        The columns to send, in order.
    """
    arrays = [render(batch.column(p.index), p.kind, p.name) for p in plans]
    arrays.extend(extra)
    return arrays


def hex_text(array: pa.Array, prefix: bytes = b"") -> pa.Array:
    r"""Render binary values as ``prefix`` then two hex digits per byte, with numpy.

    Parameters
    ----------
    array
        A binary column (nulls stay null).
    prefix
        Written before each value's digits (``b"\x"`` for PostgreSQL's bytea).

    Returns
    -------
    pyarrow.Array
        A large string array.
    """
    array = array.cast(pa.large_binary())
    n = len(array)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[array.offset : array.offset + n + 1]
    start = int(offsets[0])
    rel = offsets - start
    data_buffer = array.buffers()[2]
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)[start : start + int(rel[-1])]
        if data_buffer is not None
        else np.empty(0, dtype=np.uint8)
    )
    width = len(prefix)
    new_offsets = 2 * rel + width * np.arange(n + 1, dtype=np.int64)
    out = np.empty(int(new_offsets[-1]), dtype=np.uint8)
    heads = new_offsets[:-1]
    for i, byte in enumerate(prefix):
        out[heads + i] = byte
    if len(data):
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(rel))
        dest = 2 * np.arange(len(data), dtype=np.int64) + width * rows + width
        out[dest] = _HEX[data >> 4]
        out[dest + 1] = _HEX[data & 0x0F]
    text = pa.LargeStringArray.from_buffers(
        n, pa.py_buffer(new_offsets.astype(np.int64)), pa.py_buffer(out)
    )
    if array.null_count:
        text = pc.if_else(pc.is_valid(array), text, pa.nulls(1, pa.large_string())[0])
    return text


def json_text(array: pa.Array, name: str) -> pa.Array:
    """Render structs, maps and lists as JSON text, one Python call per row.

    Parameters
    ----------
    array
        The column (a string column is returned as it is).
    name
        The column name, for errors.

    Returns
    -------
    pyarrow.Array
        JSON text per row; nulls stay null.

    Raises
    ------
    DataError
        A value JSON cannot hold (NaN), naming the column.
    """
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return array
    arrow_type = array.type
    out: list[str | None] = []
    try:
        for value in array.to_pylist():
            out.append(None if value is None else "".join(_json(value, arrow_type)))
    except ValueError as exc:
        raise DataError(f"cannot write the value as JSON: {exc}", column=name) from None
    return text_array(out, pa.string())


def _json(value: Any, arrow_type: pa.DataType) -> list[str]:
    parts: list[str] = []
    _json_into(parts, value, arrow_type)
    return parts


def _json_into(parts: list[str], value: Any, t: pa.DataType) -> None:
    if value is None:
        parts.append("null")
        return
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_struct(t):
        parts.append("{")
        for i in range(t.num_fields):
            field = t.field(i)
            if i:
                parts.append(",")
            parts.append(json.dumps(field.name, ensure_ascii=False))
            parts.append(":")
            _json_into(parts, value.get(field.name), field.type)
        parts.append("}")
        return
    if pa.types.is_map(t):
        parts.append("{")
        for i, (key, item) in enumerate(value):
            if i:
                parts.append(",")
            parts.append(json.dumps(_json_key(key), ensure_ascii=False))
            parts.append(":")
            _json_into(parts, item, t.item_type)
        parts.append("}")
        return
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or is_type("is_list_view", t)
        or is_type("is_large_list_view", t)
    ):
        parts.append("[")
        for i, item in enumerate(value):
            if i:
                parts.append(",")
            _json_into(parts, item, t.value_type)
        parts.append("]")
        return
    parts.append(_json_scalar(value))


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        return base64.b64encode(key).decode()
    if isinstance(key, (_dt.date, _dt.time)):
        return key.isoformat()
    return str(key)


def _json_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"{value} is not a JSON number")
        return repr(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} is not a JSON number")
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bytes):
        return json.dumps(base64.b64encode(value).decode())
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return json.dumps(value.isoformat())
    if isinstance(value, _dt.timedelta):
        return json.dumps(f"PT{value.total_seconds()!r}S")
    return json.dumps(str(value))
