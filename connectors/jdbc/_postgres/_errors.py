"""PostgreSQL errors (SQLSTATEs) mapped onto :mod:`twophase.errors`.

======================================  =============================================
SQLSTATE / condition                    raised as
======================================  =============================================
no SQLSTATE (connection lost, refused)  :class:`~twophase.errors.RetriableError`
08xxx connection exception              :class:`~twophase.errors.RetriableError`
57P01/57P02/57P03 server shutting down  :class:`~twophase.errors.RetriableError`
25006 read-only (a standby, a failover)  :class:`~twophase.errors.RetriableError`
53300 too many connections, 53100 disk  :class:`~twophase.errors.RetriableError`
40001 serialization, 40P01 deadlock     :class:`~twophase.errors.RetriableError`
55P03 lock not available (lock_timeout) :class:`~twophase.errors.AbortRequiredError`
57014 statement_timeout / cancel        :class:`~twophase.errors.AbortRequiredError`
23502 NOT NULL, 23505 unique, 23503 FK  :class:`~twophase.errors.DataError`
23514 check, 22xxx data exception       :class:`~twophase.errors.DataError`
42804 datatype mismatch                 :class:`~twophase.errors.DataError`
42P01 undefined table                   :class:`~twophase.errors.ConfigurationError`
42703 undefined column                  :class:`~twophase.errors.ConfigurationError`
42501 insufficient privilege            :class:`~twophase.errors.ConfigurationError`
42P10 no unique index for ON CONFLICT   :class:`~twophase.errors.ConfigurationError`
53200 prepared-transaction slots full   :class:`~twophase.errors.RetriableError`
55000 prepared transactions disabled    :class:`~twophase.errors.ConfigurationError`
28xxx authentication                    :class:`~twophase.errors.FatalError`
anything else                           :class:`~twophase.errors.AbortRequiredError`
======================================  =============================================

Every message names what the sink was doing, the server's message and hint
and the SQLSTATE; secrets are scrubbed from the text (:class:`~.._errors.ErrorMap`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from twophase.errors import (
    AbortRequiredError,
    ConfigurationError,
    DataError,
    FatalError,
    RetriableError,
)

from .._errors import Code, Codes, ErrorMap, ErrorRule, Refusal

__all__ = [
    "POSTGRES_ERRORS",
    "PostgresErrors",
    "connection_error",
    "is_connection_error",
    "map_error",
    "sqlstate",
]

#: 25006: a write on a server in recovery (a standby, or a primary being demoted).
_READ_ONLY = "25006"
_ON_A_STANDBY = (
    "The server is read-only: a standby, or a primary demoted by a failover. The connection is "
    "dropped and the step retried; with several hosts in the DSN, add "
    "target_session_attrs=read-write so that a connection only ever lands on the primary"
)
_SLOTS_FULL = (
    ". Every prepared-transaction slot of the server is taken (by other sinks, "
    "other users or stale transactions: SELECT * FROM pg_prepared_xacts); nothing "
    "was committed, and a restart shares the slots again among the active sinks. "
    "If it recurs, lower max_partitions or raise max_prepared_transactions (needs a "
    "server restart): see docs/jdbc.md, 'Sizing max_prepared_transactions'"
)
_SHUTDOWN = frozenset({"57P01", "57P02", "57P03"})
#: The session is gone: a connection exception, a shutdown; a read-only session stays on a
#: standby, so it is dropped as if it were gone.
_LOST = Codes(_SHUTDOWN | {_READ_ONLY}, classes=("08",))
#: The table above, in the order it is read.
_RULES = (
    ErrorRule(
        Codes(_SHUTDOWN | {"40001", "40P01", "53300", "53100", "58030"}, classes=("08",)),
        RetriableError,
    ),
    ErrorRule(
        Codes(frozenset({_READ_ONLY})), RetriableError, "target_session_attrs", _ON_A_STANDBY
    ),
    # The slots are shared by the whole server; a restart rolls this batch's orphans back and
    # shares the slots again among the active sinks.
    ErrorRule(
        Codes(frozenset({"53200"})),
        RetriableError,
        "max_prepared_transactions",
        _SLOTS_FULL,
        only_if="maximum number of prepared transactions reached",
    ),
    ErrorRule(
        Codes(frozenset({"55000"})),
        ConfigurationError,
        "max_prepared_transactions",
        only_if="prepared transactions are disabled",
    ),
    ErrorRule(Codes(frozenset({"55P03", "57014"})), AbortRequiredError),
    ErrorRule(
        Codes(frozenset({"23502", "23505", "23503", "23514", "23P01", "42804"}), classes=("22",)),
        DataError,
    ),
    ErrorRule(
        Codes(frozenset({"42P01", "42703", "42501", "42P10", "3F000", "42883", "0A000", "3D000"})),
        ConfigurationError,
    ),
    ErrorRule(Codes(classes=("28",)), FatalError),
    ErrorRule(Codes(classes=("53",)), RetriableError),
)

#: A row's own errors, by class (a dead letter's ``error_class``; ``docs/jdbc.md``, "Dead
#: letters"): only these SQLSTATEs set a row aside.
_ROW_ERRORS = (
    ("not_null", Codes(frozenset({"23502"}))),
    ("too_long", Codes(frozenset({"22001"}))),
    (
        "invalid_value",
        Codes(
            frozenset(
                {"22P02", "22003", "22007", "22008", "22023", "22021", "22P05", "22009", "22018"}
            )
        ),
    ),
    ("unique", Codes(frozenset({"23505"}))),
    ("foreign_key", Codes(frozenset({"23503"}))),
    ("check", Codes(frozenset({"23514"}))),
    ("other", Codes(frozenset({"23P01"}))),
)

_COPY_COLUMN = re.compile(r"line \d+, column (.+?)(?::|$)", re.MULTILINE)
_COPY_LINE = re.compile(r"^COPY .*, line (\d+)", re.MULTILINE)
_QUOTED_COLUMN = re.compile(r'column "((?:[^"]|"")+)"')
_TOO_LONG_TYPE = re.compile(r"value too long for type (.+)$")
#: The detail of a unique or foreign-key violation: ``Key (ref)=(7) is not present ...``.
_KEY_COLUMN = re.compile(r'^Key \(("(?:[^"]|"")+"|[^,()"]+)\)=')


def sqlstate(exc: BaseException) -> str | None:
    """Return the SQLSTATE of a psycopg2 error (``"23502"``), or None (libpq's own errors)."""
    code = getattr(exc, "pgcode", None)
    return code if isinstance(code, str) else None


def _diag(exc: BaseException, name: str) -> str | None:
    diag = getattr(exc, "diag", None)
    value = getattr(diag, name, None) if diag is not None else None
    return value if isinstance(value, str) and value else None


def guess_column(exc: BaseException, columns: Sequence[tuple[str, str]] = ()) -> str | None:
    """Find the column an error is about, from the error fields or its text.

    Parameters
    ----------
    exc
        A psycopg2 error.
    columns
        ``(name, formatted type)`` of the target table's written columns, to
        find the column of a "value too long for type varchar(5)" error when
        only one column has that type.

    Returns
    -------
    str or None
        The column name when it can be told.
    """
    named = _diag(exc, "column_name")
    if named:
        return named
    context = _diag(exc, "context") or ""
    found = _COPY_COLUMN.search(context)
    if found:
        return found.group(1)
    primary = _diag(exc, "message_primary") or str(exc)
    if sqlstate(exc) == "42703":
        quoted = _QUOTED_COLUMN.search(primary)
        if quoted:
            return quoted.group(1).replace('""', '"')
    too_long = _TOO_LONG_TYPE.search(primary.strip())
    if too_long and columns:
        matches = [name for name, type_name in columns if type_name == too_long.group(1)]
        if len(matches) == 1:
            return matches[0]
    key = _KEY_COLUMN.match(_diag(exc, "message_detail") or "")
    if key:  # a one-column key
        name = key.group(1)
        return name[1:-1].replace('""', '"') if name.startswith('"') else name
    return None


def _server_text(exc: BaseException) -> str:
    primary = _diag(exc, "message_primary")
    text = primary if primary else (str(exc).strip().splitlines() or ["unknown error"])[0]
    detail = _diag(exc, "message_detail")
    hint = _diag(exc, "message_hint")
    if detail:
        text += f" ({detail.rstrip('.')})"
    if hint:
        text += f". Hint: {hint}"
    code = sqlstate(exc)
    if code:
        text += f" [SQLSTATE {code}]"
    return text


class PostgresErrors(ErrorMap):
    """psycopg2's errors, by SQLSTATE (the table above)."""

    database = "PostgreSQL"
    database_keyword = "dbname"
    library = "psycopg2"
    lost = _LOST
    rules = _RULES
    refused_login = Codes(classes=("28",))
    missing_database = Codes(frozenset({"3D000"}))
    row_errors = _ROW_ERRORS

    def code_of(self, exc: BaseException) -> Code | None:
        """Return the SQLSTATE (:func:`sqlstate`)."""
        return sqlstate(exc)

    def lost_without_code(self, exc: BaseException) -> bool:
        """Libpq's own errors: the session is gone."""
        import psycopg2

        # Every error the server sends has a SQLSTATE; one without is libpq's own. psycopg2 raises
        # a lost connection as OperationalError only if libpq has already marked it bad, else as a
        # plain DatabaseError ("server closed the connection unexpectedly" on a pooled connection
        # whose server restarted while it was idle): the session is gone either way.
        return isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)) or (
            type(exc) is psycopg2.DatabaseError
        )

    def server_text(self, exc: BaseException) -> str:
        """Return the server's message, detail and hint, and the SQLSTATE."""
        return _server_text(exc)

    def column_of(self, exc: BaseException, columns: Sequence[tuple[str, str]]) -> str | None:
        """Return the column from the error's fields or text (:func:`guess_column`)."""
        return guess_column(exc, columns)

    def failed_record(self, exc: BaseException) -> int | None:
        """Return the ``COPY``'s record at fault from the error's context (``COPY t, line 7``).

        PostgreSQL counts the records of the data it read (a CSV value's quoted line break
        included), for a row's own error; a constraint checked at the statement's end (a
        foreign key) names no line.
        """
        found = _COPY_LINE.search(_diag(exc, "context") or "")
        return int(found.group(1)) if found else None

    def refusal_in_text(self, message: str) -> Refusal | None:
        """Tell, by libpq's words, a failed authentication or a missing database."""
        if "authentication failed" in message:
            return "credentials"
        if "database" in message and "does not exist" in message:
            return "database"
        return None


#: The dialect's error map.
POSTGRES_ERRORS = PostgresErrors()
#: Shorthands of :data:`POSTGRES_ERRORS`' methods, for the dialect's modules.
map_error = POSTGRES_ERRORS.map_error
connection_error = POSTGRES_ERRORS.connection_error
is_connection_error = POSTGRES_ERRORS.is_connection_error
