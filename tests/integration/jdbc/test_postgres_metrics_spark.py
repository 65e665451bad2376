"""End to end: a Spark driver writing into PostgreSQL, its metrics scraped over HTTP by Prometheus.

The application's own OpenTelemetry set-up is the Prometheus exporter's reader on an HTTP
port; the query crashes after batch 1's decision and is restarted; the scrape must show the
batches as they ran: outcomes, rows, the transactions recovery committed, the last batch.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jdbc_support import PgTarget
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import start_http_server
from pyspark.errors import StreamingQueryException

from tests.spark.helpers import SCHEMA, run_to_end, write_input
from twophase._metrics._otel import METRICS, use_meter_provider
from twophase.testing import CrashAt, assert_exactly_once, install_step_listener
from twophase_dev import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture
def scrape_url() -> Iterator[str]:
    """The application's SDK: a Prometheus endpoint on a free port, serving twophase's metrics."""
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()], shutdown_on_exit=False)
    use_meter_provider(provider)
    port = free_ports(1)[0]
    server, thread = start_http_server(port, addr="127.0.0.1")
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        server.shutdown()
        thread.join(10)
        use_meter_provider(None)
        provider.shutdown()


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Scrape ``url``: (metric, its labels but the scope's) -> value, twophase's lines only."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for name, labels, value in re.findall(r"^(twophase_\w+)(?:\{(.*)\})? (\S+)$", text, re.M):
        pairs = frozenset(
            (k, v) for k, v in re.findall(r'(\w+)="([^"]*)"', labels) if not k.startswith("otel_")
        )
        samples[(name, pairs)] = float(value)
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, pairs), v in samples.items() if n == name and wanted <= pairs)


def read(spark: Any, source: Path) -> Any:
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    return df.repartition(3)


def test_a_prometheus_scrape_shows_the_batches_a_crash_and_its_recovery(
    spark: Any, pg_a: PgTarget, table: str, tmp_path: Path, scrape_url: str
) -> None:
    expected = write_input(tmp_path / "in", 3, rows=50)
    sink = pg_a.sink("metrics_e2e", table, create_table=True)
    crash = CrashAt("decided", batch_id=1, as_exception=True)
    install_step_listener(sink, crash)
    with pytest.raises(StreamingQueryException, match="simulated driver crash"):
        run_to_end(read(spark, tmp_path / "in"), sink, tmp_path / "chk")
    assert crash.fired
    assert len(pg_a.prepared()) == 3, "batch 1 is decided, its 3 transactions prepared"
    crashed = scrape(scrape_url)
    assert value(crashed, "twophase_batches_total", outcome="failed") == 1
    assert value(crashed, "twophase_batch_last_committed") == 0

    restarted = pg_a.sink("metrics_e2e", table)  # a restart of the application
    run_to_end(read(spark, tmp_path / "in"), restarted, tmp_path / "chk")
    assert_exactly_once(pg_a.ids(table), expected)
    assert pg_a.prepared() == []

    samples = scrape(scrape_url)
    ours = {
        "twophase_sink": "metrics_e2e",
        "twophase_protocol": "coordinated",
        "twophase_target": "postgresql",
    }
    assert value(samples, "twophase_batches_total", outcome="committed", **ours) == 2  # 0, 2
    assert value(samples, "twophase_batches_total", outcome="already-committed", **ours) == 1
    assert value(samples, "twophase_batches_total", outcome="failed", **ours) == 1
    recovered = value(samples, "twophase_transactions_recovered_total", action="committed")
    assert recovered == 3
    assert value(samples, "twophase_rows_total", **ours) == len(expected)  # 1's by recovery
    assert value(samples, "twophase_transactions_total", **ours) == 6
    assert value(samples, "twophase_bytes_total", **ours) > 0
    assert value(samples, "twophase_target_time_seconds_total", **ours) > 0
    assert value(samples, "twophase_phase1_duration_seconds_count", **ours) == 2
    assert value(samples, "twophase_phase2_duration_seconds_count", **ours) == 2
    assert value(samples, "twophase_batch_last_committed", **ours) == 2
    assert 0 <= value(samples, "twophase_batch_last_committed_age_seconds", **ours) < 300
    assert value(samples, "twophase_transactions_in_doubt", **ours) == 0
    shown = {name for name, _ in samples}
    for metric in METRICS:
        if metric.kind != "histogram" and metric.name not in (
            "twophase.partitions.skipped",
            "twophase.transactions.zombie",
            "twophase.commit.retries",
            "twophase.rows.dead_lettered",  # a sink with bad_rows="dead_letter" only
        ):
            assert metric.prometheus_name in shown, metric.prometheus_name
