"""The PostgreSQL dialect of the JDBC family (psycopg2, ``PREPARE TRANSACTION``, ``COPY``).

The public names are re-exported by :mod:`twophase.connectors.jdbc`. This
``__init__`` imports no client library: it declares the public names and the
``format(...)``, which a Spark Connect client registers without psycopg2.
"""

from typing import Final

from .._format import FormatSpec, text_option

#: Each public name of the dialect and the module of this package that defines it
#: (imported on first use; ``""``: this ``__init__``).
PUBLIC: Final = {
    "PostgresMarkerSink": "_dialect",
    "PostgresTwoPhaseSink": "_dialect",
    "PreparedTransaction": "_admin",
    "list_prepared_transactions": "_admin",
    "postgres_sink": "_factory",
    "register_postgres_format": "",
}

#: ``format("twophase-postgres")``: :func:`~._factory.postgres_sink` from the writer's
#: options; ``dsn`` is the connection option and ``mergeSchema`` PostgreSQL's own.
FORMAT: Final = FormatSpec(
    "twophase-postgres",
    f"{__name__}._factory:postgres_sink",
    "dsn",
    {"mergeschema": ("merge_schema", text_option)},
)

register_postgres_format = FORMAT.registrar(__name__, "register_postgres_format")
