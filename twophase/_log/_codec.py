"""The durable formats' handle codec: handles as plain JSON, never as code.

A commit decision in the coordinator log names the prepared transactions of a
batch by their handles. Since 0.3.0 a handle is stored as JSON through the
sink's :meth:`~twophase.TwoPhaseCommitSink.encode_handle` /
:meth:`~twophase.TwoPhaseCommitSink.decode_handle` hooks, whose defaults are
:func:`encode_dataclass` and :func:`decode_dataclass`: a frozen dataclass of
plain fields (str, int, float, bool, None, bytes, and lists, tuples and dicts
of them) needs no code. Reading a record runs no code named by the record:
the class comes from the sink, the values are data.

Values are JSON where JSON is exact, and tagged objects where it is not::

    "text", 7, 1.5, true, null, [..]        themselves (a list stays a list)
    {"$bytes": "<base64>"}                   bytes
    {"$tuple": [..]}                         a tuple
    {"$dict": [[key, value], ..]}            a dict (keys of any plain type)
    {"$float": "nan" | "inf" | "-inf"}       a float JSON has no literal for
"""

from __future__ import annotations

import base64
import dataclasses
import math
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = [
    "HandleCodecError",
    "decode_dataclass",
    "decode_value",
    "encode_dataclass",
    "encode_value",
]

_T = TypeVar("_T")


class HandleCodecError(ValueError):
    """A handle (or a recorded handle) is not what the codec stores or reads."""


def encode_value(value: Any, where: str = "value") -> Any:
    """Return ``value`` as JSON-able data (see the module's table).

    Parameters
    ----------
    value
        A plain value.
    where
        The value's path, for the error (``handle.rows``).

    Raises
    ------
    HandleCodecError
        ``value`` (or a value inside it) is not a plain value.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)  # an IntEnum is stored as its number
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, list):
        return [encode_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {"$tuple": [encode_value(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, dict):
        return {
            "$dict": [
                [encode_value(k, f"{where} key"), encode_value(v, f"{where}[{k!r}]")]
                for k, v in value.items()
            ]
        }
    raise HandleCodecError(
        f"{where} is a {type(value).__qualname__}; a handle's fields must be str, int, float, "
        "bool, None, bytes, or lists, tuples and dicts of them (or the sink must override "
        "encode_handle and decode_handle)"
    )


def decode_value(data: Any, where: str = "value") -> Any:
    """Return the value :func:`encode_value` encoded as ``data``.

    Raises
    ------
    HandleCodecError
        ``data`` is not something :func:`encode_value` writes.
    """
    if data is None or isinstance(data, (bool, str, int, float)):
        return data
    if isinstance(data, list):
        return [decode_value(v, f"{where}[{i}]") for i, v in enumerate(data)]
    if isinstance(data, dict) and len(data) == 1:
        ((tag, inner),) = data.items()
        try:
            if tag == "$bytes":
                return base64.b64decode(inner, validate=True)
            if tag == "$tuple":
                return tuple(decode_value(v, f"{where}[{i}]") for i, v in enumerate(inner))
            if tag == "$dict":
                return {
                    decode_value(k, f"{where} key"): decode_value(v, f"{where}[{k!r}]")
                    for k, v in inner
                }
            if tag == "$float" and inner in ("nan", "inf", "-inf"):
                return float(inner)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, HandleCodecError):
                raise
            raise HandleCodecError(f"{where}: malformed {tag} value ({exc})") from exc
    raise HandleCodecError(f"{where}: {data!r:.80} is not an encoded value")


def encode_dataclass(handle: object) -> dict[str, Any]:
    """Encode a dataclass instance of plain fields (the default ``encode_handle``).

    Returns
    -------
    dict
        ``{"type": <class name>, "fields": {<name>: <encoded value>}}``. The
        type is there for people reading the record; decoding takes the class
        from the sink.

    Raises
    ------
    HandleCodecError
        ``handle`` is not a dataclass instance, or a field is not a plain value.
    """
    if not dataclasses.is_dataclass(handle) or isinstance(handle, type):
        raise HandleCodecError(
            f"the handle is a {type(handle).__qualname__}, not a dataclass instance: return a "
            "frozen dataclass (subclass twophase.TransactionHandle) from pre_commit, or "
            "override encode_handle and decode_handle"
        )
    name = type(handle).__qualname__
    return {
        "type": name,
        "fields": {
            f.name: encode_value(getattr(handle, f.name), f"{name}.{f.name}")
            for f in dataclasses.fields(handle)
        },
    }


def decode_dataclass(cls: type[_T], data: Mapping[str, Any]) -> _T:
    """Rebuild an instance of the dataclass ``cls`` from :func:`encode_dataclass`'s output.

    A field the record lacks takes the class's default (a handle class may grow
    fields with defaults: older records still read); a field the class lacks,
    or a required field the record lacks, is an error naming it.

    Raises
    ------
    HandleCodecError
        The record does not fit ``cls``.
    """
    fields = data.get("fields") if isinstance(data, Mapping) else None
    if not isinstance(fields, Mapping):
        raise HandleCodecError(f"a recorded handle has no fields object: {data!r:.120}")
    if not dataclasses.is_dataclass(cls):
        raise HandleCodecError(f"{cls.__qualname__} is not a dataclass")
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise HandleCodecError(
            f"the recorded handle has field(s) {unknown} that {cls.__qualname__} does not "
            "have (was it written by a newer release of the sink?)"
        )
    missing = [
        n
        for n, f in known.items()
        if n not in fields
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise HandleCodecError(
            f"the recorded handle lacks the required field(s) {missing} of {cls.__qualname__}"
        )
    values = {n: decode_value(v, f"{cls.__qualname__}.{n}") for n, v in fields.items()}
    return typing.cast(_T, cls(**values))
