"""The Spark Connect glue without a server: identity from the metadata file, participant slots."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from twophase._log._identity import read_query_id
from twophase._spark import _connect
from twophase._spark._connect import ConnectBatchExecution, is_connect
from twophase._stores._store import LocalFileStore
from twophase.testing import FakeSink, FakeTarget

pytestmark = pytest.mark.unit

QUERY_ID = "c00b8d79-8f13-404f-b63e-4e6e91dad238"


def test_the_query_id_is_read_from_the_checkpoints_metadata(tmp_path: Path) -> None:
    store = LocalFileStore(tmp_path, fsync=False)
    assert read_query_id(store) is None  # no metadata yet
    store.write("metadata", b"not json\n", overwrite=True)
    assert read_query_id(store) is None
    store.write("metadata", b'{"id":"%s"}\n' % QUERY_ID.encode(), overwrite=True)
    assert read_query_id(store) == QUERY_ID


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _Session:
    def __init__(self, shuffle: str) -> None:
        self.conf = _Conf({"spark.sql.shuffle.partitions": shuffle})


class _Frame:
    """Just what ConnectBatchExecution asks of a DataFrame before it runs anything."""

    def __init__(self, shuffle: str = "7", coalesced: tuple[int, ...] = ()) -> None:
        self.sparkSession = _Session(shuffle)
        self.coalesced = coalesced

    def coalesce(self, n: int) -> _Frame:
        return _Frame(
            self.sparkSession.conf.values["spark.sql.shuffle.partitions"], (*self.coalesced, n)
        )


def _execution(tmp_path: Path, frame: _Frame, limit: int | None = None) -> ConnectBatchExecution:
    sink = FakeSink("s", FakeTarget.in_memory())
    sink.max_transactions_per_batch = limit
    store = LocalFileStore(tmp_path, fsync=False)
    return ConnectBatchExecution(frame, 3, store, str(tmp_path), sink)  # type: ignore[arg-type]


def test_without_a_limit_the_batch_is_coalesced_to_the_shuffle_partitions(tmp_path: Path) -> None:
    execution = _execution(tmp_path, _Frame(shuffle="7"))
    assert execution.num_partitions() == 7
    assert execution.num_partitions() == 7  # fixed once
    frame: Any = execution.df
    assert frame.coalesced == (7,)


@pytest.mark.parametrize("shuffle", ["auto", "", "-1", "12.5"])
def test_a_shuffle_setting_that_is_not_a_number_gives_200_slots_and_says_so(
    tmp_path: Path, shuffle: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Databricks accepts spark.sql.shuffle.partitions=auto.
    monkeypatch.setattr(_connect, "_SAID", set())
    with caplog.at_level(logging.INFO, logger="twophase.spark"):
        execution = _execution(tmp_path, _Frame(shuffle=shuffle))
        assert execution.num_partitions() == 200
        assert _execution(tmp_path, _Frame(shuffle=shuffle)).num_partitions() == 200
    assert execution.df.coalesced == (200,)  # type: ignore[attr-defined]
    said = [r.getMessage() for r in caplog.records if "shuffle.partitions" in r.getMessage()]
    assert len(said) == 1  # once, however many batches
    assert "set max_partitions on the sink" in said[0]
    assert _execution(tmp_path, _Frame(shuffle=shuffle), limit=8).num_partitions() == 8


def test_the_sinks_limit_bounds_the_slots_and_a_lower_limit_wins(tmp_path: Path) -> None:
    execution = _execution(tmp_path, _Frame(shuffle="200"), limit=16)
    assert execution.num_partitions() == 16
    execution.limit_partitions(4)
    assert execution.num_partitions() == 4
    execution.limit_partitions(50)  # never raised above the sink's own limit
    assert execution.num_partitions() == 4


def test_a_staged_copy_outside_the_log_is_refused(tmp_path: Path) -> None:
    execution = _execution(tmp_path, _Frame())
    with pytest.raises(ValueError, match="not below the log"):
        execution.drop_staged("/elsewhere/staging/3")


def test_a_classic_or_plain_object_is_not_a_connect_frame() -> None:
    assert not is_connect(_Frame())
    assert not is_connect(object())
