"""A dialect's ``df.writeStream.format(...)``: its sink built from the writer's string options.

The coordinated protocol only (``protocol=coordinated``, the default here): a
Python data source has no driver step before its write tasks, which the markers
protocol's replay check needs (``docs/modes.md``). Each dialect's ``_format``
module declares one :class:`FormatSpec` (its format, factory and options);
reading the options is written once, here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from twophase.errors import ConfigurationError

__all__ = ["COMMON_OPTIONS", "FormatSpec", "text_option"]


def text_option(value: str) -> str:
    """Parse an option that is text as it is."""
    return value


def _flag(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("expected true or false")
    return lowered == "true"


def _columns(value: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in value.split(",") if c.strip())


def _table(value: str) -> str | tuple[str, str]:
    schema, dot, table = value.partition(".")
    return (schema, table) if dot else value


#: Option name (as Spark passes it, lower case) -> (argument of the factory, parser), for
#: every dialect.
COMMON_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "name": ("name", text_option),
    "table": ("table", _table),
    "mode": ("mode", text_option),
    "keycolumns": ("key_columns", _columns),
    "cdcopcolumn": ("cdc_op_column", text_option),
    "ordercolumn": ("order_column", text_option),
    "protocol": ("protocol", text_option),
    "createtable": ("create_table", _flag),
    "locktimeout": ("lock_timeout", float),
    "statementtimeout": ("statement_timeout", float),
    "idleintransactiontimeout": ("idle_in_transaction_timeout", float),
    "connecttimeout": ("connect_timeout", int),
    "networktimeout": ("network_timeout", float),
    "maxpartitions": ("max_partitions", int),
}
_SPELLED = {
    "keycolumns": "keyColumns",
    "cdcopcolumn": "cdcOpColumn",
    "ordercolumn": "orderColumn",
    "createtable": "createTable",
    "locktimeout": "lockTimeout",
    "statementtimeout": "statementTimeout",
    "idleintransactiontimeout": "idleInTransactionTimeout",
    "connecttimeout": "connectTimeout",
    "networktimeout": "networkTimeout",
    "maxpartitions": "maxPartitions",
    "mergeschema": "mergeSchema",
}


def _spelled(key: str) -> str:
    return _SPELLED.get(key, key)


@dataclass(frozen=True)
class FormatSpec:
    """One dialect's ``format(...)``: its name, its factory, its options.

    Attributes
    ----------
    format
        The default format name (``"twophase-<dialect>"``).
    factory
        ``module:function`` of the sink factory, imported when a sink is built
        (so that registering a format needs no client library).
    options
        Option name (lower case) -> (factory argument, parser).
    required
        Options that must be given.
    """

    format: str
    factory: str
    options: Mapping[str, tuple[str, Callable[[str], Any]]]
    required: tuple[str, ...]

    def sink_from_options(self, options: Mapping[str, str]) -> Any:
        """Build the sink from a data source's string options.

        Parameters
        ----------
        options
            The writer's options, without ``checkpointLocation``.

        Returns
        -------
        TwoPhaseCommitSink or MarkerCommitSink
            The sink.

        Raises
        ------
        ConfigurationError
            An unknown option, a missing one, or a value of the wrong kind; the
            message names the option.
        """
        given = {k.lower(): v for k, v in options.items()}
        sink_name = given.get("name", "?")
        unknown = sorted(set(given) - set(self.options))
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) {', '.join(map(_spelled, unknown))} of "
                f"format({self.format!r}); known: {', '.join(_spelled(k) for k in self.options)}",
                sink=sink_name,
                setting=_spelled(unknown[0]),
            )
        missing = [k for k in self.required if not given.get(k)]
        if missing:
            raise ConfigurationError(
                f"format({self.format!r}) needs .option({missing[0]!r}, ...)",
                sink=sink_name,
                setting=missing[0],
            )
        arguments: dict[str, Any] = {"protocol": "coordinated"}
        for key, raw in given.items():
            argument, parse = self.options[key]
            try:
                arguments[argument] = parse(raw)
            except ValueError as exc:
                raise ConfigurationError(
                    f"option {_spelled(key)}={raw!r} of format({self.format!r}) is not valid "
                    f"({exc})",
                    sink=sink_name,
                    setting=_spelled(key),
                ) from exc
        module, _, function = self.factory.partition(":")
        factory = getattr(__import__(module, fromlist=[function]), function)
        return factory(**arguments)
