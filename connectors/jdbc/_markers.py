"""The markers protocol's SQL: the marker table, and the commit that writes a marker.

The executor inserts a partition's marker row in the partition's own
transaction and commits both (:meth:`MarkerTable.commit_with_marker`); the
driver creates and prunes the table and reads the markers of a replayed
batch. Marker table layout and pruning: "Marker table" in ``docs/jdbc.md``.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg2
from psycopg2 import sql

from twophase import Fingerprint, Marker
from twophase.errors import AbortRequiredError, RetriableError

from . import _sql
from ._client import PostgresClient
from ._errors import is_connection_error, sqlstate
from ._fencing import newer_or_sibling_marker
from ._transaction import PostgresTransaction

__all__ = ["MarkerTable"]

_log = logging.getLogger("twophase.connectors.jdbc")

# The primary key also refuses a second identical marker, so that a partition
# can never be recorded twice with the same rows.
_CREATE = sql.SQL(
    "CREATE TABLE IF NOT EXISTS {} ("
    "identity text NOT NULL, "
    "batch_id bigint NOT NULL, "
    "partition_id integer NOT NULL, "
    "attempt integer NOT NULL, "
    "fingerprint text NOT NULL, "
    "committed_at timestamptz NOT NULL DEFAULT now(), "
    "epoch bigint NOT NULL DEFAULT 0, "
    "PRIMARY KEY (identity, batch_id, partition_id, attempt, fingerprint))"
)
# Marker tables made before the zombie fence have no epoch: add it (old rows rank lowest).
_ADD_EPOCH = sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0")
# Parameters: identity, batch, partition, attempt, fingerprint, epoch.
_INSERT = sql.SQL(
    "INSERT INTO {} (identity, batch_id, partition_id, attempt, fingerprint, epoch) "
    "VALUES (%s, %s, %s, %s, %s, %s)"
)
# Parameters: identity, batch.
_SELECT = sql.SQL(
    "SELECT partition_id, attempt, fingerprint FROM {} "
    "WHERE identity = %s AND batch_id = %s ORDER BY partition_id, attempt"
)
# Parameters: identity, batch, partition, attempt.
_EXISTS = sql.SQL(
    "SELECT EXISTS (SELECT 1 FROM {} WHERE identity = %s AND batch_id = %s "
    "AND partition_id = %s AND attempt = %s)"
)
# Parameters: identity.
_NEWEST = sql.SQL("SELECT max(batch_id) FROM {} WHERE identity = %s")
# Parameters: identity, oldest batch to keep.
_PRUNE = sql.SQL("DELETE FROM {} WHERE identity = %s AND batch_id < %s")

_DUPLICATE_HINT = (
    "This partition's rows are already recorded as committed for this batch: "
    "writing them again would duplicate them"
)


class MarkerTable(PostgresClient):
    """The marker table of the markers protocol: one row per committed partition transaction.

    Picklable (options and connection parameters only).
    """

    @property
    def table(self) -> sql.Identifier:
        """The marker table's identifier.

        Returns
        -------
        psycopg2.sql.Identifier
            ``"schema"."table"`` or ``"table"``.
        """
        return _sql.ident(self.options.marker_table)

    # ------------------------------------------------------------ driver
    def ensure(self, identity: str, **context: Any) -> None:
        """Create the marker table if missing and prune this identity's old markers.

        Parameters
        ----------
        identity
            The sink identity.
        **context
            Error context.
        """
        table = self.table
        retention = self.options.marker_retention

        def ensure(cur: Any) -> None:
            cur.execute("SELECT to_regclass(%s)", (table.as_string(cur),))
            if cur.fetchone()[0] is None:
                cur.execute(_CREATE.format(table))
            else:
                cur.execute(_ADD_EPOCH.format(table))
            cur.execute(_NEWEST.format(table), (identity,))
            newest = cur.fetchone()[0]
            if newest is not None:
                cur.execute(_PRUNE.format(table), (identity, int(newest) - retention + 1))

        self.run(f"preparing the marker table {self.options.marker_table}", ensure, **context)

    def read(self, identity: str, batch: int, **context: Any) -> list[Marker]:
        """Read the committed markers of one batch.

        Parameters
        ----------
        identity
            The sink identity.
        batch
            The batch id.
        **context
            Error context.

        Returns
        -------
        list of Marker
            One per committed partition transaction.
        """
        table = self.table

        def query(cur: Any) -> list[Marker]:
            cur.execute(_SELECT.format(table), (identity, batch))
            return [
                Marker(identity, batch, int(p), int(a), Fingerprint.parse(f))
                for p, a, f in cur.fetchall()
            ]

        context.setdefault("batch_id", batch)
        return self.run(f"reading markers from {self.options.marker_table}", query, **context)

    def exists(self, marker: Marker, **context: Any) -> bool:
        """Whether the marker of one transaction (identity, batch, partition, attempt) committed.

        Parameters
        ----------
        marker
            The transaction's marker (its fingerprint is not compared).
        **context
            Error context.

        Returns
        -------
        bool
            True when the marker row is visible (the transaction committed).
        """
        table = self.table
        key = (marker.identity, marker.batch_id, marker.partition_id, marker.attempt)

        def query(cur: Any) -> bool:
            cur.execute(_EXISTS.format(table), key)
            return bool(cur.fetchone()[0])

        return self.run(f"reading markers from {self.options.marker_table}", query, **context)

    # ---------------------------------------------------------- executor
    def commit_with_marker(self, txn: PostgresTransaction, marker: Marker) -> None:
        """Insert the marker row into the finished transaction, then ``COMMIT`` it.

        Every ``marker_retention`` batches, the transaction of partition 0
        also deletes this identity's markers older than ``marker_retention``
        batches. When the connection breaks during ``COMMIT`` (outcome
        unknown), the marker tells: present means committed.

        Parameters
        ----------
        txn
            The open transaction, merged (:meth:`PostgresWriter.finish`).
        marker
            The partition's marker.

        Raises
        ------
        RetriableError
            The connection broke during ``COMMIT`` and the marker is not
            there: the transaction did not commit.
        """
        conn = txn.open_connection("commit_with_marker()")
        table = self.table
        retention = self.options.marker_retention
        try:
            with conn.cursor() as cur:
                newer_or_sibling_marker(cur, table, txn.context)  # the zombie fence
                cur.execute(
                    _INSERT.format(table),
                    (
                        marker.identity,
                        marker.batch_id,
                        marker.partition_id,
                        marker.attempt,
                        str(marker.fingerprint),
                        txn.context.epoch,
                    ),
                )
                if marker.partition_id == 0 and marker.batch_id % retention == 0:
                    cur.execute(
                        _PRUNE.format(table), (marker.identity, marker.batch_id - retention + 1)
                    )
        except psycopg2.Error as exc:
            hint = _DUPLICATE_HINT if sqlstate(exc) == "23505" else None
            raise txn.failure(
                exc, f"writing the marker into {self.options.marker_table}", hint
            ) from exc
        self._commit(txn, marker)

    def _commit(self, txn: PostgresTransaction, marker: Marker) -> None:
        conn = txn.conn
        try:
            with conn.cursor() as cur:
                cur.execute("COMMIT")
                status = cur.statusmessage
        except psycopg2.Error as exc:
            if not is_connection_error(exc):
                txn.state = "rolled back"
                error = txn.failure(exc, f"COMMIT of {txn.gid!r}")
                txn.conn = None
                txn.pool.release(conn, rollback=True)
                raise error from exc
            txn.pool.discard(conn, flush=True)
            txn.conn = None
            txn.state = "unknown"
            if self.exists(marker, **txn.where):
                txn.state = "committed"
                _log.info("%s: COMMIT's reply was lost but the marker is there", txn.gid)
                return
            txn.state = "rolled back"
            raise RetriableError(
                f"the connection broke during COMMIT of {txn.gid!r} and its marker is not "
                "there: the transaction did not commit; the task is retried",
                **txn.where,
            ) from exc
        txn.conn = None
        txn.pool.release(conn)
        if status != "COMMIT":
            txn.state = "rolled back"
            raise AbortRequiredError(
                f"COMMIT of {txn.gid!r} rolled back instead (the transaction had failed)",
                **txn.where,
            )
        txn.state = "committed"
