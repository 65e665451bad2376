"""Under Spark Connect, the sink's metrics leave the server by OTLP/HTTP, configured by the client.

The client cannot reach the server's process: ``twophase.write_stream(..., otel_environment=)``
carries the ``OTEL_*`` settings with the sink, and twophase installs the SDK and an OTLP
exporter in the server's ``foreachBatch`` worker. The test runs the receiver: a small HTTP
server decoding ``opentelemetry-proto``'s ``ExportMetricsServiceRequest``. The query fails at
batch 1's decision and runs again; the numbers received must be those of the batches run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

import twophase
from tests.connect.support import WithListener
from tests.spark.helpers import SCHEMA, write_input
from twophase.testing import CrashAt, FakeSink, FakeTarget, assert_exactly_once
from twophase_dev import SparkConnectServer, free_ports
from twophase_dev._host._wait import wait_until

pytestmark = [pytest.mark.connect, pytest.mark.spark, pytest.mark.slow]


class Receiver:
    """What an OTLP/HTTP collector received: delta sums and histogram counts added, last gauges."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sums: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        self.gauges: dict[tuple[str, frozenset[tuple[str, str]]], tuple[int, float]] = {}
        self.requests = 0

    def take(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        with self.lock:
            self.requests += 1
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    if scope.scope.name == "twophase":
                        for metric in scope.metrics:
                            self._metric(metric)

    def _metric(self, metric: Any) -> None:
        kind = metric.WhichOneof("data")
        for point in getattr(metric, kind).data_points:
            attributes = frozenset((a.key, a.value.string_value) for a in point.attributes)
            key = (metric.name, attributes)
            if kind == "gauge":
                value = point.as_double if point.HasField("as_double") else point.as_int
                if key not in self.gauges or self.gauges[key][0] <= point.time_unix_nano:
                    self.gauges[key] = (point.time_unix_nano, float(value))
            elif kind == "histogram":
                self.sums[key] = self.sums.get(key, 0) + point.count
            else:
                value = point.as_double if point.HasField("as_double") else point.as_int
                self.sums[key] = self.sums.get(key, 0) + value

    def total(self, name: str, **attributes: str) -> float:
        wanted = set(attributes.items())
        with self.lock:
            return sum(v for (n, a), v in self.sums.items() if n == name and wanted <= a)

    def gauge(self, name: str) -> float | None:
        with self.lock:
            values = [v for (n, _), (_, v) in self.gauges.items() if n == name]
        return values[0] if values else None


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    received = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.take(body)
            answer = ExportMetricsServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_ports(1)[0]), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received, f"http://127.0.0.1:{server.server_address[1]}/v1/metrics"
    finally:
        server.shutdown()
        thread.join(10)


def test_a_connect_server_exports_the_batches_a_failure_and_its_recovery_over_otlp(
    connect_server: SparkConnectServer, tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    received, endpoint = receiver
    otel = {
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta",
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
    }
    target = FakeTarget(tmp_path / "target")
    expected = write_input(tmp_path / "in", 3, rows=20)

    def source(spark: Any) -> Any:
        df = (
            spark.readStream.schema(SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .parquet(str(tmp_path / "in"))
        )
        return df.repartition(2)

    # The failing run: the batch's failure is exported at once, before the worker goes.
    spark = connect_server.session()
    try:
        sink = FakeSink("connect_metrics", target)
        df, checkpoint = source(spark), str(tmp_path / "chk")
        writer = twophase.write_stream(
            df, sink, checkpoint_location=checkpoint, otel_environment=otel
        )
        crash = CrashAt("decided", batch_id=1, as_exception=True)
        # The same function, the query's settings beside the sink, called through the listener.
        listened = WithListener.of(df, sink, crash, checkpoint, otel_environment=otel)
        writer = writer.foreachBatch(listened)
        query = writer.trigger(availableNow=True).start()
        with pytest.raises(Exception, match="simulated driver crash"):
            query.awaitTermination(180)
    finally:
        spark.stop()
    assert len(target.prepared()) == 2, "batch 1 is decided, its 2 transactions prepared"
    assert wait_until(lambda: received.total("twophase.batches", outcome="failed") == 1, timeout=30)
    assert received.total("twophase.batches", outcome="committed") == 1

    # The restarted query runs on, as a streaming query does, exporting every 300 ms.
    spark = connect_server.session()
    try:
        query = twophase.write_stream(
            source(spark),
            FakeSink("connect_metrics", target),
            checkpoint_location=str(tmp_path / "chk"),
            trigger={"processingTime": "1 second"},
            otel_environment=otel,
        ).start()
        try:

            def finished() -> bool:
                return received.total("twophase.batches", outcome="committed") == 2

            assert wait_until(finished, timeout=60), received.sums
            assert wait_until(
                lambda: received.gauge("twophase.batch.last_committed") == 2, timeout=30
            )
        finally:
            query.stop()
    finally:
        spark.stop()
    assert_exactly_once([r["id"] for r in target.committed_rows()], expected)
    assert target.prepared() == []
    ours = {
        "twophase.sink": "connect_metrics",
        "twophase.protocol": "coordinated",
        "twophase.target": "custom",
    }
    assert received.total("twophase.batches", outcome="already-committed", **ours) == 1
    assert received.total("twophase.transactions.recovered", action="committed") == 2
    assert received.total("twophase.rows", **ours) == len(expected)  # 1's by recovery
    assert received.total("twophase.transactions", **ours) == 4
    assert received.total("twophase.phase1.duration", **ours) == 2
