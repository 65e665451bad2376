"""Checks of settings, shared by the connectors.

A keyword a sink does not take is refused by name, with the closest one it
does (:func:`refuse_unknown`): a typo must not be built silently, nor fail
later as something else (a connection option the server refuses looks like an
unreachable server). A numeric setting given as ``True``, ``"4"`` or ``None`` must fail with a
:class:`~twophase.errors.ConfigurationError` that names it, never with a
``TypeError`` from a comparison deep in a constructor, and never be accepted
because ``bool`` is a subclass of ``int``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from twophase.errors import ConfigurationError

__all__ = ["check_number", "refuse_unknown"]


def refuse_unknown(what: str, sink: str, unknown: Iterable[str], known: Iterable[str]) -> None:
    """Raise for the first of ``unknown``, naming the closest of ``known``; nothing if none.

    Parameters
    ----------
    what
        What got the keywords, for the message (``"PostgreSQL sink"``).
    sink
        The sink name.
    unknown
        The keywords it does not take.
    known
        Those it does.

    Raises
    ------
    ConfigurationError
        ``setting`` is the unknown keyword (never a retriable error: fixing it
        is the user's move, not a restart's).
    """
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigurationError(
            f"{what} got an unknown keyword argument {key!r}{hint}", setting=key, sink=sink
        )


def check_number(
    value: object,
    setting: str,
    *,
    minimum: float,
    maximum: float | None = None,
    integer: bool = False,
    above: bool = False,
    unit: str = "",
    sink: str | None = None,
) -> None:
    """Raise unless ``value`` is a number within the bounds of ``setting``.

    Parameters
    ----------
    value
        What the user passed.
    setting
        The setting's name, for the error.
    minimum, maximum
        Inclusive bounds (``maximum=None``: no upper bound).
    integer
        Only an ``int`` is accepted; otherwise an ``int`` or a ``float``.
    above
        ``minimum`` is exclusive: the value must be greater than it.
    unit
        Appended to the bounds in the message (for example ``" seconds"``).
    sink
        The sink's name, when known, for the error.

    Raises
    ------
    ConfigurationError
        ``value`` is a bool, not a number, NaN, or out of bounds.
    """
    kind = "an int" if integer else "a number"
    lower = f"> {minimum:g}" if above else f">= {minimum:g}"
    bounds = lower if maximum is None else f"{lower} and <= {maximum:g}"
    types: tuple[type, ...] = (int,) if integer else (int, float)
    ok = isinstance(value, types) and not isinstance(value, bool)
    if ok:
        number = float(value)  # type: ignore[arg-type]
        ok = (number > minimum if above else number >= minimum) and (
            maximum is None or number <= maximum
        )
    if not ok:
        raise ConfigurationError(
            f"{setting} must be {kind} {bounds}{unit}, got {value!r}",
            sink=sink,
            setting=setting,
        )
