"""The dev tools' errors: a local service that failed, and a port taken between picking and binding.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

__all__ = ["DevInfraError", "PortRaceError"]


class DevInfraError(RuntimeError):
    """A local service could not be prepared, started, reached or stopped.

    The message says what failed, where the log is and, when known, how to fix it.
    """


class PortRaceError(Exception):
    """A picked port was taken by someone else between picking and binding (the caller retries)."""
