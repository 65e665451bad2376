"""Installing an OpenTelemetry SDK from ``OTEL_*`` settings where no application can (Connect).

The application's own SDK set-up always wins: this installs a ``MeterProvider``
only when none is set in the process and ``OTEL_METRICS_EXPORTER`` names an
exporter (``otlp``, ``prometheus``, ``console``; comma-separated), from the
process environment or from the settings a query carries
(``twophase.write_stream(..., otel_environment=...)``), once per process. It
needs the ``otel`` extra (the SDK and the exporters). See ``docs/monitoring.md``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["configure", "flush"]

_log = logging.getLogger("twophase.metrics")

_LOCK = threading.Lock()
_done = False
#: The provider this module installed (None: none, or the application's own).
_installed: Any = None


def configure(settings: Mapping[str, str] | None = None) -> bool:
    """Install a ``MeterProvider`` with the exporters ``OTEL_METRICS_EXPORTER`` names, once.

    Parameters
    ----------
    settings
        ``OTEL_*`` settings; each is put in the process environment unless set
        there already (the exporters read their endpoint, headers and interval
        from it).

    Returns
    -------
    bool
        Whether this call installed one.
    """
    global _done
    with _LOCK:
        if _done:
            return False
        for key, value in (settings or {}).items():
            if key.startswith("OTEL_"):
                os.environ.setdefault(key, str(value))
        exporters = os.environ.get("OTEL_METRICS_EXPORTER", "").strip()
        if not exporters or exporters == "none":
            return False
        _done = True
        return _install([e.strip() for e in exporters.split(",") if e.strip()])


def flush(timeout_seconds: float = 2.0) -> None:
    """Export now what the provider installed here holds (after a failed batch).

    A failed batch may end the process that runs the sink (a Connect server
    stops the query's worker): its count must not wait for the next export.
    Bounded by ``timeout_seconds``; an export that fails is the exporter's to
    log. Nothing to do when the application set up its own SDK.
    """
    provider = _installed
    if provider is not None:
        try:
            provider.force_flush(timeout_millis=int(timeout_seconds * 1000))
        except Exception as exc:  # never in the way of the batch's own error
            _log.warning("exporting the metrics after a failed batch failed: %r", exc)


def _install(exporters: list[str]) -> bool:
    from opentelemetry import metrics

    # Until an SDK is set, the API hands out its proxy (or, if one was set, its no-op).
    if type(metrics.get_meter_provider()).__name__ not in (
        "_ProxyMeterProvider",
        "NoOpMeterProvider",
    ):
        return False  # the application's own SDK
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        _log.warning(
            "OTEL_METRICS_EXPORTER=%s but the OpenTelemetry SDK is not installed: "
            "pip install 'twophase[otel]' where the sink runs; no metrics are exported",
            ",".join(exporters),
        )
        return False
    readers = [r for r in (_reader(name) for name in exporters) if r is not None]
    if not readers:
        return False
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "twophase"}))  # neither names it
    provider = MeterProvider(metric_readers=readers, resource=resource)
    metrics.set_meter_provider(provider)
    global _installed
    _installed = provider
    _log.info("twophase: exporting metrics (%s)", ",".join(exporters))
    return True


def _reader(name: str) -> Any:
    """Return the metric reader of one exporter name, or None (logged) when unknown or absent."""
    try:
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            PeriodicExportingMetricReader,
        )

        if name == "otlp":
            protocol = os.environ.get(
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
                os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            )
            if protocol != "http/protobuf":
                _log.warning(
                    "OTLP protocol %r: twophase exports OTLP over http/protobuf only (a "
                    "collector listens for both, on 4318 and 4317)",
                    protocol,
                )
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            return PeriodicExportingMetricReader(OTLPMetricExporter())
        if name == "console":
            return PeriodicExportingMetricReader(ConsoleMetricExporter())
        if name == "prometheus":
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import start_http_server

            port = int(os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464"))
            host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "localhost")
            start_http_server(port, addr=host)
            return PrometheusMetricReader()
    except ImportError as exc:
        _log.warning(
            "the %s metrics exporter is not installed (%s): pip install 'twophase[otel]'",
            name,
            exc,
        )
        return None
    _log.warning("unknown metrics exporter %r in OTEL_METRICS_EXPORTER: not exported", name)
    return None
