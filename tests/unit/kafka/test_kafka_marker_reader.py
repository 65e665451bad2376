"""The marker reader's offsets requests are bounded even when librdkafka never answers them."""

from __future__ import annotations

import concurrent.futures
import time
from types import SimpleNamespace
from typing import Any

import pytest

from twophase.connectors.kafka import _marker_reader
from twophase.connectors.kafka._compat import latest_offset
from twophase.connectors.kafka._marker_reader import MarkerReader
from twophase.errors import RetriableError

pytestmark = pytest.mark.unit


class SilentAdmin:
    """An admin client whose offsets requests stay pending, as librdkafka's did for a killed
    partition leader on a 3-broker cluster (past their request_timeout)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
        self.calls.append(kwargs)
        return {tp: concurrent.futures.Future() for tp in request}


def test_an_offsets_request_without_an_answer_fails_retriably_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_marker_reader, "_OFFSETS_GRACE", 0.1)
    reader = MarkerReader(
        {"bootstrap.servers": "b1:9092,b2:9092"},
        "ctl",
        sink="k",
        stable_timeout=1.0,
        operation_timeout=0.2,
    )
    admin = SilentAdmin()
    started = time.monotonic()
    with pytest.raises(RetriableError, match="no answer to an offsets request") as caught:
        reader._offsets(admin, latest_offset(), None, batch_id=7)  # type: ignore[arg-type]
    assert time.monotonic() - started < 2.0
    assert admin.calls == [{"isolation_level": None, "request_timeout": 0.2}]
    assert caught.value.sink == "k"
    assert caught.value.batch_id == 7
    assert caught.value.restartable
    assert "'ctl'" in str(caught.value)
    assert "b1:9092,b2:9092" in str(caught.value)


class StaleAdmin(SilentAdmin):
    """An admin client that answers -1001 (no offset) without an error, as one did whose metadata
    still named a killed leader."""

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
        futures = super().list_offsets(request, **kwargs)
        for future in futures.values():
            future.set_result(SimpleNamespace(offset=-1001))
        return futures


def test_an_offsets_answer_without_an_offset_is_never_read_as_an_empty_topic() -> None:
    reader = MarkerReader(
        {"bootstrap.servers": "b1:9092"},
        "ctl",
        sink="k",
        stable_timeout=1.0,
        operation_timeout=0.2,
    )
    with pytest.raises(RetriableError, match=r"returned no offset \(-1001") as caught:
        reader._offsets(StaleAdmin(), latest_offset(), None, batch_id=3)  # type: ignore[arg-type]
    assert caught.value.batch_id == 3
    assert caught.value.restartable
