"""Polling a condition until it holds, a deadline passes or a watchdog gives up.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    interval: float = 0.2,
    abort: Callable[[], None] | None = None,
) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds have passed.

    Parameters
    ----------
    condition : callable
        Returns ``True`` when done.
    timeout : float
        Seconds to wait at most.
    interval : float, optional
        Seconds between polls.
    abort : callable, optional
        Called before each poll; raises to give up early (e.g. the server process died).

    Returns
    -------
    bool
        Whether ``condition`` held in time.
    """
    deadline = time.monotonic() + timeout
    while True:
        if abort is not None:
            abort()
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
