"""``df.writeStream.format("twophase-mariadb")``: the MariaDB sink from options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import twophase

from .._format import COMMON_OPTIONS, FormatSpec, text_option

__all__ = ["MARIADB_FORMAT", "mariadb_sink_from_options", "register_mariadb_format"]


#: ``format("twophase-mariadb")``: :func:`~._factory.mariadb_sink` from options.
MARIADB_FORMAT = FormatSpec(
    "twophase-mariadb",
    f"{__package__}._factory:mariadb_sink",
    {**COMMON_OPTIONS, "url": ("url", text_option)},
    ("name", "table", "url"),
)


def mariadb_sink_from_options(options: Mapping[str, str]) -> Any:
    """Build the MariaDB sink from a data source's string options.

    As PostgreSQL's ``postgres_sink_from_options``, with ``url`` (``mysql://...``)
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
