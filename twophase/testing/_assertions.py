"""The exactly-once assertion."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable

__all__ = ["assert_exactly_once", "assert_exactly_once_or_dead_lettered"]


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


def assert_exactly_once_or_dead_lettered(
    written: Iterable[Hashable],
    dead_lettered: Iterable[Hashable],
    expected: Iterable[Hashable],
    *,
    refused: Iterable[Hashable] | None = None,
) -> None:
    """Assert that the target and the dead letters together hold every input item once.

    Each expected item is in exactly one of the two, once; nothing else is in
    either. With ``refused``, the dead letters must hold exactly those items
    (and the target the others).

    Parameters
    ----------
    written
        What the target holds (e.g. the ids of its rows).
    dead_lettered
        What the dead letters hold (e.g. ``letter.values()["id"]`` of each).
    expected
        What the input held.
    refused
        The items the target refuses, when the test knows them.

    Raises
    ------
    AssertionError
        With the lost, duplicated and unexpected items, and the items found in both.
    """
    written, dead_lettered, expected = list(written), list(dead_lettered), list(expected)
    both = set(written) & set(dead_lettered)
    if both:
        shown = ", ".join(repr(k) for k in list(both)[:10])
        raise AssertionError(f"in the target and in the dead letters ({len(both)}): {shown}")
    assert_exactly_once([*written, *dead_lettered], expected)
    if refused is not None:
        refused = list(refused)
        assert_exactly_once(dead_lettered, refused, what="dead letters")
        kept = Counter(expected) - Counter(refused)
        assert_exactly_once(written, kept.elements())
