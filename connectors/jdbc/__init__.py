"""Exactly-once sinks into PostgreSQL for PySpark Structured Streaming.

Two commit protocols, chosen from the server by :func:`postgres_sink`:

* :class:`PostgresTwoPhaseSink` (protocol A) -- ``PREPARE TRANSACTION`` on the
  executors, ``COMMIT PREPARED`` from the driver once every partition is
  prepared: a batch becomes visible entirely or not at all. Needs
  ``max_prepared_transactions > 0``.
* :class:`PostgresMarkerSink` (protocol B) -- every partition commits on its
  executor with a marker row holding the partition's fingerprint; replays skip
  committed partitions. Works on any server.

Rows go in with ``COPY`` from Arrow batches; ``mode`` is ``"append"``,
``"upsert"`` or ``"cdc"``. See ``docs/jdbc.md`` for the options, the type
mapping and the operating notes.

Examples
--------
>>> from twophase.connectors.jdbc import postgres_sink
>>> sink = postgres_sink(  # doctest: +SKIP
...     "events", table="public.events", dsn="postgresql://etl@db/app?sslmode=require")
>>> query = df.writeStream.foreachBatch(sink).option(  # doctest: +SKIP
...     "checkpointLocation", "/chk/events").start()
"""

from ._admin import PreparedTransaction, list_prepared_transactions
from ._base import PostgresHandle
from ._config import ConnectionConfig, PostgresOptions, QualifiedName, WriteMode
from ._factory import postgres_sink
from ._format import postgres_sink_from_options, register_postgres_format
from ._gid import format_gid, parse_gid
from ._sink import PostgresMarkerSink, PostgresSink, PostgresTwoPhaseSink
from ._transaction import PostgresTransaction
from ._typemap import TableColumn, compatibility_problem, postgres_type

__all__ = [
    "ConnectionConfig",
    "PostgresHandle",
    "PostgresMarkerSink",
    "PostgresOptions",
    "PostgresSink",
    "PostgresTransaction",
    "PostgresTwoPhaseSink",
    "PreparedTransaction",
    "QualifiedName",
    "TableColumn",
    "WriteMode",
    "compatibility_problem",
    "format_gid",
    "list_prepared_transactions",
    "parse_gid",
    "postgres_sink",
    "postgres_sink_from_options",
    "postgres_type",
    "register_postgres_format",
]
