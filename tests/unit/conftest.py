"""Unit-test helpers: a report of how many crash scenarios were explored."""

from __future__ import annotations

from collections import Counter
from typing import Any

EXPLORED: Counter[str] = Counter()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if EXPLORED:
        terminalreporter.section("crash-point exploration")
        for name, count in sorted(EXPLORED.items()):
            terminalreporter.write_line(f"{name}: {count} scenarios checked, no violation")
