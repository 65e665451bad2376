"""Real-time mode's commits on a real broker, without Spark: the engine's task function.

The Kafka side of ``tests/integration/jdbc/test_jdbc_realtime.py``: a replay skips the committed
prefix, a zombie that resumes after a newer attempt committed is refused (fenced by the newer
attempt's producer, or by the prefix check), and every key reaches a ``read_committed`` reader
once; the shorter prefixes' markers are tombstoned.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from kafka_support import read_all

from twophase import CommitProtocol, SinkContext
from twophase._engine._participant import TaskPlan
from twophase._engine._realtime import RealtimeSettings, committed_prefix, run_realtime_partition
from twophase.connectors.kafka import KafkaSink
from twophase.errors import TwoPhaseError

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

EVERY_TEN = RealtimeSettings(commit_interval=3600.0, commit_rows=10)


def _rows(start: int, stop: int, crash_at: int | None = None) -> Iterator[pa.RecordBatch]:
    for i in range(start, stop):
        if i == crash_at:
            raise RuntimeError("the executor died")
        yield pa.record_batch({"key": pa.array([str(i).encode()]), "value": pa.array([b"v"])})


@pytest.fixture
def rt(kafka_broker: Any, make_topic: Callable[..., str]) -> Any:
    topic = make_topic(1, prefix="rt-out")
    sink = KafkaSink("rt", bootstrap_servers=kafka_broker.bootstrap_servers, topic=topic)
    identity = f"rt.{uuid.uuid4().hex[:16]}"
    sink.open(SinkContext("rt", identity, str(uuid.uuid4()), "run", "/unused"))
    plan = TaskPlan("rt", identity, 3, CommitProtocol.MARKERS, epoch=1)

    def run(rows: Iterator[pa.RecordBatch], attempt: int = 0, **kw: Any) -> Any:
        return run_realtime_partition(sink, plan, 0, attempt, rows, kw.get("s", EVERY_TEN))

    def keys() -> Counter[int]:
        return Counter(int(r.key) for r in read_all(kafka_broker.bootstrap_servers, topic))

    run.keys = keys  # type: ignore[attr-defined]
    run.sink = sink  # type: ignore[attr-defined]
    run.identity = identity  # type: ignore[attr-defined]
    run.bootstrap = kafka_broker.bootstrap_servers  # type: ignore[attr-defined]
    return run


def test_a_replay_skips_the_committed_prefix_and_the_shorter_markers_are_tombstoned(
    rt: Any,
) -> None:
    with pytest.raises(RuntimeError, match="executor died"):
        rt(_rows(0, 60, crash_at=25))
    assert rt.keys() == Counter(range(20))
    result = rt(_rows(0, 60), attempt=1)
    assert result.skipped == 20
    assert rt.keys() == Counter(range(60))
    # The reader takes the longest prefix; the shorter ones of attempt 1's producer (30, 40,
    # 50) are tombstoned in the transactions that extended them, for compaction to remove.
    prefix = committed_prefix(rt.sink.read_markers(rt.identity, 3), 0)
    assert prefix is not None
    assert prefix.count == 60
    control = read_all(rt.bootstrap, rt.sink.control_topic)
    mine = [r for r in control if r.key and r.key.startswith(f"{rt.identity}/3/0/1/".encode())]
    assert len([r for r in mine if r.value is None]) == 3


def test_a_zombie_that_resumes_after_a_newer_attempt_committed_is_refused(rt: Any) -> None:
    resume = threading.Event()
    refused: list[BaseException] = []

    def frozen() -> Iterator[pa.RecordBatch]:
        yield from _rows(0, 5)
        resume.wait(30)

    def zombie() -> None:
        try:
            rt(frozen(), attempt=0, s=RealtimeSettings(3600.0, 1_000))
        except BaseException as exc:
            refused.append(exc)

    thread = threading.Thread(target=zombie)
    thread.start()
    rt(_rows(0, 30), attempt=1)
    resume.set()
    thread.join(60)
    assert len(refused) == 1, "the zombie was not refused"
    assert isinstance(refused[0], TwoPhaseError), refused[0]
    assert rt.keys() == Counter(range(30))
