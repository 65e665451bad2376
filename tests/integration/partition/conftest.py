"""Fixtures of the network-partition tests: servers in network namespaces of their own.

Each server runs inside a :class:`twophase_dev.NetworkNamespace` (``tp-<kind>-<pid>``) joined to
the test process by a veth pair, and listens on the namespace's address (``10.213.N.2``); its
DSNs, URLs and bootstrap strings name that address. ``fixture.netns.cut()`` partitions it from the
test process (every packet lost, both ways, nothing reset), ``fixture.netns.heal()`` ends that.

- ``netns_allowed``: skips when not root or when a namespace with a veth pair cannot be made;
  removes namespaces, veths and blackhole routes left behind by killed sessions.
- ``pg_partition``: PostgreSQL with ``max_prepared_transactions = 20``.
- ``pg_partition_no_prepared``: PostgreSQL with ``max_prepared_transactions = 0``.
- ``maria_partition``: MariaDB (binary log on); skips when MariaDB is not installed.
- ``kafka_partition``: a single-node KRaft broker.

Each yields a :class:`PartitionedServer` (``server``, ``netns``), is started on first use, once
per session, and at the end is healed, stopped and its namespace removed. After every test of
this directory, a namespace still cut is healed. External servers (``TWOPHASE_PG_DSN``...) are
never used here: only a server inside a namespace of ours can be cut off.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import pytest

from twophase_dev import (
    CutMode,
    DevInfraError,
    KafkaBroker,
    MariaDBServer,
    NetworkNamespace,
    PostgresServer,
    find_mariadb_binaries,
)

S = TypeVar("S", PostgresServer, MariaDBServer, KafkaBroker)

#: The namespaces the fixtures made and have not removed yet (for the per-test heal).
_NAMESPACES: list[NetworkNamespace] = []


@dataclass(frozen=True)
class PartitionedServer(Generic[S]):
    """A server and the network namespace it runs in."""

    server: S
    netns: NetworkNamespace

    def cut(self, mode: CutMode = "wire") -> None:
        """Partition the server from the test process (see ``NetworkNamespace.cut``)."""
        self.netns.cut(mode)

    def heal(self) -> None:
        """End the partition."""
        self.netns.heal()

    def probe(self, timeout: float = 1.0) -> bool:
        """Tell whether a new TCP connection to the server's port gets through now."""
        assert self.server.port is not None
        return self.netns.probe(self.server.port, timeout)


@pytest.fixture(scope="session")
def netns_allowed() -> None:
    """Skip unless network namespaces with a veth pair can be made here (root, iproute2)."""
    if os.geteuid() != 0:
        pytest.skip("network partitions need root (ip netns add, veth pairs, routes)")
    try:
        NetworkNamespace.remove_stale()
        with NetworkNamespace(f"tp-probe-{os.getpid()}"):
            pass
    except DevInfraError as exc:
        pytest.skip(f"cannot make a network namespace with a veth pair here: {exc}")


@contextlib.contextmanager
def _namespace(kind: str) -> Iterator[NetworkNamespace]:
    netns = NetworkNamespace(f"tp-{kind}-{os.getpid()}")
    netns.create()
    _NAMESPACES.append(netns)
    try:
        yield netns
    finally:
        _NAMESPACES.remove(netns)
        netns.destroy()


def _postgres(
    tmp_path_factory: pytest.TempPathFactory, kind: str, max_prepared_transactions: int
) -> Iterator[PartitionedServer[PostgresServer]]:
    with _namespace(kind) as netns:
        server = PostgresServer(
            max_prepared_transactions=max_prepared_transactions,
            log_dir=tmp_path_factory.mktemp(f"{kind}-partition-logs"),
            netns=netns,
        )
        yield from _serve(server, netns)


def _serve(server: S, netns: NetworkNamespace) -> Iterator[PartitionedServer[S]]:
    """Start the server, yield it, then heal the namespace and stop the server."""
    server.start()
    try:
        yield PartitionedServer(server, netns)
    finally:
        netns.heal()
        if isinstance(server, KafkaBroker):
            # As tests/conftest.py's kafka_broker: the clients this process keeps would try to
            # reconnect to the stopped broker until exit.
            from twophase.connectors.kafka import close_clients

            close_clients()
        server.stop()


@pytest.fixture(scope="session")
def pg_partition(
    netns_allowed: None, tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[PartitionedServer[PostgresServer]]:
    """PostgreSQL (``max_prepared_transactions = 20``) in a namespace of its own."""
    yield from _postgres(tmp_path_factory, "pg", 20)


@pytest.fixture(scope="session")
def pg_partition_no_prepared(
    netns_allowed: None, tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[PartitionedServer[PostgresServer]]:
    """PostgreSQL without prepared transactions (the markers protocol) in a namespace."""
    yield from _postgres(tmp_path_factory, "pgnp", 0)


@pytest.fixture(scope="session")
def maria_partition(
    netns_allowed: None, tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[PartitionedServer[MariaDBServer]]:
    """MariaDB (binary log on) in a namespace of its own; skips when MariaDB is missing."""
    try:
        find_mariadb_binaries()
    except DevInfraError as exc:
        pytest.skip(f"MariaDB is not installed: {exc}")
    with _namespace("maria") as netns:
        server = MariaDBServer(log_dir=tmp_path_factory.mktemp("maria-partition-logs"), netns=netns)
        yield from _serve(server, netns)


# Package scope, unlike the databases': an idle broker costs 2.7 % of a core (docs/development.md),
# so it stops with the last partition test instead of living to the end of the run.
@pytest.fixture(scope="package")
def kafka_partition(
    netns_allowed: None, tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[PartitionedServer[KafkaBroker]]:
    """A Kafka broker in a namespace of its own."""
    with _namespace("kafka") as netns:
        broker = KafkaBroker(log_dir=tmp_path_factory.mktemp("kafka-partition-logs"), netns=netns)
        yield from _serve(broker, netns)


@pytest.fixture(autouse=True)
def _heal_after_test() -> Iterator[None]:
    """Heal every namespace a test left cut, so that the next test starts connected."""
    yield
    for netns in list(_NAMESPACES):
        if netns.is_cut:
            netns.heal()
