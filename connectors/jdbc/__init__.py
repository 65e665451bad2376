"""Exactly-once sinks into transactional databases for PySpark Structured Streaming.

A family of dialects, each with both commit protocols:

* **PostgreSQL** (psycopg2), built by :func:`postgres_sink`, which picks the
  protocol from the server: :class:`PostgresTwoPhaseSink` (``coordinated``) --
  ``PREPARE TRANSACTION`` on the executors, ``COMMIT PREPARED`` from the
  driver once every partition is prepared: a batch becomes visible entirely or
  not at all (needs ``max_prepared_transactions > 0``); or
  :class:`PostgresMarkerSink` (``markers``) -- every partition commits on its
  executor with a marker row holding the partition's fingerprint; replays skip
  committed partitions. Rows go in with ``COPY``. See ``docs/jdbc.md``.
* **MariaDB** 10.5 or newer (PyMySQL), built by :func:`mariadb_sink`:
  :class:`MariaDBTwoPhaseSink` (``coordinated``, XA transactions; what
  ``protocol="auto"`` picks) or :class:`MariaDBMarkerSink` (``markers``). Rows
  go in with ``LOAD DATA LOCAL INFILE``. MySQL is refused by name. See
  ``docs/mariadb.md``.

In both dialects ``mode`` is ``"append"``, ``"upsert"`` or ``"cdc"``; for
upsert and CDC the sink routes every row of a key to one transaction itself
(``key_by``), whatever the DataFrame's partitioning.

Each dialect's client library is imported when one of its names is first
used, so the PostgreSQL sinks need only psycopg2 and the MariaDB sinks only
PyMySQL. The databases are registered in :mod:`._registry`.

Examples
--------
>>> from twophase.connectors.jdbc import postgres_sink
>>> sink = postgres_sink(  # doctest: +SKIP
...     "events", table="public.events", dsn="postgresql://etl@db/app?sslmode=require")
>>> query = df.writeStream.foreachBatch(sink).option(  # doctest: +SKIP
...     "checkpointLocation", "/chk/events").start()
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._pool import close_connections
from ._registry import public_names as _public_names

if _TYPE_CHECKING:
    from ._mariadb import register_mariadb_format
    from ._mariadb._dialect import MariaDBMarkerSink, MariaDBTwoPhaseSink
    from ._mariadb._factory import mariadb_sink
    from ._postgres import register_postgres_format
    from ._postgres._admin import PreparedTransaction, list_prepared_transactions
    from ._postgres._dialect import PostgresMarkerSink, PostgresTwoPhaseSink
    from ._postgres._factory import postgres_sink


#: Where each public name lives (imported on first use: a dialect's client
#: library is only needed when the dialect is used). The type checkers' imports
#: above and ``__all__`` name the same (``tests/unit/jdbc/test_jdbc_registry.py``).
_LAZY = _public_names()

__all__ = [
    "MariaDBMarkerSink",
    "MariaDBTwoPhaseSink",
    "PostgresMarkerSink",
    "PostgresTwoPhaseSink",
    "PreparedTransaction",
    "close_connections",
    "list_prepared_transactions",
    "mariadb_sink",
    "postgres_sink",
    "register_mariadb_format",
    "register_postgres_format",
]


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
