"""The coordinator log through Spark's CheckpointFileManager (the driver's JVM), and beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from twophase import TransactionHandle
from twophase._log._codec import decode_dataclass, encode_dataclass
from twophase._log._coordinator_log import CoordinatorLog
from twophase._spark._classic import log_store
from twophase._stores._store import GCSFileStore, HadoopFileStore

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


def test_one_log_on_gs_is_read_and_written_by_both_stores(
    spark: Any, gcs_endpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The classic path's conditional store and Spark's file system keep one log on ``gs://``.

    ``log_store`` gives the GCS store (its client is installed); with
    ``spark.twophase.logStore=hadoop`` the same location goes through Spark's
    ``CheckpointFileManager`` and Google's Hadoop connector. Each reads what the other wrote,
    and a name one created is refused to the other's create.
    """
    for name, value in gcs_endpoint.environment().items():
        monkeypatch.setenv(name, value)
    location = f"gs://{gcs_endpoint.new_bucket()}/chk/twophase/s/q"
    ours = log_store(spark, location)
    assert isinstance(ours, GCSFileStore)
    log = CoordinatorLog(ours, sink="s", identity="s.1")
    assert log.claim("run-1", "q") == 1
    handles = [TransactionHandle("t", 3, 0, 0)]
    log.record_decision(3, handles, {"rows": 1}, encode_dataclass)

    spark.conf.set("spark.twophase.logStore", "hadoop")
    try:
        hadoop = log_store(spark, location)
    finally:
        spark.conf.unset("spark.twophase.logStore")
    assert isinstance(hadoop, HadoopFileStore)
    through_spark = CoordinatorLog(hadoop, sink="s", identity="s.1")
    assert through_spark.load().pending_decisions() == [3]
    assert through_spark.read_decision(3, decode_handle) == handles
    assert through_spark.claim("run-2", "q") == 2, "the Hadoop store sees the GCS store's epoch"
    through_spark.record_committed(3, {})
    first, second = sorted(ours.list("epochs"))  # claimed by the GCS store, then through Spark
    assert not hadoop.write(f"epochs/{first}", b"{}", overwrite=False)

    again = CoordinatorLog(log_store(spark, location), sink="s", identity="s.1")
    assert again.load().pending_decisions() == []
    assert again.load().is_committed(3)
    assert not ours.write(f"epochs/{second}", b"{}", overwrite=False)
    assert sorted(hadoop.list("epochs")) == [first, second]
