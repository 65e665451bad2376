"""``df.writeStream.format("twophase-postgres")``: the PostgreSQL sink from options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import twophase

from .._format import COMMON_OPTIONS, FormatSpec, text_option

__all__ = ["POSTGRES_FORMAT", "postgres_sink_from_options", "register_postgres_format"]


#: ``format("twophase-postgres")``: :func:`~._factory.postgres_sink` from options.
POSTGRES_FORMAT = FormatSpec(
    "twophase-postgres",
    f"{__package__}._factory:postgres_sink",
    {**COMMON_OPTIONS, "dsn": ("dsn", text_option), "mergeschema": ("merge_schema", text_option)},
    ("name", "table", "dsn"),
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
