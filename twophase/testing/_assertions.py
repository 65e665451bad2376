"""The exactly-once assertion."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable

__all__ = ["assert_exactly_once"]


def assert_exactly_once(
    actual: Iterable[Hashable], expected: Iterable[Hashable], *, what: str = "rows"
) -> None:
    """Assert that ``actual`` holds every expected item exactly once, and nothing else.

    Items are compared as multisets (order is ignored). Rows given as dicts can
    be turned into hashable items with ``tuple(sorted(row.items()))`` or by
    passing their key (e.g. the id column).

    Parameters
    ----------
    actual
        What the target holds.
    expected
        What the input held.
    what
        Word used in the failure message.

    Raises
    ------
    AssertionError
        With the missing, duplicated and unexpected items (first 10 of each).
    """
    have = Counter(actual)
    want = Counter(expected)
    missing = want - have
    extra = have - want
    duplicated = {k: have[k] - want[k] for k in extra if k in want}
    unexpected = {k: n for k, n in extra.items() if k not in want}
    if missing or extra:

        def show(items: dict[Hashable, int]) -> str:
            shown = list(items.items())[:10]
            more = "" if len(items) <= 10 else f" ... and {len(items) - 10} more"
            return ", ".join(f"{k!r} x{n}" for k, n in shown) + more

        lines = [
            f"not exactly once: {sum(have.values())} {what} held, {sum(want.values())} expected"
        ]
        if missing:
            lines.append(f"  lost ({sum(missing.values())}): {show(dict(missing))}")
        if duplicated:
            lines.append(f"  duplicated ({sum(duplicated.values())}): {show(duplicated)}")
        if unexpected:
            lines.append(f"  unexpected ({sum(unexpected.values())}): {show(unexpected)}")
        raise AssertionError("\n".join(lines))
