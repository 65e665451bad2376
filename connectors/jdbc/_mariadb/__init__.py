"""The MariaDB dialect of the JDBC family (PyMySQL, XA, ``LOAD DATA LOCAL INFILE``).

MySQL is not supported: the sessions set MariaDB's own variables
(``docs/mariadb.md``). The names in ``PUBLIC`` are re-exported by
:mod:`twophase.connectors.jdbc`; PyMySQL is imported only when one is used.
"""

from typing import Final

from .._format import FormatSpec

PUBLIC: Final = {
    "_dialect": ("MariaDBMarkerSink", "MariaDBTwoPhaseSink"),
    "_factory": ("mariadb_sink",),
    "": ("register_mariadb_format",),
}

#: ``format("twophase-mariadb")``, whose connection option is ``url`` (``mysql://...``).
FORMAT: Final = FormatSpec("twophase-mariadb", f"{__name__}._factory:mariadb_sink", "url")
register_mariadb_format = FORMAT.registrar(__name__, "register_mariadb_format")
