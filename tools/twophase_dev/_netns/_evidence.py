"""What a cut did, as evidence: packet counters on both sides of a veth, and TCP connection states.

:class:`TrafficCounters` are read from ``/proc/net/snmp``, ``/proc/net/netstat`` (network
counters, not processes) and ``ip -s -s -j link``, in the root namespace and inside the namespace;
:class:`TcpConnection` is a line of ``ss -ti``.

Runs on: the developer's or test session's machine (as root).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, fields
from pathlib import Path

from twophase_dev._errors import DevInfraError
from twophase_dev._netns._commands import run

__all__ = [
    "TcpConnection",
    "TrafficCounters",
    "parse_snmp",
    "read_counters",
    "read_tcp_connections",
    "rx_stats",
]


def parse_snmp(text: str) -> dict[str, int]:
    """Parse ``/proc/net/snmp`` or ``/proc/net/netstat``: ``{"Tcp.RetransSegs": 0, ...}``."""
    values: dict[str, int] = {}
    lines = text.splitlines()
    for header, row in zip(lines[::2], lines[1::2], strict=False):
        names, numbers = header.split(), row.split()
        if not names or not numbers or names[0] != numbers[0]:
            continue
        group = names[0].rstrip(":")
        for name, number in zip(names[1:], numbers[1:], strict=False):
            with contextlib.suppress(ValueError):
                values[f"{group}.{name}"] = int(number)
    return values


@dataclass(frozen=True)
class TrafficCounters:
    """Packet counters on both sides of a namespace's veth, at one instant.

    Subtract two of them (``after - before``) to get what happened in between. ``ns_*`` are the
    namespace's, ``root_*`` the root namespace's (the whole namespace, not only this veth: other
    connections of the test process count too).

    Attributes
    ----------
    ns_rx_packets : int
        Frames the namespace-side veth received (``rx_packets``; ARP included).
    ns_rx_otherhost : int
        Frames it received and dropped as addressed to another host: what a ``wire`` cut lost
        on the way into the namespace.
    root_rx_otherhost : int
        The same on the root-side veth: what a ``wire`` cut lost on the way out.
    ns_ip_in_receives : int
        IP packets that reached the namespace's IP stack (``Ip InReceives``).
    ns_tcp_in_segs : int
        TCP segments the namespace received (``Tcp InSegs``).
    ns_ip_out_no_routes : int
        Packets the namespace (the server) could not send for want of a route (``Ip
        OutNoRoutes``): the server's attempts during a ``blackhole`` cut.
    root_ip_out_no_routes : int
        The same in the root namespace: the clients' attempts during a ``blackhole`` cut.
    root_tcp_out_segs : int
        TCP segments the root namespace tried to send (``Tcp OutSegs``).
    root_tcp_retrans_segs : int
        TCP segments it retransmitted (``Tcp RetransSegs``); grows during a ``wire`` cut only.
    root_tcp_timeouts : int
        Retransmission timeouts (``TcpExt TCPTimeouts``), in both modes when data was in flight.
    root_tcp_syn_retrans : int
        Retransmitted SYNs (``TcpExt TCPSynRetrans``): connects hanging during a ``wire`` cut.
    """

    ns_rx_packets: int
    ns_rx_otherhost: int
    root_rx_otherhost: int
    ns_ip_in_receives: int
    ns_tcp_in_segs: int
    ns_ip_out_no_routes: int
    root_ip_out_no_routes: int
    root_tcp_out_segs: int
    root_tcp_retrans_segs: int
    root_tcp_timeouts: int
    root_tcp_syn_retrans: int

    def __sub__(self, other: TrafficCounters) -> TrafficCounters:
        return TrafficCounters(
            **{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)}
        )

    @property
    def lost_packets(self) -> int:
        """Packets a cut destroyed, both ways, in either mode.

        Refused by a blackhole route on either side (``OutNoRoutes``) plus frames dropped by
        either veth as addressed to another host (a ``wire`` cut). In a difference of two
        counters taken around a cut, a positive value proves that the cut really lost traffic.
        One case escapes it: in a ``blackhole`` cut, the retransmission of a segment that was in
        flight when the cut began fails before any of these counts it (only ``TcpExt
        TCPTimeouts``, :attr:`root_tcp_timeouts`, grows); new data, and any data in the other
        direction, does count.
        """
        return (
            self.root_ip_out_no_routes
            + self.ns_ip_out_no_routes
            + self.root_rx_otherhost
            + self.ns_rx_otherhost
        )


@dataclass(frozen=True)
class TcpConnection:
    """One TCP connection between the root namespace and a namespace, as ``ss -ti`` shows it.

    Attributes
    ----------
    state : str
        ``ESTAB``, ``SYN-SENT``, ``TIME-WAIT``, ...
    local_port : int
        The root-side port (``socket.getsockname()[1]`` of the client).
    remote_port : int
        The server's port.
    send_queue : int
        Bytes queued and not acknowledged yet (``Send-Q``).
    backoff : int
        Exponential backoff of its retransmission or probe timer; above 0 while its packets are
        lost or refused.
    retransmits : int
        Segments it retransmitted in total (``retrans:x/N``; 0 in ``blackhole`` mode, see the
        module documentation).
    """

    state: str
    local_port: int
    remote_port: int
    send_queue: int
    backoff: int
    retransmits: int


def rx_stats(link_json: str) -> dict[str, int]:
    """Return the receive counters of ``ip -s -s -j link show <one interface>``.

    ``otherhost`` (frames for another MAC address) is only listed once it is not 0.
    """
    try:
        rx = json.loads(link_json)[0]["stats64"]["rx"]
    except (ValueError, LookupError, TypeError) as exc:
        raise DevInfraError(f"unexpected output of 'ip -s -s -j link show': {link_json!r}") from exc
    return {str(key): int(value) for key, value in rx.items() if isinstance(value, int)}


def read_counters(ns_prefix: list[str], ip: str, ns_if: str, host_if: str) -> TrafficCounters:
    """Read the packet counters of both sides of a veth now (two commands, a few milliseconds).

    Parameters
    ----------
    ns_prefix : list of str
        The prefix that runs a command inside the namespace (``ip netns exec NAME``).
    ip : str
        The ``ip`` binary.
    ns_if, host_if : str
        The namespace-side and root-side interfaces of the veth.

    Returns
    -------
    TrafficCounters
        The counters.
    """
    marker = "----tp-link----"
    out = run(
        [
            *ns_prefix,
            "sh",
            "-c",
            f"cat /proc/net/snmp; echo {marker}; {ip} -s -s -j link show {ns_if}",
        ]
    ).stdout
    snmp_text, _, link_json = out.partition(marker)
    ns = parse_snmp(snmp_text)
    ns_rx = rx_stats(link_json)
    root_rx = rx_stats(run([ip, "-s", "-s", "-j", "link", "show", host_if]).stdout)
    root = parse_snmp(Path("/proc/net/snmp").read_text())
    root.update(parse_snmp(Path("/proc/net/netstat").read_text()))
    return TrafficCounters(
        ns_rx_packets=ns_rx.get("packets", 0),
        ns_rx_otherhost=ns_rx.get("otherhost", 0),
        root_rx_otherhost=root_rx.get("otherhost", 0),
        ns_ip_in_receives=ns.get("Ip.InReceives", 0),
        ns_tcp_in_segs=ns.get("Tcp.InSegs", 0),
        ns_ip_out_no_routes=ns.get("Ip.OutNoRoutes", 0),
        root_ip_out_no_routes=root.get("Ip.OutNoRoutes", 0),
        root_tcp_out_segs=root.get("Tcp.OutSegs", 0),
        root_tcp_retrans_segs=root.get("Tcp.RetransSegs", 0),
        root_tcp_timeouts=root.get("TcpExt.TCPTimeouts", 0),
        root_tcp_syn_retrans=root.get("TcpExt.TCPSynRetrans", 0),
    )


def read_tcp_connections(address: str, port: int | None) -> list[TcpConnection]:
    """List the root namespace's TCP connections to ``address`` (``ss -tin``), to ``port`` only.

    Parameters
    ----------
    address : str
        The namespace's address.
    port : int or None
        Only the connections to this server port, or all.

    Returns
    -------
    list of TcpConnection
        One per connection, listening sockets excluded.
    """
    out = run(["ss", "-tinHO", "state", "all", "dst", address]).stdout
    connections = []
    for line in out.splitlines():
        words = line.split()
        if len(words) < 5 or ":" not in words[3] or ":" not in words[4]:
            continue
        remote_port = int(words[4].rpartition(":")[2])
        if port is not None and remote_port != port:
            continue
        backoff = re.search(r"\bbackoff:(\d+)", line)
        retrans = re.search(r"\bretrans:\d+/(\d+)", line)
        connections.append(
            TcpConnection(
                state=words[0],
                local_port=int(words[3].rpartition(":")[2]),
                remote_port=remote_port,
                send_queue=int(words[2]),
                backoff=int(backoff.group(1)) if backoff else 0,
                retransmits=int(retrans.group(1)) if retrans else 0,
            )
        )
    return connections
