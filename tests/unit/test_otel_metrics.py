"""twophase's OpenTelemetry metrics, read by the SDK's in-memory reader, against the batches run."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from twophase import RetryPolicy, TaskContext
from twophase._metrics._otel import ATTRIBUTES, METRICS, use_meter_provider
from twophase.testing import (
    FakeMarkerSink,
    FakeSink,
    FakeTarget,
    LocalRunner,
    SimulatedCrash,
    assert_exactly_once,
)

pytestmark = pytest.mark.unit

#: The attributes a metric may have besides the common ones: bounded values only.
BOUNDED = {"outcome", "action", "error_class"}


def rows(batch_id: int, n: int = 6) -> list[dict[str, int]]:
    return [{"id": batch_id * 100 + i} for i in range(n)]


def split(batch_id: int, partitions: int = 3, n: int = 6) -> list[list[dict[str, int]]]:
    parts: list[list[dict[str, int]]] = [[] for _ in range(partitions)]
    for index, row in enumerate(rows(batch_id, n)):
        parts[index % partitions].append(row)
    return parts


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    use_meter_provider(provider)
    try:
        yield reader
    finally:
        use_meter_provider(None)
        provider.shutdown()


class Points:
    """The data points of one collection, by metric name."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        data = reader.get_metrics_data()
        self.by_name: dict[str, list[Any]] = {}
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                assert scope.scope.name == "twophase"
                for metric in scope.metrics:
                    self.by_name[metric.name] = list(metric.data.data_points)

    def value(self, name: str, **attributes: str) -> float:
        """Sum of the points of ``name`` whose attributes include ``attributes`` (0 if none)."""
        total = 0.0
        for point in self.by_name.get(name, []):
            if all(point.attributes.get(k) == v for k, v in attributes.items()):
                total += point.value
        return total

    def histogram(self, name: str) -> tuple[int, float]:
        points = self.by_name[name]
        return sum(p.count for p in points), sum(p.sum for p in points)

    def attributes(self) -> list[dict[str, Any]]:
        return [dict(p.attributes) for points in self.by_name.values() for p in points]


def test_a_committed_batch_reports_its_counts_durations_and_what_the_executors_measured(
    reader: InMemoryMetricReader,
) -> None:
    target = FakeTarget.in_memory()
    runner = LocalRunner(FakeSink("orders", target))
    metrics = runner.run_batch(0, split(0, partitions=3))
    runner.run_batch(1, split(1, partitions=2, n=4))
    points = Points(reader)
    common = {
        "twophase.sink": "orders",
        "twophase.protocol": "coordinated",
        "twophase.target": "custom",
    }
    assert points.value("twophase.batches", outcome="committed", **common) == 2
    assert points.value("twophase.rows", **common) == 10
    assert points.value("twophase.transactions", **common) == 5
    # the Arrow bytes the participants wrote came back with their phase-1 results
    written = sum(pa.RecordBatch.from_pylist(p).nbytes for p in split(0, partitions=3))
    assert metrics.arrow_bytes == written
    assert points.value("twophase.bytes") > written
    assert points.value("twophase.target.time") > 0
    for name in ("twophase.phase1.duration", "twophase.decision.duration"):
        count, total = points.histogram(name)
        assert count == 2
        assert total > 0
    assert points.histogram("twophase.phase2.duration")[0] == 2
    assert points.value("twophase.batch.last_committed", **common) == 1
    assert 0 <= points.value("twophase.batch.last_committed.age") < 60
    assert points.value("twophase.transactions.in_doubt", **common) == 0


def test_every_attribute_is_bounded_and_every_recorded_metric_is_defined(
    reader: InMemoryMetricReader,
) -> None:
    target = FakeTarget.in_memory()
    runner = LocalRunner(FakeSink("s", target))
    runner.run_batch(0, split(0))
    points = Points(reader)
    assert set(points.by_name) <= {m.name for m in METRICS}
    for attributes in points.attributes():
        assert set(ATTRIBUTES) <= attributes.keys() <= set(ATTRIBUTES) | BOUNDED, attributes


