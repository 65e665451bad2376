"""The sink's settings, validated once where the sink is built.

:class:`JdbcOptions` is what every other module of the connector reads:
the writer, the fencing, the driver-side checks. It is frozen and picklable,
and travels to the executors inside the sink. The connection parameters are
kept apart, in :mod:`._config`, so that their secrets stay hidden.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from twophase import TwoPhaseCommitSink
from twophase.errors import ConfigurationError

from .._settings import check_number
from ._network import NetworkBounds

__all__ = ["BadRows", "JdbcOptions", "QualifiedName", "SchemaEvolution", "WriteMode"]

WriteMode = Literal["append", "upsert", "cdc"]
_MODES: tuple[str, ...] = ("append", "upsert", "cdc")
SchemaEvolution = Literal["none", "add_columns"]
_EVOLUTIONS: tuple[str, ...] = ("none", "add_columns")
BadRows = Literal["fail", "dead_letter"]
_BAD_ROWS: tuple[str, ...] = ("fail", "dead_letter")
#: The core's ``max_bad_rows`` default (its constructor's), the factories' too.
_MAX_BAD_ROWS: int = (
    inspect.signature(TwoPhaseCommitSink.__init__).parameters["max_bad_rows"].default
)
#: What the dead-letter table's default name adds to the table's.
DEAD_LETTERS_SUFFIX = "_dead_letters"


@dataclass(frozen=True)
class QualifiedName:
    """A table name, optionally schema-qualified, taken literally (case-sensitive).

    Attributes
    ----------
    schema
        The schema, or ``None`` for the connection's ``search_path``.
    name
        The table name.
    """

    schema: str | None
    name: str

    @classmethod
    def parse(cls, value: str | tuple[str, str], setting: str) -> QualifiedName:
        """Read ``"table"``, ``"schema.table"`` or ``("schema", "table")``.

        Names are exact: ``"Events"`` is the table created as ``"Events"``
        (quoted). Use the tuple form for names that contain a dot.

        Parameters
        ----------
        value
            The name as given by the user.
        setting
            The option it came from, for the error message.

        Returns
        -------
        QualifiedName
            The parsed name.
        """
        if isinstance(value, tuple):
            if len(value) != 2 or not all(isinstance(v, str) and v for v in value):
                raise ConfigurationError(
                    f"{setting} must be 'table', 'schema.table' or ('schema', 'table'), "
                    f"got {value!r}",
                    setting=setting,
                )
            return cls(value[0], value[1])
        if not isinstance(value, str) or not value:
            raise ConfigurationError(
                f"{setting} must be a non-empty string, got {value!r}", setting=setting
            )
        parts = value.split(".")
        if len(parts) == 1:
            return cls(None, parts[0])
        if len(parts) == 2 and all(parts):
            return cls(parts[0], parts[1])
        raise ConfigurationError(
            f"{setting}={value!r} has more than one dot; pass ('schema', 'table') for "
            "names that contain a dot",
            setting=setting,
        )

    def parts(self) -> tuple[str, ...]:
        """Return the name as identifier parts, for ``psycopg2.sql.Identifier(*parts)``.

        Returns
        -------
        tuple of str
            ``(schema, name)`` or ``(name,)``.
        """
        return (self.name,) if self.schema is None else (self.schema, self.name)

    def __str__(self) -> str:
        return ".".join(self.parts())


def _check_identifier(value: str, setting: str, database: str, limit: int) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{setting} must be a non-empty string", setting=setting)
    if len(value.encode()) > limit:
        raise ConfigurationError(
            f"{setting}={value!r} is longer than {database}'s {limit}-byte identifier limit",
            setting=setting,
        )
    if "\x00" in value:
        raise ConfigurationError(f"{setting} must not contain NUL", setting=setting)
    return value


@dataclass(frozen=True)
class JdbcOptions:
    """What a JDBC sink writes, and how; validated on construction.

    Built by a dialect's factory from its keywords, which are documented
    there. Picklable.

    Attributes
    ----------
    table
        The target table.
    mode
        ``"append"``, ``"upsert"`` or ``"cdc"``.
    key_columns
        The key of upsert and CDC (a unique index on exactly these columns must
        exist, or ``create_table=True`` creates it as the primary key).
    cdc_op_column
        CDC only: the column holding the operation (``c``, ``r``, ``u``, ``d``).
    order_column
        Upsert and CDC: the column that orders the rows of one key inside a
        batch (the largest wins); row order within the partition otherwise.
    create_table
        Create the table from the first batch's schema when it does not exist.
    schema_evolution
        ``"none"``, or ``"add_columns"``: before each batch the driver adds a
        column of the batch the table lacks, nullable, of the mapped type
        (:mod:`._evolution`).
    bad_rows
        ``"fail"`` (a row the table refuses fails the batch) or
        ``"dead_letter"`` (append mode: set aside in :attr:`dead_letters`, in
        the batch's transaction).
    dead_letter_table
        The dead-letter table as given (None: :attr:`dead_letters`' default).
    max_bad_rows
        The most rows one batch may set aside before it fails.
    marker_table
        Markers protocol: the table holding the idempotence markers.
    marker_retention
        Markers protocol: markers of how many recent batches to keep per identity.
    lock_timeout, statement_timeout, idle_in_transaction_timeout
        Server-side timeouts in seconds (0 disables one) set on every session.
    connect_timeout
        Seconds to wait for a connection.
    network_timeout
        Seconds a connection may go without an answer from the server before
        it is dropped and the step fails with a retriable error (TCP keepalive
        and ``TCP_USER_TIMEOUT``, on both ends where the server allows it);
        0 leaves the operating system's defaults (hours).
    max_partitions
        The most transactions one batch may hold (None: the dialect's bound,
        if any).
    merge_schema
        Coordinated protocol, upsert/CDC: the schema of the per-transaction staging
        tables (default: the target table's schema).
    application_name
        The sessions' application name, where the dialect sets one.
    database, max_identifier_bytes
        The dialect's name and identifier limit, for the checks (set by the
        dialect's factory).
    """

    table: QualifiedName
    mode: WriteMode = "append"
    key_columns: tuple[str, ...] = ()
    cdc_op_column: str = "op"
    order_column: str | None = None
    create_table: bool = False
    schema_evolution: SchemaEvolution = "none"
    bad_rows: BadRows = "fail"
    dead_letter_table: QualifiedName | None = None
    max_bad_rows: int = _MAX_BAD_ROWS
    marker_table: QualifiedName = field(
        default_factory=lambda: QualifiedName(None, "twophase_markers")
    )
    marker_retention: int = 100
    lock_timeout: float = 30.0
    statement_timeout: float = 600.0
    idle_in_transaction_timeout: float = 600.0
    connect_timeout: int = 10
    network_timeout: float = 60.0
    max_partitions: int | None = None
    merge_schema: str | None = None
    application_name: str = "twophase"
    database: str = "the database"
    max_identifier_bytes: int = 63

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ConfigurationError(
                f"mode must be one of {', '.join(_MODES)}; got {self.mode!r}", setting="mode"
            )
        if self.schema_evolution not in _EVOLUTIONS:
            raise ConfigurationError(
                f"schema_evolution must be 'none' or 'add_columns'; got {self.schema_evolution!r}",
                setting="schema_evolution",
            )
        self._check_bad_rows()
        for key in self.key_columns:
            self._identifier(key, "key_columns")
        if len(set(self.key_columns)) != len(self.key_columns):
            raise ConfigurationError("key_columns has duplicates", setting="key_columns")
        if self.mode in ("upsert", "cdc") and not self.key_columns:
            raise ConfigurationError(
                f"mode={self.mode!r} needs key_columns (the columns of a unique index)",
                setting="key_columns",
            )
        self._identifier(self.cdc_op_column, "cdc_op_column")
        if self.mode == "cdc" and self.cdc_op_column in self.key_columns:
            raise ConfigurationError(
                "cdc_op_column cannot be one of the key columns", setting="cdc_op_column"
            )
        if self.order_column is not None:
            self._identifier(self.order_column, "order_column")
            if self.mode == "append":
                raise ConfigurationError(
                    "order_column only applies to mode='upsert' or 'cdc'",
                    setting="order_column",
                )
            if self.mode == "cdc" and self.order_column == self.cdc_op_column:
                raise ConfigurationError(
                    "order_column and cdc_op_column must differ", setting="order_column"
                )
        self._identifier(self.table.name, "table")
        self._identifier(self.marker_table.name, "marker_table")
        if self.merge_schema is not None:
            self._identifier(self.merge_schema, "merge_schema")
        check_number(
            self.marker_retention,
            "marker_retention",
            minimum=2,
            integer=True,
            unit=" batches (a replay needs the markers of the last unfinished batch)",
        )
        for name in ("lock_timeout", "statement_timeout", "idle_in_transaction_timeout"):
            check_number(getattr(self, name), name, minimum=0, unit=" seconds")
        check_number(
            self.connect_timeout, "connect_timeout", minimum=1, integer=True, unit=" seconds"
        )
        check_number(self.network_timeout, "network_timeout", minimum=0, unit=" seconds")
        if 0 < self.network_timeout < 2:
            raise ConfigurationError(
                f"network_timeout must be 0 (off) or at least 2 seconds (TCP keepalive counts "
                f"in whole seconds); got {self.network_timeout!r}",
                setting="network_timeout",
            )
        if self.max_partitions is not None:
            check_number(self.max_partitions, "max_partitions", minimum=1, integer=True)

    def _check_bad_rows(self) -> None:
        if self.bad_rows not in _BAD_ROWS:
            raise ConfigurationError(
                f"bad_rows must be 'fail' or 'dead_letter'; got {self.bad_rows!r}",
                setting="bad_rows",
            )
        if self.bad_rows != "dead_letter":
            return
        if self.mode != "append":
            raise ConfigurationError(
                f"bad_rows='dead_letter' works with mode='append' only, not mode={self.mode!r}: "
                "upsert and CDC rows reach the table through one merge statement, which a "
                "refused row fails as a whole",
                setting="bad_rows",
            )
        if self.dead_letter_table is None and len(self.dead_letters.name.encode()) > (
            self.max_identifier_bytes
        ):
            raise ConfigurationError(
                f"the default dead_letter_table {self.dead_letters.name!r} (the table's name + "
                f"{DEAD_LETTERS_SUFFIX!r}) is longer than {self.database}'s "
                f"{self.max_identifier_bytes}-byte identifier limit: name one",
                setting="dead_letter_table",
            )
        self._identifier(self.dead_letters.name, "dead_letter_table")

    @property
    def dead_letters(self) -> QualifiedName:
        """Return the dead-letter table: as given, or ``<table>_dead_letters`` in its schema.

        Returns
        -------
        QualifiedName
            The table.
        """
        if self.dead_letter_table is not None:
            return self.dead_letter_table
        return QualifiedName(self.table.schema, self.table.name + DEAD_LETTERS_SUFFIX)

    def _identifier(self, value: str, setting: str) -> None:
        _check_identifier(value, setting, self.database, self.max_identifier_bytes)

    @property
    def bounds(self) -> NetworkBounds:
        """How long the sink's sessions wait on the network.

        Returns
        -------
        NetworkBounds
            ``connect_timeout`` and ``network_timeout``.
        """
        return NetworkBounds(self.connect_timeout, self.network_timeout)

    def session_settings(self) -> tuple[tuple[str, str], ...]:
        """Return the ``SET`` values every session of the sink runs with.

        Returns
        -------
        tuple of (name, value)
            Timeouts in milliseconds, the server's side of the network bound
            (its keepalive and ``tcp_user_timeout``, so that the server drops
            a session whose client vanished and frees its locks),
            ``TimeZone=UTC``, ``DateStyle=ISO``, ``temp_buffers=64MB``.
        """
        server_side: tuple[tuple[str, str], ...] = ()
        keepalive = self.bounds.keepalive()
        if keepalive is not None:
            idle, interval, count = keepalive
            server_side = (
                ("tcp_keepalives_idle", str(idle)),
                ("tcp_keepalives_interval", str(interval)),
                ("tcp_keepalives_count", str(count)),
                ("tcp_user_timeout", str(self.bounds.user_timeout_ms)),
            )
        return (
            *server_side,
            ("lock_timeout", str(int(self.lock_timeout * 1000))),
            ("statement_timeout", str(int(self.statement_timeout * 1000))),
            (
                "idle_in_transaction_session_timeout",
                str(int(self.idle_in_transaction_timeout * 1000)),
            ),
            ("TimeZone", "UTC"),
            ("DateStyle", "ISO, YMD"),
            # The markers protocol stages upserts in temporary tables: keep them in memory longer
            # than the default 8MB (only allocated when used; per session).
            ("temp_buffers", "64MB"),
            ("application_name", self.application_name),
        )

    def data_columns(self, names: Iterable[str]) -> list[str]:
        """Return the input columns written to the table (the CDC op column is not).

        Parameters
        ----------
        names
            The input column names.

        Returns
        -------
        list of str
            ``names`` without the control columns.
        """
        if self.mode == "cdc":
            return [n for n in names if n != self.cdc_op_column]
        return list(names)
