"""A third dialect of the JDBC family, over SQLite, used only in tests: the seam, proven.

It plugs into the family through the documented seam alone (docs/development.md, "The JDBC
family, and adding a database"): a DB-API layer, an error table, type rows, the table checks, a
writer, the marker table, the dialect object and a factory on ``build_sink`` -- and nothing of
PostgreSQL's or MariaDB's. SQLite has no transaction that outlives its session, so, as the
family says of such a database, it runs the markers protocol only: its prepared store is the
family's refusing one. Its writes take SQLite's database-wide write lock (``BEGIN IMMEDIATE``),
which also keeps one live attempt per slot. Append mode only.

The family's contract tests run against it (``test_jdbc_sqlite_dialect.py``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from twophase import TaskContext, TransactionHandle
from twophase.connectors._context import ErrorContext
from twophase.connectors.jdbc._checks import TableChecks
from twophase.connectors.jdbc._client import JdbcClient
from twophase.connectors.jdbc._config import ConnectionConfig
from twophase.connectors.jdbc._dead_letter_table import DeadLetterTable
from twophase.connectors.jdbc._dialect import PartsDialect
from twophase.connectors.jdbc._errors import Codes, ErrorMap, ErrorRule
from twophase.connectors.jdbc._evolution import NewColumn
from twophase.connectors.jdbc._factory import Choice, SinkClasses, build_sink
from twophase.connectors.jdbc._gid import LONGEST_SUFFIX, IdLimit
from twophase.connectors.jdbc._marker_table import MarkerTable
from twophase.connectors.jdbc._network import NetworkBounds
from twophase.connectors.jdbc._options import JdbcOptions, QualifiedName
from twophase.connectors.jdbc._prepared_store import NoPreparedTransactions
from twophase.connectors.jdbc._sink import JdbcMarkerSink, JdbcTwoPhaseSink
from twophase.connectors.jdbc._table import TableColumn, TableInfo
from twophase.connectors.jdbc._transaction import JdbcTransaction
from twophase.connectors.jdbc._type_rules import TypeRow, TypeRules
from twophase.connectors.jdbc._writer import TransactionWriter
from twophase.errors import ConfigurationError, DataError, RetriableError

__all__ = ["SQLITE", "SqliteMarkerSink", "sqlite_sink"]


def quote(name: str) -> str:
    """Quote an identifier the SQL standard's way."""
    return '"' + name.replace('"', '""') + '"'


def table_name(name: QualifiedName) -> str:
    """Quote a table name (a schema is an attached database in SQLite)."""
    return ".".join(quote(part) for part in name.parts())


# ------------------------------------------------------------------ the DB-API layer
class _Cursor:
    """sqlite3's cursor with the family's ``%s`` parameters and ``with`` blocks."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        self._cursor.execute(statement.replace("%s", "?"), tuple(params))

    def executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        self._cursor.executemany(statement.replace("%s", "?"), rows)

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    def close(self) -> None:
        self._cursor.close()


class _Connection:
    """An autocommit sqlite3 connection whose transactions the sink opens with ``BEGIN``."""

    def __init__(self, path: str, busy_ms: int) -> None:
        self.raw = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.raw.execute(f"PRAGMA busy_timeout = {busy_ms}")
        self.closed = False

    def cursor(self) -> _Cursor:
        return _Cursor(self.raw.cursor())

    def close(self) -> None:
        self.closed = True
        self.raw.close()


class SqliteDbApi:
    """SQLite through the standard library's sqlite3 (a file on this machine)."""

    name = "sqlite3"

    def connect(
        self, config: ConnectionConfig, settings: tuple[tuple[str, str], ...], bounds: NetworkBounds
    ) -> _Connection:
        """Open the database file; ``lock_timeout`` becomes SQLite's busy timeout."""
        values = dict(settings)
        return _Connection(config.get("database") or "", int(values.get("lock_timeout", "30000")))

    def is_closed(self, conn: _Connection) -> bool:
        """Whether it was closed."""
        return conn.closed

    def is_idle(self, conn: _Connection) -> bool:
        """Whether no transaction is open."""
        return not conn.closed and not conn.raw.in_transaction

    def rollback(self, conn: _Connection) -> None:
        """Roll back the open transaction, if any."""
        if conn.raw.in_transaction:
            conn.raw.execute("ROLLBACK")


