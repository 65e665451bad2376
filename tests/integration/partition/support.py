"""Helpers of the partition tests: a cut placed right before a hook, and its evidence."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest


class Cut:
    """One partition of a namespace: when it began and ended, and what it did to the traffic."""

    def __init__(self, netns: Any) -> None:
        self.netns = netns
        self.started: float | None = None
        self.healed: float | None = None
        self._lock = threading.Lock()
        self._at_cut: Any = None
        self._at_heal: Any = None

    def start(self) -> None:
        """Cut (a "wire" cut: frames leave and are lost, nothing is reset), once."""
        with self._lock:
            if self.started is not None:
                return
            self.netns.cut("wire")
            self.started = time.monotonic()
            self._at_cut = self.netns.counters()  # after: frames sent before the cut arrive

    def heal(self) -> None:
        """End the partition, once, after reading the counters."""
        with self._lock:
            if self.started is None or self.healed is not None:
                return
            self._at_heal = self.netns.counters()
            self.netns.heal()
            self.healed = time.monotonic()

    def assert_blocked(self) -> None:
        """The cut happened and lost what was sent: frames reached the wire, none the server."""
        assert self.started is not None, "the cut never happened"
        assert self._at_heal is not None, "the cut was never healed through this object"
        during = self._at_heal - self._at_cut
        assert during.ns_rx_packets > 0, f"nothing was sent during the cut: {during}"
        # Every frame that reached the server's side was dropped there, as addressed to another
        # host (Ip InReceives would also count the namespace's loopback: Kafka's controller).
        assert during.ns_rx_otherhost == during.ns_rx_packets, f"frames got through: {during}"
        assert during.lost_packets > 0, during


@contextlib.contextmanager
def cut_before(
    monkeypatch: pytest.MonkeyPatch,
    cls: type[Any],
    hook: str,
    netns: Any,
    *,
    heal_after: float | None = None,
) -> Iterator[Cut]:
    """Cut the network right before the first call of ``cls.hook`` in this process.

    With ``heal_after``, a timer heals the partition that many seconds after the cut;
    otherwise the test heals it (``cut.heal()``). The hook is restored on exit.
    """
    original = getattr(cls, hook)
    cut = Cut(netns)

    def first_cuts(self: Any, *args: Any, **kwargs: Any) -> Any:
        if cut.started is None:
            cut.start()
            if heal_after is not None:
                threading.Timer(heal_after, cut.heal).start()
        return original(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(cls, hook, first_cuts)
        try:
            yield cut
        finally:
            if heal_after is not None:  # let the timer's heal (and its counters) come first
                deadline = time.monotonic() + heal_after + 5
                while cut.started is not None and cut.healed is None:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
