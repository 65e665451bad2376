"""How a client library's errors become :mod:`twophase.errors`: the skeleton every dialect shares.

:class:`ErrorMap` builds every message the same way -- what the sink was
doing, the server's own text with its error code, a hint, secrets scrubbed
(:func:`~._config.redact`), the column when it can be told -- and classifies
every error the same way: by the dialect's error code (:meth:`ErrorMap.code_of`)
looked up in its tables (:class:`ErrorRule`, :class:`Codes`): which codes mean
a lost session, which class, setting and advice each code is raised with,
which codes mean a refused login or a missing database, and which codes are
a row's own error (:attr:`ErrorMap.row_errors`: a row the table refuses, set
aside as a dead letter under ``bad_rows="dead_letter"``). A dialect declares
those tables and says how its client library reads a code, its server's text
and the column at fault.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Union

from twophase import RowError
from twophase.errors import (
    AbortRequiredError,
    ConfigurationError,
    FatalError,
    RetriableError,
    TwoPhaseError,
)

from .._context import ErrorContext, keywords_of
from ._config import redact, redact_connection_strings

__all__ = ["Code", "Codes", "ErrorMap", "ErrorRule", "Refusal"]

#: Why a server refused a connection, when it is not a network failure.
Refusal = Literal["credentials", "database"]
#: A server's error code: a SQLSTATE (``"23505"``) or an error number (``1062``).
Code = Union[str, int]  # noqa: UP007 (a runtime alias under Python 3.10)


@dataclass(frozen=True)
class Codes:
    """A set of error codes: exact ones, classes of SQLSTATEs (``"08"``), ranges of numbers."""

    #: The codes themselves.
    exact: frozenset[Code] = frozenset()
    #: Prefixes of text codes (a SQLSTATE's class: ``"08"`` for every connection exception).
    classes: tuple[str, ...] = ()
    #: Ranges of number codes (``range(2000, 3000)``: a client library's own errors).
    ranges: tuple[range, ...] = ()

    def __contains__(self, code: object) -> bool:
        if code is None or isinstance(code, bool):
            return False
        if code in self.exact:
            return True
        if isinstance(code, str):
            return code.startswith(self.classes) if self.classes else False
        return isinstance(code, int) and any(code in span for span in self.ranges)


@dataclass(frozen=True)
class ErrorRule:
    """One row of a dialect's error table: these codes are raised as this class.

    Attributes
    ----------
    codes
        The codes of the row.
    raised_as
        The :mod:`twophase.errors` class.
    setting
        The setting at fault, named by the error (None: none).
    advice
        Text added to the message.
    only_if
        The row applies only when the message contains this text ("": always).
    """

    codes: Codes
    raised_as: type[TwoPhaseError]
    setting: str | None = None
    advice: str = ""
    only_if: str = ""


class ErrorMap:
    """A client library's errors as :mod:`twophase.errors` (stateless, shared per dialect)."""

    #: The database, for messages (``"PostgreSQL"``).
    database: ClassVar[str]
    #: The connection keyword naming the database (``"dbname"``).
    database_keyword: ClassVar[str]
    #: The import name of the client library, whose ``Error`` is caught around statements.
    library: ClassVar[str]
    #: The codes that mean the session is gone (lost, shut down, unusable).
    lost: ClassVar[Codes]
    #: The error table, first matching row wins; a code of no row is an AbortRequiredError.
    rules: ClassVar[tuple[ErrorRule, ...]]
    #: The codes of a refused login, and of a missing database, at connect.
    refused_login: ClassVar[Codes]
    missing_database: ClassVar[Codes]
    #: The codes of a row's own error, by error class (``not_null``, ``unique``...): only
    #: these are row errors; any other code fails the batch.
    row_errors: ClassVar[tuple[tuple[str, Codes], ...]] = ()

    # ------------------------------------------------------------------ hooks
    def code_of(self, exc: BaseException) -> Code | None:
        """Return the server's error code of ``exc`` (None: none, e.g. the client library's own)."""
        raise NotImplementedError

    def lost_without_code(self, exc: BaseException) -> bool:
        """Whether an error without a code means the session is gone (by its class)."""
        raise NotImplementedError

    def server_text(self, exc: BaseException) -> str:
        """Return the server's message of a failed statement, with its error code."""
        raise NotImplementedError

    def column_of(self, exc: BaseException, columns: Sequence[tuple[str, str]]) -> str | None:
        """Return the column a failed statement is about, when it can be told."""
        raise NotImplementedError

    def refusal_in_text(self, message: str) -> Refusal | None:
        """Why a connect failed, told by the message alone (None: it does not say)."""
        return None

    def failed_record(self, exc: BaseException) -> int | None:
        """Return the record of a bulk load the server refused, counted from 1, if it says.

        With it, the bad rows of a write are found by splitting at each refused record
        rather than by halves (:mod:`._bad_rows`). None (the default): it does not say.
        """
        return None

    # ------------------------------------------------------------- the skeleton
    @property
    def error(self) -> tuple[type[BaseException], ...]:
        """The client library's base exception class, caught around statements."""
        base: type[BaseException] = importlib.import_module(self.library).Error
        return (base,)

    def is_connection_error(self, exc: BaseException) -> bool:
        """Whether the session is gone: a code of :attr:`lost`, or the library's own error."""
        code = self.code_of(exc)
        return self.lost_without_code(exc) if code is None else code in self.lost

    def classify(
        self, exc: BaseException, text: str
    ) -> tuple[type[TwoPhaseError], str | None, str]:
        """Return the class, the setting at fault (or None) and advice to add to ``text``."""
        code = self.code_of(exc)
        if code is None:
            return (RetriableError if self.lost_without_code(exc) else AbortRequiredError), None, ""
        for rule in self.rules:
            if code in rule.codes and rule.only_if in text:
                return rule.raised_as, rule.setting, rule.advice
        return AbortRequiredError, None, ""

    def row_error(
        self,
        exc: BaseException,
        row: int,
        *,
        secrets: Iterable[str] = (),
        columns: Sequence[tuple[str, str]] = (),
    ) -> RowError | None:
        """Return ``exc`` as the error of row ``row``, or None when it is not a row's error.

        Parameters
        ----------
        exc
            The client library's error of a statement that wrote the row alone.
        row
            The row's position in its record batch.
        secrets
            Values to scrub from the message (the password).
        columns
            Written columns and their types, to name the column at fault.

        Returns
        -------
        RowError or None
            Its class from :attr:`row_errors`, the server's message and code,
            the column; None for a code of no row (or no code).
        """
        code = self.code_of(exc)
        for error_class, codes in self.row_errors:
            if code in codes:
                message = redact_connection_strings(redact(self.server_text(exc), secrets))
                column = self.column_of(exc, columns)
                return RowError(row, error_class, message, str(code), column)
        return None

    def refusal(self, exc: BaseException, message: str) -> Refusal | None:
        """Why a connect failed, when the server refused it (None: unreachable)."""
        code = self.code_of(exc)
        told = self.refusal_in_text(message)
        if code in self.refused_login or told == "credentials":
            return "credentials"
        if code in self.missing_database or told == "database":
            return "database"
        return None

    def map_error(
        self,
        exc: BaseException,
        doing: str,
        *,
        secrets: Iterable[str] = (),
        columns: Sequence[tuple[str, str]] = (),
        hint: str | None = None,
        where: ErrorContext | None = None,
        column: str | None = None,
        setting: str | None = None,
    ) -> TwoPhaseError:
        """Return the twophase error for a failed statement.

        Parameters
        ----------
        exc
            The client library's error.
        doing
            What the sink was doing, e.g. ``"COPY into public.events"``.
        secrets
            Values to scrub from the message (the password).
        columns
            Written columns and their types, to name the column at fault.
        hint
            An extra sentence of advice added to the message.
        where
            The sink, batch and partition (None: no sink, e.g. the command line).
        column
            The column at fault, when the caller knows it (else told from ``exc``).
        setting
            The setting at fault, when the caller knows it (else the dialect's).

        Returns
        -------
        TwoPhaseError
            The exception to raise (``raise mapped from exc``).
        """
        text = redact(f"{doing}: {self.server_text(exc)}", secrets)
        if hint:
            text += f". {hint}"
        column = column or self.column_of(exc, columns)
        cls, at_fault, advice = self.classify(exc, text)
        return cls(text + advice, column=column, setting=setting or at_fault, **keywords_of(where))

    def connection_error(
        self,
        exc: BaseException,
        server: str,
        *,
        secrets: Iterable[str] = (),
        where: ErrorContext | None = None,
    ) -> TwoPhaseError:
        """Return the error for a failed connect: it names the server, never a secret.

        Parameters
        ----------
        exc
            The client library's error.
        server
            The secret-free server description.
        secrets
            Values to scrub (the password).
        where
            The sink, batch and partition (None: no sink, e.g. the command line).

        Returns
        -------
        TwoPhaseError
            RetriableError for an unreachable server, FatalError for rejected
            credentials, ConfigurationError for a missing database.
        """
        message = redact(self.connect_text(exc), secrets)
        text = f"cannot connect to {self.database} at {server}: {message}"
        refused = self.refusal(exc, message)
        context = keywords_of(where)
        if refused == "credentials":
            return FatalError(text + " (check user and password)", **context)
        if refused == "database":
            return ConfigurationError(text, setting=self.database_keyword, **context)
        return RetriableError(text, **context)

    def connect_text(self, exc: BaseException) -> str:
        """Return the client library's message of a failed connect, on one line."""
        return str(exc).strip().replace("\n", " ")
