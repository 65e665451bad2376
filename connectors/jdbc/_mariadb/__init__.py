"""The MariaDB dialect of the JDBC family (PyMySQL, XA, ``LOAD DATA LOCAL INFILE``).

MySQL is not supported: the sessions set MariaDB's own variables (``docs/mariadb.md``).

The public names are re-exported by :mod:`twophase.connectors.jdbc`.
"""
