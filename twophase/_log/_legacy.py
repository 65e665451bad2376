"""Reading the handles of a commit decision written by twophase 0.2.0 (pickled), without code.

0.2.0 stored a decision's handles as a base64 cloudpickle of a list of handle
objects. A batch decided by 0.2.0 whose driver died before phase 2 must still
be finished after an upgrade, but a pickle names code to run: whoever could
write to the checkpoint could run code in the driver. So the pickle is read by
an unpickler that loads no class at all. It accepts the opcodes that build
lists, dicts and plain values, and, as the only names it resolves, the handle
classes twophase itself shipped in 0.2.0 (:data:`LEGACY_HANDLE_CLASSES`) --
each as an inert stand-in that records the fields the pickle sets. Any other
name (a class of a custom sink, ``os.system``, ``builtins.eval``, ...) is
refused before anything is imported, naming it. The fields then go through the
sink's own :meth:`~twophase.TwoPhaseCommitSink.decode_handle`, as a JSON
record would: the module paths in the pickle do not matter.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
from typing import Any

__all__ = ["LEGACY_HANDLE_CLASSES", "LegacyRecordError", "read_legacy_handles"]

#: The handle classes twophase 0.2.0 shipped: ``(module, qualified name)`` as its pickles name them
#: (0.2.0's module paths, matched as text: ``twophase._types`` is ``twophase._values`` since).
LEGACY_HANDLE_CLASSES = frozenset(
    {
        ("twophase._types", "TransactionHandle"),
        ("twophase.connectors.jdbc._prepared", "PostgresHandle"),
        ("twophase.connectors.jdbc._mariadb._xa", "MariaDBHandle"),
    }
)


class LegacyRecordError(ValueError):
    """A 0.2.0 decision that the restricted reader refuses (the message says why)."""


class _StandIn:
    """What a pickled handle becomes: its class's name and the fields the pickle set."""

    legacy_name = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise LegacyRecordError(
                f"a pickled {self.legacy_name} is built with arguments, which 0.2.0 never wrote"
            )
        self.fields: dict[str, Any] = {}

    def __setstate__(self, state: Any) -> None:
        # A dataclass pickles its __dict__; one with __slots__ pickles (None, {name: value}).
        if isinstance(state, tuple) and len(state) == 2:
            merged: dict[str, Any] = {}
            for part in state:
                if part is not None and not isinstance(part, dict):
                    raise LegacyRecordError(f"a pickled {self.legacy_name} has a malformed state")
                merged.update(part or {})
            state = merged
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            raise LegacyRecordError(f"a pickled {self.legacy_name} has a malformed state")
        if not hasattr(self, "fields"):
            self.fields = {}
        self.fields.update(state)


def _stand_in(module: str, name: str) -> type[_StandIn]:
    return type(name, (_StandIn,), {"legacy_name": f"{module}.{name}", "__module__": __name__})


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in LEGACY_HANDLE_CLASSES:
            return _stand_in(module, name)
        raise LegacyRecordError(
            f"it names {module}.{name}, which is not one of the handle classes twophase 0.2.0 "
            "shipped; it was not loaded"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise LegacyRecordError("it holds a persistent reference; it was not loaded")


def read_legacy_handles(payload: object) -> list[dict[str, Any]]:
    """Return the handles of a 0.2.0 decision as ``{"type": ..., "fields": {...}}`` records.

    Parameters
    ----------
    payload
        The record's ``handles`` value: base64 of a pickled list of handles.

    Returns
    -------
    list of dict
        One record per handle, in the shape of :func:`twophase._log._codec.encode_dataclass`
        (``type`` is the class's module and name in 0.2.0).

    Raises
    ------
    LegacyRecordError
        The payload is not a list of handles of the classes 0.2.0 shipped.
    """
    if not isinstance(payload, str):
        raise LegacyRecordError("its handles are not a base64 string")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise LegacyRecordError(f"its handles are not base64 ({exc})") from exc
    try:
        value = _RestrictedUnpickler(io.BytesIO(raw)).load()
    except LegacyRecordError:
        raise
    except Exception as exc:  # a truncated or malformed pickle: nothing ran
        raise LegacyRecordError(f"its handles are not a readable pickle ({exc})") from exc
    if not isinstance(value, list) or not all(isinstance(h, _StandIn) for h in value):
        raise LegacyRecordError("its handles are not a list of handles")
    return [{"type": h.legacy_name, "fields": dict(getattr(h, "fields", {}))} for h in value]
