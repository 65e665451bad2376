"""The markers protocol on MariaDB: the marker table; the slot's named locks go at commit."""

from __future__ import annotations

from typing import Any

from .._marker_table import MarkerTable
from ._client import MariaDBClient
from ._errors import errno
from ._rows import mariadb_add_format_column, mariadb_has_column
from ._sql import table
from ._zombie_fences import create_slots_table, release_slot

__all__ = ["MariaDBMarkerTable"]


class MariaDBMarkerTable(MariaDBClient, MarkerTable):
    """MariaDB's marker table (InnoDB, binary collation: identities compare byte for byte)."""

    create_statement = (
        "CREATE TABLE IF NOT EXISTS {} ("
        "identity VARCHAR(255) NOT NULL, "
        "batch_id BIGINT NOT NULL, "
        "partition_id INT NOT NULL, "
        "attempt INT NOT NULL, "
        "fingerprint VARCHAR(255) NOT NULL, "
        "committed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        "epoch BIGINT NOT NULL DEFAULT 0, "
        "record_format SMALLINT NOT NULL DEFAULT 1, "
        "PRIMARY KEY (identity, batch_id, partition_id, attempt, fingerprint)) "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )

    @property
    def table(self) -> str:
        """Return ```db`.`table``` or ```table```."""
        return table(self.options.marker_table)

    def is_duplicate(self, exc: BaseException) -> bool:
        """Error 1062."""
        return errno(exc) == 1062

    def create(self, cur: Any, name: str) -> None:
        """Create the marker table and the attempts registry (``twophase_attempts``) if missing."""
        super().create(cur, name)
        create_slots_table(cur, self.options)

    def has_column(self, cur: Any, table: str, column: str) -> bool:
        """``SHOW COLUMNS``."""
        return mariadb_has_column(cur, table, column)

    def add_format_column(self, cur: Any, table: str) -> None:
        """Add ``record_format`` to a table made before 0.3.0, unless a lock is held on it."""
        mariadb_add_format_column(cur, table)

    def end_session(self, cur: Any) -> None:
        """Free the slot's named locks."""
        release_slot(cur)