SQLITE3 = SqliteDbApi()


# ------------------------------------------------------------------ errors and client
class SqliteErrors(ErrorMap):
    """sqlite3's errors, by their extended result code's name."""

    database = "SQLite"
    database_keyword = "database"
    library = "sqlite3"
    lost = Codes()
    rules = (
        ErrorRule(Codes(classes=("SQLITE_CONSTRAINT",)), DataError),
        ErrorRule(Codes(classes=("SQLITE_MISMATCH", "SQLITE_TOOBIG")), DataError),
        ErrorRule(Codes(classes=("SQLITE_BUSY", "SQLITE_LOCKED")), RetriableError),
        ErrorRule(Codes(classes=("SQLITE_CANTOPEN", "SQLITE_READONLY")), ConfigurationError),
    )
    refused_login = Codes()
    missing_database = Codes(classes=("SQLITE_CANTOPEN",))
    row_errors = (
        ("not_null", Codes(frozenset({"SQLITE_CONSTRAINT_NOTNULL"}))),
        ("unique", Codes(frozenset({"SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"}))),
        ("check", Codes(frozenset({"SQLITE_CONSTRAINT_CHECK"}))),
    )

    def code_of(self, exc: BaseException) -> str | None:
        """The extended result code's name (``SQLITE_CONSTRAINT_NOTNULL``)."""
        return getattr(exc, "sqlite_errorname", None)

    def lost_without_code(self, exc: BaseException) -> bool:
        """A file database loses no session."""
        return False

    def server_text(self, exc: BaseException) -> str:
        """The message and the code."""
        return f"{exc} ({self.code_of(exc)})"

    def column_of(self, exc: BaseException, columns: Sequence[tuple[str, str]]) -> str | None:
        """``NOT NULL constraint failed: t.c`` names the column."""
        text = str(exc)
        return next((name for name, _type in columns if text.endswith(f".{name}")), None)


class SqliteClient(JdbcClient):
    """The dialect's client: sqlite3 and the lock timeout as its busy timeout."""

    dbapi = SQLITE3
    errors = SqliteErrors()

    def session_settings(self) -> tuple[tuple[str, str], ...]:
        """Only the lock timeout, in milliseconds."""
        return (("lock_timeout", str(int(self.options.lock_timeout * 1000) or 1)),)


# ------------------------------------------------------------------ types and checks
SQLITE_TYPES = TypeRules(
    "SQLite",
    (
        TypeRow("boolean int8 int16 int32 int64 uint8 uint16 uint32", "INTEGER", {"integer"}, "v"),
        TypeRow("float16 float32 float64", "REAL", {"real"}, "v"),
        TypeRow("string", "TEXT", {"text"}, "v"),
        TypeRow("binary", "BLOB", {"blob"}, "v"),
        TypeRow("null", "TEXT", None, "v"),
    ),
    other_kind="v",
)


def describe_table(cur: Any, table: QualifiedName) -> TableInfo | None:
    """Read the table's columns (``PRAGMA table_info``); None when it does not exist."""
    cur.execute(f"PRAGMA table_info({table_name(table)})")
    rows = cur.fetchall()
    if not rows:
        return None
    columns = tuple(
        TableColumn(name, declared, declared.lower(), "", None, bool(not_null), default is not None)
        for _cid, name, declared, not_null, default, _pk in rows
    )
    return TableInfo(0, "table", columns, ())


