"""TCP ports on this machine: the loopback address, free ports, and waiting for one to answer.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import contextlib
import socket
import time

__all__ = ["LOOPBACK", "free_ports", "port_is_free", "wait_for_port"]

#: The only address the local services listen on.
LOOPBACK = "127.0.0.1"


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Tell whether a TCP port can be bound on ``host`` right now.

    Parameters
    ----------
    port : int
        The port to probe.
    host : str, optional
        The address to probe, loopback by default.

    Returns
    -------
    bool
        ``True`` if a listening socket could be bound (and was closed again at once).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """Pick ``count`` distinct TCP ports that are free on ``host`` at the time of the call.

    The sockets are all held open until every port is chosen, so the ports differ; another process
    may still take one before the caller binds it, which the services detect and retry.

    Parameters
    ----------
    count : int
        How many ports to pick (at least 1).
    host : str, optional
        The address to bind, loopback by default.

    Returns
    -------
    list of int
        The ports, in the order they were handed out by the kernel.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    """Wait until something accepts TCP connections on ``host:port``.

    Parameters
    ----------
    host : str
        Address to connect to.
    port : int
        Port to connect to.
    timeout : float
        Seconds to wait at most.

    Returns
    -------
    bool
        ``True`` once a connection succeeded, ``False`` if ``timeout`` ran out first.
    """
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
