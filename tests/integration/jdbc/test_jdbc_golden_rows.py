"""The rows twophase 0.2.0 kept in PostgreSQL and MariaDB, read by this release.

The tables are made with the DDL the 0.2.0 servers reported and hold the rows
0.2.0 wrote (``tests/golden/v0_2_0/``, written by the 0.2.0 code itself). The
current sinks open them (adding ``record_format``, 1 for the old rows), read
the markers field by field, and obey the fence rows; a row of a newer format
is refused by name.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pymysql
import pytest
from jdbc_support import PgTarget, mariadb_sql

from twophase import (
    CoordinatorLogError,
    FatalError,
    Fingerprint,
    Marker,
    SinkContext,
    TaskContext,
)
from twophase.connectors.jdbc import mariadb_sink, postgres_sink

pytestmark = pytest.mark.integration

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "v0_2_0"
FINGERPRINT = Fingerprint.parse("0:" + "0" * 64)


class OldTables:
    """A scratch schema (database) of one server holding 0.2.0's tables and rows."""

    dialect = ""
    quote = '"'

    def __init__(self, server: Any) -> None:
        self.server = server
        self.schema = f"golden_{uuid.uuid4().hex[:8]}"

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def create_table(self, name: str, ddl: dict[str, Any]) -> str:
        raise NotImplementedError

    def sink(self, name: str, protocol: str) -> Any:
        raise NotImplementedError

    def name(self, table: str) -> str:
        q = self.quote
        return f"{q}{self.schema}{q}.{q}{table}{q}"

    def load(self, protocol: str) -> dict[str, Any]:
        """Make 0.2.0's tables of ``protocol`` with its DDL and rows, and the data table."""
        path = GOLDEN / self.dialect / f"{protocol}_tables.json"
        golden: dict[str, Any] = json.loads(path.read_text())
        q = self.quote
        for name, table in golden["tables"].items():
            self.sql(self.create_table(name, table["ddl"]))
            for row in table["rows"]:
                columns = ", ".join(f"{q}{k}{q}" for k in row)
                values = ", ".join(["%s"] * len(row))
                self.sql(
                    f"INSERT INTO {self.name(name)} ({columns}) VALUES ({values})", [*row.values()]
                )
        self.sql(f"CREATE TABLE {self.name('data')} (id BIGINT)")
        return golden

    def create(self) -> None:
        """Create the scratch schema."""
        raise NotImplementedError

    def drop(self) -> None:
        """Roll back what a failed test left prepared, and drop the scratch schema."""
        raise NotImplementedError

    def open(self, name: str, protocol: str, identity: str) -> Any:
        sink = self.sink(name, protocol)
        sink.open(SinkContext(sink.name, identity, "query", "run", "/tmp/unused"))
        return sink


class OldPostgres(OldTables):
    dialect = "postgres"

    def create(self) -> None:
        self.sql(f'CREATE SCHEMA "{self.schema}"')

    def drop(self) -> None:
        self.server.rollback_prepared("tp:orders_")
        self.sql(f'DROP SCHEMA "{self.schema}" CASCADE')

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        return PgTarget(self.server, "coordinated").sql(statement, params)

    def create_table(self, name: str, ddl: dict[str, Any]) -> str:
        columns = [
            f'"{c["name"]}" {c["data_type"]}'
            + ("" if c["nullable"] else " NOT NULL")
            + (f" DEFAULT {c['default']}" if c["default"] is not None else "")
            for c in sorted(ddl["columns"], key=lambda c: c["ordinal"])
        ]
        key = ", ".join(f'"{k}"' for k in ddl["primary_key"])
        return f"CREATE TABLE {self.name(name)} ({', '.join(columns)}, PRIMARY KEY ({key}))"

    def sink(self, name: str, protocol: str) -> Any:
        return postgres_sink(
            name,
            table=(self.schema, "data"),
            dsn=self.server.dsn,
            protocol=protocol,
            marker_table=(self.schema, "twophase_markers"),
            lock_timeout=5.0,
        )