def test_a_crash_after_the_decision_counts_a_failed_batch_then_the_recovered_commits(
    reader: InMemoryMetricReader,
) -> None:
    target = FakeTarget.in_memory()
    runner = LocalRunner(FakeSink("s", target))
    runner.run_batch(0, split(0))
    crash = runner.crash_at("decided", 1)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(1, split(1))
    assert crash.fired
    assert Points(reader).value("twophase.batches", outcome="failed") == 1
    assert len(target.prepared()) == 3, "the decided batch's transactions stay prepared"
    runner.restart()
    replay = runner.run_batch(1, split(1))
    assert replay.outcome == "already-committed"
    points = Points(reader)
    assert points.value("twophase.transactions.recovered", action="committed") == 3
    assert points.value("twophase.transactions.recovered", action="aborted") == 0
    assert points.value("twophase.batches", outcome="already-committed") == 1
    assert points.value("twophase.batches", outcome="committed") == 1
    # batch 0's rows, and batch 1's when recovery committed them; the replay writes nothing
    assert points.value("twophase.rows") == 12
    assert points.value("twophase.batch.last_committed") == 1
    assert_exactly_once(
        [r["id"] for r in target.committed_rows()], [r["id"] for r in rows(0) + rows(1)]
    )


def test_a_run_stuck_on_its_first_batch_reports_the_last_commit_from_the_log(
    reader: InMemoryMetricReader,
) -> None:
    target = FakeTarget.in_memory()
    runner = LocalRunner(FakeSink("s", target))
    runner.run_batch(0, split(0))
    runner.run_batch(1, split(1))
    fresh = InMemoryMetricReader()
    use_meter_provider(MeterProvider(metric_readers=[fresh], shutdown_on_exit=False))
    runner.restart()  # a new driver process: nothing in memory but the log
    crash = runner.crash_at("recovered", 2)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(2, split(2))
    assert crash.fired
    points = Points(fresh)
    assert points.value("twophase.batch.last_committed") == 1
    assert points.value("twophase.batch.last_committed.age") >= 0
    assert points.value("twophase.batches", outcome="committed") == 0


def test_phase2_retries_are_counted(reader: InMemoryMetricReader) -> None:
    target = FakeTarget.in_memory()
    sink = FakeSink("s", target, retry=RetryPolicy(max_attempts=5, initial_backoff=0))
    runner = LocalRunner(sink)
    target.fail("commit", batch_id=0, partition_id=1, times=2, error="RetriableError")
    runner.run_batch(0, split(0))
    assert Points(reader).value("twophase.commit.retries") == 2


def test_a_zombies_transaction_is_counted_when_a_later_sweep_rolls_it_back(
    reader: InMemoryMetricReader,
) -> None:
    target = FakeTarget.in_memory()
    sink = FakeSink("s", target)
    runner = LocalRunner(sink)
    runner.run_batch(0, split(0))
    # a zombie attempt of batch 0 prepares after batch 0 was swept
    txn = sink.begin_transaction(TaskContext("s", runner.identity.token, 0, 0, 7))
    sink.write(txn, pa.RecordBatch.from_pylist(rows(0)[:1]))
    zombie = sink.pre_commit(txn)
    runner.run_batch(1, split(1))
    assert zombie.transaction_id not in target.prepared()
    points = Points(reader)
    assert points.value("twophase.transactions.zombie") == 1
    assert points.value("twophase.transactions.recovered", action="aborted") == 1


def test_a_transaction_left_in_doubt_shows_in_the_gauges_until_it_is_gone(
    reader: InMemoryMetricReader,
) -> None:
    target = FakeTarget.in_memory()
    sink = FakeSink("s", target)
    runner = LocalRunner(sink)
    runner.run_batch(0, split(0))
    # prepared for a later batch (an attempt of a run the driver does not know): not swept
    txn = sink.begin_transaction(TaskContext("s", runner.identity.token, 9, 0, 0))
    sink.write(txn, pa.RecordBatch.from_pylist(rows(9)[:1]))
    later = sink.pre_commit(txn)
    runner.run_batch(1, split(1))
    points = Points(reader)
    assert points.value("twophase.transactions.in_doubt") == 1
    assert points.value("twophase.transactions.in_doubt.age") >= 0
    sink.recover_and_abort(later)
    runner.run_batch(2, split(2))
    points = Points(reader)
    assert points.value("twophase.transactions.in_doubt") == 0
    assert points.value("twophase.transactions.in_doubt.age") == 0


def test_a_markers_replay_reports_the_partitions_it_skipped(reader: InMemoryMetricReader) -> None:
    target = FakeTarget.in_memory()
    runner = LocalRunner(FakeMarkerSink("m", target))
    crash = runner.crash_at("phase1_done", 0)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, split(0))
    assert crash.fired
    runner.restart()
    replay = runner.run_batch(0, split(0))
    assert replay.skipped_partitions == 3
    points = Points(reader)
    markers = {"twophase.protocol": "markers"}
    assert points.value("twophase.partitions.skipped", **markers) == 3
    assert points.value("twophase.batches", outcome="committed", **markers) == 1
    assert points.value("twophase.rows", **markers) == 0, "the replay wrote no partition again"
    assert_exactly_once([r["id"] for r in target.committed_rows()], [r["id"] for r in rows(0)])


