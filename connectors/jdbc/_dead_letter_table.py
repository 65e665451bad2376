"""The dead-letter table: rows the table refused, set aside in their batch's transaction.

Written once for every database: the driver creates the table at ``open`` (or
finds it, when the sink's user may not create it); the executor inserts a
partition's dead letters in the partition's own transaction, before it is
prepared or committed; the driver or the command line reads a sink's pending
letters and redrives them into the table after a fix, in one transaction. The
layout and what each column holds: "Dead letters" in ``docs/jdbc.md``.

The statements are the same on every database (both client libraries take
``%s`` parameters); a dialect's subclass says how it quotes a name, which
column types it creates the table with, how its row column reads back as JSON
text, how it reads the target table's catalog, how a JSON value becomes a
parameter of the target's column type, and how it tells whether the sink's user
lacks a privilege on the table. What the sink needs (:data:`WRITES`) is checked at
``open``, what a redrive needs (:data:`REDRIVES`) as the redrive starts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from twophase import DeadLetter, RowError
from twophase.errors import ConfigurationError, TwoPhaseError

from .._context import ErrorContext
from ._bad_rows import SAVEPOINT
from ._client import JdbcClient
from ._rows import check_row_format
from ._table import TableColumn, TableInfo
from ._transaction import JdbcTransaction

__all__ = ["LAYOUT", "REDRIVES", "WRITES", "DeadLetterTable"]

#: The columns a dead letter fills, in :class:`~twophase.DeadLetter`'s order.
_COLUMNS = (
    "sink",
    "batch_id",
    "partition_id",
    "position",
    "error_class",
    "code",
    "message",
    "column_name",
    "row",
)
#: The table's columns: (name, kind of type, NOT NULL). Its primary key is the
#: first four: a row of a batch is set aside once.
LAYOUT = (
    ("sink", "name", True),
    ("batch_id", "bigint", True),
    ("partition_id", "int", True),
    ("position", "bigint", True),
    ("error_class", "name", True),
    ("code", "name", False),
    ("message", "text", True),
    ("column_name", "text", False),
    ("row", "json", True),
    ("identity", "text", True),
    ("recorded_at", "now", True),
    ("record_format", "smallint", True),
)
#: The privileges on the table a batch's writes need (checked at ``open``), and a redrive.
WRITES = ("SELECT", "INSERT")
REDRIVES = ("SELECT", "DELETE", "UPDATE")
_DUPLICATE_HINT = (
    "A dead letter of this sink is already at this batch, partition and position: the "
    "checkpoint was reset (batch ids started again) while the old dead letters are still "
    "there. Redrive or move them (twophase dead-letters), or give the sink a new "
    "dead_letter_table"
)


def error_fields(error: RowError) -> tuple[str, str | None, str, str | None]:
    """Return a row error's class, code, message and column, as the table keeps them."""
    return error.error_class, error.code, error.message, error.column


