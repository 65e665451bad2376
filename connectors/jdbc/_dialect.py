"""What a database supplies to the JDBC family: the dialect interfaces.

The sink classes (:mod:`._sink`) are written once, for every SQL database with
transactions. They plan nothing and run no SQL themselves: each hook hands its
work to one of five parts that a :class:`Dialect` builds from the sink's
options and connection parameters.

* :class:`Writer` -- the executor side both protocols share: open a
  transaction, load record batches into it, finish it (merge upserts and CDC),
  roll it back.
* :class:`Checker` -- the driver's checks at ``open`` and before each batch:
  the identity, the table, the privileges, the batch schema.
* :class:`PreparedStore` -- the coordinated protocol: the server's capacity for
  prepared transactions, the zombie fence, prepare (executor), commit and
  roll back by transaction id and list this identity's in-doubt transactions
  (driver).
* :class:`MarkerStore` -- the markers protocol: the marker table, read on the
  driver, written in the partition's own transaction on the executor.
* :class:`DeadLetterStore` -- ``bad_rows="dead_letter"``: the dead-letter table,
  created on the driver, written in the partition's transaction, read and
  redriven from the driver or the command line.

A dialect object is stateless and picklable (a module-level instance), and so
is every part it builds (options and connection parameters only; connections
live in per-process pools). ``docs/development.md`` ("The JDBC family, and
adding a database") walks through what each part must guarantee.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar, Generic, Protocol, TypeVar

import pyarrow as pa

from twophase import (
    DeadLetter,
    Marker,
    RowError,
    TaskContext,
    TransactionHandle,
    TransactionStatus,
)

from .._context import ErrorContext
from ._config import ConnectionConfig
from ._options import JdbcOptions

__all__ = [
    "Checker",
    "DeadLetterStore",
    "Dialect",
    "MarkerStore",
    "PartsDialect",
    "PreparedStore",
    "Writer",
    "WriterClass",
]

TxnT = TypeVar("TxnT")
TxnT_contra = TypeVar("TxnT_contra", contravariant=True)
HandleT = TypeVar("HandleT", bound=TransactionHandle)


class Writer(Protocol[TxnT]):
    """The executor side of both protocols, up to the end of the writes."""

    @property
    def dead_letter_write_rows(self) -> int:
        """``bad_rows="dead_letter"``: the sink's ``write_batch_rows`` (each write settles)."""
        ...

    def begin(self, context: TaskContext) -> TxnT:
        """Open the partition's transaction (and, for the markers protocol, take its slot)."""
        ...

    def write(self, txn: TxnT, batch: pa.RecordBatch) -> list[RowError]:
        """Load one record batch into the transaction; return the rows refused (dead letters)."""
        ...

    def finish(self, txn: TxnT) -> None:
        """End the loads; merge staged rows into the table (upsert, CDC)."""
        ...

    def rollback(self, txn: TxnT) -> None:
        """Roll the transaction back, open or prepared; idempotent."""
        ...


class Checker(Protocol):
    """The driver's checks of the target."""

    def check_open(self, identity: str, *, coordinated: bool, where: ErrorContext) -> None:
        """Check the identity's transaction ids, the table and the user's privileges."""
        ...

    def check_schema(self, schema: pa.Schema, where: ErrorContext) -> None:
        """Create the table if asked, then check a batch's schema against it."""
        ...


class PreparedStore(Protocol[TxnT_contra, HandleT]):
    """The coordinated protocol's statements on prepared transactions."""

    def capacity(self, identity: str, where: ErrorContext) -> int | None:
        """Refuse a server that cannot prepare; return how many partitions a batch may have."""
        ...

    def ensure_ready(self, identity: str, where: ErrorContext) -> None:
        """Create the fence for this identity; warn of other sinks' stale transactions."""
        ...

    def prepare(self, txn: TxnT_contra) -> HandleT:
        """Refuse a fenced attempt, prepare the finished transaction (executor)."""
        ...

    def fence(self, identity: str, epoch: int, batch_id: int, where: ErrorContext) -> bool:
        """Fence every attempt up to ``(epoch, batch_id)``; False while a prepared one holds it."""
        ...

    def commit_prepared(self, handle: HandleT, where: ErrorContext) -> str:
        """Commit by transaction id; idempotent. Returns what happened, for the log."""
        ...

    def rollback_prepared(self, handle: HandleT, where: ErrorContext) -> None:
        """Roll back by transaction id; an unknown id is success, a foreign one refused."""
        ...

    def status(self, handle: HandleT, where: ErrorContext) -> TransactionStatus | None:
        """Tell prepared, committed (its own proof row says so) or lost; None: cannot tell."""
        ...

    def in_doubt(self, identity: str, where: ErrorContext) -> Sequence[HandleT]:
        """List exactly this identity's prepared transactions."""
        ...


