"""The per-process producer pool, marker garbage collection, and the hooks over a stub."""

from __future__ import annotations

import json
import pickle
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException

from twophase import Fingerprint, Marker, RecoveryContext, TaskContext
from twophase.connectors.kafka import KafkaSink, KafkaTransaction, _pool
from twophase.connectors.kafka._marker_records import decode_marker
from twophase.errors import AbortRequiredError, FatalError

pytestmark = pytest.mark.unit


class StubProducer:
    """Stands in for confluent_kafka.Producer: no network, records the calls."""

    instances: ClassVar[list[StubProducer]] = []
    fail_commit: ClassVar[KafkaError | None] = None

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        self.calls: list[str] = []
        self.closed = False
        self.produced: list[tuple[Any, ...]] = []
        StubProducer.instances.append(self)

    def init_transactions(self, timeout: float) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        headers: Any = None,
    ) -> None:
        self.produced.append((topic, value, key, partition))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        self.calls.append("flush")
        return 0

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        if StubProducer.fail_commit is not None:
            raise KafkaException(StubProducer.fail_commit)

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")

    def close(self) -> bool:
        self.closed = True
        return True


@pytest.fixture(autouse=True)
def stub_producer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    # Lanes are claimed through lock files under the temporary folder, shared by every process
    # of the machine: a folder of its own, so that another process's claim cannot move a lane.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _pool.clear()
    StubProducer.instances = []
    StubProducer.fail_commit = None
    monkeypatch.setattr(_pool, "Producer", StubProducer)
    yield
    _pool.clear()


KEY = (("bootstrap.servers", "'x'"),)


def entry(tid: str = "t-0") -> _pool.PooledProducer:
    e = _pool.PooledProducer(tid, {"bootstrap.servers": "x"}, KEY)
    e.initialised = True
    return e


def test_a_returned_producer_is_reused_for_the_same_id_and_config() -> None:
    first = entry()
    _pool.give_back(first)
    assert _pool.take("t-0", KEY) is first
    assert _pool.take("t-0", KEY) is None
    assert _pool.take("t-1", KEY) is None


def test_the_newer_of_two_producers_of_one_id_is_kept() -> None:
    older, newer = entry(), entry()
    _pool.give_back(newer)
    _pool.give_back(older)
    assert _pool.take("t-0", KEY) is newer
    assert older.broken, "the older (fenced) instance must be closed"


def test_broken_or_uninitialised_producers_are_closed_not_pooled() -> None:
    broken = entry()
    broken.broken = True
    _pool.give_back(broken)
    fresh = _pool.PooledProducer("t-0", {}, KEY)
    _pool.give_back(fresh)
    assert _pool.idle_count() == 0


def test_the_pool_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pool, "MAX_IDLE_PRODUCERS", 3)
    entries = [entry(f"t-{i}") for i in range(5)]
    for e in entries:
        _pool.give_back(e)
    assert _pool.idle_count() == 3
    assert entries[0].broken
    assert entries[1].broken
    assert _pool.take("t-4", KEY) is entries[4]


def test_discard_idle_closes_every_instance_of_an_id() -> None:
    _pool.give_back(entry("t-0"))
    _pool.give_back(entry("t-1"))
    assert _pool.discard_idle("t-0") == 1
    assert _pool.take("t-0", KEY) is None
    assert _pool.take("t-1", KEY) is not None


def _of(batch: int, partition: int = 0) -> Marker:
    return Marker("id", batch, partition, 0, Fingerprint(1, 1))


MICRO = TaskContext("s", "id", 0, 0, 0)
REALTIME = TaskContext("s", "id", 0, 0, 0, realtime=True)


def test_markers_of_finished_batches_are_offered_for_tombstoning() -> None:
    producer = entry()
    producer.remember_marker("ctl", 4, b"id/4/0/0/a", [])
    producer.remember_marker("ctl", 5, b"id/5/0/0/b", [])
    assert producer.stale_markers("ctl", _of(5), 10, MICRO) == [b"id/4/0/0/a"]
    assert producer.stale_markers("ctl", _of(6), 1, MICRO) == [b"id/4/0/0/a"]
    assert producer.stale_markers("other", _of(6), 10, MICRO) == []
    producer.remember_marker("ctl", 6, b"id/6/0/0/c", [b"id/4/0/0/a", b"id/5/0/0/b"])
    assert producer.stale_markers("ctl", _of(7), 10, MICRO) == [b"id/6/0/0/c"]
    # the producer that replaces it (fenced) inherits what is left to tombstone
    successor = entry()
    successor.adopt_markers(producer)
    assert successor.stale_markers("ctl", _of(7), 10, MICRO) == [b"id/6/0/0/c"]


