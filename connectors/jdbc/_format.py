"""A dialect's ``df.writeStream.format(...)``: its sink built from the writer's string options.

The coordinated protocol only (``protocol=coordinated``, the default here): a
Python data source has no driver step before its write tasks, which the markers
protocol's replay check needs (``docs/modes.md``). Each dialect's ``_format``
package declares one :class:`FormatSpec` in its ``__init__`` (its format, its
factory, its connection option and its own options), which imports no client
library; reading the options and registering the format are written once, here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import twophase
from twophase.errors import ConfigurationError

__all__ = ["COMMON_OPTIONS", "FormatRegistrar", "FormatSpec", "text_option"]


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
    "schemaevolution": ("schema_evolution", text_option),
    "badrows": ("bad_rows", text_option),
    "deadlettertable": ("dead_letter_table", _table),
    "maxbadrows": ("max_bad_rows", int),
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
    "schemaevolution": "schemaEvolution",
    "badrows": "badRows",
    "deadlettertable": "deadLetterTable",
    "maxbadrows": "maxBadRows",
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
    connection_option
        The factory argument holding the connection string (``"dsn"``,
        ``"url"``): an option of the same name, required.
    own_options
        The dialect's other options: option name (lower case) -> (factory
        argument, parser).
    """

    format: str
    factory: str
    connection_option: str
    own_options: Mapping[str, tuple[str, Callable[[str], Any]]] = field(default_factory=dict)

    @property
    def options(self) -> dict[str, tuple[str, Callable[[str], Any]]]:
        """Return every option of the format: option name (lower case) -> (argument, parser)."""
        connection = {self.connection_option: (self.connection_option, text_option)}
        return {**COMMON_OPTIONS, **connection, **self.own_options}

    @property
    def required(self) -> tuple[str, ...]:
        """Return the options that must be given."""
        return ("name", "table", self.connection_option)

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
        known = self.options
        given = {k.lower(): v for k, v in options.items()}
        sink_name = given.get("name", "?")
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) {', '.join(map(_spelled, unknown))} of "
                f"format({self.format!r}); known: {', '.join(_spelled(k) for k in known)}",
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
            argument, parse = known[key]
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

    def registrar(self, module: str, name: str) -> FormatRegistrar:
        """Return the dialect's public ``register_<dialect>_format`` function.

        Parameters
        ----------
        module
            The module that exports it (its ``__module__``, so that it pickles
            and documents as that module's).
        name
            Its name.

        Returns
        -------
        FormatRegistrar
            ``register(spark, name=None)``, documented with this format's name.
        """
        spec = self

        def register(spark: Any, name: str | None = None) -> None:
            twophase.register_format(spark, name or spec.format, spec.sink_from_options)

        register.__module__ = module
        register.__name__ = register.__qualname__ = name
        register.__doc__ = _REGISTER_DOC.format(format=self.format, option=self.connection_option)
        return register


class FormatRegistrar(Protocol):
    """A dialect's ``register_<dialect>_format(spark, name=None)``."""

    def __call__(self, spark: Any, name: str | None = None) -> None:
        """Register the dialect's format in ``spark`` (under ``name``, default its own)."""
        ...


_REGISTER_DOC = """Register ``df.writeStream.format("{format}")`` in a session.

The format's options (case-insensitive) are the factory's arguments in camel
case: ``name``, ``table`` (``schema.table`` allowed) and ``{option}`` are
required; ``mode``, ``keyColumns`` (comma-separated), ``cdcOpColumn``,
``orderColumn``, ``protocol`` (default ``coordinated``), ``createTable``
(``true``/``false``), ``lockTimeout``, ``statementTimeout``,
``idleInTransactionTimeout``, ``networkTimeout`` (seconds), ``connectTimeout``,
``maxPartitions`` and the dialect's own options mean what the factory's
arguments of the same name mean. The format refuses ``mode`` ``upsert`` and
``cdc`` when the query starts: their rows must be routed by key, which only
``foreachBatch`` does.

Parameters
----------
spark
    A classic or Spark Connect session.
name
    The format name (default ``"{format}"``).

Examples
--------
>>> register(spark)  # doctest: +SKIP
>>> (orders.writeStream.format("{format}")  # doctest: +SKIP
...     .option("name", "orders").option("table", "shop.orders")
...     .option("{option}", "...").option("checkpointLocation", "/chk/orders").start())
"""
