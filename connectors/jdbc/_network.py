"""How long a session waits on the network: to connect, and for a silent peer.

:class:`NetworkBounds` is read from the sink's options (``connect_timeout``,
``network_timeout``) and applied by each dialect's DB-API layer: as its client
library's keywords (PostgreSQL's ``_dbapi.libpq_bounds``) or on the socket
(:meth:`NetworkBounds.apply_to_socket`).
See "Network failures" in ``docs/guarantees.md``.
"""

from __future__ import annotations

import contextlib
import math
import socket
from dataclasses import dataclass
from typing import Any

__all__ = ["NetworkBounds"]


@dataclass(frozen=True)
class NetworkBounds:
    """How long a session waits on the network: to connect, and for a silent peer.

    A client that sent a request and waits for its answer cannot tell a slow
    statement from a peer that vanished behind a network partition: nothing
    but TCP notices, and by default only after two hours. The bound makes the
    kernel probe a quiet connection (TCP keepalive) and drop it when the peer
    has not acknowledged anything -- probe or data -- for
    ``network_timeout`` seconds (``TCP_USER_TIMEOUT``). A long statement on a
    live server is not cut: the server's kernel answers the probes.

    Attributes
    ----------
    connect_timeout
        Seconds to wait for a connection.
    network_timeout
        Seconds a connection may go without an acknowledgement from the
        peer before it is dropped; 0 leaves the operating system's defaults.
    """

    connect_timeout: int = 10
    network_timeout: float = 60.0

    def keepalive(self) -> tuple[int, int, int] | None:
        """Return TCP keepalive's idle time, probe interval and probe count, in seconds.

        The probes start after a quarter of the bound and fill the rest of it,
        so that a dead peer is found within about ``network_timeout`` even where
        ``TCP_USER_TIMEOUT`` is not available.

        Returns
        -------
        tuple of int or None
            ``(idle, interval, count)``, or ``None`` when the bound is off.
        """
        if not self.network_timeout:
            return None
        idle = max(1, round(self.network_timeout / 4))
        interval = max(1, round(self.network_timeout / 12))
        count = max(1, math.ceil((self.network_timeout - idle) / interval))
        return idle, interval, count

    @property
    def user_timeout_ms(self) -> int:
        """``TCP_USER_TIMEOUT`` in milliseconds (0: the kernel's default).

        Returns
        -------
        int
            Milliseconds.
        """
        return int(self.network_timeout * 1000)

    def apply_to_socket(self, sock: Any) -> None:
        """Set keepalive and ``TCP_USER_TIMEOUT`` on a connected socket (what the OS offers).

        Parameters
        ----------
        sock
            A ``socket.socket`` (or an ``ssl.SSLSocket`` around one).
        """
        values = self.keepalive()
        if values is None:
            return
        idle, interval, count = values
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (
            ("TCP_KEEPIDLE", idle),
            ("TCP_KEEPALIVE", idle),  # macOS's name for the idle time
            ("TCP_KEEPINTVL", interval),
            ("TCP_KEEPCNT", count),
            ("TCP_USER_TIMEOUT", self.user_timeout_ms),
        ):
            option = getattr(socket, name, None)
            if option is not None:
                with contextlib.suppress(OSError):  # not for this socket family (Unix socket)
                    sock.setsockopt(socket.IPPROTO_TCP, option, value)

    def describe(self) -> str:
        """Say what the bound is, for error messages.

        Returns
        -------
        str
            E.g. ``"network_timeout=60 s"``.
        """
        if not self.network_timeout:
            return "network_timeout=0 (off: the operating system's TCP defaults)"
        return f"network_timeout={self.network_timeout:g} s"

    def lost_hint(self) -> str:
        """Return the advice added to an error about a lost connection.

        Returns
        -------
        str
            One sentence.
        """
        return (
            f"The connection was lost or the server did not answer within the sink's "
            f"{self.describe()} (a network partition, the server down or restarted); the "
            "query can be restarted once the server is reachable, or raise network_timeout "
            "for a slow network"
        )