def test_real_time_tombstones_the_shorter_prefixes_of_its_own_partition_and_epoch() -> None:
    producer = entry()
    producer.remember_marker("ctl", 6, b"id/6/0/0/a", [])
    producer.remember_marker("ctl", 6, b"id/6/1/0/b", [])  # another partition: not its prefix
    assert producer.stale_markers("ctl", _of(6), 10, MICRO) == []
    assert producer.stale_markers("ctl", _of(6), 10, REALTIME) == [b"id/6/0/0/a"]


# ------------------------------------------------- sink hooks over the stub
SINK = KafkaSink("orders", bootstrap_servers="127.0.0.1:9", topic="out", producer_lanes=4)
CTX = TaskContext("orders", "orders.0123456789abcdef", 5, 2, 0)


def run_partition(sink: KafkaSink, ctx: TaskContext = CTX) -> KafkaTransaction:
    txn = sink.begin_transaction(ctx)
    sink.write(txn, pa.record_batch({"value": pa.array(["a", "b"])}))
    sink.commit_with_marker(
        txn, Marker(ctx.identity, ctx.batch_id, ctx.partition_id, ctx.attempt, Fingerprint(2, 9))
    )
    return txn


def test_the_steady_state_reuses_the_producer_without_init_transactions() -> None:
    txn = run_partition(SINK)
    assert txn.transactional_id == "twophase-orders.0123456789abcdef-2"
    assert txn.records == 2
    # what the driver learns of the commit is the marker: it round-trips through Kafka
    (record,) = [p for p in StubProducer.instances[0].produced if p[0] == SINK.control_topic]
    assert decode_marker(record[1]) == txn.marker
    assert json.loads(record[1])["transactional_id"] == txn.transactional_id
    assert json.loads(record[1])["records"] == 2
    run_partition(SINK, TaskContext("orders", CTX.identity, 6, 2, 0))
    assert len(StubProducer.instances) == 1
    calls = StubProducer.instances[0].calls
    assert calls.count("init") == 1
    assert calls.count("commit") == 2
    # the reused producer was probed with the first record (one flush) before writing
    assert calls.count("flush") == 3


def test_a_retry_fences_every_lane_of_its_slot_and_writes_on_a_new_producer() -> None:
    run_partition(SINK)
    first = StubProducer.instances[0]
    run_partition(SINK, TaskContext("orders", CTX.identity, 5, 2, 1))
    retry = StubProducer.instances[1:]
    lanes = SINK.options.producer_lanes
    # every lane of slot 2 initialised once by the retry: the earlier attempt, in whatever
    # worker (lane) it ran, is fenced; nothing of another slot is touched
    ids = sorted(p.conf["transactional.id"] for p in retry)
    assert ids == sorted(SINK.transactional_id(CTX.identity, 2, lane) for lane in range(lanes))
    assert all(p.calls[0] == "init" for p in retry)
    assert first.closed  # the pooled producer of the earlier attempt is not reused
    writer = [p for p in retry if "commit" in p.calls]
    assert len(writer) == 1
    assert not writer[0].closed
    assert all(p.closed for p in retry if p is not writer[0])


def test_one_lane_is_the_id_of_the_slot_as_before_lanes() -> None:
    sink = KafkaSink("orders", bootstrap_servers="b:9092", topic="t", producer_lanes=1)
    run_partition(sink, TaskContext("orders", CTX.identity, 5, 2, 1))
    assert [p.conf["transactional.id"] for p in StubProducer.instances] == [
        f"twophase-{CTX.identity}-2"
    ]
    handles = sink.list_in_doubt(RecoveryContext(CTX.identity, 3, (5,)))
    assert [h.transaction_id for h in handles] == [f"twophase-{CTX.identity}-{s}" for s in range(3)]


def test_the_marker_goes_to_partition_0_of_the_control_topic_with_tombstones() -> None:
    run_partition(SINK)
    run_partition(SINK, TaskContext("orders", CTX.identity, 6, 2, 0))
    produced = StubProducer.instances[0].produced
    control = [p for p in produced if p[0] == "orders-twophase-markers"]
    assert all(p[3] == 0 for p in control)
    first_marker_key = control[0][2]
    # batch 6 deleted the marker of batch 5 (finished) with a tombstone
    assert ("orders-twophase-markers", None, first_marker_key, 0) in control


def test_commit_is_idempotent_and_transactions_not_open_fail_clearly() -> None:
    txn = run_partition(SINK)
    txn.commit()  # a second commit of a committed transaction succeeds
    assert StubProducer.instances[0].calls.count("commit") == 1
    aborted = SINK.begin_transaction(TaskContext("orders", CTX.identity, 9, 2, 0))
    SINK.abort(aborted)
    with pytest.raises(FatalError, match="on the executor"):
        SINK.commit_with_marker(aborted, Marker(CTX.identity, 9, 2, 0, Fingerprint(0, 0)))


def test_commit_without_a_marker_is_refused() -> None:
    txn = SINK.begin_transaction(CTX)
    SINK.write(txn, pa.record_batch({"value": pa.array(["a"])}))
    with pytest.raises(FatalError, match="write_marker"):
        txn.commit()
    SINK.abort(txn)
    SINK.abort(txn)  # idempotent
    assert StubProducer.instances[0].calls.count("abort") == 1


