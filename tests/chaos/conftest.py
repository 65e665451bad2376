"""Fixtures of the chaos tests: the session's servers as a harness :class:`Infra`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.chaos.harness import Infra
from tests.chaos.realtime import servers_needed

_FIXTURES = {
    "kafka": "kafka_broker",
    "pg-coordinated": "postgres_server",
    "pg-markers": "postgres_server_no_prepared",
    "maria-coordinated": "mariadb_server",
    "maria-markers": "mariadb_server",
}


@pytest.fixture
def infra_for(request: pytest.FixtureRequest) -> Callable[..., Infra]:
    """Return ``infra_for(*sinks)``: the session's servers the sinks need (started on demand).

    A real-time sink (``-rt``) needs the server of its base sink and the Kafka broker.

    A test that restarts or freezes a server is skipped when the server was not started by this
    session or by ``twophase-dev up`` (``managed`` is False): it cannot be restarted.
    """

    def make(*sinks: str, restarts: bool = True) -> Infra:
        # A real-time sink (tests.chaos.realtime): its base sink's server and Kafka, its input.
        needed = servers_needed(sinks)
        servers: dict[str, Any] = {s: request.getfixturevalue(_FIXTURES[s]) for s in needed}
        if restarts and not all(getattr(s, "managed", False) for s in servers.values()):
            pytest.skip("needs servers this session started (the test restarts them)")
        return Infra(
            kafka=servers.get("kafka"),
            pg_a=servers.get("pg-coordinated"),
            pg_b=servers.get("pg-markers"),
            maria=servers.get("maria-coordinated") or servers.get("maria-markers"),
        )

    return make
