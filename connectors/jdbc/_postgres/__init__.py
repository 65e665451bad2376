"""The PostgreSQL dialect of the JDBC family (psycopg2, ``PREPARE TRANSACTION``, ``COPY``).

Its public names are re-exported by :mod:`twophase.connectors.jdbc`, each
imported from its module on first use. This ``__init__`` imports no client
library: a Spark Connect client registers the ``format(...)`` without psycopg2.
"""

from typing import Final

from .._format import FormatSpec, text_option

#: The package's public names, by the module that defines them ("": this ``__init__``).
PUBLIC: Final = {
    "_admin": ("PreparedTransaction", "list_prepared_transactions"),
    "_dialect": ("PostgresMarkerSink", "PostgresTwoPhaseSink"),
    "_factory": ("postgres_sink",),
    "": ("register_postgres_format",),
}

#: ``format("twophase-postgres")``: :func:`~._factory.postgres_sink` from the options,
#: ``dsn`` among them, and ``mergeSchema`` (PostgreSQL's own).
FORMAT: Final = FormatSpec(
    "twophase-postgres",
    f"{__name__}._factory:postgres_sink",
    "dsn",
    {"mergeschema": ("merge_schema", text_option)},
)

register_postgres_format = FORMAT.registrar(__name__, "register_postgres_format")
