"""Fixtures of the Kafka connector's integration tests (real broker from ``kafka_broker``).

- ``kafka_sink``: ``make(name="k", *, topic=..., partitions=3, open_it=False, **kwargs)`` builds
  a ``KafkaSink`` writing to a fresh topic, with its own control topic and short timeouts;
  ``open_it`` runs ``open()`` (creating the control topic) as the coordinator would.
- ``read_topic``: ``read(topic, isolation="read_committed") -> list[Record]`` reads every
  partition from the beginning to its end (the last stable offset for ``read_committed``).
- ``secured_broker``: a second broker for the session, started on first use, with SASL/PLAIN
  and ACLs (``StandardAuthorizer``): principal ``User:alice`` may do only what a test grants it
  (``grant``); the PLAINTEXT listener is the unrestricted admin's (``admin_bootstrap``).

Helpers the tests import (``read_all``, ``SecuredBroker``...) live in ``kafka_support.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka_support import Record, SecuredBroker, read_all, secured_config

from twophase import SinkContext
from twophase.connectors.kafka import KafkaSink, close_clients
from twophase_dev import DevInfraError, KafkaBroker, free_ports


@pytest.fixture
def read_topic(kafka_broker: KafkaBroker) -> Callable[..., list[Record]]:
    def read(topic: str, isolation: str = "read_committed") -> list[Record]:
        return read_all(kafka_broker.bootstrap_servers, topic, isolation)

    return read


@pytest.fixture
def kafka_sink(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str]
) -> Iterator[Callable[..., KafkaSink]]:
    def make(
        name: str = "k",
        *,
        topic: str | None = None,
        partitions: int = 3,
        open_it: bool = False,
        **kwargs: Any,
    ) -> KafkaSink:
        kwargs.setdefault("control_topic", f"ctl-{uuid.uuid4().hex[:12]}")
        kwargs.setdefault("operation_timeout", 15.0)
        sink = KafkaSink(
            name,
            bootstrap_servers=kafka_broker.bootstrap_servers,
            topic=topic if topic is not None else make_topic(partitions, prefix="kt"),
            **kwargs,
        )
        if open_it:  # what the coordinator does first: creates the control topic
            query = uuid.uuid4().hex
            sink.open(SinkContext(name, f"{name}.{query[:16]}", query, uuid.uuid4().hex, ""))
        return sink

    yield make
    close_clients()


# Module scope: two modules use it; an idle broker costs 2.7 % of a core (docs/development.md),
# so it stops after each instead of living to the end of the run.
@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    """A second broker, for ACL and credential tests (about 6 s to start)."""
    for attempt in range(3):
        port, controller_port, sasl_port = free_ports(3)
        broker = KafkaBroker(
            port=port,
            controller_port=controller_port,
            config=secured_config(port, controller_port, sasl_port),
            log_dir=tmp_path_factory.mktemp("kafka-secured-logs"),
        )
        try:
            broker.start()
        except DevInfraError:
            broker.stop()
            if attempt == 2:
                raise
            continue  # a port was taken in the meantime: new ports
        break
    try:
        yield SecuredBroker(broker, f"127.0.0.1:{sasl_port}")
    finally:
        close_clients()  # the process's kept clients of it, which would retry a stopped broker
        broker.stop()
