"""Fixtures of the JDBC family's integration tests: the PostgreSQL targets, a fresh table name.

Built on the session servers of ``tests/conftest.py``: ``postgres_server``
(``max_prepared_transactions = 64``, the coordinated protocol) and
``postgres_server_no_prepared`` (0, the markers protocol). Every test gets a fresh table
name; prepared transactions written by this connector (gid prefix ``tp:``)
are rolled back before and after each test, as psycopg's TPC fixture does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from jdbc_support import PROTOCOLS, PgTarget


@pytest.fixture(params=PROTOCOLS)
def pg(request: pytest.FixtureRequest) -> Iterator[PgTarget]:
    """Both protocols: server that has (coordinated) or lacks (markers) prepared transactions."""
    fixture = "postgres_server" if request.param == "coordinated" else "postgres_server_no_prepared"
    target = PgTarget(request.getfixturevalue(fixture), request.param)
    target.clean_prepared()
    yield target
    target.clean_prepared()


@pytest.fixture
def pg_a(postgres_server: Any) -> Iterator[PgTarget]:
    """The server with prepared transactions (the coordinated protocol only)."""
    target = PgTarget(postgres_server, "coordinated")
    target.clean_prepared()
    yield target
    target.clean_prepared()


@pytest.fixture
def pg_b(postgres_server_no_prepared: Any) -> Iterator[PgTarget]:
    """The server without prepared transactions (the markers protocol only)."""
    target = PgTarget(postgres_server_no_prepared, "markers")
    return target


@pytest.fixture
def table() -> str:
    """A fresh table name (created by the test or by ``create_table=True``)."""
    return f"t_{uuid.uuid4().hex[:12]}"
