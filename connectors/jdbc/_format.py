"""``df.writeStream.format("twophase-postgres")``: the PostgreSQL sink from string options.

The coordinated protocol only (``protocol=coordinated``, the default here): a
Python data source has no driver step before its write tasks, which the markers
protocol's replay check needs (``docs/modes.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import twophase
from twophase.errors import ConfigurationError

from ._factory import postgres_sink
from ._postgres import PostgresSink

__all__ = ["postgres_sink_from_options", "register_postgres_format"]

#: The default format name.
FORMAT = "twophase-postgres"


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


#: Option name (as Spark passes it, lower case) -> (argument of postgres_sink, parser).
_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "name": ("name", _text),
    "table": ("table", _table),
    "dsn": ("dsn", _text),
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
    "maxpartitions": ("max_partitions", int),
    "mergeschema": ("merge_schema", _text),
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
    "maxpartitions": "maxPartitions",
    "mergeschema": "mergeSchema",
}


def _spelled(key: str) -> str:
    return _SPELLED.get(key, key)


def postgres_sink_from_options(options: Mapping[str, str]) -> PostgresSink:
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
    PostgresSink
        The sink.

    Raises
    ------
    ConfigurationError
        An unknown option, a missing one, or a value of the wrong kind; the
        message names the option.
    """
    given = {k.lower(): v for k, v in options.items()}
    sink_name = given.get("name", "?")
    unknown = sorted(set(given) - set(_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(map(_spelled, unknown))} of format({FORMAT!r}); "
            f"known: {', '.join(_spelled(k) for k in _OPTIONS)}",
            sink=sink_name,
            setting=_spelled(unknown[0]),
        )
    missing = [k for k in ("name", "table", "dsn") if not given.get(k)]
    if missing:
        raise ConfigurationError(
            f"format({FORMAT!r}) needs .option({missing[0]!r}, ...)",
            sink=sink_name,
            setting=missing[0],
        )
    arguments: dict[str, Any] = {"protocol": "coordinated"}
    for key, raw in given.items():
        argument, parse = _OPTIONS[key]
        try:
            arguments[argument] = parse(raw)
        except ValueError as exc:
            raise ConfigurationError(
                f"option {_spelled(key)}={raw!r} of format({FORMAT!r}) is not valid ({exc})",
                sink=sink_name,
                setting=_spelled(key),
            ) from exc
    return postgres_sink(**arguments)


def register_postgres_format(spark: Any, name: str = FORMAT) -> None:
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
