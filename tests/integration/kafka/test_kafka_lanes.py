"""Producer lanes against the real broker: attempts on different lanes do not fence each other.

Two attempts of one partition under different ``transactional.id`` values are
kept apart by the fence records (``connectors/kafka/_attempt_fence.py``): each
test runs the zombie on the lane the newer attempt does not use, starting
*after* the newer attempt fenced every lane, which ``init_transactions`` alone
cannot stop.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from twophase import Fingerprint, Marker, RecoveryContext, TaskContext
from twophase.connectors.kafka import KafkaSink, KafkaTransaction, _fencing
from twophase.errors import FatalError
from twophase.testing import assert_exactly_once

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

IDS = range(10)


def rows(ids: range) -> pa.RecordBatch:
    return pa.record_batch({"key": [str(i) for i in ids], "value": [str(i) for i in ids]})


def on_lane(monkeypatch: pytest.MonkeyPatch, lane: int) -> None:
    """Make this process's lane ``lane`` (every Python worker claims its own)."""
    monkeypatch.setattr(_fencing, "lane_of_this_process", lambda _key, _lanes: lane)


def begin_and_write(sink: KafkaSink, ctx: TaskContext) -> tuple[KafkaSink, KafkaTransaction]:
    executor: KafkaSink = pickle.loads(pickle.dumps(sink))  # what a Spark task gets
    txn = executor.begin_transaction(ctx)
    executor.write(txn, rows(IDS))
    return executor, txn


def commit(executor: KafkaSink, txn: KafkaTransaction) -> None:
    c = txn.context
    marker = Marker(c.identity, c.batch_id, c.partition_id, c.attempt, Fingerprint(len(IDS), 0))
    executor.commit_with_marker(txn, marker)


def values(read_topic: Callable[..., list[Any]], topic: str | None) -> list[int]:
    assert topic is not None
    return [int(r.value) for r in read_topic(topic)]


def test_a_zombie_of_an_earlier_run_beginning_after_recovery_on_another_lane_cannot_commit(
    kafka_sink: Callable[..., KafkaSink],
    read_topic: Callable[..., list[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = kafka_sink(open_it=True, producer_lanes=2)
    identity = "k.00000000000000c1"
    # Run 2 recovers batch 4, which run 1 left unfinished: a fence record, then every lane.
    handles = sink.list_in_doubt(RecoveryContext(identity, 2, (4,), epoch=2))
    assert len(handles) == 4
    for handle in handles:
        sink.recover_and_abort(handle)
    # A task of run 1, held until now, begins on lane 1 with a new producer: not fenced.
    on_lane(monkeypatch, 1)
    zombie, z_txn = begin_and_write(sink, TaskContext(sink.name, identity, 4, 1, 0, epoch=1))
    # Run 2's attempt of the same partition runs on lane 0 and finds no marker yet.
    on_lane(monkeypatch, 0)
    new, n_txn = begin_and_write(sink, TaskContext(sink.name, identity, 4, 1, 0, epoch=2))
    assert new.needs_marker_check(n_txn)  # its own run's fence does not stop it
    assert new.read_markers(identity, 4) == []
    # The zombie looks before committing, and stops: without the record both would commit.
    with pytest.raises(FatalError, match=r"is a zombie: run 2 recovered the sink") as info:
        zombie.needs_marker_check(z_txn)
    assert (info.value.batch_id, info.value.partition_id) == (4, 1)
    zombie.abort(z_txn)
    commit(new, n_txn)
    assert_exactly_once(values(read_topic, sink.topic), IDS)
    assert [(m.attempt, m.partition_id) for m in sink.read_markers(identity, 4)] == [(0, 1)]


def test_an_earlier_attempt_beginning_after_the_retry_on_another_lane_cannot_commit(
    kafka_sink: Callable[..., KafkaSink],
    read_topic: Callable[..., list[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = kafka_sink(open_it=True, producer_lanes=2)
    identity = "k.00000000000000c2"
    retry_ctx = TaskContext(sink.name, identity, 7, 1, 1, epoch=3)
    # Attempt 1 clears what earlier attempts of partition 1 left (the participant's first step).
    on_lane(monkeypatch, 0)
    for handle in sink.list_in_doubt(RecoveryContext(identity, 2, epoch=3, task=retry_ctx)):
        if handle.partition_id == 1:
            sink.recover_and_abort(handle)
    retry, r_txn = begin_and_write(sink, retry_ctx)
    # Attempt 0, which Spark gave up on, only now begins, in a worker holding lane 1.
    on_lane(monkeypatch, 1)
    zombie, z_txn = begin_and_write(sink, TaskContext(sink.name, identity, 7, 1, 0, epoch=3))
    with pytest.raises(FatalError, match=r"attempt 1 of batch 7, partition 1 \(run 3\) took over"):
        zombie.needs_marker_check(z_txn)
    zombie.abort(z_txn)
    # The fence is the partition's: attempt 0 of partition 0 on a new producer goes on.
    other, o_txn = begin_and_write(sink, TaskContext(sink.name, identity, 7, 0, 0, epoch=3))
    assert other.needs_marker_check(o_txn)
    other.abort(o_txn)
    assert retry.needs_marker_check(r_txn)
    commit(retry, r_txn)
    assert_exactly_once(values(read_topic, sink.topic), IDS)


def test_with_one_lane_no_fence_record_is_written(
    kafka_sink: Callable[..., KafkaSink], read_topic: Callable[..., list[Any]]
) -> None:
    sink = kafka_sink(open_it=True, producer_lanes=1)
    sink.list_in_doubt(RecoveryContext("k.00000000000000c3", 2, (1,), epoch=5))
    assert read_topic(sink.control_topic) == []
