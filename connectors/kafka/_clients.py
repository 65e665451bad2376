"""The Kafka clients a process keeps between batches, and closing them."""

from __future__ import annotations

from . import _marker_reader, _pool, _topics

__all__ = ["close_clients"]


def close_clients() -> None:
    """Close the Kafka clients every Kafka sink of this process keeps between batches.

    Sinks keep idle transactional producers (one per ``transactional.id``),
    the marker reader's consumers and the topic check's admin clients in each
    Python process (driver, Python workers) to reuse them in the next batch.
    Call this in tests (before a test's broker is stopped: the clients would
    try to reconnect to it until exit) and where a long-lived process is done
    with Kafka; it runs at exit anyway. The next batch creates new clients.
    Producers of transactions in flight are not touched.
    """
    _pool.clear()
    _marker_reader.close_idle_clients()
    _topics.clear()
