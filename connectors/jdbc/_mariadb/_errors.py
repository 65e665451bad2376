"""MariaDB's errors mapped onto :mod:`twophase.errors`.

PyMySQL's errors carry the server's error number (``exc.args[0]``):

=========================================  =============================================
error number / condition                   raised as
=========================================  =============================================
2000-2999 client: cannot connect, lost     :class:`~twophase.errors.RetriableError`
1053 shutdown, 1927 connection killed      :class:`~twophase.errors.RetriableError`
1040 too many connections, 1213 deadlock   :class:`~twophase.errors.RetriableError`
1205 lock wait timeout                     :class:`~twophase.errors.AbortRequiredError`
1969/3024 statement timeout, 1317 killed   :class:`~twophase.errors.AbortRequiredError`
1048 NULL, 1062 duplicate, 1264 range,     :class:`~twophase.errors.DataError`
1265/1292/1366/1406/1367 bad value,
1451/1452 foreign key, 4025 CHECK
1146 no table, 1054 no column, 1049 no     :class:`~twophase.errors.ConfigurationError`
database, 1142/1143/1044/1227 privilege
1045 access denied (authentication)        :class:`~twophase.errors.FatalError`
anything else                              :class:`~twophase.errors.AbortRequiredError`
=========================================  =============================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from twophase.errors import (
    AbortRequiredError,
    ConfigurationError,
    DataError,
    FatalError,
    RetriableError,
)

from .._errors import Code, Codes, ErrorMap, ErrorRule

__all__ = ["MARIADB_ERRORS", "errno", "guess_column"]

#: Client errors 2000-2999 (lost, gone away, cannot connect), shutdown, connection killed.
_LOST = Codes(frozenset({1053, 1927}), ranges=(range(2000, 3000),))
_AUTH = frozenset({1045, 1698, 1251})
#: The table above.
_RULES = (
    ErrorRule(_LOST, RetriableError),
    ErrorRule(
        Codes(frozenset({1053, 1927, 1040, 1213, 1614, 1203, 1021, 1037, 1041})), RetriableError
    ),
    ErrorRule(Codes(frozenset({1205, 1969, 3024, 1317, 1613})), AbortRequiredError),
    ErrorRule(
        Codes(
            frozenset(
                {
                    1048,
                    1062,
                    1264,
                    1265,
                    1292,
                    1366,
                    1406,
                    1367,
                    1451,
                    1452,
                    4025,
                    1690,
                    1411,
                    1586,
                    1263,
                }
            )
        ),
        DataError,
    ),
    ErrorRule(
        Codes(frozenset({1146, 1054, 1049, 1142, 1143, 1044, 1227, 1109, 1064, 1136, 1471, 1370})),
        ConfigurationError,
    ),
    ErrorRule(Codes(_AUTH), FatalError),
)
#: A row's own errors, by class (a dead letter's ``error_class``; ``docs/jdbc.md``, "Dead
#: letters"): only these error numbers set a row aside.
_ROW_ERRORS = (
    ("not_null", Codes(frozenset({1048, 1364}))),
    ("too_long", Codes(frozenset({1406}))),
    ("invalid_value", Codes(frozenset({1366, 1264, 1292, 1265, 1367, 1411, 1690, 4078}))),
    ("unique", Codes(frozenset({1062, 1586}))),
    ("foreign_key", Codes(frozenset({1452, 1216}))),
    ("check", Codes(frozenset({4025, 3819}))),
)

# "Column 'x' cannot be null", "Out of range value for column 'x'", and
# "Incorrect datetime value: '...' for column `db`.`table`.`x` at row 1".
_COLUMN = re.compile(
    r"column '((?:[^']|'')+)'|column (?:`(?:[^`]|``)+`\.)*`((?:[^`]|``)+)`"
    # a one-column foreign key: "... CONSTRAINT `fk` FOREIGN KEY (`ref`) REFERENCES ..."
    r"|FOREIGN KEY \(`((?:[^`]|``)+)`\)"
    # a column's own CHECK, named after it: "CONSTRAINT `table.amount` failed for ..."
    r"|CONSTRAINT `(?:[^`.]+\.)?((?:[^`.]|``)+)` failed",
    re.IGNORECASE,
)


def errno(exc: BaseException) -> int | None:
    """Return the error number of a PyMySQL error (``1062``: duplicate key), or None."""
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int) and not isinstance(args[0], bool):
        return args[0]
    return None


class MariaDBErrors(ErrorMap):
    """PyMySQL's errors, by error number (the dialect's error map)."""

    database = "MariaDB"
    database_keyword = "database"
    library = "pymysql"
    lost = _LOST
    rules = _RULES
    refused_login = Codes(_AUTH)
    missing_database = Codes(frozenset({1049}))
    row_errors = _ROW_ERRORS

    def code_of(self, exc: BaseException) -> Code | None:
        """Return the error number (:func:`errno`); 0, PyMySQL's own error, as None."""
        return errno(exc) or None

    def lost_without_code(self, exc: BaseException) -> bool:
        """PyMySQL's ``InterfaceError`` (a closed connection)."""
        import pymysql

        return isinstance(exc, pymysql.InterfaceError)

    def server_text(self, exc: BaseException) -> str:
        """Return the server's message and its error number."""
        return f"{_server_text(exc)} (error {errno(exc)})"

    def column_of(self, exc: BaseException, columns: Sequence[tuple[str, str]]) -> str | None:
        """Return the column the server's message names (:func:`guess_column`)."""
        return guess_column(_server_text(exc), columns)

    def connect_text(self, exc: BaseException) -> str:
        """Return the server's message and its error number."""
        return self.server_text(exc)


def _server_text(exc: BaseException) -> str:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    return str(args[1]) if len(args) > 1 else str(exc)


def guess_column(text: str, columns: Iterable[tuple[str, str]]) -> str | None:
    """Return the column a server message names, if it is one of ``columns`` (or any, if empty).

    Parameters
    ----------
    text
        The server's message.
    columns
        ``(name, type)`` of the written columns.

    Returns
    -------
    str or None
        The column's name.
    """
    match = _COLUMN.search(text)
    if match is None:
        return None
    if match.group(1):
        name = match.group(1).replace("''", "'")
    else:
        name = (match.group(2) or match.group(3) or match.group(4)).replace("``", "`")
    known = {c for c, _t in columns}
    return name if not known or name in known else None


MARIADB_ERRORS = MariaDBErrors()