class MarkerStore(Protocol[TxnT_contra]):
    """Return the markers protocol's marker table."""

    def ensure(self, identity: str, where: ErrorContext) -> None:
        """Create the marker table if missing; prune this identity's old markers."""
        ...

    def read(self, identity: str, batch: int, where: ErrorContext) -> list[Marker]:
        """Return the committed markers of one batch."""
        ...

    def commit_with_marker(self, txn: TxnT_contra, marker: Marker) -> None:
        """Insert the marker row in the transaction and commit it (executor)."""
        ...


class DeadLetterStore(Protocol[TxnT_contra]):
    """The dead-letter table of ``bad_rows="dead_letter"``."""

    def ensure(self, where: ErrorContext) -> None:
        """Create the dead-letter table if missing (driver, at ``open``)."""
        ...

    def write(self, txn: TxnT_contra, letters: Sequence[DeadLetter]) -> None:
        """Insert a partition's dead letters in its transaction (executor)."""
        ...

    def read(self, sink: str, where: ErrorContext) -> Iterator[DeadLetter]:
        """Yield a sink's pending dead letters, by batch, partition and position."""
        ...

    def redrive(
        self, sink: str, letters: Sequence[DeadLetter], where: ErrorContext
    ) -> list[RowError]:
        """Move letters' rows into the table, in one transaction; return those still refused."""
        ...


class Dialect(Protocol[TxnT, HandleT]):
    """One database: builds the five parts the sink classes drive.

    Attributes
    ----------
    name
        The database's name for messages and ``repr`` (``"PostgreSQL"``).
    """

    @property
    def name(self) -> str:
        """The database's name."""
        ...

    def writer(
        self, options: JdbcOptions, connection: ConnectionConfig, *, prepare: bool
    ) -> Writer[TxnT]:
        """Return the executor side (``prepare``: the transaction will be prepared)."""
        ...

    def checker(self, options: JdbcOptions, connection: ConnectionConfig) -> Checker:
        """Return the driver's checks."""
        ...

    def prepared(
        self, options: JdbcOptions, connection: ConnectionConfig
    ) -> PreparedStore[TxnT, HandleT]:
        """Return the coordinated protocol's statements."""
        ...

    def markers(self, options: JdbcOptions, connection: ConnectionConfig) -> MarkerStore[TxnT]:
        """Return the markers protocol's marker table."""
        ...

    def dead_letters(
        self, options: JdbcOptions, connection: ConnectionConfig
    ) -> DeadLetterStore[TxnT]:
        """Return the dead-letter table."""
        ...


class WriterClass(Protocol[TxnT]):
    """A :class:`Writer` class: built from options, connection parameters and ``prepare``."""

    def __call__(
        self, options: JdbcOptions, connection: ConnectionConfig, *, prepare: bool
    ) -> Writer[TxnT]:
        """Return the executor side (``prepare``: the transaction will be prepared)."""
        ...


class PartsDialect(Generic[TxnT, HandleT]):
    """A dialect made of its five part classes, each built from options and connection.

    A subclass names its database and its parts; its one module-level instance
    (named by :attr:`instance`) pickles by name.
    """

    #: The database's name for messages and ``repr``.
    name: ClassVar[str]
    #: The module-level name of the dialect's instance.
    instance: ClassVar[str]
    #: The classes of the :class:`Writer`, :class:`Checker`, :class:`PreparedStore`,
    #: :class:`MarkerStore` and :class:`DeadLetterStore` (a class attribute of each subclass).
    parts: tuple[
        WriterClass[TxnT],
        Callable[[JdbcOptions, ConnectionConfig], Checker],
        Callable[[JdbcOptions, ConnectionConfig], PreparedStore[TxnT, HandleT]],
        Callable[[JdbcOptions, ConnectionConfig], MarkerStore[TxnT]],
        Callable[[JdbcOptions, ConnectionConfig], DeadLetterStore[TxnT]],
    ]

    def writer(
        self, options: JdbcOptions, connection: ConnectionConfig, *, prepare: bool
    ) -> Writer[TxnT]:
        """Return the executor side (``prepare``: the transaction will be prepared)."""
        return self.parts[0](options, connection, prepare=prepare)

    def checker(self, options: JdbcOptions, connection: ConnectionConfig) -> Checker:
        """Return the driver's checks."""
        return self.parts[1](options, connection)

    def prepared(
        self, options: JdbcOptions, connection: ConnectionConfig
    ) -> PreparedStore[TxnT, HandleT]:
        """Return the coordinated protocol's statements."""
        return self.parts[2](options, connection)

    def markers(self, options: JdbcOptions, connection: ConnectionConfig) -> MarkerStore[TxnT]:
        """Return the markers protocol's marker table."""
        return self.parts[3](options, connection)

    def dead_letters(
        self, options: JdbcOptions, connection: ConnectionConfig
    ) -> DeadLetterStore[TxnT]:
        """Return the dead-letter table."""
        return self.parts[4](options, connection)

    def __reduce__(self) -> str:
        return self.instance
