"""Sink identity: stable across restarts from one checkpoint, new after a reset.

The identity token is ``<sink name>.<first 16 hex digits of the query id>``.
Spark keeps the query id in ``<checkpoint>/metadata``: it survives restarts
from the same checkpoint and is new when the checkpoint is reset, so a reset
can never make new data look "already committed" (``docs/guarantees.md``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._values import SinkContext
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from .._stores._store import LogStore

__all__ = ["SinkIdentity", "query_id_in_metadata", "read_query_id"]

_QUERY_ID_RE = re.compile(r"^[0-9a-fA-F-]{16,64}$")


@dataclass(frozen=True)
class SinkIdentity:
    """Who a sink is: its name within one streaming query.

    Attributes
    ----------
    name
        The sink name.
    query_id
        The streaming query id (a UUID).
    """

    name: str
    query_id: str

    def __post_init__(self) -> None:
        if not _QUERY_ID_RE.match(self.query_id):
            raise ConfigurationError(
                f"query id {self.query_id!r} is not a UUID", sink=self.name, setting="query_id"
            )

    @property
    def token(self) -> str:
        """Return the identity used in transaction ids, markers and transactional ids.

        Returns
        -------
        str
            ``"<name>.<16 hex digits>"``, at most 81 characters.
        """
        return f"{self.name}.{self.query_id.replace('-', '').lower()[:16]}"

    def log_location(self, checkpoint: str) -> str:
        """Return where the coordinator log of this identity lives.

        Parameters
        ----------
        checkpoint
            The query's checkpoint location.

        Returns
        -------
        str
            ``<checkpoint>/twophase/<name>/<query id>``.
        """
        return f"{checkpoint.rstrip('/')}/twophase/{self.name}/{self.query_id}"

    def context(self, checkpoint: str, run_id: str) -> SinkContext:
        """Return what a sink is told when it is opened for the run ``run_id`` of its query.

        Parameters
        ----------
        checkpoint
            The query's checkpoint location.
        run_id
            The run of the query.

        Returns
        -------
        SinkContext
            Its ``log_location`` is :meth:`log_location` of ``checkpoint``.
        """
        return SinkContext(
            self.name, self.token, self.query_id, run_id, self.log_location(checkpoint)
        )


def query_id_in_metadata(raw: bytes | None) -> str | None:
    """Return the query id Spark wrote in a checkpoint's ``metadata`` file.

    Parameters
    ----------
    raw
        The file's bytes, or None when it does not exist.

    Returns
    -------
    str or None
        The id, or None when the file is absent or unreadable.
    """
    if not raw:
        return None
    try:
        value = json.loads(raw.decode().strip().splitlines()[0])
    except (ValueError, IndexError, UnicodeDecodeError):
        return None
    found = value.get("id") if isinstance(value, dict) else None
    return str(found) if found else None


def read_query_id(checkpoint: LogStore) -> str | None:
    """Return the query id Spark wrote in a checkpoint's ``metadata`` file, if any.

    Parameters
    ----------
    checkpoint
        A store rooted at the checkpoint location.

    Returns
    -------
    str or None
        The id, or None when the file is absent or unreadable.
    """
    return query_id_in_metadata(checkpoint.read("metadata"))