class SqliteChecker(SqliteClient, TableChecks):
    """The driver's checks: ids of any length, the table's columns."""

    ids = IdLimit("SQLite", "transaction ids", 1 << 20, LONGEST_SUFFIX)
    types = SQLITE_TYPES

    def describe_table(self, cur: Any, table: QualifiedName) -> TableInfo | None:
        """``PRAGMA table_info``."""
        return describe_table(cur, table)

    def create_table_statement(self, fields: Sequence[tuple[str, str, bool]]) -> str:
        """``CREATE TABLE IF NOT EXISTS``."""
        parts = [f"{quote(n)} {t}{' NOT NULL' if nn else ''}" for n, t, nn in fields]
        return f"CREATE TABLE IF NOT EXISTS {table_name(self.options.table)} ({', '.join(parts)})"

    def add_column_statement(self, column: NewColumn) -> str:
        """``ADD COLUMN`` (no ``IF NOT EXISTS`` in SQLite: the core takes a duplicate as added)."""
        target = table_name(self.options.table)
        return f"ALTER TABLE {target} ADD COLUMN {quote(column.name)} {column.sql_type}"


# ------------------------------------------------------------------ the writer
class SqliteTransaction(JdbcTransaction):
    """A partition's SQLite transaction."""

    errors = SqliteClient.errors


class SqliteWriter(SqliteClient, TransactionWriter[SqliteTransaction]):
    """``BEGIN IMMEDIATE`` (the write lock: one writer at a time), ``INSERT``, ``ROLLBACK``."""

    types = SQLITE_TYPES

    def start(self, context: TaskContext, where: ErrorContext) -> tuple[SqliteTransaction, bool]:
        """Take the write lock and read the table."""

        def start(cur: Any) -> TableInfo | None:
            cur.execute("BEGIN IMMEDIATE")
            return describe_table(cur, self.options.table)

        found, conn = self.session("starting the transaction", start, where)
        gid = f"tp:{context.identity}:{context.batch_id}:{context.partition_id}:{context.attempt}"
        empty = TableInfo(0, "table", (), ())
        txn = SqliteTransaction(context, gid, self.pool(), conn, found or empty, None)
        return txn, found is not None

    def load(self, txn: SqliteTransaction, batch: pa.RecordBatch, *, settle: bool) -> None:
        """Insert the rows with one ``executemany``."""
        conn = txn.open_connection("write()")
        if batch.num_rows == 0:
            return
        plan = self.planned(txn, batch.schema)
        columns = [batch.column(c.index).to_pylist() for c in plan.columns]
        names = ", ".join(quote(n) for n in plan.names)
        marks = ", ".join("%s" for _ in plan.columns)
        statement = f"INSERT INTO {table_name(self.options.table)} ({names}) VALUES ({marks})"
        try:
            with conn.cursor() as cur:
                cur.executemany(statement, list(zip(*columns, strict=True)))
        except txn.errors.error as exc:
            raise txn.failure(exc, f"INSERT into {self.options.table}") from exc
        txn.rows += batch.num_rows

    def finish(self, txn: SqliteTransaction) -> None:
        """Nothing to merge in append mode."""

    def release_session(self, txn: SqliteTransaction) -> None:
        """Give the connection back, rolled back."""
        if txn.conn is not None:
            conn, txn.conn = txn.conn, None
            txn.pool.release(conn, rollback=True)

    def rollback_prepared(self, gid: str, where: ErrorContext) -> None:
        """Never called: nothing is prepared."""
        raise AssertionError("SQLite prepares nothing")

    def create_staging(self, txn: SqliteTransaction) -> None:
        """Append only (refused at build)."""
        raise AssertionError("append only")


# ------------------------------------------------------------------ the marker table
class SqliteMarkerTable(SqliteClient, MarkerTable):
    """The marker table, in SQLite's types."""

    create_statement = (
        "CREATE TABLE IF NOT EXISTS {} ("
        "identity TEXT NOT NULL, batch_id INTEGER NOT NULL, partition_id INTEGER NOT NULL, "
        "attempt INTEGER NOT NULL, fingerprint TEXT NOT NULL, "
        "committed_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, "
        "epoch INTEGER NOT NULL DEFAULT 0, record_format INTEGER NOT NULL DEFAULT 1, "
        "PRIMARY KEY (identity, batch_id, partition_id, attempt, fingerprint))"
    )

    @property
    def table(self) -> str:
        """The quoted marker table."""
        return table_name(self.options.marker_table)

    def is_duplicate(self, exc: BaseException) -> bool:
        """A primary key violation."""
        return getattr(exc, "sqlite_errorname", "") == "SQLITE_CONSTRAINT_PRIMARYKEY"

    def is_missing(self, cur: Any, table: str) -> bool | None:
        """Asked of ``PRAGMA table_info``."""
        return describe_table(cur, self.options.marker_table) is None

    def has_column(self, cur: Any, table: str, column: str) -> bool:
        """Asked of ``PRAGMA table_info``."""
        found = describe_table(cur, self.options.marker_table)
        return found is not None and found.column(column) is not None

    def add_format_column(self, cur: Any, table: str) -> None:
        """Every SQLite marker table has it."""


