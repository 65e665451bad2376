"""``df.writeStream.format("twophase-postgres")`` and ``"twophase-mariadb"``: sinks from options.

The coordinated protocol only (``protocol=coordinated``, the default here): a
Python data source has no driver step before its write tasks, which the markers
protocol's replay check needs (``docs/modes.md``). One :class:`FormatSpec` per
dialect names its format, its factory and its options; reading the options is
written once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import twophase
from twophase.errors import ConfigurationError

__all__ = [
    "MARIADB_FORMAT",
    "POSTGRES_FORMAT",
    "FormatSpec",
    "mariadb_sink_from_options",
    "postgres_sink_from_options",
    "register_mariadb_format",
    "register_postgres_format",
]


def _text(value: str) -> str:
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
_COMMON: dict[str, tuple[str, Callable[[str], Any]]] = {
    "name": ("name", _text),
    "table": ("table", _table),
    "mode": ("mode", _text),
    "keycolumns": ("key_columns", _columns),
    "cdcopcolumn": ("cdc_op_column", _text),
    "ordercolumn": ("order_column", _text),
    "protocol": ("protocol", _text),
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
        The default format name (``"twophase-postgres"``).
    factory
        ``module:function`` of the sink factory, imported when a sink is built
        (so that registering a format needs no database driver).
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


#: ``format("twophase-postgres")``: :func:`~._factory.postgres_sink` from options.
POSTGRES_FORMAT = FormatSpec(
    "twophase-postgres",
    f"{__package__}._factory:postgres_sink",
    {**_COMMON, "dsn": ("dsn", _text), "mergeschema": ("merge_schema", _text)},
    ("name", "table", "dsn"),
)
#: ``format("twophase-mariadb")``: :func:`~._mariadb._factory.mariadb_sink` from options.
MARIADB_FORMAT = FormatSpec(
    "twophase-mariadb",
    f"{__package__}._mariadb._factory:mariadb_sink",
    {**_COMMON, "url": ("url", _text)},
    ("name", "table", "url"),
)


def postgres_sink_from_options(options: Mapping[str, str]) -> Any:
    """Build the PostgreSQL sink from a data source's string options.

    Options (case-insensitive): ``name``, ``table`` (``schema.table`` allowed)
    and ``dsn`` are required; ``mode``, ``keyColumns`` (comma-separated),
    ``cdcOpColumn``, ``orderColumn``, ``protocol`` (default ``coordinated``),
    ``createTable`` (``true``/``false``), ``lockTimeout``,
    ``statementTimeout``, ``idleInTransactionTimeout`` (seconds),
    ``connectTimeout``, ``maxPartitions`` and ``mergeSchema`` mean what the
    arguments of :func:`postgres_sink` of the same name mean. The format
    refuses ``mode`` ``upsert`` and ``cdc`` when the query starts: their rows
    must be routed by key, which only ``foreachBatch`` does.

    Parameters
    ----------
    options
        The writer's options, without ``checkpointLocation``.

    Returns
    -------
    PostgresTwoPhaseSink or PostgresMarkerSink
        The sink.
    """
    return POSTGRES_FORMAT.sink_from_options(options)


def mariadb_sink_from_options(options: Mapping[str, str]) -> Any:
    """Build the MariaDB sink from a data source's string options.

    As :func:`postgres_sink_from_options`, with ``url`` (``mysql://...``)
    instead of ``dsn`` and without ``mergeSchema``.

    Parameters
    ----------
    options
        The writer's options, without ``checkpointLocation``.

    Returns
    -------
    MariaDBTwoPhaseSink or MariaDBMarkerSink
        The sink.
    """
    return MARIADB_FORMAT.sink_from_options(options)


def register_postgres_format(spark: Any, name: str = POSTGRES_FORMAT.format) -> None:
    """Register ``df.writeStream.format("twophase-postgres")`` in a session.

    Parameters
    ----------
    spark
        A classic or Spark Connect session.
    name
        The format name.

    Examples
    --------
    >>> register_postgres_format(spark)  # doctest: +SKIP
    >>> (orders.writeStream.format("twophase-postgres")  # doctest: +SKIP
    ...     .option("name", "orders").option("table", "public.orders")
    ...     .option("dsn", "host=db dbname=shop")
    ...     .option("checkpointLocation", "/chk/orders").start())
    """
    twophase.register_format(spark, name, postgres_sink_from_options)


def register_mariadb_format(spark: Any, name: str = MARIADB_FORMAT.format) -> None:
    """Register ``df.writeStream.format("twophase-mariadb")`` in a session.

    Parameters
    ----------
    spark
        A classic or Spark Connect session.
    name
        The format name.

    Examples
    --------
    >>> register_mariadb_format(spark)  # doctest: +SKIP
    >>> (orders.writeStream.format("twophase-mariadb")  # doctest: +SKIP
    ...     .option("name", "orders").option("table", "shop.orders")
    ...     .option("url", "mysql://etl@db:3306/shop")
    ...     .option("checkpointLocation", "/chk/orders").start())
    """
    twophase.register_format(spark, name, mariadb_sink_from_options)