@pytest.mark.parametrize("sink_class", [FakeSink, FakeMarkerSink])
def test_rows_set_aside_are_counted_by_error_class_and_not_as_rows(
    reader: InMemoryMetricReader, sink_class: type[Any]
) -> None:
    target = FakeTarget.in_memory()
    target.reject("id", [1, 2], error_class="not_null", code="23502")
    target.reject("id", [4], error_class="too_long", code="22001")
    runner = LocalRunner(sink_class("s", target, bad_rows="dead_letter"))
    metrics = runner.run_batch(0, split(0))
    assert (metrics.rows, metrics.dead_lettered) == (3, 3)
    assert metrics.dead_lettered_by_class == {"not_null": 2, "too_long": 1}
    assert "dead_lettered=3" in metrics.log_line()
    points = Points(reader)
    assert points.value("twophase.rows.dead_lettered", error_class="not_null") == 2
    assert points.value("twophase.rows.dead_lettered", error_class="too_long") == 1
    assert points.value("twophase.rows") == 3
    assert runner.log.read_record(0, "committed")["dead_lettered"] == 3


def test_dead_letters_of_a_batch_finished_by_recovery_are_counted_once(
    reader: InMemoryMetricReader,
) -> None:
    target = FakeTarget.in_memory()
    target.reject("id", [1, 2])
    runner = LocalRunner(FakeSink("s", target, bad_rows="dead_letter"))
    runner.crash_at("decided", batch_id=0)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, split(0))
    assert runner.log.read_record(0, "decision")["dead_lettered"] == {"not_null": 2}
    assert Points(reader).value("twophase.rows.dead_lettered") == 0  # not committed yet
    runner.restart()
    assert runner.run_batch(0, split(0)).outcome == "already-committed"
    assert len(target.dead_letters()) == 2
    assert Points(reader).value("twophase.rows.dead_lettered", error_class="not_null") == 2


def test_a_prometheus_scrape_shows_every_metric_under_the_documented_name() -> None:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import REGISTRY, generate_latest

    provider = MeterProvider(metric_readers=[PrometheusMetricReader()], shutdown_on_exit=False)
    use_meter_provider(provider)
    try:
        target = FakeTarget.in_memory()
        sink = FakeSink("s", target, retry=RetryPolicy(max_attempts=5, initial_backoff=0))
        runner = LocalRunner(sink)
        runner.run_batch(0, split(0))
        target.fail("commit", batch_id=1, partition_id=1, times=1, error="RetriableError")
        runner.run_batch(1, split(1))
        scraped = generate_latest(REGISTRY).decode()
    finally:
        use_meter_provider(None)
        provider.shutdown()  # unregisters its collector
    shown = {
        line.split("{")[0].split(" ")[0].removesuffix("_bucket").removesuffix("_count")
        for line in scraped.splitlines()
        if line.startswith("twophase_")
    }
    expected = {m.prometheus_name for m in METRICS} - {
        # nothing of these happened here: a counter appears once it counted
        "twophase_rows_dead_lettered_total",
        "twophase_partitions_skipped_total",
        "twophase_transactions_recovered_total",
        "twophase_transactions_zombie_total",
    }
    assert expected <= shown, sorted(shown)
    committed = re.search(r"^twophase_batches_total\{([^}]*)\} (\S+)$", scraped, re.M)
    assert committed is not None
    assert 'outcome="committed"' in committed.group(1)
    assert 'twophase_sink="s"' in committed.group(1)
    assert float(committed.group(2)) == 2
    assert re.search(r"^twophase_commit_retries_total\{.*\} 1\.0$", scraped, re.M)


def test_a_replay_of_the_last_batch_keeps_the_time_its_commit_was_recorded(
    reader: InMemoryMetricReader,
) -> None:
    target = FakeTarget.in_memory()
    runner = LocalRunner(FakeSink("s", target))
    runner.run_batch(0, split(0))
    recorded = runner.log.read_record(0, "committed")
    assert recorded is not None
    runner.restart()
    time.sleep(0.2)
    assert runner.run_batch(0, split(0)).outcome == "already-committed"
    points = Points(reader)
    assert points.value("twophase.batch.last_committed") == 0
    age = points.value("twophase.batch.last_committed.age")
    assert age >= 0.2, "the replay is not a new commit"
    assert age == pytest.approx(time.time() - recorded["committed_at"], abs=0.1)