def test_a_commit_the_broker_refuses_is_aborted_and_reported() -> None:
    StubProducer.fail_commit = KafkaError(
        KafkaError.INVALID_TXN_STATE, "no", txn_requires_abort=True
    )
    txn = SINK.begin_transaction(CTX)
    SINK.write(txn, pa.record_batch({"value": pa.array(["a"])}))
    with pytest.raises(AbortRequiredError):
        SINK.commit_with_marker(txn, Marker(CTX.identity, 5, 2, 0, Fingerprint(1, 1)))
    assert "abort" in StubProducer.instances[0].calls
    SINK.abort(txn)  # what the framework does next: a no-op now
    assert StubProducer.instances[0].calls.count("abort") == 1


def test_list_in_doubt_names_every_lane_of_every_slot_ever_used() -> None:
    handles = SINK.list_in_doubt(RecoveryContext(CTX.identity, 3, (7,)))
    assert [h.transaction_id for h in handles] == [
        f"twophase-{CTX.identity}-{slot}" + ("" if lane == 0 else f".{lane}")
        for slot in range(3)
        for lane in range(4)
    ]
    assert [h.partition_id for h in handles] == [slot for slot in range(3) for _ in range(4)]
    assert {h.batch_id for h in handles} == {7}
    assert all(pickle.loads(pickle.dumps(h)) == h for h in handles)


def test_recover_and_abort_fences_the_slot_with_init_transactions() -> None:
    txn = run_partition(SINK)
    handles = SINK.list_in_doubt(RecoveryContext(CTX.identity, 3))
    (handle,) = [h for h in handles if h.transaction_id == txn.transactional_id]
    SINK.recover_and_abort(handle)
    fencer = StubProducer.instances[-1]
    assert fencer.conf["transactional.id"] == handle.transaction_id
    assert fencer.calls == ["init"]
    assert fencer.closed
    assert StubProducer.instances[0].closed, "the now fenced pooled producer was dropped"


def test_the_sink_pickles_to_executors() -> None:
    clone = pickle.loads(pickle.dumps(SINK))
    assert clone.producer_config == SINK.producer_config
    assert clone.transactional_id(CTX.identity, 1) == SINK.transactional_id(CTX.identity, 1)


def test_a_dropped_producer_is_freed_at_once_not_by_the_cycle_collector() -> None:
    # The producer (the stub here) keeps its configuration, delivery callback included, as
    # librdkafka's does. A real one holds a thread-local storage key of the process (1024 at
    # most) until it is freed: a reference cycle through that callback kept 1,000 fenced
    # producers alive at once.
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        entry = _pool.PooledProducer("twophase-freed-0", {"bootstrap.servers": "127.0.0.1:9"}, ())
        alive = weakref.ref(entry)
        entry.close()
        del entry
        assert alive() is None, "the producer is kept alive by a reference cycle"
    finally:
        gc.enable()


class _NoFences:
    """A marker reader of an empty control topic, counting its reads (fence records, lanes)."""

    def __init__(self) -> None:
        self.reads = 0
        self.fences: list[object] = []

    def read(self, identity: str, batch_id: int) -> list[Marker]:
        self.reads += 1
        return []


def test_the_marker_check_before_commit_is_spared_only_for_a_checked_live_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = _NoFences()
    monkeypatch.setattr(KafkaSink, "_reader", lambda self: reader)
    ctx6 = TaskContext("orders", CTX.identity, 6, 2, 0)
    first = SINK.begin_transaction(CTX)
    assert SINK.needs_marker_check(first), "a new producer: a zombie may have committed first"
    assert reader.reads == 1, "with several lanes a new producer reads the fence records first"
    first.abort()
    # The aborted producer went back to the pool unchecked: its next transaction checks too.
    again = SINK.begin_transaction(CTX)
    SINK.write(again, pa.record_batch({"value": pa.array(["a", "b"])}))
    assert again.producer is first.producer
    assert SINK.needs_marker_check(again)
    SINK.commit_with_marker(again, Marker(CTX.identity, 5, 2, 0, Fingerprint(2, 9)))
    reused = SINK.begin_transaction(ctx6)
    SINK.write(reused, pa.record_batch({"value": pa.array(["c"])}))
    assert not SINK.needs_marker_check(reused), "checked, live, and new to batch 6"
    assert reader.reads == 2, "a checked producer reads no fence record"
    reused.abort()
    # The same producer, asked for batch 5 again (a task of a stopped query committed it in
    # this worker): it must look.
    replayed = SINK.begin_transaction(CTX)
    SINK.write(replayed, pa.record_batch({"value": pa.array(["a"])}))
    assert SINK.needs_marker_check(replayed), "this producer committed batch 5 itself"
