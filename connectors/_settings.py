"""Checks of numeric settings, shared by the connectors.

A setting given as ``True``, ``"4"`` or ``None`` must fail with a
:class:`~twophase.errors.ConfigurationError` that names it, never with a
``TypeError`` from a comparison deep in a constructor, and never be accepted
because ``bool`` is a subclass of ``int``.
"""

from __future__ import annotations

from twophase.errors import ConfigurationError

__all__ = ["check_number"]


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
