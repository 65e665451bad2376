"""The coordinator log's records: their names, their format, and how they are encoded and read.

Layout under ``<checkpoint>/twophase/<sink name>/<query id>/``::

    epochs/<epoch>.json          one per run that claimed the sink identity
    batches/<batch>.intent.json  both protocols: batch started, with P partitions
    batches/<batch>.decision.json  coordinated: "commit batch N with these handles"
    batches/<batch>.committed.json "batch N is committed"
    batches/<batch>.rewrite.json   an operator's decision: rewrite markers batch N whole
    state.json                   compaction summary (committed-through, slot high-water)

Every record is JSON and carries its format (``"format": 2`` since 0.3.0, with
``"writer": "twophase <version>"``; records of 0.2.0 have no format and are
format 1). This release reads formats 1 and 2 and refuses a newer one, naming
it and the release that wrote it (``docs/upgrading.md``). A decision stores its
handles as JSON through the sink's codec (``encode_handle``/``decode_handle``,
``_log/_codec.py``); nothing read from the log is unpickled, except a 0.2.0
decision's handles, through the restricted reader of ``_log/_legacy.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .._version import __version__
from ..errors import CoordinatorLogError
from ._legacy import read_legacy_handles

__all__ = [
    "BATCH_RE",
    "EPOCH_RE",
    "LOG_FORMAT",
    "WRITER",
    "decision_handles",
    "dump_record",
    "parse_record",
    "record_format",
]

#: The format of the records this release writes. 1: twophase 0.2.0 (no "format" field,
#: pickled handles in decisions); 2: since 0.3.0 (handles as JSON).
LOG_FORMAT = 2
#: Who wrote a record, kept in it so that a reader too old for it can name the release to run.
WRITER = f"twophase {__version__}"
#: The name of a batch's record under ``batches/``: the batch id and the record's kind.
BATCH_RE = re.compile(r"^(\d{20})\.(intent|decision|committed|rewrite|lost)\.json$")
#: The name of a run's claim under ``epochs/``: the epoch.
EPOCH_RE = re.compile(r"^(\d{20})\.json$")


def dump_record(record: dict[str, Any]) -> bytes:
    """Return a record as the bytes to store, stamped with this release's format and name."""
    stamped = {**record, "format": LOG_FORMAT, "writer": WRITER}
    return (json.dumps(stamped, sort_keys=True, allow_nan=False) + "\n").encode()


def record_format(value: Mapping[str, Any], where: str, sink: str) -> int:
    """Return a record's format (1 when it has none), refusing one this release cannot read.

    Raises
    ------
    CoordinatorLogError
        The record is of a newer (or a nonsensical) format.
    """
    fmt = value.get("format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
        raise CoordinatorLogError(
            f"coordinator log record {where} has an invalid format {fmt!r}", sink=sink
        )
    if fmt > LOG_FORMAT:
        writer = value.get("writer")
        by = f"{writer}" if isinstance(writer, str) else "a newer release of twophase"
        raise CoordinatorLogError(
            f"coordinator log record {where} has format {fmt}, written by {by}; "
            f"{WRITER} reads formats 1 to {LOG_FORMAT}. Run {by} or a later release "
            "on the driver and every executor (docs/upgrading.md)",
            sink=sink,
        )
    return fmt


def parse_record(raw: bytes, where: str, sink: str) -> dict[str, Any]:
    """Return a record read from the log, refusing a corrupt one or one of a newer format.

    Parameters
    ----------
    raw
        The stored bytes.
    where
        The record's location (for the messages).
    sink
        The sink name (for the messages).

    Returns
    -------
    dict
        The record.

    Raises
    ------
    CoordinatorLogError
        The record is not a JSON object, or is of a format this release cannot read.
    """
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise CoordinatorLogError(
            f"coordinator log record {where} is corrupt: {exc}",
            sink=sink,
        ) from exc
    if not isinstance(value, dict):
        raise CoordinatorLogError(
            f"coordinator log record {where} is not an object",
            sink=sink,
        )
    record_format(value, where, sink)
    return value


def decision_handles(record: Mapping[str, Any], where: str, sink: str) -> list[dict[str, Any]]:
    """Return the handles of a decision record as recorded, to be decoded by the sink's codec.

    A decision of 0.2.0 (format 1) keeps its handles as a pickle: they are read
    by the restricted reader (``_log/_legacy.py``), which loads no code and refuses
    every class but the handle classes 0.2.0 shipped.

    Raises
    ------
    CoordinatorLogError
        The record is of a newer format.
    LegacyRecordError
        A 0.2.0 decision's handles cannot be read.
    ValueError
        The record's transactions are not a list of objects.
    """
    if record_format(record, where, sink) == 1:
        return read_legacy_handles(record.get("handles"))
    listed = record.get("transactions")
    if not isinstance(listed, list) or not all(isinstance(h, dict) for h in listed):
        raise ValueError("its transactions are not a list of objects")
    return listed
