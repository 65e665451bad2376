"""Two sinks in one query (``write_stream(df, [sink, (sink, projection)])``), with real Spark.

Each batch is computed once and written by each sink in turn, each exactly once on its own. The
real connectors under a driver SIGKILL between the two targets:
tests/integration/test_two_targets.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as sf

import twophase
from tests.spark.helpers import run_query, write_input
from twophase.errors import ConfigurationError
from twophase.testing import (
    CrashAt,
    FakeMarkerSink,
    FakeSink,
    FakeTarget,
    assert_exactly_once,
    install_step_listener,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def ids(target: FakeTarget, column: str = "id") -> list[int]:
    return [int(row[column]) for row in target.committed_rows()]


def mark_computed(directory: Path) -> Any:
    """A ``mapInArrow`` function: one file per partition each time a batch is computed."""

    def mark(batches: Any) -> Any:
        (directory / uuid.uuid4().hex).touch()
        yield from batches

    return mark


def test_each_batch_is_computed_once_and_written_by_each_sink_once(
    spark: Any, tmp_path: Path
) -> None:
    expected = write_input(tmp_path / "in", 3)
    first, second = FakeTarget(tmp_path / "a"), FakeTarget(tmp_path / "b")
    computed = tmp_path / "computed"
    computed.mkdir()

    def doubled(batch: Any) -> Any:  # the second sink's own columns
        return batch.select((sf.col("id") * 2).alias("twice"), "payload")

    sinks = [FakeSink("first", first), (FakeMarkerSink("second", second), doubled)]
    run_query(
        spark,
        tmp_path / "in",
        tmp_path / "chk",
        sinks,
        lambda df: df.mapInArrow(mark_computed(computed), df.schema),
    )
    assert_exactly_once(ids(first), expected)
    assert_exactly_once(ids(second, "twice"), [2 * i for i in expected])
    # One input file per batch, one partition each: three computations in all, not six.
    assert len(list(computed.iterdir())) == 3


@pytest.mark.extended  # a real driver is killed there: tests/integration/test_two_targets.py
def test_a_failure_between_the_targets_resumes_with_the_second(spark: Any, tmp_path: Path) -> None:
    expected = write_input(tmp_path / "in", 3)
    first, second = FakeTarget(tmp_path / "a"), FakeTarget(tmp_path / "b")
    sink_a, sink_b = FakeSink("first", first), FakeMarkerSink("second", second)
    crash = CrashAt("start", batch_id=1, as_exception=True)
    install_step_listener(sink_b, crash)
    with pytest.raises(StreamingQueryException):
        run_query(spark, tmp_path / "in", tmp_path / "chk", [sink_a, sink_b])
    assert crash.fired
    # The first target has batch 1, the second does not: the failure fell between them.
    assert sorted(ids(first)) == sorted(expected[:40])
    assert sorted(ids(second)) == sorted(expected[:20])

    again_a, again_b = FakeSink("first", first), FakeMarkerSink("second", second)
    run_query(spark, tmp_path / "in", tmp_path / "chk", [again_a, again_b])
    assert_exactly_once(ids(first), expected)
    assert_exactly_once(ids(second), expected)
    outcomes = {m.batch_id: m.outcome for m in twophase.batch_metrics(again_a)}
    assert outcomes[1] == "already-committed", outcomes


@pytest.mark.parametrize(
    ("targets", "match"),
    [
        ([], "at least one sink"),
        ("same-name", "two sinks of one query are named 'same'"),
        ("bad-pair", "a target is a sink or a"),
    ],
)
def test_bad_targets_are_refused_before_the_query_starts(
    spark: Any, tmp_path: Path, targets: Any, match: str
) -> None:
    target = FakeTarget(tmp_path / "t")
    if targets == "same-name":
        targets = [FakeSink("same", target), FakeMarkerSink("same", target)]
    elif targets == "bad-pair":
        targets = [(FakeSink("pair", target), "not a function")]
    df = spark.readStream.schema("id long").parquet(str(tmp_path))
    with pytest.raises(ConfigurationError, match=match):
        twophase.write_stream(df, targets, checkpoint_location=str(tmp_path / "chk"))
