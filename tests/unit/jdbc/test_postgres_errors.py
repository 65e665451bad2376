"""SQLSTATE -> twophase.errors mapping, column detection and secret scrubbing."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import psycopg2
import pytest

from twophase.connectors._context import ErrorContext
from twophase.connectors.jdbc._postgres._errors import (
    connection_error,
    guess_column,
    is_connection_error,
    map_error,
)
from twophase.errors import (
    AbortRequiredError,
    ConfigurationError,
    DataError,
    FatalError,
    RetriableError,
    TwoPhaseError,
)

pytestmark = pytest.mark.unit


class FakePgError(Exception):
    """Shaped like a psycopg2 server error (pgcode + diag)."""

    def __init__(
        self,
        pgcode: str,
        message: str,
        *,
        column: str | None = None,
        context: str | None = None,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(f"ERROR:  {message}")
        self.pgcode = pgcode
        self.diag = SimpleNamespace(
            column_name=column,
            context=context,
            message_primary=message,
            message_detail=detail,
            message_hint=hint,
        )


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        ("08006", "connection failure", RetriableError),
        ("08001", "could not connect", RetriableError),
        ("57P01", "terminating connection due to administrator command", RetriableError),
        ("57P03", "the database system is starting up", RetriableError),
        ("53300", "too many connections", RetriableError),
        ("40001", "could not serialize access", RetriableError),
        ("40P01", "deadlock detected", RetriableError),
        ("55P03", "canceling statement due to lock timeout", AbortRequiredError),
        ("57014", "canceling statement due to statement timeout", AbortRequiredError),
        ("23502", 'null value in column "x" violates not-null constraint', DataError),
        ("23505", "duplicate key value violates unique constraint", DataError),
        ("22001", "value too long for type character varying(3)", DataError),
        ("22P02", 'invalid input syntax for type integer: "x"', DataError),
        ("22003", "integer out of range", DataError),
        ("42804", "column is of type integer but expression is of type text", DataError),
        ("42P01", 'relation "t" does not exist', ConfigurationError),
        ("42703", 'column "x" of relation "t" does not exist', ConfigurationError),
        ("42501", "permission denied for table t", ConfigurationError),
        ("42P10", "there is no unique or exclusion constraint matching", ConfigurationError),
        ("53200", "maximum number of prepared transactions reached", RetriableError),
        ("55000", "prepared transactions are disabled", ConfigurationError),
        ("28P01", 'password authentication failed for user "u"', FatalError),
        ("XX000", "internal error", AbortRequiredError),
    ],
)
def test_sqlstates_map_onto_the_exception_tree(
    code: str, message: str, expected: type[TwoPhaseError]
) -> None:
    exc = map_error(FakePgError(code, message), "doing X", where=ErrorContext("s", 7, 2))
    assert type(exc) is expected
    text = str(exc)
    assert "sink='s'" in text
    assert "batch=7" in text
    assert "partition=2" in text
    assert "doing X" in text
    assert message in text
    assert f"SQLSTATE {code}" in text


def test_exhausted_prepared_slots_say_what_to_do() -> None:
    exc = map_error(
        FakePgError(
            "53200",
            "maximum number of prepared transactions reached",
            hint="Increase max_prepared_transactions (currently 2).",
        ),
        "PREPARE TRANSACTION",
        where=ErrorContext("s"),
    )
    assert isinstance(exc, RetriableError)  # shared slots: a restart shares them again
    assert exc.setting == "max_prepared_transactions"
    assert "currently 2" in str(exc)
    assert "pg_prepared_xacts" in str(exc)
    assert "Sizing max_prepared_transactions" in str(exc)


def test_connection_errors_without_sqlstate_are_retriable() -> None:
    lost = psycopg2.OperationalError("server closed the connection unexpectedly")
    assert is_connection_error(lost)
    assert isinstance(map_error(lost, "COPY"), RetriableError)
    assert not is_connection_error(FakePgError("23502", "null value"))
    assert isinstance(map_error(ValueError("client bug"), "COPY"), AbortRequiredError)
    # The same loss seen before libpq marked the connection bad: psycopg2's plain DatabaseError
    # (a pooled connection whose server restarted while it was idle; seen in a whole-suite run).
    unmarked = psycopg2.DatabaseError("server closed the connection unexpectedly")
    assert is_connection_error(unmarked)
    assert isinstance(map_error(unmarked, "reading the server settings"), RetriableError)
    assert not is_connection_error(psycopg2.DataError("invalid input syntax"))


def test_column_comes_from_diag_then_copy_context_then_message() -> None:
    assert guess_column(FakePgError("23502", "null", column="name")) == "name"
    copy = FakePgError(
        "22001",
        "value too long for type character varying(3)",
        context='COPY t, line 2, column code: "abcdef"',
    )
    assert guess_column(copy) == "code"
    null_input = FakePgError("23502", "x", context="COPY t, line 9, column weird name: null input")
    assert guess_column(null_input) == "weird name"
    missing = FakePgError("42703", 'column "Amount" of relation "t" does not exist')
    assert guess_column(missing) == "Amount"


def test_too_long_in_a_merge_is_traced_to_the_only_column_of_that_type() -> None:
    exc = FakePgError("22001", "value too long for type character varying(5)")
    columns = [("id", "bigint"), ("code", "character varying(5)"), ("name", "text")]
    assert guess_column(exc, columns) == "code"
    ambiguous = [*columns, ("other", "character varying(5)")]
    assert guess_column(exc, ambiguous) is None


def test_mapped_error_names_the_column_and_pickles() -> None:
    exc = map_error(
        FakePgError("23502", 'null value in column "name"', column="name"),
        "merging",
        where=ErrorContext("s", batch_id=1),
    )
    assert isinstance(exc, DataError)
    assert exc.column == "name"
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is DataError
    assert str(again) == str(exc)


def test_server_detail_and_hint_are_kept() -> None:
    exc = map_error(
        FakePgError(
            "55000",
            "prepared transactions are disabled",
            hint="Set max_prepared_transactions to a nonzero value.",
        ),
        "PREPARE",
    )
    assert "Hint: Set max_prepared_transactions to a nonzero value." in str(exc)


def test_secrets_are_scrubbed_from_every_message() -> None:
    secret = "pa ss/w:rd@1"
    raw = FakePgError(
        "XX000", f"something echoed {secret} and postgresql://u:pa%20ss%2Fw%3Ard%401@h"
    )
    text = str(map_error(raw, "doing", secrets=[secret]))
    assert secret not in text
    assert "pa%20ss%2Fw%3Ard%401" not in text
    assert "***" in text
    refused = psycopg2.OperationalError(f'connection to server failed: password "{secret}"')
    err = connection_error(refused, "h:1/db", secrets=[secret], where=ErrorContext("s"))
    assert secret not in str(err)
    assert isinstance(err, RetriableError)


def test_rejected_credentials_are_fatal_and_missing_database_is_configuration() -> None:
    auth = psycopg2.OperationalError('FATAL:  password authentication failed for user "u"')
    assert isinstance(connection_error(auth, "h"), FatalError)
    missing = psycopg2.OperationalError('FATAL:  database "nope" does not exist')
    assert isinstance(connection_error(missing, "h"), ConfigurationError)


def test_a_write_on_a_read_only_standby_is_retried_on_a_new_connection() -> None:
    # After a failover a session can land on (or stay with) a server in recovery: 25006.
    error = FakePgError("25006", "cannot execute INSERT in a read-only transaction")
    exc = map_error(error, "COPY into public.t", where=ErrorContext("s"))
    assert isinstance(exc, RetriableError)
    assert exc.setting == "target_session_attrs"
    assert "target_session_attrs=read-write" in str(exc)
    assert is_connection_error(error)  # the pool drops the connection instead of reusing it