class OldMariaDB(OldTables):
    dialect = "mariadb"
    quote = "`"

    def create(self) -> None:
        self.sql(f"CREATE DATABASE `{self.schema}`")
        self.sql(f"GRANT ALL PRIVILEGES ON `{self.schema}`.* TO 'twophase'@'%'")  # the sink's

    def drop(self) -> None:
        self.server.rollback_prepared("tp:orders_")
        self.sql(f"SET STATEMENT lock_wait_timeout = 5 FOR DROP DATABASE `{self.schema}`")

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        return mariadb_sql(self.server, statement, params)

    def create_table(self, name: str, ddl: dict[str, Any]) -> str:
        created: str = ddl["show_create_table"]
        return created.replace(f"CREATE TABLE `{name}`", f"CREATE TABLE {self.name(name)}", 1)

    def sink(self, name: str, protocol: str) -> Any:
        return mariadb_sink(
            name,
            table=(self.schema, "data"),
            url=self.server.password_url,
            protocol=protocol,
            marker_table=(self.schema, "twophase_markers"),
            lock_timeout=5.0,
        )


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def old(request: pytest.FixtureRequest) -> Iterator[OldTables]:
    if request.param == "postgres":
        tables: OldTables = OldPostgres(request.getfixturevalue("postgres_server"))
    else:
        tables = OldMariaDB(request.getfixturevalue("mariadb_server"))
    tables.create()
    yield tables
    tables.drop()


@pytest.fixture
def old_mariadb(mariadb_server: Any) -> Iterator[OldTables]:
    tables = OldMariaDB(mariadb_server)
    tables.create()
    yield tables
    tables.drop()


def _formats(old: OldTables, table: str) -> list[tuple[Any, ...]]:
    return old.sql(f"SELECT DISTINCT record_format FROM {old.name(table)}")


def test_markers_of_0_2_0_read_field_by_field(old: OldTables) -> None:
    golden = old.load("markers")
    identity = golden["identity"]
    sink = old.open(identity.split(".")[0], "markers", identity)
    rows = golden["tables"]["twophase_markers"]["rows"]
    for batch in (0, 1):
        markers = sink.read_markers(identity, batch)
        assert [(m.partition_id, m.attempt, str(m.fingerprint)) for m in markers] == sorted(
            (r["partition_id"], r["attempt"], r["fingerprint"])
            for r in rows
            if r["batch_id"] == batch
        )
        assert {(m.identity, m.batch_id) for m in markers} == {(identity, batch)}
    for table in golden["tables"].keys() - {"twophase_slots"}:  # read, never altered (below)
        assert _formats(old, table) == [(1,)], f"{table}: the old rows are format 1"
    old.sql(f"UPDATE {old.name('twophase_markers')} SET record_format = 2 WHERE batch_id = 1")
    with pytest.raises(CoordinatorLogError, match="record_format 2, written by a twophase") as err:
        sink.read_markers(identity, 1)
    assert "twophase_markers" in str(err.value)
    assert f"identity {identity!r}, batch 1, partition 0" in str(err.value)


def test_fence_rows_of_0_2_0_still_fence(old: OldTables) -> None:
    golden = old.load("coordinated")
    identity = golden["identity"]
    (fence,) = golden["tables"]["twophase_fences"]["rows"]
    sink = old.open(identity.split(".")[0], "coordinated", identity)
    for table in golden["tables"].keys() - {"twophase_slots"}:  # the fences; MariaDB's registry
        assert old.sql(f"SELECT record_format FROM {old.name(table)} WHERE 1 = 0") == [], table
    assert _formats(old, "twophase_fences") == [(1,)]
    executor = pickle.loads(pickle.dumps(sink))
    rank = (fence["epoch"], fence["batch_id"])  # the 0.2.0 row's: attempts up to it are stale
    stale = rank if rank[1] >= 0 else (rank[0] - 1, 0)  # (n, -1): every attempt of runs before n

    def prepare(epoch: int, batch: int) -> Any:
        txn = executor.begin_transaction(TaskContext(sink.name, identity, batch, 0, 0, epoch))
        executor.write(txn, pa.RecordBatch.from_pylist([{"id": 1}]))
        return txn

    txn = prepare(*stale)
    with pytest.raises(FatalError, match="is fenced"):
        executor.pre_commit(txn)
    executor.abort(txn)  # what the framework does when pre_commit fails
    txn = prepare(rank[0] + 1, 0)
    sink.recover_and_abort(executor.pre_commit(txn))
    old.sql(f"UPDATE {old.name('twophase_fences')} SET record_format = 7")
    txn = prepare(rank[0] + 2, 0)
    with pytest.raises(CoordinatorLogError, match="record_format 7") as err:
        executor.pre_commit(txn)
    executor.abort(txn)
    assert "twophase_fences" in str(err.value)
    assert old.sql(f"SELECT count(*) FROM {old.name('data')}") == [(0,)]


