"""A network namespace joined to this one by a veth pair: made, cut, healed, removed, inspected.

See the package documentation (:mod:`twophase_dev._netns`) for what each cut mode does.

Needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``) and ``ip`` from iproute2. Runs on: the
developer's or test session's machine, never on Spark executors.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
from types import TracebackType
from typing import Literal

from twophase_dev._errors import DevInfraError
from twophase_dev._host._proc import process_alive
from twophase_dev._netns._commands import disable_ipv6, ip_binary, root_ip_text, run
from twophase_dev._netns._evidence import (
    TcpConnection,
    TrafficCounters,
    read_counters,
    read_tcp_connections,
)

__all__ = ["CutMode", "NetworkNamespace"]

#: How a cut loses packets, see the package documentation (:mod:`twophase_dev._netns`).
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
        return [self._ip or ip_binary(), "netns", "exec", self.name]

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
        self._ip = ip = ip_binary()
        run([ip, "netns", "add", self.name])
        try:
            self._subnet = subnet = self._claim_subnet()
            host_if = self.host_interface
            disable_ipv6(host_if)
            self._ns_run(
                ["sh", "-c", f"echo 1 > /proc/sys/net/ipv6/conf/{_NS_IF}/disable_ipv6"],
                check=False,
            )
            run([ip, "addr", "add", f"{_NET_PREFIX}.{subnet}.1/30", "dev", host_if])
            run([ip, "link", "set", host_if, "up"])
            run([ip, "-n", self.name, "addr", "add", f"{_NET_PREFIX}.{subnet}.2/30", "dev", _NS_IF])
            run([ip, "-n", self.name, "link", "set", "lo", "up"])
            run([ip, "-n", self.name, "link", "set", _NS_IF, "up"])
        except BaseException:
            self._remove()
            raise
        return self

    def _claim_subnet(self) -> int:
        """Create the veth pair with the first free ``N``; the root side's name is the claim."""
        used = root_ip_text()
        for subnet in range(256):
            if f"{_NET_PREFIX}.{subnet}." in used:
                continue
            result = run(
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
        ip = self._ip or ip_binary()
        if self._subnet is not None:
            self._heal_all()
            run([ip, "link", "del", self.host_interface], check=False)
        run([ip, "netns", "del", self.name], check=False)
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
        result = run([self._ip or ip_binary(), "netns", "pids", self.name], check=False)
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
        ip = ip_binary()
        removed = []
        listing = run([ip, "netns", "list"], check=False).stdout
        for line in listing.splitlines():
            name = line.split()[0] if line.split() else ""
            match = _STALE_NAME.match(name)
            if match is None or process_alive(int(match.group(1))):
                continue
            pids = run([ip, "netns", "pids", name], check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            run([ip, "netns", "del", name], check=False)
            removed.append(name)
        # A root-side veth whose peer's namespace has no name any more: its name was removed
        # while a process still held it. Deleting the root side deletes the pair.
        links = run([ip, "-o", "link", "show"], check=False).stdout
        alive_subnets = set()
        for line in links.splitlines():
            match = re.match(r"^\d+: tpv(\d+)[@:]", line)
            if match is None:
                continue
            subnet = int(match.group(1))
            if "link-netns " in line:
                alive_subnets.add(subnet)
            else:
                run([ip, "link", "del", _HOST_IF.format(subnet)], check=False)
        routes = run([ip, "-4", "route", "show", "type", "blackhole"], check=False).stdout
        for match in re.finditer(rf"\b{re.escape(_NET_PREFIX)}\.(\d+)\.2\b", routes):
            if int(match.group(1)) not in alive_subnets:
                run([ip, "route", "del", "blackhole", f"{match.group(0)}/32"], check=False)
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
                run(argv)
        except BaseException:
            self._heal_all()
            self._cut_mode = None
            raise

    def heal(self) -> None:
        """End a :meth:`cut` (nothing happens if there is none); connections then go on."""
        if self._subnet is None or self._cut_mode is None:
            return
        for argv in self._heal_commands(self._cut_mode):
            run(argv, check=False)
        self._cut_mode = None

    def _heal_all(self) -> None:
        for mode in _MODES:
            for argv in self._heal_commands(mode):
                run(argv, check=False)
        self._cut_mode = None

    def _cut_commands(self, mode: CutMode) -> list[list[str]]:
        ip, ns = self._ip or ip_binary(), ["-n", self.name]
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
        ip, ns = self._ip or ip_binary(), ["-n", self.name]
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
        return run([*self.exec_prefix(), *argv], check=check)

    def counters(self) -> TrafficCounters:
        """Read the packet counters of both sides now (two commands, a few milliseconds).

        Returns
        -------
        TrafficCounters
            Subtract the values taken before a cut from those taken during or after it.
        """
        return read_counters(
            self.exec_prefix(), self._ip or ip_binary(), _NS_IF, self.host_interface
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
        return read_tcp_connections(self.address, port)

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
        out = run(["ss", "-Hltn", "-N", self.name, "sport", "=", f":{port}"], check=False).stdout
        return not out.strip()

    def __repr__(self) -> str:
        if not self.created:
            return f"NetworkNamespace({self.name!r}, not created)"
        state = f"cut ({self._cut_mode})" if self._cut_mode else "healed"
        return f"NetworkNamespace({self.name!r}, address={self.address}, {state})"
