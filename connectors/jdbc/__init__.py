"""Exactly-once sinks into PostgreSQL for PySpark Structured Streaming.

Two commit protocols, chosen from the server by :func:`postgres_sink`:

* :class:`PostgresTwoPhaseSink` (``coordinated``) -- ``PREPARE TRANSACTION`` on the
  executors, ``COMMIT PREPARED`` from the driver once every partition is
  prepared: a batch becomes visible entirely or not at all. Needs
  ``max_prepared_transactions > 0``.
* :class:`PostgresMarkerSink` (``markers``) -- every partition commits on its
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
from ._factory import postgres_sink
from ._format import register_postgres_format
from ._pool import close_connections
from ._sink import PostgresMarkerSink, PostgresTwoPhaseSink

__all__ = [
    "PostgresMarkerSink",
    "PostgresTwoPhaseSink",
    "PreparedTransaction",
    "close_connections",
    "list_prepared_transactions",
    "postgres_sink",
    "register_postgres_format",
]
