"""Spark local mode with the fake sinks: task retries, driver failures, replays, layout changes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

import twophase
from tests.spark.helpers import ODD_NAMES, run_query, write_input
from twophase import ConfigurationError
from twophase.testing import (
    CrashAt,
    FakeMarkerSink,
    FakeSink,
    FakeTarget,
    assert_exactly_once,
    install_step_listener,
)

pytestmark = pytest.mark.spark


def ids(target: FakeTarget) -> list[int]:
    return [r["id"] for r in target.committed_rows()]


@pytest.mark.parametrize("sink_cls", [FakeSink, FakeMarkerSink])
def test_task_failures_are_retried_with_new_attempts(
    spark: Any, tmp_path: Path, sink_cls: type[Any]
) -> None:
    target = FakeTarget(tmp_path / "target")
    expected = write_input(tmp_path / "in", 3)
    finishing = "pre_commit" if sink_cls is FakeSink else "commit_with_marker"
    target.fail("write", batch_id=1, partition_id=0, attempt=0)
    target.fail(finishing, batch_id=2, partition_id=1, attempt=0)
    sink = sink_cls("retries", target)
    run_query(spark, tmp_path / "in", tmp_path / "chk", sink, lambda df: df.repartition(3))
    assert_exactly_once(ids(target), expected)
    assert target.prepared() == []
    assert target.open_transactions() == []
    fired = {r.hook: target.fired(r) for r in target.rules()}
    assert fired == {"write": 1, finishing: 1}, "the faults did not fire: nothing was tested"
    assert [m.batch_id for m in twophase.batch_metrics(sink)] == [0, 1, 2]
    attempts = {
        (int(t.split(":")[1]), int(t.split(":")[2]), int(t.split(":")[3]))
        for t in target.committed()
    }
    assert (1, 0, 1) in attempts, "batch 1 partition 0 should be committed by attempt 1"
    log_dir = tmp_path / "chk" / "twophase" / "retries"
    assert log_dir.is_dir(), "the coordinator log must live in the checkpoint"


@pytest.mark.parametrize(
    ("sink_cls", "step", "index"),
    [
        (FakeSink, "phase1_done", None),
        (FakeSink, "decided", None),
        (FakeSink, "committed_handle", 0),
        (FakeSink, "recorded_committed", None),
        (FakeMarkerSink, "intent_recorded", None),
        (FakeMarkerSink, "phase1_done", None),
    ],
)
def test_driver_failure_mid_protocol_then_restart_from_checkpoint(
    spark: Any, tmp_path: Path, sink_cls: type[Any], step: str, index: int | None
) -> None:
    target = FakeTarget(tmp_path / "target")
    expected = write_input(tmp_path / "in", 3)
    sink = sink_cls("crashy", target)
    crash = CrashAt(step, batch_id=1, index=index, as_exception=True)
    install_step_listener(sink, crash)
    with pytest.raises(StreamingQueryException, match="simulated driver crash"):
        run_query(spark, tmp_path / "in", tmp_path / "chk", sink, lambda df: df.repartition(2))
    assert crash.fired
    if sink_cls is FakeSink and step in ("phase1_done", "decided"):
        assert target.prepared(), "phase 1 should have left prepared transactions"
        assert_exactly_once(ids(target), expected[:20])  # batch 1 prepared, invisible
    restarted = sink_cls("crashy", target)  # a new driver: nothing cached
    run_query(spark, tmp_path / "in", tmp_path / "chk", restarted, lambda df: df.repartition(2))
    assert_exactly_once(ids(target), expected)
    assert target.prepared() == []


def test_coordinated_replay_with_another_layout_is_exact(spark: Any, tmp_path: Path) -> None:
    target = FakeTarget(tmp_path / "target")
    expected = write_input(tmp_path / "in", 2)
    sink = FakeSink("layout", target)
    install_step_listener(sink, CrashAt("phase1_done", batch_id=1, as_exception=True))
    with pytest.raises(StreamingQueryException):
        run_query(spark, tmp_path / "in", tmp_path / "chk", sink, lambda df: df.repartition(3))
    # the restarted query shuffles into another layout (a code change between runs)
    run_query(
        spark,
        tmp_path / "in",
        tmp_path / "chk",
        FakeSink("layout", target),
        lambda df: df.repartition(2),
    )
    assert_exactly_once(ids(target), expected)


def test_markers_replay_with_another_layout_is_refused_then_staging_is_exact(
    spark: Any, tmp_path: Path
) -> None:
    target = FakeTarget(tmp_path / "target")
    expected = write_input(tmp_path / "in", 2)
    sink = FakeMarkerSink("layout", target)
    install_step_listener(sink, CrashAt("phase1_done", batch_id=1, as_exception=True))
    with pytest.raises(StreamingQueryException):
        run_query(spark, tmp_path / "in", tmp_path / "chk", sink, lambda df: df.repartition(3))
    before = sorted(ids(target))
    with pytest.raises(StreamingQueryException, match=r"NondeterministicBatchError|does not match"):
        run_query(
            spark,
            tmp_path / "in",
            tmp_path / "chk",
            FakeMarkerSink("layout", target),
            lambda df: df.repartition(2),
        )
    assert sorted(ids(target)) == before, "the refused replay wrote rows"
    # the same pipeline with staging, from a fresh checkpoint, survives the same change
    target2 = FakeTarget(tmp_path / "target2")
    staged = FakeMarkerSink("staged", target2, staging=True)
    install_step_listener(staged, CrashAt("phase1_done", batch_id=1, as_exception=True))
    with pytest.raises(StreamingQueryException):
        run_query(spark, tmp_path / "in", tmp_path / "chk2", staged, lambda df: df.repartition(3))
    run_query(
        spark,
        tmp_path / "in",
        tmp_path / "chk2",
        FakeMarkerSink("staged", target2, staging=True),
        lambda df: df.repartition(2),
    )
    assert_exactly_once(ids(target2), expected)


def test_wrong_checkpoint_location_is_refused(spark: Any, tmp_path: Path) -> None:
    target = FakeTarget(tmp_path / "target")
    write_input(tmp_path / "in", 1)
    sink = FakeSink("wrong", target, checkpoint_location=str(tmp_path / "elsewhere"))
    df = spark.readStream.schema("id long, payload string").parquet(str(tmp_path / "in"))
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException, match="checkpoint_location"):
        query.awaitTermination(120)
    assert ids(target) == []


def test_plain_foreach_batch_finds_the_checkpoint(spark: Any, tmp_path: Path) -> None:
    target = FakeTarget(tmp_path / "target")
    expected = write_input(tmp_path / "in", 2)
    probes = tmp_path / "pandas"
    probes.mkdir()

    class PandasProbe(FakeSink):  # a local class: pickled by value, nothing else to import
        """Say in each task's write whether its Python worker has imported pandas."""

        def write(self, txn: Any, batch: Any) -> None:
            super().write(txn, batch)
            c = txn.context
            probe = probes / f"{os.getpid()}-{c.batch_id}-{c.partition_id}-{c.attempt}"
            probe.write_text(str("pandas" in sys.modules))

    sink = PandasProbe("plain", target)
    df = (
        spark.readStream.schema("id long, payload string")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(tmp_path / "in"))
    )
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert_exactly_once(ids(target), expected)
    assert (tmp_path / "chk" / "twophase" / "plain" / query.id / "batches").is_dir()
    # Spark reuses its Python workers: a task that imported pandas shows in a later one.
    seen = {p.name: p.read_text() for p in probes.iterdir()}
    assert seen, "no task wrote a probe: nothing was checked"
    assert set(seen.values()) == {"False"}, f"a worker running twophase imported pandas: {seen}"


