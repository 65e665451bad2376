"""PostgreSQL's limit on gids: ``strlen(gid) < GIDSIZE`` with ``GIDSIZE = 200``."""

from __future__ import annotations

from .._gid import LONGEST_SUFFIX, IdLimit

__all__ = ["GIDS", "MAX_GID_BYTES"]

#: The most bytes a gid may have.
MAX_GID_BYTES = 199

#: The whole gid is limited (``PREPARE TRANSACTION 'tp:...'``).
GIDS = IdLimit("PostgreSQL", "transaction ids", MAX_GID_BYTES, LONGEST_SUFFIX)
