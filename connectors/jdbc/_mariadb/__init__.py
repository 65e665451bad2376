"""The MariaDB dialect of the JDBC family (PyMySQL, XA, ``LOAD DATA LOCAL INFILE``).

MySQL is not supported: the sessions set MariaDB's own variables (``docs/mariadb.md``).

The public names are re-exported by :mod:`twophase.connectors.jdbc`.
"""

from typing import Final

#: Each public name of the dialect and the module of this package that defines it
#: (imported on first use: this package's ``__init__`` imports no client library).
PUBLIC: Final = {
    "MariaDBMarkerSink": "_dialect",
    "MariaDBTwoPhaseSink": "_dialect",
    "mariadb_sink": "_factory",
    "register_mariadb_format": "_format",
}