def test_calling_the_sink_outside_a_stream_is_a_clear_error(spark: Any) -> None:
    sink = FakeSink("direct", FakeTarget.in_memory())
    with pytest.raises(ConfigurationError, match="foreachBatch"):
        sink(spark.range(3), 0)


@pytest.mark.parametrize("sink_cls", [FakeSink, FakeMarkerSink])
def test_any_column_name_spark_allows_is_written_as_it_is(
    spark: Any, tmp_path: Path, sink_cls: type[Any]
) -> None:
    from pyspark.sql import functions as sf

    target = FakeTarget(tmp_path / "target")
    expected = write_input(tmp_path / "in", 2)
    sink = sink_cls("odd-names", target)

    def odd(df: Any) -> Any:
        extra = [
            sf.concat(sf.col("payload"), sf.lit(f"/{i}")).alias(n) for i, n in enumerate(ODD_NAMES)
        ]
        return df.select(sf.col("id"), *extra).repartition(2)

    run_query(spark, tmp_path / "in", tmp_path / "chk", sink, odd)
    rows = target.committed_rows()
    assert_exactly_once([r["id"] for r in rows], expected)
    assert {tuple(r) for r in rows} == {("id", *ODD_NAMES)}
    assert all(r[n] == f"p{r['id']}/{i}" for r in rows for i, n in enumerate(ODD_NAMES))
