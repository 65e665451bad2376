"""Connection parameters of one server, with secrets kept out of text.

:class:`ConnectionConfig` is pickled with the sink to the executors, so it
holds plain values only. It never shows a password or an ``sslpassword`` in
its ``repr``, its ``str``, or in any message built from it; :func:`redact`
scrubs them from text that comes back from a client library. Each dialect parses its
own connection strings (a libpq DSN, a ``mariadb://`` URL) into keywords. The
sink's own settings are in :mod:`._options`.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping

from twophase.errors import ConfigurationError

__all__ = ["ConnectionConfig", "redact"]

#: Keywords whose values are secrets.
SECRET_KEYS = frozenset({"password", "sslpassword"})

#: What replaces a secret in text.
REDACTED = "***"


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of a secret (and its URL-encoded form) in ``text``.

    Parameters
    ----------
    text
        Any text that may contain a secret (an error message from a client library).
    secrets
        The secret values.

    Returns
    -------
    str
        ``text`` with each secret replaced by ``***``.
    """
    for secret in secrets:
        if not secret:
            continue
        for form in {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret)}:
            text = text.replace(form, REDACTED)
    return text


#: A URL's user information (``scheme://user:password@``) and a ``password=`` keyword.
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^\s/@'\"]+@")
_PASSWORD_KEYWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'\"]+)", re.IGNORECASE)


def redact_connection_strings(text: str) -> str:
    """Replace the credentials of any connection string in ``text`` (a URL's, a ``password=``).

    A server message quotes the value it refused, which may be a connection
    string: a dead letter's message keeps the value but never its password.

    Parameters
    ----------
    text
        A server's message.

    Returns
    -------
    str
        ``text`` with ``scheme://***@`` and ``password=***``.
    """
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return _PASSWORD_KEYWORD.sub(lambda m: f"{m.group(1)}{REDACTED}", text)


class ConnectionConfig:
    """A server's connection keywords, merged from a parsed connection string and keywords.

    The keywords are the dialect's client library's own (libpq's ``host``, ``dbname``,
    ``sslmode``...; PyMySQL's ``host``, ``database``...), passed through
    unchanged. Keywords win over the parsed string. Secrets stay hidden.

    Picklable: it travels to the executors with the sink.

    Parameters
    ----------
    parsed
        The keywords of a connection string, parsed by the dialect.
    **params
        Keywords. ``None`` values are ignored.

    Raises
    ------
    ConfigurationError
        A keyword's value is neither a string nor an integer.
    """

    __slots__ = ("_params",)

    def __init__(self, parsed: Mapping[str, str] | None = None, **params: object) -> None:
        merged: dict[str, str] = dict(parsed or {})
        for key, value in params.items():
            if value is None:
                continue
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise ConfigurationError(
                    f"connection parameter {key!r} must be a string or an integer, "
                    f"got {type(value).__name__}",
                    setting=key,
                )
            merged[key] = str(value)
        if "dsn" in merged:
            raise ConfigurationError("pass the DSN once, as dsn=", setting="dsn")
        self._params: tuple[tuple[str, str], ...] = tuple(sorted(merged.items()))

    # ------------------------------------------------------------ access
    def connect_kwargs(self) -> dict[str, str]:
        """Return the keywords for the client library's ``connect(**kwargs)``, secrets included.

        Returns
        -------
        dict
            A fresh copy; never log it.
        """
        return dict(self._params)

    def get(self, key: str) -> str | None:
        """One parameter (``None`` when not set), e.g. ``config.get("sslmode")``.

        Parameters
        ----------
        key
            A keyword. Secrets are refused.

        Returns
        -------
        str or None
            The value.
        """
        if key in SECRET_KEYS:
            raise KeyError(f"{key} is a secret and is not readable through get()")
        return dict(self._params).get(key)

    @property
    def secrets(self) -> tuple[str, ...]:
        """The secret values, for :func:`redact`.

        Returns
        -------
        tuple of str
            Password and SSL key password, when set.
        """
        return tuple(value for key, value in self._params if key in SECRET_KEYS and value)

    @property
    def key(self) -> tuple[tuple[str, str], ...]:
        """A hashable identity of the parameters (secrets included), for pooling.

        Returns
        -------
        tuple
            Sorted ``(keyword, value)`` pairs. Never log it.
        """
        return self._params

    def describe(self) -> str:
        """Describe the server in a short, secret-free way for messages and logs.

        Returns
        -------
        str
            ``"user@host:port/dbname"`` with libpq's defaults shown as ``default``.
        """
        params = dict(self._params)
        host = params.get("host") or params.get("hostaddr") or "default-host"
        port = params.get("port") or "default-port"
        dbname = params.get("dbname") or params.get("database") or "default-db"
        user = params.get("user")
        return f"{user + '@' if user else ''}{host}:{port}/{dbname}"

    # ------------------------------------------------------------ dunder
    def __repr__(self) -> str:
        shown = ", ".join(
            f"{key}={REDACTED if key in SECRET_KEYS else value!r}" for key, value in self._params
        )
        return f"ConnectionConfig({shown})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConnectionConfig) and other._params == self._params

    def __hash__(self) -> int:
        return hash(self._params)

    def __getstate__(self) -> tuple[tuple[str, str], ...]:
        return self._params

    def __setstate__(self, state: tuple[tuple[str, str], ...]) -> None:
        self._params = state
