"""The partition infrastructure works: servers answer through the veth, a cut silences them.

A cut must be silent (an established connection's query neither returns nor fails, nothing is
reset) and real (the counters show the client kept trying and no packet reached the namespace);
a heal must let the same connection go on.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any

import pytest

from twophase_dev import NetworkNamespace, TrafficCounters

from .conftest import PartitionedServer

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.timeout(120)]

#: How long a query must stay blocked during a cut to count as "does not return".
BLOCKED_FOR = 2.0


class _Query(threading.Thread):
    """Runs one statement on an open DB-API connection in the background."""

    def __init__(self, conn: Any, sql: str):
        super().__init__(daemon=True)
        self.conn, self.sql = conn, sql
        self.rows: list[Any] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                cur.execute(self.sql)
                self.rows = list(cur.fetchall())
        except BaseException as exc:  # reported by the test
            self.error = exc


def _client_port(conn: Any, sql: str) -> int:
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def _cut_blocks(target: PartitionedServer[Any], conn: Any, local_port: int) -> TrafficCounters:
    """Cut, check that ``SELECT 1`` on ``conn`` hangs, heal, check it returns; give the deltas."""
    netns = target.netns
    before = netns.counters()
    target.cut("blackhole")
    query = _Query(conn, "SELECT 1")
    query.start()
    query.join(BLOCKED_FOR)
    assert query.is_alive(), f"SELECT 1 returned during the cut: {query.rows} {query.error}"
    during = netns.counters() - before
    (mine,) = [c for c in netns.tcp_connections() if c.local_port == local_port]
    # Still established, the query queued, TCP backing off: silent, nothing reset.
    assert mine.state == "ESTAB"
    assert mine.send_queue > 0
    assert mine.backoff > 0
    started = time.monotonic()
    assert not target.probe(timeout=1.0)
    assert time.monotonic() - started < 0.5, "a blackhole cut refuses new connects at once"
    target.heal()
    query.join(15.0)
    assert not query.is_alive(), "SELECT 1 still blocked after the heal"
    assert query.error is None
    assert query.rows == [(1,)]
    assert target.probe(timeout=2.0)
    return during


def test_postgres_through_veth_and_cut(pg_partition: PartitionedServer[Any]) -> None:
    server, netns = pg_partition.server, pg_partition.netns
    assert server.host == netns.address
    assert netns.address in server.dsn
    assert netns.address in server.password_dsn
    assert netns.address in server.jdbc_url
    assert pg_partition.probe()
    conn = server.connect()
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT host(inet_client_addr()), host(inet_server_addr()), "
                "current_setting('max_prepared_transactions')"
            )
            assert cur.fetchone() == (netns.peer_address, netns.address, "20")
        password_conn = server.connect(superuser=False)  # SCRAM from the peer address
        password_conn.close()
        delta = _cut_blocks(pg_partition, conn, _client_port(conn, "SELECT inet_client_port()"))
    finally:
        conn.close()
    assert delta.ns_rx_packets == 0, delta
    assert delta.ns_ip_in_receives == 0, delta
    assert delta.ns_tcp_in_segs == 0, delta
    # The client kept trying to send its query; each attempt was refused by the blackhole route
    # (not counted as a retransmission by the kernel: the segment never left, see _netns.py).
    assert delta.root_ip_out_no_routes > 0, delta
    assert delta.lost_packets > 0, delta


@pytest.mark.extended  # every partition test proves its own cut with these counters
def test_postgres_wire_cut_loses_packets(pg_partition: PartitionedServer[Any]) -> None:
    server, netns = pg_partition.server, pg_partition.netns
    conn = server.connect()
    conn.autocommit = True
    try:
        local_port = _client_port(conn, "SELECT inet_client_port()")
        before = netns.counters()
        pg_partition.cut("wire")
        query = _Query(conn, "SELECT 1")
        query.start()
        started = time.monotonic()
        assert not pg_partition.probe(timeout=1.0)  # hangs like a real partition, then gives up
        assert time.monotonic() - started >= 0.9
        query.join(max(0.0, BLOCKED_FOR - (time.monotonic() - started)))
        assert query.is_alive()
        delta = netns.counters() - before
        (mine,) = [c for c in netns.tcp_connections() if c.local_port == local_port]
        assert mine.state == "ESTAB"
        assert mine.retransmits > 0
        pg_partition.heal()
        query.join(15.0)
        assert not query.is_alive()
        assert query.rows == [(1,)]
    finally:
        conn.close()
    assert delta.root_tcp_retrans_segs > 0, delta  # real retransmissions, lost on the wire
    assert delta.ns_rx_otherhost > 0, delta  # frames arrived at the veth and were dropped
    assert delta.lost_packets > 0, delta
    assert delta.ns_ip_in_receives == 0, delta  # none reached the namespace's IP stack
    assert delta.ns_tcp_in_segs == 0, delta


@pytest.mark.extended  # every partition test proves its own cut with these counters
def test_postgres_without_prepared_transactions(
    pg_partition_no_prepared: PartitionedServer[Any],
) -> None:
    conn = pg_partition_no_prepared.server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW max_prepared_transactions")
            assert cur.fetchone() == ("0",)
    finally:
        conn.close()


@pytest.mark.extended  # every partition test proves its own cut with these counters
def test_mariadb_through_veth_and_cut(maria_partition: PartitionedServer[Any]) -> None:
    server, netns = maria_partition.server, maria_partition.netns
    assert netns.address in server.url
    assert netns.address in server.password_url
    assert netns.address in server.jdbc_url
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CURRENT_USER(), USER()")
            assert cur.fetchone() == (
                f"root@{netns.peer_address}",
                f"root@{netns.peer_address}",
            )
        password_conn = server.connect(superuser=False)
        password_conn.close()
        local_port = conn._sock.getsockname()[1]  # PyMySQL has no client-port query
        delta = _cut_blocks(maria_partition, conn, local_port)
    finally:
        conn.close()
    assert delta.ns_ip_in_receives == 0, delta
    assert delta.root_ip_out_no_routes > 0, delta


@pytest.mark.extended  # every partition test proves its own cut with these counters
def test_kafka_through_veth_and_cut(kafka_partition: PartitionedServer[Any]) -> None:
    from confluent_kafka.admin import AdminClient

    broker, netns = kafka_partition.server, kafka_partition.netns
    assert broker.bootstrap_servers == f"{netns.address}:{broker.port}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 0})
    metadata = admin.list_topics(timeout=10.0)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [(netns.address, broker.port)]
    kafka_partition.cut()
    assert not kafka_partition.probe()
    kafka_partition.heal()
    assert kafka_partition.probe()
    assert admin.list_topics(timeout=10.0).brokers


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def _blackholes() -> str:
    return subprocess.run(
        ["ip", "route", "show", "type", "blackhole"], capture_output=True, text=True
    ).stdout


def test_namespace_life_cycle_and_stale_cleanup(netns_allowed: None) -> None:
    with NetworkNamespace(f"tp-life-{os.getpid()}") as netns:
        assert netns.create() is netns  # idempotent
        assert netns.exec_prefix()[1:] == ["netns", "exec", netns.name]
        address = netns.address
        netns.cut("blackhole")
        assert netns.is_cut
        assert f"blackhole {address}" in _blackholes()
    assert not netns.created
    assert netns.name not in _namespaces()
    assert f"blackhole {address}" not in _blackholes()
    netns.destroy()  # idempotent

    # A namespace whose creator died, left cut: remove_stale takes all of it away.
    finished = subprocess.Popen(["true"])
    finished.wait()
    stale = NetworkNamespace(f"tp-stale-{finished.pid}").create()
    stale.cut("blackhole")
    address, interface = stale.address, stale.host_interface
    assert stale.name in NetworkNamespace.remove_stale()
    assert stale.name not in _namespaces()
    assert f"blackhole {address}" not in _blackholes()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f" {interface}@" not in links
