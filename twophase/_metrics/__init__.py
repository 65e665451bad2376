"""Batch metrics and their export: ``BatchMetrics`` and the optional OpenTelemetry instruments."""
