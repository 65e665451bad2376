"""Dead letters through the production coordinator: the seam, each protocol, the row as JSON."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from twophase import ConfigurationError, DataError, DeadLetter, RowError, TwoPhaseCommitSink
from twophase._cli._commands import main
from twophase._engine._row_json import row_json
from twophase.testing import (
    FakeMarkerSink,
    FakeSink,
    FakeTarget,
    FakeTransaction,
    LocalRunner,
    SimulatedCrash,
    assert_exactly_once_or_dead_lettered,
)

pytestmark = pytest.mark.unit

SINKS = [FakeSink, FakeMarkerSink]


def parts(batch_id: int, n: int = 9, count: int = 3) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    for i in range(n):
        out[i % count].append({"id": batch_id * 100 + i, "payload": f"p{i}"})
    return out


def refusing(values: Sequence[int], path: Path | None = None) -> FakeTarget:
    target = FakeTarget(path) if path else FakeTarget.in_memory()
    target.reject("id", list(values), error_class="too_long", code="22001", message="too long")
    return target


def ids(target: FakeTarget) -> tuple[list[int], list[int]]:
    return (
        [r["id"] for r in target.committed_rows()],
        [d.values()["id"] for d in target.dead_letters()],
    )


@pytest.mark.parametrize("sink_class", SINKS)
def test_with_bad_rows_fail_a_refused_row_fails_the_batch_by_name(sink_class: type[Any]) -> None:
    target = refusing([4])
    runner = LocalRunner(sink_class("s", target), max_task_failures=2)
    with pytest.raises(DataError) as failed:
        runner.run_batch(0, parts(0))
    error = failed.value
    assert (error.sink, error.batch_id, error.partition_id) == ("s", 0, 1)
    assert (error.column, error.setting) == ("id", "bad_rows")
    assert "partition 1 row 1: too_long 22001 in column 'id': too long" in str(error)
    assert target.dead_letters() == []
    assert 4 not in ids(target)[0]


@pytest.mark.parametrize("sink_class", SINKS)
def test_a_partition_over_max_bad_rows_fails_on_its_executor_and_commits_nothing(
    sink_class: type[Any],
) -> None:
    target = refusing([0, 3, 6])  # all in partition 0
    fired = target.fail("write_dead_letters", times=-1)  # must never be reached
    sink = sink_class("s", target, bad_rows="dead_letter", max_bad_rows=2)
    with pytest.raises(DataError, match=r"3 rows were refused, more than max_bad_rows=2") as failed:
        LocalRunner(sink, max_task_failures=1).run_batch(0, parts(0))
    assert failed.value.partition_id == 0
    assert "partition 0 row 0: too_long" in str(failed.value)
    assert target.fired(fired) == 0, "the partition wrote dead letters over the bound"
    assert target.dead_letters() == []
    assert not [i for i in ids(target)[0] if i in (0, 3, 6)]
    assert target.open_transactions() == target.prepared() == []


def test_a_coordinated_batch_over_max_bad_rows_commits_nothing_and_leaves_nothing_prepared() -> (
    None
):
    target = refusing([0, 1, 2])  # one per partition, each within the bound
    sink = FakeSink("s", target, bad_rows="dead_letter", max_bad_rows=2)
    runner = LocalRunner(sink)
    with pytest.raises(DataError, match="3 rows were refused") as failed:
        runner.run_batch(0, parts(0))
    assert (failed.value.batch_id, failed.value.partition_id) == (0, None)
    assert target.committed_rows() == target.dead_letters() == []
    assert target.prepared() == []
    assert runner.log.read_record(0, "decision") is None


def test_positions_count_across_the_partitions_record_batches() -> None:
    target = refusing([7])
    runner = LocalRunner(FakeMarkerSink("s", target, bad_rows="dead_letter"))
    first = pa.RecordBatch.from_pylist([{"id": i} for i in range(5)])
    second = pa.RecordBatch.from_pylist([{"id": i} for i in range(5, 9)])
    runner.run_batch(3, [[first, second]])
    (letter,) = target.dead_letters()
    assert letter == DeadLetter("s", 3, 0, 7, "too_long", "22001", "too long", "id", '{"id":7}')
    assert_exactly_once_or_dead_lettered(*ids(target), range(9), refused=[7])


class ReturnsGarbage(FakeSink):
    returned: Any = None

    def write(self, txn: FakeTransaction, batch: pa.RecordBatch) -> Any:
        super().write(txn, batch)
        return self.returned


@pytest.mark.parametrize(
    ("returned", "match"),
    [
        ("row 1", "must return None or a list of RowError"),
        ([RowError(5, "other", "x")], r"refused rows \[5\] of a record batch of 3 rows"),
        ([RowError(1, "other", "x"), RowError(1, "other", "y")], "distinct position"),
    ],
)
def test_what_write_returns_is_checked(returned: Any, match: str) -> None:
    sink = ReturnsGarbage("s", FakeTarget.in_memory(), bad_rows="dead_letter")
    sink.returned = returned
    with pytest.raises(TypeError, match=match):
        LocalRunner(sink, max_task_failures=1).run_batch(0, parts(0))


class NoDeadLetters(FakeSink):
    write_dead_letters = TwoPhaseCommitSink.write_dead_letters  # the base's: not implemented


@pytest.mark.parametrize(
    ("make", "setting"),
    [
        (lambda: FakeSink("s", FakeTarget.in_memory(), bad_rows="skip"), "bad_rows"),
        (lambda: FakeSink("s", FakeTarget.in_memory(), max_bad_rows=-1), "max_bad_rows"),
        (lambda: FakeSink("s", FakeTarget.in_memory(), max_bad_rows=True), "max_bad_rows"),
        (lambda: NoDeadLetters("s", FakeTarget.in_memory(), bad_rows="dead_letter"), "bad_rows"),
    ],
)
def test_invalid_settings_are_refused_by_name(make: Any, setting: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        make()
    assert refused.value.setting == setting


def test_a_row_error_class_is_a_bounded_word() -> None:
    with pytest.raises(ValueError, match="labels a metric"):
        RowError(0, "Null value in column x", "m")
    with pytest.raises(ValueError, match="row position"):
        RowError(-1, "other", "m")


def test_the_row_is_json_with_every_type_kept() -> None:
    utc = dt.timezone.utc
    schema = pa.schema(
        [
            ("i", pa.int64()),
            ("f", pa.float64()),
            ("nan", pa.float64()),
            ("d", pa.decimal128(20, 4)),
            ("b", pa.binary()),
            ("s", pa.string()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
            ("t", pa.time64("us")),
            ("dur", pa.duration("s")),
            ("l", pa.list_(pa.int32())),
            ("st", pa.struct([("a", pa.string()), ("n", pa.int8())])),
            ("m", pa.map_(pa.string(), pa.float32())),
            ("dict", pa.dictionary(pa.int8(), pa.string())),
            ("null", pa.string()),
        ]
    )
    row = {
        "i": 2**62,
        "f": 0.1,
        "nan": float("nan"),
        "d": decimal.Decimal("12345678901234.5678"),
        "b": b"\x00\xff",
        "s": 'héllo "q"',
        "ts": dt.datetime(2026, 11, 28, 14, 30, 1, 5, tzinfo=utc),
        "day": dt.date(2026, 2, 28),
        "t": dt.time(23, 59, 59, 999999),
        "dur": dt.timedelta(seconds=90),
        "l": [1, None, 3],
        "st": {"a": "x", "n": -1},
        "m": [("k", 1.5)],
        "dict": "red",
        "null": None,
    }
    batch = pa.RecordBatch.from_pylist([{"i": 0}, row], schema=schema)
    text = row_json(batch, 1)
    assert json.loads(text) == {
        "i": 2**62,
        "f": 0.1,
        "nan": "NaN",
        "d": "12345678901234.5678",
        "b": "AP8=",
        "s": 'héllo "q"',
        "ts": "2026-11-28T14:30:01.000005+00:00",
        "day": "2026-02-28",
        "t": "23:59:59.999999",
        "dur": "PT90.0S",
        "l": [1, None, 3],
        "st": {"a": "x", "n": -1},
        "m": {"k": 1.5},
        "dict": "red",
        "null": None,
    }
    assert list(json.loads(text)) == schema.names  # the columns in their order


def test_status_shows_the_dead_letters_of_the_last_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = refusing([1, 2])
    runner = LocalRunner(FakeSink("s", target, bad_rows="dead_letter"), tmp_path / "chk")
    runner.run_batch(0, parts(0))
    assert main(["status", str(tmp_path / "chk")]) == 0
    out = capsys.readouterr().out
    assert "through batch 0, at 20" in out
    assert ", 7 rows, 2 dead-lettered" in out
    assert main(["status", str(tmp_path / "chk"), "--json"]) == 0
    (sink,) = json.loads(capsys.readouterr().out)["sinks"]
    assert sink["last_committed"]["dead_lettered"] == 2


def test_a_sink_without_dead_letters_records_no_count(tmp_path: Path) -> None:
    runner = LocalRunner(FakeSink("s", FakeTarget.in_memory()), tmp_path / "chk")
    runner.run_batch(0, parts(0))
    assert "dead_lettered" not in (runner.log.read_record(0, "committed") or {})


def test_a_data_source_batch_over_max_bad_rows_rolls_its_prepared_transactions_back() -> None:
    # A Python data source's tasks prepare before the driver's commit() sees the total.
    from twophase._engine._participant import TaskPlan, run_participant

    target = refusing([0, 1, 2])
    sink = FakeSink("s", target, bad_rows="dead_letter", max_bad_rows=2)
    runner = LocalRunner(sink)
    coordinator = runner.coordinator
    coordinator.plan(sink, 0)
    plan = TaskPlan("s", runner.identity.token, 0, sink.protocol, epoch=runner.log.epoch or 0)
    results = [
        run_participant(sink, plan, p, 0, [pa.RecordBatch.from_pylist(rows)])
        for p, rows in enumerate(parts(0))
    ]
    assert len(target.prepared()) == 3
    with pytest.raises(DataError, match="3 rows were refused"):
        coordinator.commit_prepared(sink, 0, results)
    assert target.prepared() == []
    assert target.committed_rows() == target.dead_letters() == []


SIZES: list[int] = []  # the local runner's copies of the sink run in this process


class Sized(FakeMarkerSink):
    """Records the rows of each ``write`` call in SIZES."""

    def write(self, txn: FakeTransaction, batch: pa.RecordBatch) -> list[RowError]:
        SIZES.append(batch.num_rows)
        return super().write(txn, batch)


@pytest.mark.parametrize(("rows", "sizes"), [(None, [2] * 7), (5, [6, 6, 2]), (100, [14])])
def test_write_batch_rows_joins_record_batches_and_keeps_positions_and_fingerprints(
    tmp_path: Path, rows: int | None, sizes: list[int]
) -> None:
    target = refusing([3, 12])
    sink = Sized("s", target, bad_rows="dead_letter")
    SIZES.clear()
    sink.write_batch_rows = rows
    given = [pa.record_batch({"id": [i, i + 1]}) for i in range(0, 14, 2)]
    runner = LocalRunner(sink, tmp_path / "chk")
    runner.crash_at("phase1_done", batch_id=0)  # committed, not recorded: the replay checks
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, [given])
    assert sizes == SIZES
    runner.restart()
    runner.run_batch(0, [[pa.record_batch({"id": list(range(14))})]])  # one batch: the same rows
    assert sorted(r["id"] for r in target.committed_rows()) == [
        i for i in range(14) if i not in (3, 12)
    ]
    assert [(d.position, d.values()["id"]) for d in target.dead_letters()] == [(3, 3), (12, 12)]
