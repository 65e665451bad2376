"""The coordinator log: atomic records, fencing epochs, compaction, corruption.

Every test runs on each store that holds the log without the JVM: a local directory, S3
(moto's server, ``s3_endpoint``), GCS (fake-gcs-server, ``gcs_endpoint``) and Azure Blob
Storage (Azurite, ``azure_endpoint``), each test on a fresh directory, bucket or container.
The object stores are opened from a URI and the variables their client libraries read, as a
user's driver opens them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from twophase import ConcurrentQueryError, CoordinatorLogError, TransactionHandle
from twophase._log._codec import decode_dataclass, encode_dataclass
from twophase._log._coordinator_log import CoordinatorLog
from twophase._stores._store import LocalFileStore, LogStore, S3FileStore
from twophase._stores._store import open_store as store_at

OpenStore = Callable[[], LogStore]


@pytest.fixture(
    params=[
        pytest.param("local", marks=pytest.mark.unit),
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("gcs", marks=pytest.mark.gcs),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def open_store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> OpenStore:
    """Return ``open() -> store`` on one fresh log location; each call is another process's."""
    if request.param == "local":
        return lambda: LocalFileStore(tmp_path / "log", fsync=True)
    if request.param == "s3":
        endpoint: Any = request.getfixturevalue("s3_endpoint")
        uri = f"s3a://{endpoint.new_bucket()}/chk/twophase/s/q"
        return lambda: S3FileStore(uri, client=endpoint.client())
    if request.param == "gcs":
        endpoint = request.getfixturevalue("gcs_endpoint")
        uri = f"gs://{endpoint.new_bucket()}/chk/twophase/s/q"
    else:
        endpoint = request.getfixturevalue("azure_endpoint")
        uri = f"abfss://{endpoint.new_container()}@devstoreaccount1.dfs.core.windows.net/chk/q"
    for name, value in endpoint.environment().items():
        monkeypatch.setenv(name, value)
    return lambda: store_at(uri)


def make_log(open_store: OpenStore, retain: int = 3) -> CoordinatorLog:
    return CoordinatorLog(open_store(), sink="s", identity="s.1", retain=retain)


def test_store_write_without_overwrite_is_create_if_absent(open_store: OpenStore) -> None:
    store = open_store()
    assert store.write("a/b.json", b"1", overwrite=False)
    assert not store.write("a/b.json", b"2", overwrite=False)
    assert store.read("a/b.json") == b"1"
    assert store.write("a/b.json", b"3", overwrite=True)
    assert store.read("a/b.json") == b"3"
    assert store.list("a") == ["b.json"]
    assert not open_store().write("a/b.json", b"4", overwrite=False), "another process's store"
    store.delete("a/b.json")
    store.delete("a/b.json")
    assert store.read("a/b.json") is None
    assert store.list("missing") == []
    assert store.read("missing/x.json") is None


@pytest.mark.unit
def test_local_store_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = LocalFileStore(tmp_path)
    assert store.write("a/b.json", b"1", overwrite=False)
    assert not store.write("a/b.json", b"2", overwrite=False)
    assert store.write("a/b.json", b"3", overwrite=True)
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["b.json"]


