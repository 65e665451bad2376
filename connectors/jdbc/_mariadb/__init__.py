"""The MariaDB dialect of the JDBC family (PyMySQL, XA, ``LOAD DATA LOCAL INFILE``).

MySQL is not supported: the sessions set MariaDB's own variables (``docs/mariadb.md``).

The public names are re-exported by :mod:`twophase.connectors.jdbc`. This
``__init__`` imports no client library: it declares the public names and the
``format(...)``, which a Spark Connect client registers without PyMySQL.
"""

from typing import Final

from .._format import FormatSpec

#: Each public name of the dialect and the module of this package that defines it
#: (imported on first use; ``""``: this ``__init__``).
PUBLIC: Final = {
    "MariaDBMarkerSink": "_dialect",
    "MariaDBTwoPhaseSink": "_dialect",
    "mariadb_sink": "_factory",
    "register_mariadb_format": "",
}

#: ``format("twophase-mariadb")``: :func:`~._factory.mariadb_sink` from the writer's
#: options; ``url`` (``mysql://...``) is the connection option.
FORMAT: Final = FormatSpec("twophase-mariadb", f"{__name__}._factory:mariadb_sink", "url")

register_mariadb_format = FORMAT.registrar(__name__, "register_mariadb_format")
