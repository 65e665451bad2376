"""Network namespaces joined to this one by a veth pair, for silent network partitions in tests.

A :class:`NetworkNamespace` is a Linux network namespace (``ip netns add tp-<kind>-<pid>``) with
one veth pair: the root side (in the namespace of this process, the "root namespace" below) gets
``10.213.N.1/30``, the namespace side ``10.213.N.2/30``; ``N`` is picked per namespace (the root
side's interface is named ``tpv<N>``, so creating it claims ``N``). A server started inside with
``ip netns exec`` (``PostgresServer(netns=...)``, ``MariaDBServer(netns=...)``,
``KafkaBroker(netns=...)``) listens on ``10.213.N.2``; clients in this process reach it through the
veth and come from ``10.213.N.1``. Nothing is ever sent to an address outside the machine: both
ends of the pair are on it, IPv6 is off on them and nothing routes beyond them.

:meth:`NetworkNamespace.cut` partitions the server from the root namespace, :meth:`~.heal` ends
the partition. Nothing is reset and nobody is told: every packet is lost, both ways. Two modes,
measured on Linux 6.18 with iproute2 6.1:

``"blackhole"``
    ``ip route add blackhole 10.213.N.2/32`` in the root namespace and ``blackhole 10.213.N.1/32``
    inside. The kernel refuses each packet at the route lookup, before it leaves the sending
    namespace, so not a single frame crosses the veth.

    - *Established connections* stay ``ESTABLISHED`` and silent: a ``send`` still returns (the
      data is queued), a ``recv`` blocks. TCP keeps trying with exponential backoff (``ss -ti``
      shows ``backoff:N``), but a failed route lookup does not count as a transmission: data that
      was never sent stays "not sent" and is retried by the probe timer (each attempt adds 1 to
      ``Ip OutNoRoutes``, and to ``Tcp OutSegs``), data in flight at the cut is retried by the
      retransmission timer (``TcpExt TCPTimeouts`` grows). ``Tcp RetransSegs`` does **not**
      grow. After :meth:`~.heal` the next attempt (within the current backoff, a fraction of a
      second in a short cut) gets through and the connection continues as if nothing happened.
    - *New connections* fail at once: ``connect()`` returns ``EINVAL`` ("Invalid argument") from
      the route lookup, they do not hang. A client that reconnects during the cut sees an
      immediate error, not a timeout.

``"wire"`` (the default: what a failed switch or a dropped flow looks like)
    A permanent neighbour (ARP) entry with a made-up MAC address for the other side, on both
    sides. Packets leave the sender like on a healthy link and are lost "on the wire": the other
    side's veth receives the frames (its ``rx_packets`` grows) and drops them as addressed to
    another host, so no packet reaches its IP stack (``Ip InReceives`` stays put). TCP sees real
    losses: ``Tcp RetransSegs`` and ``TcpExt TCPTimeouts`` grow, and a new ``connect()`` hangs
    (its SYN is retransmitted) until the caller's timeout, as in a real partition.

:meth:`NetworkNamespace.counters` returns the evidence (what reached the namespace, what the root
namespace's TCP did), :meth:`~.tcp_connections` the state of each connection to the namespace,
:meth:`~.probe` whether a new TCP connection gets through.

Needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``) and ``ip`` from iproute2. Runs on: the
developer's or test session's machine, never on Spark executors.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import Literal

from twophase_dev._errors import DevInfraError
from twophase_dev._host._proc import process_alive

__all__ = ["CutMode", "NetworkNamespace", "TcpConnection", "TrafficCounters"]

#: How a cut loses packets, see the module documentation.
CutMode = Literal["blackhole", "wire"]

_MODES: tuple[CutMode, ...] = ("blackhole", "wire")

#: Prefix of every namespace name this module creates (and of the only ones it ever removes).
NAME_PREFIX = "tp-"
#: ``tp-<anything>-<pid>``: the namespaces whose creator can be judged alive or dead.
_STALE_NAME = re.compile(r"^tp-[A-Za-z0-9_.-]*-([0-9]+)$")
#: Allowed namespace names (``ip netns`` makes a file of the name under ``/run/netns``).
_VALID_NAME = re.compile(r"^tp-[A-Za-z0-9_.-]{1,60}$")
#: The /16 the namespaces' /30s come from: 10.213.N.0/30 for N in 0..255.
_NET_PREFIX = "10.213"
#: Root-side interface of subnet N (at most 15 characters).
_HOST_IF = "tpv{}"
#: Namespace-side interface (its name only has to be unique inside the namespace).
_NS_IF = "tpns0"
#: The made-up MAC address of the "wire" cut: locally administered, never a real interface's.
_BOGUS_MAC = "02:00:5e:10:dd:01"

_COMMAND_TIMEOUT = 15.0


def _ip_binary() -> str:
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])
    found = shutil.which("ip", path=search)
    if found is None:
        raise DevInfraError(
            "'ip' (iproute2) was not found; install it with 'apt-get install iproute2'"
        )
    return found


def _run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a short command; raise :class:`DevInfraError` if it fails and ``check`` is set."""
    try:
        result = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DevInfraError(f"{' '.join(argv)} failed: {exc}") from exc
    if check and result.returncode != 0:
        raise DevInfraError(
            f"{' '.join(argv)} failed (exit {result.returncode}): "
            f"{(result.stderr or result.stdout).strip()}"
        )
    return result