def race(count: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run ``fn(0)`` ... ``fn(count - 1)`` in threads released at once; return their results."""
    barrier = threading.Barrier(count)
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = fn(i)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(results) == count
    return [results[i] for i in range(count)]


def test_racing_creates_of_one_name_have_exactly_one_winner(open_store: OpenStore) -> None:
    stores = [open_store() for _ in range(8)]  # one store (one client) per writer
    for round_ in range(3):
        name = f"batches/{round_:020d}.decision.json"
        won = race(len(stores), lambda i, n=name: stores[i].write(n, b"w%d" % i, overwrite=False))
        winners = [i for i, ok in enumerate(won) if ok]
        assert len(winners) == 1, f"round {round_}: winners {winners}"
        assert open_store().read(name) == b"w%d" % winners[0]


def test_racing_claims_get_distinct_epochs_and_the_newest_fences_the_rest(
    open_store: OpenStore,
) -> None:
    logs = [make_log(open_store) for _ in range(6)]
    epochs = race(len(logs), lambda i: logs[i].claim(f"run-{i}", "q"))
    assert sorted(epochs) == list(range(1, len(logs) + 1))
    newest = logs[epochs.index(len(logs))]
    newest.record_intent(0, 1)
    for log in logs:
        if log is not newest:
            with pytest.raises(ConcurrentQueryError, match=f"epoch {len(logs)} >"):
                log.record_decision(0, [], {}, encode_dataclass)


def test_decision_round_trip_and_state(open_store: OpenStore) -> None:
    log = make_log(open_store)
    log.claim("run-1", "q")
    handles = [TransactionHandle("t1", 4, 0, 0), TransactionHandle("t2", 4, 1, 2)]
    log.record_intent(4, 2)
    log.record_decision(4, handles, {"rows": 10}, encode_dataclass)
    fresh = make_log(open_store)
    state = fresh.load()
    assert state.pending_decisions() == [4]
    assert state.partition_slots == 2
    assert fresh.read_decision(4, decode_handle) == handles
    fresh.claim("run-2", "q")
    fresh.record_committed(4, {})
    assert make_log(open_store).load().pending_decisions() == []


def test_second_decision_for_a_batch_is_refused(open_store: OpenStore) -> None:
    log = make_log(open_store)
    log.claim("run-1", "q")
    log.record_decision(1, [], {}, encode_dataclass)
    with pytest.raises(ConcurrentQueryError, match="already exists"):
        log.record_decision(1, [], {}, encode_dataclass)


def test_newer_epoch_fences_older_run(open_store: OpenStore) -> None:
    old, new = make_log(open_store), make_log(open_store)
    assert old.claim("run-1", "q") == 1
    assert new.claim("run-2", "q") == 2
    new.record_intent(0, 1)
    with pytest.raises(ConcurrentQueryError, match="run-2"):
        old.record_intent(0, 1)
    with pytest.raises(ConcurrentQueryError, match="run-2"):
        old.record_decision(0, [], {}, encode_dataclass)
    with pytest.raises(ConcurrentQueryError, match="run-2"):
        old.record_committed(0, {})
    assert make_log(open_store).load().decided == set(), "the fenced run wrote no decision"


def test_compaction_bounds_the_log_and_remembers_committed_batches(open_store: OpenStore) -> None:
    log = make_log(open_store, retain=3)
    log.claim("run-1", "q")
    for batch_id in range(20):
        log.record_intent(batch_id, 4 if batch_id == 2 else 1)
        log.record_committed(batch_id, {})
        log.compact(batch_id)
    assert len(open_store().list("batches")) <= 2 * 4
    state = make_log(open_store).load()
    assert all(state.is_committed(b) for b in range(20))
    assert not state.is_committed(20)
    assert state.partition_slots == 4, "the slot high-water mark survives compaction"


def test_compaction_never_forgets_an_unfinished_batch(open_store: OpenStore) -> None:
    log = make_log(open_store, retain=1)
    log.claim("run-1", "q")
    log.record_intent(0, 1)  # started, never committed
    for batch_id in range(1, 6):
        log.record_committed(batch_id, {})
        log.compact(batch_id)
    assert make_log(open_store).load().unfinished() == [0]


def test_corrupt_record_is_reported_with_its_path(open_store: OpenStore) -> None:
    log = make_log(open_store)
    log.claim("run-1", "q")
    log.record_intent(7, 1)
    open_store().write(f"batches/{7:020d}.intent.json", b"{not json", overwrite=True)
    with pytest.raises(CoordinatorLogError, match=r"batches/00000000000000000007\.intent\.json"):
        make_log(open_store).load()


def test_compaction_runs_once_every_tenth_of_the_window(open_store: OpenStore) -> None:
    log = make_log(open_store, retain=20)
    log.claim("run-1", "q")
    removed = []
    for batch_id in range(60):
        log.record_intent(batch_id, 1)
        log.record_committed(batch_id, {})
        removed.append(log.compact(batch_id))
    runs = [b for b, n in enumerate(removed) if n]
    assert runs == list(range(21, 60, 2)), "every second batch (retain // 10 = 2)"
    kept = len(open_store().list("batches")) // 2
    assert 20 <= kept <= 22
    state = make_log(open_store).load()
    assert all(state.is_committed(b) for b in range(60))


def decode_handle(data: Any) -> TransactionHandle:
    """The default codec's decoder for plain handles."""
    return decode_dataclass(TransactionHandle, data)
