"""Installing an SDK from ``OTEL_*`` settings (the Connect server's case), and the target kinds."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider

import twophase
from twophase._metrics import _otel_setup
from twophase.errors import ConfigurationError
from twophase.testing import FakeSink, FakeTarget

pytestmark = pytest.mark.unit


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """What ``configure`` sets as the global provider (captured: the real one is set once)."""
    captured: list[Any] = []
    saved = dict(os.environ)  # configure() writes the settings into the environment
    monkeypatch.setattr(_otel_setup, "_done", False)
    monkeypatch.setattr(_otel_setup, "_installed", None)
    monkeypatch.setattr(metrics, "set_meter_provider", captured.append)
    for name in ("OTEL_METRICS_EXPORTER", "OTEL_METRIC_EXPORT_INTERVAL", "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)
    yield captured
    os.environ.clear()
    os.environ.update(saved)
    for provider in captured:
        provider.shutdown()


def test_settings_install_the_named_exporter_once_and_the_environment_wins(
    installed: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from opentelemetry.sdk.metrics import export

    written = io.StringIO()

    class Console(export.ConsoleMetricExporter):
        def __init__(self) -> None:
            super().__init__(out=written)

    monkeypatch.setattr(export, "ConsoleMetricExporter", Console)

    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "60000")
    settings = {"OTEL_METRICS_EXPORTER": "console", "OTEL_METRIC_EXPORT_INTERVAL": "5"}
    assert _otel_setup.configure(settings) is True
    assert _otel_setup.configure(settings) is False, "once per process"
    (provider,) = installed
    assert isinstance(provider, MeterProvider)
    assert os.environ["OTEL_METRIC_EXPORT_INTERVAL"] == "60000", "the process's own setting wins"
    provider.get_meter("probe").create_counter("probe.count").add(3)
    provider.force_flush()  # the console exporter writes what it exports
    exported = written.getvalue()
    assert '"probe.count"' in exported
    assert '"service.name": "twophase"' in exported


def test_a_failed_batch_is_exported_at_once_not_at_the_next_interval(
    installed: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process may end with the batch (a Connect server stops the query's worker)."""
    import io

    from opentelemetry.sdk.metrics import export

    from twophase._metrics import _otel
    from twophase.testing import LocalRunner

    written = io.StringIO()

    class Console(export.ConsoleMetricExporter):
        def __init__(self) -> None:
            super().__init__(out=written)

    monkeypatch.setattr(export, "ConsoleMetricExporter", Console)
    assert _otel_setup.configure({"OTEL_METRICS_EXPORTER": "console"})  # every 60 s
    (provider,) = installed
    _otel.use_meter_provider(provider)  # what the global one would be, in a process of its own
    try:
        target = FakeTarget.in_memory()
        target.fail("write", batch_id=0, partition_id=0, times=-1, error="DataError")
        with pytest.raises(Exception, match="injected fault"):
            LocalRunner(FakeSink("s", target)).run_batch(0, [[{"id": 1}]])
    finally:
        _otel.use_meter_provider(None)
    assert '"outcome": "failed"' in written.getvalue()


def test_the_prometheus_exporter_listens_where_the_environment_says(
    installed: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import prometheus_client
    from prometheus_client import REGISTRY, generate_latest

    listening: list[tuple[int, str]] = []
    monkeypatch.setattr(
        prometheus_client, "start_http_server", lambda port, addr: listening.append((port, addr))
    )
    settings = {
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "0.0.0.0",
        "OTEL_EXPORTER_PROMETHEUS_PORT": "9999",
    }
    assert _otel_setup.configure(settings)
    assert listening == [(9999, "0.0.0.0")]
    (provider,) = installed
    provider.get_meter("probe").create_counter("probe.count").add(2)
    assert "probe_count_total" in generate_latest(REGISTRY).decode()


@pytest.mark.parametrize("exporters", ["", "none"])
def test_no_exporter_named_installs_nothing(installed: list[Any], exporters: str) -> None:
    assert _otel_setup.configure({"OTEL_METRICS_EXPORTER": exporters}) is False
    assert installed == []
    assert _otel_setup._done is False, "a later query's settings may still name one"


def test_an_unknown_exporter_is_logged_and_nothing_is_installed(
    installed: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="twophase.metrics"):
        assert _otel_setup.configure({"OTEL_METRICS_EXPORTER": "carrier-pigeon"}) is False
    assert installed == []
    assert "unknown metrics exporter 'carrier-pigeon'" in caplog.text


def test_the_applications_own_sdk_wins(
    installed: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    own = MeterProvider(shutdown_on_exit=False)
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: own)
    assert _otel_setup.configure({"OTEL_METRICS_EXPORTER": "console"}) is False
    assert installed == []
    own.shutdown()


class _StreamingFrame:
    isStreaming = True  # noqa: N815 (PySpark's name)


def test_write_stream_refuses_settings_that_are_not_otel() -> None:
    sink = FakeSink("s", FakeTarget.in_memory())
    with pytest.raises(ConfigurationError, match="OTEL_\\* settings only, not 'PATH'") as info:
        twophase.write_stream(
            _StreamingFrame(),  # type: ignore[arg-type]
            sink,
            checkpoint_location="/tmp/chk",
            otel_environment={"OTEL_METRICS_EXPORTER": "otlp", "PATH": "/evil"},
        )
    assert info.value.setting == "otel_environment"


def test_a_sinks_target_kind_is_custom_unless_it_says() -> None:
    class Kafkaish(FakeSink):
        metrics_target = "kafka"

    target = FakeTarget.in_memory()
    assert FakeSink("s", target).metrics_target == "custom"
    assert Kafkaish("k", target).metrics_target == "kafka"


def test_the_connectors_name_their_target_kind() -> None:
    from twophase.connectors.jdbc import mariadb_sink, postgres_sink
    from twophase.connectors.kafka import KafkaSink

    postgres = postgres_sink("s", table="t", protocol="markers", dsn="postgresql://127.0.0.1:9/d")
    mariadb = mariadb_sink("s", table="t", protocol="markers", url="mariadb://127.0.0.1:9/d")
    kafka = KafkaSink("s", bootstrap_servers="127.0.0.1:9", topic="t")
    assert [s.metrics_target for s in (postgres, mariadb, kafka)] == [
        "postgresql",
        "mariadb",
        "kafka",
    ]


_LATE_PROVIDER = """
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from twophase.testing import FakeSink, FakeTarget, LocalRunner

runner = LocalRunner(FakeSink("late", FakeTarget.in_memory()))
runner.run_batch(0, [[{"id": 1}]])  # the instruments are made now, before any SDK
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
runner.run_batch(1, [[{"id": 2}, {"id": 3}]])
data = reader.get_metrics_data()
for scope in data.resource_metrics[0].scope_metrics:
    for metric in scope.metrics:
        if metric.name in ("twophase.batches", "twophase.rows"):
            print(metric.name, sum(p.value for p in metric.data.data_points))
"""


def test_an_sdk_the_application_sets_after_the_first_batch_gets_every_later_batch() -> None:
    """The global provider is set once per process: a process of its own for this test."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", _LATE_PROVIDER], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(done.stdout.split("\n")[:2]) == ["twophase.batches 1", "twophase.rows 2"]


def test_importing_twophase_imports_no_opentelemetry() -> None:
    """The executors' Python workers import twophase and record nothing: no import cost there."""
    import subprocess
    import sys

    probe = "import sys, twophase; print(sorted(m for m in sys.modules if 'opentelemetry' in m))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"
