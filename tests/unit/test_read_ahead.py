"""Reading Spark's record batches ahead while ``write`` works (sinks with ``write_batch_rows``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from twophase import RowError
from twophase._arrow import read_ahead
from twophase._engine._participant import TaskPlan, run_participant
from twophase.testing import FakeSink, FakeTarget, FakeTransaction

pytestmark = pytest.mark.unit


def test_items_come_in_order_pulled_by_another_thread() -> None:
    pullers: set[str] = set()

    def source() -> Iterator[int]:
        for i in range(50):
            pullers.add(threading.current_thread().name)
            yield i

    with read_ahead(source()) as items:
        assert list(items) == list(range(50))
    assert pullers == {"twophase-read-ahead"}


def test_an_error_of_the_iterator_reaches_the_caller_after_the_items_before_it() -> None:
    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("the input broke")

    got: list[int] = []
    with pytest.raises(ValueError, match="the input broke"), read_ahead(source()) as items:
        got.extend(items)
    assert got == [1, 2]


def test_leaving_early_stops_the_thread_and_nothing_is_pulled_after() -> None:
    pulled: list[int] = []

    def source() -> Iterator[int]:
        for i in range(1000):
            pulled.append(i)
            yield i

    def consume() -> None:
        with read_ahead(source()) as items:
            for i in items:
                if i == 3:
                    raise RuntimeError("write failed")

    with pytest.raises(RuntimeError):
        consume()
    threads = [t.name for t in threading.enumerate()]
    assert "twophase-read-ahead" not in threads
    after = len(pulled)
    assert after <= 3 + 1 + 2  # the one consumed, the one queued, the one being read
    threading.Event().wait(0.2)
    assert len(pulled) == after


class _WaitsForTheNextBatch(FakeSink):
    """Its first ``write`` returns only once Spark's next record batch is being read."""

    reading_next = threading.Event()

    def write(self, txn: FakeTransaction, batch: pa.RecordBatch) -> list[RowError]:
        if batch.column("id")[0].as_py() == 0:
            assert self.reading_next.wait(10), "the next batch was not read while write ran"
        return super().write(txn, batch)


def test_the_participant_reads_the_next_batch_while_write_settles_the_one_before(
    tmp_path: Path,
) -> None:
    def given() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"id": [0, 1]})
        _WaitsForTheNextBatch.reading_next.set()
        yield pa.record_batch({"id": [2, 3]})

    target = FakeTarget.in_memory()
    sink = _WaitsForTheNextBatch("s", target, bad_rows="dead_letter")
    sink.write_batch_rows = 2
    plan = TaskPlan("s", "identity", 0, sink.protocol)
    result = run_participant(sink, plan, 0, 0, given())
    assert result.rows == 4
    assert len(target.prepared()) == 1