def test_a_live_attempt_of_0_2_0_holding_a_slot_is_killed_by_a_newer_run(
    old_mariadb: OldTables,
) -> None:
    """0.2.0's MariaDB attempts registered ``(epoch, attempt)`` in ``twophase_slots``.

    An attempt of 0.2.0 still alive after the upgrade (a zombie of the last run of
    the old release) holds its partition's slot and a lock named after its rank.
    The new release never alters that table, but reads it: the holder is an
    attempt of an older run, so its connection is killed, and the new attempt
    writes.
    """
    old = old_mariadb
    golden = old.load("markers")
    identity = golden["identity"]
    slot_row = golden["tables"]["twophase_slots"]["rows"][0]
    partition, epoch, attempt = (slot_row[k] for k in ("partition_id", "epoch", "attempt"))
    # 0.2.0's lock names: the slot, and the attempt's own (its _fencing._lock_name)
    slot = f"tp:{hashlib.blake2b(identity.encode(), digest_size=8).hexdigest()}:{partition}"
    zombie = old.server.connect(superuser=False, autocommit=True)  # the sink's user
    with zombie.cursor() as cur:
        for name in (f"{slot}:{epoch}:{attempt}", slot):
            cur.execute("SELECT GET_LOCK(%s, 0)", (name,))
            assert cur.fetchone() == (1,), name
    sink = old.open(identity.split(".")[0], "markers", identity)
    executor = pickle.loads(pickle.dumps(sink))
    context = TaskContext(sink.name, identity, 2, partition, 0, epoch + 1)
    txn = executor.begin_transaction(context)  # waits for the slot no longer than the kill
    executor.write(txn, pa.RecordBatch.from_pylist([{"id": 7}]))
    executor.commit_with_marker(txn, Marker(identity, 2, partition, 0, FINGERPRINT))
    assert old.sql(f"SELECT id FROM {old.name('data')}") == [(7,)]
    with pytest.raises(pymysql.err.OperationalError), zombie.cursor() as cur:
        cur.execute("SELECT 1")  # its connection was killed
    assert old.sql(f"SELECT count(*) FROM {old.name('twophase_slots')}") == [
        (len(golden["tables"]["twophase_slots"]["rows"]),)
    ], "0.2.0's registry is not written"


def test_opening_upgraded_tables_alters_nothing_and_waits_for_no_lock(old: OldTables) -> None:
    """Once the tables have their columns, a start runs no ``ALTER``: even a no-op one waits
    for every lock on the table (here a reader's open transaction), and would stall the start."""
    golden = old.load("markers")
    identity = golden["identity"]
    old.open(identity.split(".")[0], "markers", identity)  # adds record_format
    reader = old.server.connect()  # autocommit off: the transaction holds the table's lock
    try:
        with reader.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {old.name('twophase_markers')}")
            cur.fetchall()
        opened: list[float] = []
        errors: list[BaseException] = []

        def start() -> None:
            began = time.monotonic()
            try:
                old.open(identity.split(".")[0], "markers", identity)
            except BaseException as exc:
                errors.append(exc)
            opened.append(time.monotonic() - began)

        thread = threading.Thread(target=start, daemon=True)
        thread.start()
        thread.join(15)
        assert not thread.is_alive(), "the start waited for the reader's lock"
        assert errors == [], errors
        assert opened[0] < 4, f"the start took {opened[0]:.1f} s"
    finally:
        reader.rollback()
        reader.close()