class DeadLetterTable(JdbcClient):
    """A sink's dead-letter table (the dialect's :class:`~._dialect.DeadLetterStore`).

    Picklable: options and connection parameters only.

    Attributes
    ----------
    types
        The database's type of each kind of column of :data:`LAYOUT`
        (``name``, ``text``, ``bigint``, ``int``, ``json``, ``now``: a time
        that defaults to the server's current time).
    row_check
        A check the ``row`` column adds, where the JSON type has none of its own.
    table_options
        What follows the column list (an engine, a collation).
    row_text
        The select expression of the ``row`` column as JSON text.
    """

    types: ClassVar[dict[str, str]]
    row_check: ClassVar[str] = ""
    table_options: ClassVar[str] = ""
    row_text: ClassVar[str]

    # ------------------------------------------------------------------ hooks
    def quote(self, name: str) -> str:
        """Return ``name`` quoted as an identifier."""
        raise NotImplementedError

    def is_missing(self, cur: Any) -> bool:
        """Whether the dead-letter table is missing (the catalog; no privilege needed)."""
        raise NotImplementedError

    def describe(self, cur: Any) -> TableInfo | None:
        """Return the target table as the catalog shows it (None: missing)."""
        raise NotImplementedError

    def lacks(self, cur: Any, privilege: str, statement: str, params: int) -> bool:
        """Whether the sink's user lacks ``privilege`` on the dead-letter table.

        ``statement`` is the one the sink runs that needs it, with ``params``
        parameters (``%s``), for a dialect that asks the server about the statement.
        """
        raise NotImplementedError

    def value_of(self, value: Any, column: TableColumn) -> Any:
        """Return a JSON value of a dead letter's row as a parameter for ``column``.

        The default: objects and arrays as JSON text, anything else as it is.
        """
        if isinstance(value, (dict, list)):
            return json.dumps(value, ensure_ascii=False)
        return value

    # ---------------------------------------------------------------- shared
    @property
    def table(self) -> str:
        """Return the dead-letter table, quoted."""
        return ".".join(self.quote(part) for part in self.options.dead_letters.parts())

    def create_statement(self) -> str:
        """Return the ``CREATE TABLE IF NOT EXISTS`` of :data:`LAYOUT` in the database's types."""
        defaults = {"now": "", "smallint": " DEFAULT 1"}
        columns = [
            f"{self.quote(name)} {self.types[kind]}{' NOT NULL' if not_null else ''}"
            f"{defaults.get(kind, '')}{self.row_check if name == 'row' else ''}"
            for name, kind, not_null in LAYOUT
        ]
        key = ", ".join(self.quote(name) for name, _kind, _null in LAYOUT[:4])
        return (
            f"CREATE TABLE IF NOT EXISTS {self.table} ({', '.join(columns)}, "
            f"PRIMARY KEY ({key})){self.table_options}"
        )

    def _columns(self) -> str:
        return ", ".join(self.quote(c) for c in _COLUMNS)

    def _key(self) -> str:
        return "sink = %s AND batch_id = %s AND partition_id = %s AND {} = %s".format(
            self.quote("position")
        )

    def statements(self) -> dict[str, tuple[str, int]]:
        """Return the statements run on the table, by privilege, with their parameter counts.

        A partition's read of its letters' places and its insert; a redrive's
        delete, and its update of a row still refused.
        """
        q, n = self.quote, len(_COLUMNS) + 1
        return {
            "SELECT": (
                f"SELECT {q('position')}, {q('identity')} FROM {self.table} "
                "WHERE sink = %s AND batch_id = %s AND partition_id = %s",
                3,
            ),
            "INSERT": (
                f"INSERT INTO {self.table} ({self._columns()}, {q('identity')}) "
                f"VALUES ({', '.join(['%s'] * n)})",
                n,
            ),
            "DELETE": (f"DELETE FROM {self.table} WHERE {self._key()}", 4),
            "UPDATE": (
                f"UPDATE {self.table} SET error_class = %s, code = %s, message = %s, "
                f"column_name = %s WHERE {self._key()}",
                8,
            ),
        }

    def check_privileges(
        self, cur: Any, needed: tuple[str, ...], purpose: str, where: ErrorContext
    ) -> None:
        """Refuse, naming ``dead_letter_table``, a user who lacks any of ``needed`` on it."""
        statements = self.statements()
        missing = [p for p in needed if self.lacks(cur, p, *statements[p])]
        if missing:
            lacking, name = ", ".join(missing), self.options.dead_letters
            raise ConfigurationError(
                f"permission denied: {purpose} needs {', '.join(needed)} on the dead-letter "
                f"table {name}, and the sink's user lacks {lacking}. GRANT {lacking} ON "
                f"{name} to it, or set dead_letter_table to a table where it has them",
                setting="dead_letter_table",
                **where.keywords(),
            )

    # ------------------------------------------------------------ driver
    def ensure(self, where: ErrorContext) -> None:
        """Create the dead-letter table when missing, check :data:`WRITES` (the driver, ``open``).

        Parameters
        ----------
        where
            The sink, named by every error.

        Raises
        ------
        ConfigurationError
            The table is missing and the sink's user may not create it, or the
            user lacks a privilege of :data:`WRITES` on it, naming ``dead_letter_table``.
        """
        name = self.options.dead_letters

        def ensure(cur: Any) -> None:
            if self.is_missing(cur):
                cur.execute(self.create_statement())

        try:
            self.run(f"creating the dead-letter table {name}", ensure, where)
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"{exc.message}. bad_rows='dead_letter' needs the dead-letter table {name}: "
                "create it as docs/jdbc.md ('Dead letters') shows, or let the sink's user "
                "create it",
                setting="dead_letter_table",
                **where.keywords(),
            ) from exc
        self.run(
            f"checking the privileges on {name}",
            lambda cur: self.check_privileges(cur, WRITES, "bad_rows='dead_letter'", where),
            where,
        )

    def read(self, sink: str, where: ErrorContext) -> Iterator[DeadLetter]:
        """Yield a sink's pending dead letters, by batch, partition and position.

        Parameters
        ----------
        sink
            The sink's name.
        where
            The sink, named by every error.

        Returns
        -------
        iterator of DeadLetter
            The committed letters of ``sink``.
        """
        columns = ", ".join(self.quote(c) for c in _COLUMNS[:-1])
        statement = (
            f"SELECT {columns}, {self.row_text}, record_format FROM {self.table} "
            f"WHERE sink = %s ORDER BY batch_id, partition_id, {self.quote('position')}"
        )

        def query(cur: Any) -> list[tuple[Any, ...]]:
            cur.execute(statement, (sink,))
            return list(cur.fetchall())

        for row in self.run(f"reading {self.options.dead_letters}", query, where):
            *fields, fmt = row
            check_row_format(fmt, table=self.options.dead_letters, row=str(fields[:4]), where=where)
            s, b, p, pos, error_class, code, message, column, text = fields
            yield DeadLetter(
                str(s), int(b), int(p), int(pos), str(error_class), code, str(message), column,
                str(text),
            )  # fmt: skip

    def redrive(
        self, sink: str, letters: Sequence[DeadLetter], where: ErrorContext
    ) -> list[RowError]:
        """Move letters' rows into the table and out of the dead letters, in one transaction.

        Each letter is deleted, then its row inserted, under a savepoint: a row
        the table still refuses stays a dead letter (the savepoint rolled back)
        and is returned; a letter no longer there (redriven already) is
        skipped, so running it again after a lost ``COMMIT`` moves nothing twice.
        Any other error rolls the whole transaction back. The user's privileges
        on the dead-letter table (:data:`REDRIVES`) are checked first.

        Parameters
        ----------
        sink
            The sink's name (a letter of another sink is refused).
        letters
            From :meth:`read`.
        where
            The sink, named by every error.

        Returns
        -------
        list of RowError
            The rows still refused, ``row`` the letter's index in ``letters``.
        """
        for letter in letters:
            if letter.sink != sink:
                raise ConfigurationError(
                    f"a dead letter of sink {letter.sink!r} cannot be redriven by sink {sink!r}",
                    **where.keywords(),
                )
        statements = self.statements()
        delete, update = statements["DELETE"][0], statements["UPDATE"][0]

        def move(cur: Any) -> list[RowError]:
            self.check_privileges(cur, REDRIVES, "a redrive of dead letters", where)
            cur.execute("BEGIN")
            table = self.describe(cur)
            if table is None:
                raise ConfigurationError(
                    f"table {self.options.table} does not exist", **where.keywords()
                )
            refused: list[RowError] = []
            for index, letter in enumerate(letters):
                cur.execute(f"SAVEPOINT {SAVEPOINT}")
                key = (letter.sink, letter.batch_id, letter.partition_id, letter.position)
                cur.execute(delete, key)
                if cur.rowcount == 1:
                    try:
                        error = self._insert(cur, table, letter, index)
                    except TwoPhaseError as exc:
                        raise exc.with_context(**where.keywords()) from None
                    if error is not None:  # it stays, with the error of this try
                        refused.append(error)
                        cur.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
                        cur.execute(update, (*error_fields(error), *key))
                cur.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
            cur.execute("COMMIT")
            return refused

        return self.run(f"redriving dead letters into {self.options.table}", move, where)

    def _insert(
        self, cur: Any, table: TableInfo, letter: DeadLetter, index: int
    ) -> RowError | None:
        row = letter.values()
        missing = [name for name in row if table.column(name) is None]
        if missing:
            raise ConfigurationError(
                f"table {self.options.table} has no column {missing[0]!r} of the dead letter "
                f"of batch {letter.batch_id}, partition {letter.partition_id}, position "
                f"{letter.position}: add it, or redrive only the letters that fit",
                column=missing[0],
            )
        names = ", ".join(self.quote(name) for name in row)
        marks = ", ".join(["%s"] * len(row))
        params = [self.value_of(v, table.column(n)) for n, v in row.items()]  # type: ignore[arg-type]
        try:
            cur.execute(f"INSERT INTO {self.quote_table()} ({names}) VALUES ({marks})", params)
        except self.errors.error as exc:
            error = self.errors.row_error(exc, index, secrets=self.connection.secrets)
            if error is None:
                raise
            return error
        return None

    def quote_table(self) -> str:
        """Return the target table, quoted."""
        return ".".join(self.quote(part) for part in self.options.table.parts())

    # ---------------------------------------------------------- executor
    def write(self, txn: JdbcTransaction, letters: Sequence[DeadLetter]) -> None:
        """Insert a partition's dead letters into its open transaction (executor).

        A letter of this sink identity already committed at its place is not
        written again: ``format(...)`` runs a replayed batch's tasks even when
        recovery committed its decision, into transactions the driver then rolls
        back (whatever their partitions hold). A letter of another identity there
        (the checkpoint was reset: batch ids started again) is refused by name.

        Parameters
        ----------
        txn
            The partition's open transaction, before it is prepared or committed.
        letters
            The partition's dead letters (of one batch and partition).

        Raises
        ------
        TwoPhaseError
            The insert failed, or another row holds a letter's place.
        """
        conn = txn.open_connection("write_dead_letters()")
        statement = self.statements()["INSERT"][0]
        identity = txn.context.identity
        doing = f"writing dead letters into {self.options.dead_letters}"
        try:
            with conn.cursor() as cur:
                fresh = self._not_yet_written(cur, letters, txn)
                rows = [
                    (d.sink, d.batch_id, d.partition_id, d.position, d.error_class, d.code,
                     d.message, d.column, d.row, identity)
                    for d in fresh
                ]  # fmt: skip
                if rows:
                    cur.executemany(statement, rows)
        except txn.errors.error as exc:
            code = txn.errors.code_of(exc)
            unique = dict(txn.errors.row_errors).get("unique")
            hint = _DUPLICATE_HINT if unique is not None and code in unique else None
            error: TwoPhaseError = txn.failure(exc, doing, hint)
            raise error.with_context(setting="dead_letter_table") from exc

    def _not_yet_written(
        self, cur: Any, letters: Sequence[DeadLetter], txn: JdbcTransaction
    ) -> list[DeadLetter]:
        """Return the letters whose place holds no committed letter; refuse another run's there."""
        first = letters[0]
        cur.execute(
            self.statements()["SELECT"][0], (first.sink, first.batch_id, first.partition_id)
        )
        held = {int(position): str(identity) for position, identity in cur.fetchall()}
        fresh = []
        for letter in letters:
            identity = held.get(letter.position)
            if identity is None:
                fresh.append(letter)
            elif identity != txn.context.identity:
                raise ConfigurationError(
                    f"writing dead letters into {self.options.dead_letters}: batch "
                    f"{letter.batch_id}, partition {letter.partition_id}, position "
                    f"{letter.position} holds a letter of another run. {_DUPLICATE_HINT}",
                    setting="dead_letter_table",
                    **txn.where.keywords(),
                )
        return fresh
