"""The coordinator log through Spark's CheckpointFileManager (the driver's JVM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from twophase import TransactionHandle
from twophase._codec import decode_dataclass, encode_dataclass
from twophase._log import CoordinatorLog
from twophase._store import HadoopFileStore

pytestmark = pytest.mark.spark


def test_hadoop_store_is_atomic_create_if_absent(spark: Any, tmp_path: Path) -> None:
    store = HadoopFileStore(spark, f"file://{tmp_path}/log")
    assert "CheckpointFileManager" in store.manager_class
    assert store.write("batches/a.json", b"one", overwrite=False)
    assert not store.write("batches/a.json", b"two", overwrite=False)
    assert store.read("batches/a.json") == b"one"
    assert store.write("batches/a.json", b"three", overwrite=True)
    assert store.read("batches/a.json") == b"three"
    assert store.list("batches") == ["a.json"]  # no .crc or temporary files listed
    store.delete("batches/a.json")
    assert store.read("batches/a.json") is None
    assert store.list("nothing-here") == []


def test_coordinator_log_round_trip_through_hadoop(spark: Any, tmp_path: Path) -> None:
    log = CoordinatorLog(HadoopFileStore(spark, str(tmp_path / "log")), sink="s", identity="s.1")
    log.claim("run", "q")
    handles = [TransactionHandle("t", 3, 0, 0)]
    log.record_decision(3, handles, {"rows": 1}, encode_dataclass)
    again = CoordinatorLog(HadoopFileStore(spark, str(tmp_path / "log")), sink="s", identity="s.1")
    assert again.load().pending_decisions() == [3]
    assert again.read_decision(3, decode_handle) == handles


def decode_handle(data: Any) -> TransactionHandle:
    """The default codec's decoder for plain handles."""
    return decode_dataclass(TransactionHandle, data)