def _parse_snmp(text: str) -> dict[str, int]:
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


class NetworkNamespace:
    """A network namespace joined to this process's namespace by a veth pair (a /30 of its own).

    Parameters
    ----------
    name : str
        The namespace's name, ``tp-<kind>-<pid>`` by convention (e.g. ``f"tp-pg-{os.getpid()}"``):
        it must start with ``tp-``, and :meth:`remove_stale` removes namespaces whose trailing
        ``<pid>`` is no longer alive.

    Notes
    -----
    Needs root. :meth:`create` makes the namespace, the veth pair, the addresses; :meth:`destroy`
    (also ``with`` on the way out) heals a cut and removes all of it. Processes started with
    :meth:`exec_prefix` keep running after :meth:`destroy` (stop them first), but unreachable.

    Examples
    --------
    >>> with NetworkNamespace(f"tp-pg-{os.getpid()}") as ns:  # doctest: +SKIP
    ...     with PostgresServer(netns=ns) as pg:
    ...         conn = pg.connect()
    ...         ns.cut()  # conn's next query hangs, a new connect fails with EINVAL
    ...         ns.heal()  # conn goes on
    """

    def __init__(self, name: str):
        if not _VALID_NAME.match(name):
            raise ValueError(
                f"a namespace name must start with {NAME_PREFIX!r} and contain only letters, "
                f"digits, '_', '.' and '-' (at most 63 characters), got {name!r}"
            )
        self.name = name
        self._subnet: int | None = None
        self._cut_mode: CutMode | None = None
        self._ip = ""

    # ---------------------------------------------------------------- addresses

    @property
    def created(self) -> bool:
        """Whether :meth:`create` made the namespace (and :meth:`destroy` did not remove it)."""
        return self._subnet is not None

    def _require_subnet(self) -> int:
        if self._subnet is None:
            raise DevInfraError(f"network namespace {self.name} is not created: call create()")
        return self._subnet

    @property
    def subnet(self) -> int:
        """``N`` of this namespace's ``10.213.N.0/30``."""
        return self._require_subnet()

    @property
    def address(self) -> str:
        """The namespace side's address, ``10.213.N.2``: where servers inside listen."""
        return f"{_NET_PREFIX}.{self._require_subnet()}.2"

    @property
    def peer_address(self) -> str:
        """The root side's address, ``10.213.N.1``: where clients of this process come from."""
        return f"{_NET_PREFIX}.{self._require_subnet()}.1"

    @property
    def host_interface(self) -> str:
        """The root side's veth, ``tpv<N>``."""
        return _HOST_IF.format(self._require_subnet())

    @property
    def ns_interface(self) -> str:
        """The namespace side's veth (its name inside the namespace)."""
        return _NS_IF

    def exec_prefix(self) -> list[str]:
        """Return the command prefix that runs a program inside the namespace.

        Returns
        -------
        list of str
            ``[<path of ip>, "netns", "exec", name]``; ``ip`` replaces itself with the program
            (``exec``), so its pid is the one the caller started.
        """
        self._require_subnet()
        return [self._ip or _ip_binary(), "netns", "exec", self.name]

    # ---------------------------------------------------------------- life cycle

    def create(self) -> NetworkNamespace:
        """Make the namespace, the veth pair and the addresses (nothing happens if made already).

        Returns
        -------
        NetworkNamespace
            ``self``, for chaining.

        Raises
        ------
        DevInfraError
            If not root, if a namespace of that name exists, or if ``ip`` fails; whatever was
            made is removed again.
        """
        if self.created:
            return self
        if os.geteuid() != 0:
            raise DevInfraError("network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)")
        self._ip = ip = _ip_binary()
        _run([ip, "netns", "add", self.name])
        try:
            self._subnet = subnet = self._claim_subnet()
            host_if = self.host_interface
            _disable_ipv6(host_if)
            self._ns_run(
                ["sh", "-c", f"echo 1 > /proc/sys/net/ipv6/conf/{_NS_IF}/disable_ipv6"],
                check=False,
            )
            _run([ip, "addr", "add", f"{_NET_PREFIX}.{subnet}.1/30", "dev", host_if])
            _run([ip, "link", "set", host_if, "up"])
            _run(
                [ip, "-n", self.name, "addr", "add", f"{_NET_PREFIX}.{subnet}.2/30", "dev", _NS_IF]
            )
            _run([ip, "-n", self.name, "link", "set", "lo", "up"])
            _run([ip, "-n", self.name, "link", "set", _NS_IF, "up"])
        except BaseException:
            self._remove()
            raise
        return self

    def _claim_subnet(self) -> int:
        """Create the veth pair with the first free ``N``; the root side's name is the claim."""
        used = _root_ip_text()
        for subnet in range(256):
            if f"{_NET_PREFIX}.{subnet}." in used:
                continue
            result = _run(
                [
                    self._ip,
                    "link",
                    "add",
                    _HOST_IF.format(subnet),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    _NS_IF,
                    "netns",
                    self.name,
                ],
                check=False,
            )
            if result.returncode == 0:
                return subnet
            if "exists" not in result.stderr:
                raise DevInfraError(f"cannot create a veth pair: {result.stderr.strip()}")
        raise DevInfraError(f"no free subnet left in {_NET_PREFIX}.0.0/16 for a namespace")

    def destroy(self) -> None:
        """Heal a cut, remove the veth pair and the namespace (nothing happens if already gone)."""
        if not self.created:
            return
        self._remove()

    def _remove(self) -> None:
        ip = self._ip or _ip_binary()
        if self._subnet is not None:
            self._heal_all()
            _run([ip, "link", "del", self.host_interface], check=False)
        _run([ip, "netns", "del", self.name], check=False)
        self._subnet = None
        self._cut_mode = None

    def __enter__(self) -> NetworkNamespace:
        return self.create()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()

    def pids(self) -> list[int]:
        """Return the processes running inside the namespace.

        Returns
        -------
        list of int
            Their pids (``ip netns pids``).
        """
        result = _run([self._ip or _ip_binary(), "netns", "pids", self.name], check=False)
        return [int(word) for word in result.stdout.split() if word.isdigit()]

    @classmethod
    def remove_stale(cls) -> list[str]:
        """Remove the ``tp-*-<pid>`` namespaces whose ``<pid>`` is dead, with what they leave.

        Processes still inside such a namespace (servers of a killed session that outlived it)
        are killed, root-side ``tpv<N>`` interfaces whose namespace is gone are deleted, and so
        are blackhole routes to ``10.213.N.2`` without a ``tpv<N>`` interface.

        Returns
        -------
        list of str
            The names of the namespaces removed.
        """
        if os.geteuid() != 0:
            return []
        ip = _ip_binary()
        removed = []
        listing = _run([ip, "netns", "list"], check=False).stdout
        for line in listing.splitlines():
            name = line.split()[0] if line.split() else ""
            match = _STALE_NAME.match(name)
            if match is None or process_alive(int(match.group(1))):
                continue
            pids = _run([ip, "netns", "pids", name], check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _run([ip, "netns", "del", name], check=False)
            removed.append(name)
        # A root-side veth whose peer's namespace has no name any more: its name was removed
        # while a process still held it. Deleting the root side deletes the pair.
        links = _run([ip, "-o", "link", "show"], check=False).stdout
        alive_subnets = set()
        for line in links.splitlines():
            match = re.match(r"^\d+: tpv(\d+)[@:]", line)
            if match is None:
                continue
            subnet = int(match.group(1))
            if "link-netns " in line:
                alive_subnets.add(subnet)
            else:
                _run([ip, "link", "del", _HOST_IF.format(subnet)], check=False)
        routes = _run([ip, "-4", "route", "show", "type", "blackhole"], check=False).stdout
        for match in re.finditer(rf"\b{re.escape(_NET_PREFIX)}\.(\d+)\.2\b", routes):
            if int(match.group(1)) not in alive_subnets:
                _run([ip, "route", "del", "blackhole", f"{match.group(0)}/32"], check=False)
        return removed

    # ---------------------------------------------------------------- partitions

    @property
    def is_cut(self) -> bool:
        """Whether a :meth:`cut` is in force."""
        return self._cut_mode is not None

    @property
    def cut_mode(self) -> CutMode | None:
        """The mode of the cut in force, ``None`` when healed."""
        return self._cut_mode

    def cut(self, mode: CutMode = "wire") -> None:
        """Partition the namespace from the root namespace: every packet is lost, both ways.

        Parameters
        ----------
        mode : {"blackhole", "wire"}, optional
            ``blackhole``: blackhole routes on both sides (new connects fail at once with
            ``EINVAL``); ``wire``: packets leave and are lost (new connects hang). See the module
            documentation. Cutting again with another mode switches modes.

        Raises
        ------
        DevInfraError
            If the namespace is not created, or ``ip`` fails (the partial cut is healed).
        """
        self._require_subnet()
        if mode not in _MODES:
            raise ValueError(f"mode must be 'blackhole' or 'wire', got {mode!r}")
        if self._cut_mode == mode:
            return
        if self._cut_mode is not None:
            self.heal()
        self._cut_mode = mode
        try:
            for argv in self._cut_commands(mode):
                _run(argv)
        except BaseException:
            self._heal_all()
            self._cut_mode = None
            raise

    def heal(self) -> None:
        """End a :meth:`cut` (nothing happens if there is none); connections then go on."""
        if self._subnet is None or self._cut_mode is None:
            return
        for argv in self._heal_commands(self._cut_mode):
            _run(argv, check=False)
        self._cut_mode = None

    def _heal_all(self) -> None:
        for mode in _MODES:
            for argv in self._heal_commands(mode):
                _run(argv, check=False)
        self._cut_mode = None

    def _cut_commands(self, mode: CutMode) -> list[list[str]]:
        ip, ns = self._ip or _ip_binary(), ["-n", self.name]
        if mode == "blackhole":
            return [
                [ip, "route", "add", "blackhole", f"{self.address}/32"],
                [ip, *ns, "route", "add", "blackhole", f"{self.peer_address}/32"],
            ]
        fake = ["lladdr", _BOGUS_MAC, "nud", "permanent"]
        return [
            [ip, "neigh", "replace", self.address, *fake, "dev", self.host_interface],
            [ip, *ns, "neigh", "replace", self.peer_address, *fake, "dev", _NS_IF],
        ]

    def _heal_commands(self, mode: CutMode) -> list[list[str]]:
        ip, ns = self._ip or _ip_binary(), ["-n", self.name]
        if mode == "blackhole":
            return [
                [ip, "route", "del", "blackhole", f"{self.address}/32"],
                [ip, *ns, "route", "del", "blackhole", f"{self.peer_address}/32"],
            ]
        # Without the made-up entries, ARP finds the real addresses again at the next packet.
        return [
            [ip, "neigh", "del", self.address, "dev", self.host_interface],
            [ip, *ns, "neigh", "del", self.peer_address, "dev", _NS_IF],
        ]

    # ---------------------------------------------------------------- evidence

    def _ns_run(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run([*self.exec_prefix(), *argv], check=check)

    def counters(self) -> TrafficCounters:
        """Read the packet counters of both sides now (two commands, a few milliseconds).

        Returns
        -------
        TrafficCounters
            Subtract the values taken before a cut from those taken during or after it.
        """
        ip = self._ip or _ip_binary()
        marker = "----tp-link----"
        out = self._ns_run(
            ["sh", "-c", f"cat /proc/net/snmp; echo {marker}; {ip} -s -s -j link show {_NS_IF}"]
        ).stdout
        snmp_text, _, link_json = out.partition(marker)
        ns = _parse_snmp(snmp_text)
        ns_rx = _rx_stats(link_json)
        root_rx = _rx_stats(
            _run([ip, "-s", "-s", "-j", "link", "show", self.host_interface]).stdout
        )
        root = _parse_snmp(Path("/proc/net/snmp").read_text())
        root.update(_parse_snmp(Path("/proc/net/netstat").read_text()))
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

    def tcp_connections(self, *, port: int | None = None) -> list[TcpConnection]:
        """List the root namespace's TCP connections to the namespace (``ss -tin``).

        Parameters
        ----------
        port : int, optional
            Only those to this server port.

        Returns
        -------
        list of TcpConnection
            One per connection, listening sockets excluded.
        """
        argv = ["ss", "-tinHO", "state", "all", "dst", self.address]
        out = _run(argv).stdout
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

    def probe(self, port: int, timeout: float = 1.0) -> bool:
        """Tell whether a new TCP connection from this process to ``address:port`` succeeds.

        Parameters
        ----------
        port : int
            The server's port.
        timeout : float, optional
            Seconds to wait for the connection. During a ``blackhole`` cut the answer is
            ``False`` at once (``EINVAL``), during a ``wire`` cut after ``timeout``.

        Returns
        -------
        bool
            ``True`` if it was accepted (it is closed again at once).
        """
        try:
            with socket.create_connection((self.address, port), timeout=timeout):
                return True
        except OSError:
            return False

    def port_is_free(self, port: int) -> bool:
        """Tell whether nothing listens on TCP ``port`` inside the namespace.

        Parameters
        ----------
        port : int
            The port.

        Returns
        -------
        bool
            ``True`` if no listening socket of the namespace has it.
        """
        out = _run(["ss", "-Hltn", "-N", self.name, "sport", "=", f":{port}"], check=False).stdout
        return not out.strip()

    def __repr__(self) -> str:
        if not self.created:
            return f"NetworkNamespace({self.name!r}, not created)"
        state = f"cut ({self._cut_mode})" if self._cut_mode else "healed"
        return f"NetworkNamespace({self.name!r}, address={self.address}, {state})"


def _root_ip_text() -> str:
    """Return the root namespace's addresses and routes, to skip subnets already in use."""
    ip = _ip_binary()
    addresses = _run([ip, "-4", "-o", "addr", "show"], check=False).stdout
    routes = _run([ip, "-4", "route", "show", "table", "all"], check=False).stdout
    return addresses + routes


def _rx_stats(link_json: str) -> dict[str, int]:
    """Return the receive counters of ``ip -s -s -j link show <one interface>``.

    ``otherhost`` (frames for another MAC address) is only listed once it is not 0.
    """
    try:
        rx = json.loads(link_json)[0]["stats64"]["rx"]
    except (ValueError, LookupError, TypeError) as exc:
        raise DevInfraError(f"unexpected output of 'ip -s -s -j link show': {link_json!r}") from exc
    return {str(key): int(value) for key, value in rx.items() if isinstance(value, int)}


def _disable_ipv6(interface: str) -> None:
    """Turn IPv6 off on a root-namespace interface (no DAD, router or MLD traffic on the veth)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/sys/net/ipv6/conf/{interface}/disable_ipv6").write_text("1\n")
