"""The coordinator log: atomic records, fencing epochs, compaction, corruption."""

from __future__ import annotations

from pathlib import Path

import pytest

from twophase import ConcurrentQueryError, CoordinatorLogError, TransactionHandle
from twophase._log import CoordinatorLog
from twophase._store import LocalFileStore

pytestmark = pytest.mark.unit


def make_log(tmp_path: Path, retain: int = 3) -> CoordinatorLog:
    return CoordinatorLog(
        LocalFileStore(tmp_path, fsync=True), sink="s", identity="s.1", retain=retain
    )


def test_store_write_without_overwrite_is_create_if_absent(tmp_path: Path) -> None:
    store = LocalFileStore(tmp_path)
    assert store.write("a/b.json", b"1", overwrite=False)
    assert not store.write("a/b.json", b"2", overwrite=False)
    assert store.read("a/b.json") == b"1"
    assert store.write("a/b.json", b"3", overwrite=True)
    assert store.read("a/b.json") == b"3"
    assert store.list("a") == ["b.json"]
    assert not [p for p in (tmp_path / "a").iterdir() if p.name.startswith(".tmp")]
    store.delete("a/b.json")
    store.delete("a/b.json")
    assert store.read("a/b.json") is None
    assert store.list("missing") == []


def test_decision_round_trip_and_state(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.claim("run-1", "q")
    handles = [TransactionHandle("t1", 4, 0, 0), TransactionHandle("t2", 4, 1, 2)]
    log.record_intent(4, 2)
    log.record_decision(4, handles, {"rows": 10})
    fresh = make_log(tmp_path)
    state = fresh.load()
    assert state.pending_decisions() == [4]
    assert state.partition_slots == 2
    assert fresh.read_decision(4) == handles
    fresh.claim("run-2", "q")
    fresh.record_committed(4, {})
    assert make_log(tmp_path).load().pending_decisions() == []


def test_second_decision_for_a_batch_is_refused(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.claim("run-1", "q")
    log.record_decision(1, [], {})
    with pytest.raises(ConcurrentQueryError, match="already exists"):
        log.record_decision(1, [], {})


def test_newer_epoch_fences_older_run(tmp_path: Path) -> None:
    old, new = make_log(tmp_path), make_log(tmp_path)
    assert old.claim("run-1", "q") == 1
    assert new.claim("run-2", "q") == 2
    new.record_intent(0, 1)
    with pytest.raises(ConcurrentQueryError, match="run-2"):
        old.record_intent(0, 1)


def test_compaction_bounds_the_log_and_remembers_committed_batches(tmp_path: Path) -> None:
    log = make_log(tmp_path, retain=3)
    log.claim("run-1", "q")
    for batch_id in range(20):
        log.record_intent(batch_id, 4 if batch_id == 2 else 1)
        log.record_committed(batch_id, {})
        log.compact(batch_id)
    files = list((tmp_path / "batches").iterdir())
    assert len(files) <= 2 * 4
    state = make_log(tmp_path).load()
    assert all(state.is_committed(b) for b in range(20))
    assert not state.is_committed(20)
    assert state.partition_slots == 4, "the slot high-water mark survives compaction"


def test_compaction_never_forgets_an_unfinished_batch(tmp_path: Path) -> None:
    log = make_log(tmp_path, retain=1)
    log.claim("run-1", "q")
    log.record_intent(0, 1)  # started, never committed
    for batch_id in range(1, 6):
        log.record_committed(batch_id, {})
        log.compact(batch_id)
    assert make_log(tmp_path).load().unfinished() == [0]


def test_corrupt_record_is_reported_with_its_path(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.claim("run-1", "q")
    log.record_intent(7, 1)
    (tmp_path / "batches" / f"{7:020d}.intent.json").write_text("{not json")
    with pytest.raises(CoordinatorLogError, match=r"batches/00000000000000000007\.intent\.json"):
        make_log(tmp_path).load()


def test_compaction_runs_once_every_tenth_of_the_window(tmp_path: Path) -> None:
    log = make_log(tmp_path, retain=20)
    log.claim("run-1", "q")
    removed = []
    for batch_id in range(60):
        log.record_intent(batch_id, 1)
        log.record_committed(batch_id, {})
        removed.append(log.compact(batch_id))
    runs = [b for b, n in enumerate(removed) if n]
    assert runs == list(range(21, 60, 2)), "every second batch (retain // 10 = 2)"
    kept = len(list((tmp_path / "batches").iterdir())) // 2
    assert 20 <= kept <= 22
    state = make_log(tmp_path).load()
    assert all(state.is_committed(b) for b in range(60))
