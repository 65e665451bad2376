"""The MariaDB / MySQL dialect of the JDBC family (PyMySQL, XA, multi-row ``INSERT``).

The public names are re-exported by :mod:`twophase.connectors.jdbc`.
"""
