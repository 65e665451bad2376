"""The markers protocol's marker table, and the commit that writes a marker, for every dialect.

The executor inserts a partition's marker row in the partition's own
transaction and commits both (:meth:`MarkerTable.commit_with_marker`); the
driver creates and prunes the table and reads the markers of a replayed
batch. Marker table layout and pruning: "Marker table" in ``docs/jdbc.md``.

The statements are the same on every database (both client libraries take ``%s``
parameters); a dialect's subclass says how to quote the table, which column
types to create it with, and how to tell a duplicate-key error and a
``COMMIT`` that rolled back instead (each dialect's ``_marker_table`` module).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from twophase import Fingerprint, Marker, TaskContext
from twophase.errors import AbortRequiredError, FatalError, RetriableError

from .._context import ErrorContext
from ._client import JdbcClient
from ._rows import FORMAT_COLUMN, check_row_format, row_dicts
from ._transaction import JdbcTransaction

__all__ = ["ADD_EPOCH", "MarkerTable", "newer_or_sibling_marker"]

_log = logging.getLogger("twophase.connectors.jdbc")

# Parameters: identity, batch, partition, attempt, fingerprint, epoch. The record format is
# the column's default (_rows.py).
_INSERT = (
    "INSERT INTO {} (identity, batch_id, partition_id, attempt, fingerprint, epoch) "
    "VALUES (%s, %s, %s, %s, %s, %s)"
)
# Parameters: identity, batch. Every column: a table made before 0.3.0 has no record_format.
_SELECT = "SELECT * FROM {} WHERE identity = %s AND batch_id = %s ORDER BY partition_id, attempt"
# Parameters: identity, batch, partition, attempt, fingerprint.
_EXISTS = (
    "SELECT 1 FROM {} WHERE identity = %s AND batch_id = %s "
    "AND partition_id = %s AND attempt = %s AND fingerprint = %s LIMIT 1"
)
# Parameters: identity, batch, partition, fingerprint. Real-time mode: the prefixes the new
# marker extends (checked by the framework before the commit), in its transaction.
_SUPERSEDED = (
    "DELETE FROM {} WHERE identity = %s AND batch_id = %s AND partition_id = %s "
    "AND fingerprint <> %s"
)
# Parameters: identity.
_NEWEST = "SELECT max(batch_id) FROM {} WHERE identity = %s"
# Parameters: identity, oldest batch to keep.
_PRUNE = "DELETE FROM {} WHERE identity = %s AND batch_id < %s"
# Marker tables made before the zombie fence have no epoch: add it (old rows rank lowest).
ADD_EPOCH = "ALTER TABLE {} ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0"
# Parameters: identity, batch, partition, epoch, epoch, attempt.
_SIBLING = (
    "SELECT epoch, attempt FROM {} WHERE identity = %s AND batch_id = %s "
    "AND partition_id = %s AND epoch >= %s AND NOT (epoch = %s AND attempt = %s) "
    "ORDER BY epoch DESC, attempt DESC LIMIT 1"
)

_DUPLICATE_HINT = (
    "This partition's rows are already recorded as committed for this batch: "
    "writing them again would duplicate them"
)


def newer_or_sibling_marker(cur: Any, table: str, context: TaskContext) -> None:
    """Refuse to commit when another attempt already committed this partition.

    Runs under the slot's lock, before the marker is inserted (the markers
    protocol's zombie fence, with the slot lock of the dialect's fencing).

    Parameters
    ----------
    cur
        The transaction's cursor.
    table
        The marker table, quoted.
    context
        The attempt.

    Raises
    ------
    AbortRequiredError
        Another attempt of this run committed the partition (the task retry finds
        its marker and skips the partition).
    FatalError
        An attempt of a newer run committed it (real-time mode: a newer attempt
        of this run too): this attempt is a zombie.
    """
    c = context
    cur.execute(
        _SIBLING.format(table),
        (c.identity, c.batch_id, c.partition_id, c.epoch, c.epoch, c.attempt),
    )
    row = cur.fetchone()
    if row is None:
        return
    epoch, attempt = int(row[0]), int(row[1])
    if c.realtime and (epoch, attempt) < (c.epoch, c.attempt):
        return  # an earlier attempt's prefix of this epoch: the framework checked it
    where = ErrorContext.of_task(c)
    if epoch > c.epoch or c.realtime:
        raise FatalError(
            f"attempt {c.attempt} (run {c.epoch}) is a zombie: attempt {attempt} of run "
            f"{epoch} already committed partition {c.partition_id} of this batch; not "
            "writing it again",
            **where.keywords(),
        )
    raise AbortRequiredError(
        f"attempt {attempt} of this run already committed partition {c.partition_id} "
        f"of this batch while attempt {c.attempt} was writing it; not writing it twice "
        "(the task's next attempt finds that marker and skips the partition)",
        **where.keywords(),
    )


class MarkerTable(JdbcClient):
    """The marker table of the markers protocol: one row per committed partition transaction.

    The dialect's :class:`~._dialect.MarkerStore`; subclasses fill in the
    database's parts. Picklable (options and connection parameters only).

    Attributes
    ----------
    create_statement
        ``CREATE TABLE IF NOT EXISTS {} (...)`` in the database's types; the
        primary key (identity, batch, partition, attempt, fingerprint) also
        refuses a second identical marker.
    """

    create_statement: ClassVar[str]

    @property
    def table(self) -> str:
        """Return the marker table's quoted name."""
        raise NotImplementedError

    def is_duplicate(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a duplicate-key error."""
        raise NotImplementedError

    def commit(self, cur: Any) -> bool:
        """Run ``COMMIT``; False when the server rolled back instead (a failed transaction)."""
        cur.execute("COMMIT")
        return True

    def end_session(self, cur: Any) -> None:
        """Reset what the session holds besides the transaction (nothing by default)."""

    def create(self, cur: Any, table: str) -> None:
        """Create the table if missing; add the ``epoch`` and format columns to an older one.

        Each ``ALTER`` runs only when its column is missing: even a no-op one
        waits for every lock on the table.
        """
        missing = self.is_missing(cur, table)
        if missing is not False:
            cur.execute(self.create_statement.format(table))
        if missing is not True:
            if not self.has_column(cur, table, "epoch"):
                cur.execute(ADD_EPOCH.format(table))
            self.add_format_column(cur, table)

    def is_missing(self, cur: Any, table: str) -> bool | None:
        """Whether the table is missing; None (the default): not asked, ``IF NOT EXISTS`` tells."""
        return None

    def has_column(self, cur: Any, table: str, column: str) -> bool:
        """Whether the table has ``column`` (the dialect's catalog)."""
        raise NotImplementedError

    def add_format_column(self, cur: Any, table: str) -> None:
        """Add ``record_format`` to a table made before 0.3.0 if no one holds it (the dialect's)."""
        raise NotImplementedError

    def _give_back(self, txn: JdbcTransaction, conn: Any) -> None:
        """Return a failed transaction's connection, rolled back and reset, or close it."""
        try:
            with conn.cursor() as cur:
                self.end_session(cur)
        except Exception:
            txn.pool.discard(conn)
            return
        txn.pool.release(conn, rollback=True)

    # ------------------------------------------------------------ driver
    def ensure(self, identity: str, where: ErrorContext) -> None:
        """Create the marker table if missing and prune this identity's old markers.

        Parameters
        ----------
        identity
            The sink identity.
        where
            The sink, named by every error.
        """
        table = self.table
        retention = self.options.marker_retention

        def ensure(cur: Any) -> None:
            self.create(cur, table)
            cur.execute(_NEWEST.format(table), (identity,))
            newest = cur.fetchone()[0]
            if newest is not None:
                cur.execute(_PRUNE.format(table), (identity, int(newest) - retention + 1))

        self.run(f"preparing the marker table {self.options.marker_table}", ensure, where)

    def read(self, identity: str, batch: int, where: ErrorContext) -> list[Marker]:
        """Read the committed markers of one batch.

        Parameters
        ----------
        identity
            The sink identity.
        batch
            The batch id.
        where
            The sink and the batch, named by every error.

        Returns
        -------
        list of Marker
            One per committed partition transaction.
        """
        table = self.table

        def query(cur: Any) -> list[Marker]:
            cur.execute(_SELECT.format(table), (identity, batch))
            markers = []
            for row in row_dicts(cur):
                p, a = int(row["partition_id"]), int(row["attempt"])
                check_row_format(
                    row.get(FORMAT_COLUMN),
                    table=self.options.marker_table,
                    row=f"identity {identity!r}, batch {batch}, partition {p}, attempt {a}",
                    where=where,
                )
                markers.append(Marker(identity, batch, p, a, Fingerprint.parse(row["fingerprint"])))
            return markers

        return self.run(f"reading markers from {self.options.marker_table}", query, where)

    def exists(self, marker: Marker, where: ErrorContext) -> bool:
        """Whether the marker of one transaction committed (a real-time task commits several).

        Parameters
        ----------
        marker
            The transaction's marker: identity, batch, partition, attempt, fingerprint.
        where
            The sink, batch and partition, named by every error.

        Returns
        -------
        bool
            True when the marker row is visible (the transaction committed).
        """
        table = self.table
        m = marker
        key = (m.identity, m.batch_id, m.partition_id, m.attempt, str(m.fingerprint))

        def query(cur: Any) -> bool:
            cur.execute(_EXISTS.format(table), key)
            return cur.fetchone() is not None

        return self.run("checking a marker", query, where)

    # ---------------------------------------------------------- executor
    def commit_with_marker(self, txn: JdbcTransaction, marker: Marker) -> None:
        """Insert the marker row into the finished transaction, then ``COMMIT`` it.

        Every ``marker_retention`` batches, the transaction of partition 0
        also deletes this identity's markers older than ``marker_retention``
        batches; in real-time mode each transaction deletes the markers of the
        shorter prefixes of its partition's epoch, which its marker extends.
        When the connection breaks during ``COMMIT`` (outcome unknown), the
        marker tells: present means committed.

        Parameters
        ----------
        txn
            The open transaction, merged (the writer's ``finish``).
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
                if txn.context.realtime:
                    key = (marker.identity, marker.batch_id, marker.partition_id)
                    cur.execute(_SUPERSEDED.format(table), (*key, str(marker.fingerprint)))
                if marker.partition_id == 0 and marker.batch_id % retention == 0:
                    cur.execute(
                        _PRUNE.format(table), (marker.identity, marker.batch_id - retention + 1)
                    )
        except txn.errors.error as exc:
            hint = _DUPLICATE_HINT if self.is_duplicate(exc) else None
            raise txn.failure(
                exc, f"writing the marker into {self.options.marker_table}", hint
            ) from exc
        self._commit(txn, marker)

    def _commit(self, txn: JdbcTransaction, marker: Marker) -> None:
        conn = txn.conn
        errors = txn.errors
        try:
            with conn.cursor() as cur:
                committed = self.commit(cur)
                self.end_session(cur)
        except errors.error as exc:
            if not errors.is_connection_error(exc):
                txn.state = "rolled back"
                error = txn.failure(exc, f"COMMIT of {txn.gid!r}")
                txn.conn = None
                self._give_back(txn, conn)
                raise error from exc
            txn.pool.discard(conn, flush=True)
            txn.conn = None
            txn.state = "unknown"
            if self.exists(marker, txn.where):
                txn.state = "committed"
                _log.info("%s: COMMIT's reply was lost but the marker is there", txn.gid)
                return
            txn.state = "rolled back"
            raise RetriableError(
                f"the connection broke during COMMIT of {txn.gid!r} and its marker is not "
                "there: the transaction did not commit; the task is retried",
                **txn.where.keywords(),
            ) from exc
        txn.conn = None
        txn.pool.release(conn)
        if not committed:
            txn.state = "rolled back"
            raise AbortRequiredError(
                f"COMMIT of {txn.gid!r} rolled back instead (the transaction had failed)",
                **txn.where.keywords(),
            )
        txn.state = "committed"
