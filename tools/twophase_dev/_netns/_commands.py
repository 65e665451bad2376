"""The commands that make, cut and read network namespaces: ``ip``, ``ss`` and a sysctl file.

Each runs briefly with a timeout; a failure is a :class:`~twophase_dev.DevInfraError` naming the
command and its output.

Runs on: the developer's or test session's machine (as root).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from twophase_dev._errors import DevInfraError

__all__ = ["disable_ipv6", "ip_binary", "root_ip_text", "run"]

_COMMAND_TIMEOUT = 15.0


def ip_binary() -> str:
    """Return the path of ``ip`` (iproute2); raise :class:`DevInfraError` if it is missing."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])
    found = shutil.which("ip", path=search)
    if found is None:
        raise DevInfraError(
            "'ip' (iproute2) was not found; install it with 'apt-get install iproute2'"
        )
    return found


def run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
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


def root_ip_text() -> str:
    """Return the root namespace's addresses and routes, to skip subnets already in use."""
    ip = ip_binary()
    addresses = run([ip, "-4", "-o", "addr", "show"], check=False).stdout
    routes = run([ip, "-4", "route", "show", "table", "all"], check=False).stdout
    return addresses + routes


def disable_ipv6(interface: str) -> None:
    """Turn IPv6 off on a root-namespace interface (no DAD, router or MLD traffic on the veth)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/sys/net/ipv6/conf/{interface}/disable_ipv6").write_text("1\n")