# ------------------------------------------------------------------ the dead letters
class SqliteDeadLetterTable(SqliteClient, DeadLetterTable):
    """The dead-letter table, in SQLite's types (the row as JSON text)."""

    types = dict.fromkeys(("name", "text", "json"), "TEXT") | {
        "bigint": "INTEGER",
        "int": "INTEGER",
        "smallint": "INTEGER",
        "now": "TEXT DEFAULT CURRENT_TIMESTAMP",
    }
    row_text = '"row"'

    def quote(self, name: str) -> str:
        """Double quotes."""
        return quote(name)

    def is_missing(self, cur: Any) -> bool:
        """``IF NOT EXISTS`` tells: always create."""
        return True

    def lacks(self, cur: Any, privilege: str, statement: str, params: int) -> bool:
        """SQLite has no privileges: whoever may open the file may do anything in it."""
        return False

    def describe(self, cur: Any) -> TableInfo | None:
        """``PRAGMA table_info``."""
        return describe_table(cur, self.options.table)


# ------------------------------------------------------------------ the dialect
class SqliteDialect(PartsDialect[SqliteTransaction, TransactionHandle]):
    """SQLite: the markers protocol only, append only."""

    name = "SQLite"
    instance = "SQLITE"
    parts = (
        SqliteWriter,
        SqliteChecker,
        NoPreparedTransactions,
        SqliteMarkerTable,
        SqliteDeadLetterTable,
    )
    max_identifier_bytes = 1 << 10
    sink_options: frozenset[str] = frozenset()
    connection_keywords = frozenset({"database"})

    def connection(self, target: str | None, keywords: Mapping[str, object]) -> ConnectionConfig:
        """The database file is the target."""
        return ConnectionConfig(None, database=target or str(keywords.get("database", "")))

    def accepts_keyword(self, keyword: str) -> bool:
        """Only ``database``."""
        return keyword in self.connection_keywords

    def application_name(self, sink: str) -> str | None:
        """None: SQLite has no sessions to name."""
        return None

    def choose(
        self, requested: str, options: JdbcOptions, connection: ConnectionConfig, sink: str
    ) -> Choice:
        """Pick the markers protocol; refuse the coordinated one and every mode but append."""
        if options.mode != "append":
            raise ConfigurationError(
                "the SQLite test dialect writes mode='append' only", setting="mode", sink=sink
            )
        if requested == "coordinated":
            NoPreparedTransactions(options, connection).capacity("", ErrorContext(sink))
        return Choice("markers", "SQLite keeps no prepared transaction")


#: The one SQLite dialect object (it pickles by name).
SQLITE = SqliteDialect()


class SqliteTwoPhaseSink(JdbcTwoPhaseSink[SqliteTransaction, TransactionHandle]):
    """Never built: the dialect refuses the coordinated protocol."""

    dialect = SQLITE


class SqliteMarkerSink(JdbcMarkerSink[SqliteTransaction]):
    """Exactly-once into SQLite: each partition commits with its marker row."""

    dialect = SQLITE


def sqlite_sink(name: str, *, table: str, database: str, **options: Any) -> SqliteMarkerSink:
    """Build the SQLite sink: the family's ``build_sink`` does everything."""
    sinks = SinkClasses(SqliteTwoPhaseSink, SqliteMarkerSink)
    sink = build_sink(SQLITE, sinks, name, table, database, options)
    assert isinstance(sink, SqliteMarkerSink)
    return sink
