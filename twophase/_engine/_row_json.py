"""One row of an Arrow record batch as JSON text, every type kept faithfully (a dead letter's row).

The rules follow the JDBC connectors' JSON text (``docs/jdbc.md``, type mapping), with two
changes for a row that must survive any JSON reader: a decimal is a string (its digits and
scale, which a float would round), and a float JSON cannot hold (NaN, infinities) is the
string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` instead of an error -- the value may be
why the row was refused. Bytes are base64; dates, times and timestamps ISO 8601 (a timestamp
with a zone carries its offset); a duration ``PT<seconds>S``; structs and maps are objects,
lists arrays; a map's non-string key is its text (bytes base64).
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
import math
from typing import Any

import pyarrow as pa

__all__ = ["row_json"]


def row_json(batch: pa.RecordBatch, index: int) -> str:
    """Return row ``index`` of ``batch`` as a JSON object of its columns, in column order.

    Parameters
    ----------
    batch
        The record batch.
    index
        The row's position in it.

    Returns
    -------
    str
        ``{"column": value, ...}``; a null is ``null``.
    """
    parts = ["{"]
    row = batch.slice(index, 1)
    for i, field in enumerate(batch.schema):
        if i:
            parts.append(",")
        parts.append(json.dumps(field.name, ensure_ascii=False))
        parts.append(":")
        _into(parts, row.column(i)[0].as_py(), field.type)
    parts.append("}")
    return "".join(parts)


def _is_list(t: pa.DataType) -> bool:
    kinds = ("is_list", "is_large_list", "is_fixed_size_list", "is_list_view", "is_large_list_view")
    return any(getattr(pa.types, kind, lambda _: False)(t) for kind in kinds)


def _into(parts: list[str], value: Any, t: pa.DataType) -> None:
    if value is None:
        parts.append("null")
        return
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_struct(t):
        parts.append("{")
        for i in range(t.num_fields):
            field = t.field(i)
            parts.append("," if i else "")
            parts.append(json.dumps(field.name, ensure_ascii=False) + ":")
            _into(parts, value.get(field.name), field.type)
        parts.append("}")
    elif pa.types.is_map(t):
        parts.append("{")
        for i, (key, item) in enumerate(value):
            parts.append("," if i else "")
            parts.append(json.dumps(_key(key), ensure_ascii=False) + ":")
            _into(parts, item, t.item_type)
        parts.append("}")
    elif _is_list(t):
        parts.append("[")
        for i, item in enumerate(value):
            parts.append("," if i else "")
            _into(parts, item, t.value_type)
        parts.append("]")
    else:
        parts.append(_scalar(value))


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        return base64.b64encode(key).decode()
    if isinstance(key, (_dt.date, _dt.time)):
        return key.isoformat()
    return str(key)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return '"NaN"'
        if math.isinf(value):
            return '"Infinity"' if value > 0 else '"-Infinity"'
        return repr(value)
    if isinstance(value, decimal.Decimal):
        return json.dumps(str(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bytes):
        return json.dumps(base64.b64encode(value).decode())
    if isinstance(value, _dt.timedelta):
        return json.dumps(f"PT{value.total_seconds()!r}S")
    if hasattr(value, "isoformat"):  # date, time, datetime (pandas' Timestamp for nanoseconds)
        return json.dumps(value.isoformat())
    return json.dumps(str(value))
