"""What every dialect's factory does alike: check ``protocol``, build the options."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Literal

from twophase.errors import ConfigurationError

from ._options import JdbcOptions, QualifiedName

__all__ = ["PROTOCOLS", "Protocol", "sink_options", "unused_staging"]

_log = logging.getLogger("twophase.connectors.jdbc")

#: The ``protocol`` argument of every factory.
Protocol = Literal["auto", "coordinated", "markers"]
PROTOCOLS: tuple[str, ...] = ("auto", "coordinated", "markers")

_FIELDS = frozenset(f.name for f in dataclasses.fields(JdbcOptions) if f.init)


def sink_options(
    name: str, protocol: str, arguments: Mapping[str, Any], **dialect: Any
) -> JdbcOptions:
    """Check ``protocol`` and build the options from a factory's arguments.

    Parameters
    ----------
    name
        The sink name (errors name it).
    protocol
        The factory's ``protocol`` argument.
    arguments
        The factory's arguments (``locals()`` on entry): those that are
        :class:`~._options.JdbcOptions` fields are used, ``table`` and
        ``marker_table`` parsed (``"schema.table"`` or a pair).
    **dialect
        Options only the dialect sets (``database``, ``max_identifier_bytes``,
        ``application_name``).

    Returns
    -------
    JdbcOptions
        The validated options.

    Raises
    ------
    ConfigurationError
        ``protocol`` or an option is invalid; the message names it and the sink.
    """
    if protocol not in PROTOCOLS:
        raise ConfigurationError(
            f"protocol must be 'auto', 'coordinated' or 'markers'; got {protocol!r}",
            setting="protocol",
            sink=name,
        )
    given = {k: v for k, v in arguments.items() if k in _FIELDS}
    try:
        given["table"] = QualifiedName.parse(given["table"], "table")
        given["marker_table"] = QualifiedName.parse(given["marker_table"], "marker_table")
        given["key_columns"] = tuple(given["key_columns"])
        return JdbcOptions(**given, **dialect)
    except ConfigurationError as exc:
        raise exc.with_context(sink=name) from None


def unused_staging(name: str, staging: bool) -> None:
    """Say, once, that ``staging=True`` does nothing under the coordinated protocol."""
    if staging:
        _log.info("sink %s: staging=True has no effect with protocol 'coordinated'", name)
