"""Unit-test helpers: a report of how many crash scenarios were explored."""

from __future__ import annotations

from tests.summaries import count


def explored(name: str, n: int = 1) -> None:
    """Count ``n`` crash scenarios of kind ``name`` checked without a violation."""
    count("crash-point exploration", name, n, unit=" scenarios checked, no violation")
