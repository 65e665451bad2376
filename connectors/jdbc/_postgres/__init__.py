"""The PostgreSQL dialect of the JDBC family (psycopg2, ``PREPARE TRANSACTION``, ``COPY``).

The public names are re-exported by :mod:`twophase.connectors.jdbc`.
"""

from typing import Final

#: Each public name of the dialect and the module of this package that defines it
#: (imported on first use: this package's ``__init__`` imports no client library).
PUBLIC: Final = {
    "PostgresMarkerSink": "_dialect",
    "PostgresTwoPhaseSink": "_dialect",
    "PreparedTransaction": "_admin",
    "list_prepared_transactions": "_admin",
    "postgres_sink": "_factory",
    "register_postgres_format": "_format",
}
