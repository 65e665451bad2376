"""``writeStream.format(name)``: register a coordinated sink as a Python data source.

The data source itself is :mod:`twophase._spark._datasource`; this module refuses, by
name, a PySpark that lacks the Python data source writer it needs
(:func:`twophase._pyspark.require_feature`) before importing it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._pyspark import require_feature

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSource

    from ._datasource import SinkBuilder

__all__ = ["data_source", "register_format"]


def data_source(name: str, build: SinkBuilder) -> type[DataSource]:
    """Return a Python data source class that runs the sinks ``build`` makes.

    Parameters
    ----------
    name
        The format name (``df.writeStream.format(name)``).
    build
        Makes the sink from the writer's options (strings; every option but
        ``checkpointLocation``). Runs on the driver; it must be picklable and
        raise :class:`~twophase.ConfigurationError` for a bad option.

    Returns
    -------
    type
        A :class:`pyspark.sql.datasource.DataSource` subclass.
    """
    require_feature("format")
    from ._datasource import TwoPhaseDataSource

    attributes: dict[str, Any] = {"_format_name": name, "_build": staticmethod(build)}
    return type(f"TwoPhaseDataSource[{name}]", (TwoPhaseDataSource,), attributes)


def register_format(spark: Any, name: str, build: SinkBuilder) -> None:
    """Register ``name`` as a streaming format that writes through a twophase sink.

    Works in classic and Spark Connect sessions, with PySpark 4.1 or later
    (an older one is refused, naming the version). Only sinks of the
    coordinated protocol (:class:`~twophase.TwoPhaseCommitSink`) can run this
    way; a sink of the markers protocol is refused when the query starts (``docs/modes.md``).

    Parameters
    ----------
    spark
        The session.
    name
        The format name.
    build
        Makes the sink from the writer's options (see :func:`data_source`).

    Examples
    --------
    >>> def build(o):  # module level: the format pickles it  # doctest: +SKIP
    ...     return postgres_sink(
    ...         "orders", table=o["table"], dsn=o["dsn"], protocol="coordinated")
    >>> twophase.register_format(spark, "orders-pg", build)  # doctest: +SKIP
    >>> (df.writeStream.format("orders-pg").option("table", "orders")  # doctest: +SKIP
    ...     .option("dsn", dsn).option("checkpointLocation", "/chk/orders").start())
    """
    source = data_source(name, build)  # refuses a PySpark without the writer first
    spark.dataSource.register(source)
