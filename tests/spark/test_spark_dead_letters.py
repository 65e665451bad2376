"""Dead letters in Spark local mode, both protocols: refused rows set aside once, under faults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

import twophase
from tests.spark.helpers import run_query, write_input
from twophase.testing import (
    CrashAt,
    FakeMarkerSink,
    FakeSink,
    FakeTarget,
    assert_exactly_once_or_dead_lettered,
    install_step_listener,
)

pytestmark = pytest.mark.spark


def placed(target: FakeTarget) -> tuple[list[int], list[int]]:
    written = [r["id"] for r in target.committed_rows()]
    return written, [d.values()["id"] for d in target.dead_letters()]


@pytest.mark.parametrize(
    ("sink_cls", "step"),
    [(FakeSink, "phase1_done"), (FakeSink, "decided"), (FakeMarkerSink, "phase1_done")],
)
def test_refused_rows_are_set_aside_once_across_a_task_retry_and_a_driver_failure(
    spark: Any, tmp_path: Path, sink_cls: type[Any], step: str
) -> None:
    target = FakeTarget(tmp_path / "target")
    expected = write_input(tmp_path / "in", 3)
    refused = expected[3::7]  # a few rows of every batch
    target.reject("id", refused, error_class="too_long", code="22001")
    finishing = "pre_commit" if sink_cls is FakeSink else "commit_with_marker"
    retried = target.fail(finishing, batch_id=0, partition_id=1, attempt=0)
    sink = sink_cls("dlq", target, bad_rows="dead_letter")
    crash = CrashAt(step, batch_id=1, as_exception=True)
    install_step_listener(sink, crash)
    with pytest.raises(StreamingQueryException, match="simulated driver crash"):
        run_query(spark, tmp_path / "in", tmp_path / "chk", sink, lambda df: df.repartition(2))
    assert crash.fired
    assert target.fired(retried) == 1, "the task failure did not fire: nothing was tested"
    restarted = sink_cls("dlq", target, bad_rows="dead_letter")  # a new driver
    run_query(spark, tmp_path / "in", tmp_path / "chk", restarted, lambda df: df.repartition(2))
    assert_exactly_once_or_dead_lettered(*placed(target), expected, refused=refused)
    assert target.prepared() == target.open_transactions() == []
    letters = target.dead_letters()
    assert {(d.sink, d.error_class, d.code) for d in letters} == {("dlq", "too_long", "22001")}
    assert {d.batch_id for d in letters} == {0, 1, 2}
    assert twophase.batch_metrics(restarted)[-1].dead_lettered == sum(
        1 for i in refused if i in expected[40:]
    )


def test_a_coordinated_batch_over_max_bad_rows_fails_the_query_with_nothing_of_it_committed(
    spark: Any, tmp_path: Path
) -> None:
    target = FakeTarget(tmp_path / "target")
    expected = write_input(tmp_path / "in", 2)
    target.reject("id", expected[20:26])  # six rows of batch 1
    sink = FakeSink("dlq", target, bad_rows="dead_letter", max_bad_rows=5)
    with pytest.raises(StreamingQueryException, match="6 rows were refused, more than max_bad"):
        run_query(spark, tmp_path / "in", tmp_path / "chk", sink, lambda df: df.repartition(3))
    assert_exactly_once_or_dead_lettered(*placed(target), expected[:20], refused=[])
    assert target.prepared() == []
