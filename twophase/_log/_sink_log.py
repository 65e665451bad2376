"""Opening a sink's coordinator log: the one way every entry (Spark, format, test kit, CLI) does."""

from __future__ import annotations

from collections.abc import Callable

from .._stores._store import LogStore, open_store
from ._coordinator_log import CoordinatorLog
from ._identity import SinkIdentity

__all__ = ["open_sink_log"]


def open_sink_log(
    checkpoint: str,
    identity: SinkIdentity,
    *,
    store: Callable[[str], LogStore] = open_store,
) -> CoordinatorLog:
    """Return the coordinator log of ``identity`` under the query's ``checkpoint`` (not loaded).

    Parameters
    ----------
    checkpoint
        The query's checkpoint location; the log is at
        :meth:`SinkIdentity.log_location <twophase._log._identity.SinkIdentity.log_location>`.
    identity
        The sink identity the log belongs to.
    store
        Opens the store at the log's location: :func:`~twophase._stores._store.open_store`,
        or that rule with the caller's options (Spark's file system, ``fsync``, read only).

    Returns
    -------
    CoordinatorLog
        The log; its state is read by its first ``load`` or ``claim``.
    """
    location = identity.log_location(checkpoint)
    return CoordinatorLog(store(location), sink=identity.name, identity=identity.token)
