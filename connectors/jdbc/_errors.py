"""How a client library's errors become :mod:`twophase.errors`: the skeleton every dialect shares.

:class:`ErrorMap` builds every message the same way -- what the sink was
doing, the server's own text with its error code, a hint, secrets scrubbed
(:func:`~._config.redact`), the column when it can be told -- and asks the
dialect only what its codes mean (:meth:`ErrorMap.classify`) and how its
client library tells a lost connection, a refused login and a missing database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar, Literal

from twophase.errors import ConfigurationError, FatalError, RetriableError, TwoPhaseError

from .._context import ErrorContext, keywords_of
from ._config import redact

__all__ = ["ErrorMap", "Refusal"]

#: Why a server refused a connection, when it is not a network failure.
Refusal = Literal["credentials", "database"]


class ErrorMap:
    """A client library's errors as :mod:`twophase.errors` (stateless, shared per dialect)."""

    #: The database, for messages (``"PostgreSQL"``).
    database: ClassVar[str]
    #: The connection keyword naming the database (``"dbname"``).
    database_keyword: ClassVar[str]

    # ------------------------------------------------------------------ hooks
    @property
    def error(self) -> tuple[type[BaseException], ...]:
        """The client library's base exception class(es), caught around statements."""
        raise NotImplementedError

    def is_connection_error(self, exc: BaseException) -> bool:
        """Whether the session is gone."""
        raise NotImplementedError

    def server_text(self, exc: BaseException) -> str:
        """Return the server's message of a failed statement, with its error code."""
        raise NotImplementedError

    def column_of(self, exc: BaseException, columns: Sequence[tuple[str, str]]) -> str | None:
        """Return the column a failed statement is about, when it can be told."""
        raise NotImplementedError

    def classify(
        self, exc: BaseException, text: str
    ) -> tuple[type[TwoPhaseError], str | None, str]:
        """Return the class, the setting at fault (or None) and advice to add to ``text``."""
        raise NotImplementedError

    def refusal(self, exc: BaseException, message: str) -> Refusal | None:
        """Why a connect failed, when the server refused it (None: unreachable)."""
        raise NotImplementedError

    # ------------------------------------------------------------- the skeleton
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
