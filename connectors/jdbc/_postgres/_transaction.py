"""A partition's live PostgreSQL transaction on an executor."""

from __future__ import annotations

from .._transaction import JdbcTransaction
from ._client import PostgresClient

__all__ = ["PostgresTransaction"]


class PostgresTransaction(JdbcTransaction):
    """A partition's live PostgreSQL transaction (psycopg2)."""

    errors = PostgresClient.errors
