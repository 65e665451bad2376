"""The event log and the pause points shared by the harness, the driver and its executors.

Every process of a trial (the harness, the driver, Spark's Python workers) appends JSON lines to one
file, ``events.jsonl``: one ``os.write`` of an ``O_APPEND`` descriptor per event, so lines from
concurrent processes never interleave. The harness tails it to fire faults at chosen points.

A *pause point* stops the process that reaches it until the harness has fired the fault bound to it
(file ``control/go-<id>``), so that a fault lands exactly at a protocol step. Each pause holds at
most :data:`PAUSE_TIMEOUT` seconds. An *armed* pause (``"armed": True``, the real-time trials of
:mod:`tests.chaos.realtime`) holds nothing until the harness arms it (file ``control/arm-<id>``):
its point is the first one reached after a time, not the first one reached.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PAUSE_TIMEOUT", "emit", "go", "matches", "probe", "read_events"]

#: Seconds a paused process waits for the harness before going on by itself.
PAUSE_TIMEOUT = 120.0

#: Fields a point may restrict; ``None`` (or absent) matches anything.
_POINT_FIELDS = ("src", "name", "batch", "partition", "index", "attempt")


def emit(path: str | os.PathLike[str], **fields: Any) -> dict[str, Any]:
    """Append one event (``t``, ``pid`` and ``fields``) to the event log; return it."""
    event = {"t": time.time(), "pid": os.getpid(), **fields}
    line = (json.dumps(event, default=str) + "\n").encode()
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return event


def matches(point: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """Tell whether ``event`` is at ``point`` (every field the point sets is equal)."""
    return all(point.get(key) is None or point.get(key) == event.get(key) for key in _POINT_FIELDS)


def go(control: str | os.PathLike[str], pause_id: str) -> None:
    """Release every process waiting at pause ``pause_id`` (and any that reaches it later)."""
    Path(control, f"go-{pause_id}").touch()


def probe(
    events: str,
    control: str,
    pauses: Sequence[Mapping[str, Any]],
    **fields: Any,
) -> None:
    """Emit an event and, at a pause point armed and not released yet, wait for the harness."""
    event = emit(events, **fields)
    for pause in pauses:
        if not matches(pause, event):
            continue
        released = Path(control, f"go-{pause['id']}")
        if released.exists():
            continue
        if pause.get("armed") and not Path(control, f"arm-{pause['id']}").exists():
            continue
        emit(events, src="pause", name="paused", pause=pause["id"], at=fields)
        deadline = time.monotonic() + PAUSE_TIMEOUT
        while not released.exists():
            if time.monotonic() > deadline:
                emit(events, src="pause", name="pause_timeout", pause=pause["id"])
                break
            time.sleep(0.05)


def read_events(path: str | os.PathLike[str], offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Return the complete events after byte ``offset`` and the offset after them."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    out = []
    for line in data[: end + 1].splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out, offset + end + 1
