"""Schema evolution on the real servers: PostgreSQL and MariaDB, both protocols.

A new column arrives across a restart (a Spark query restarted from its checkpoint; a driver
that died with a batch decided and prepared under the old schema), in append and upsert mode,
and a table some other transaction holds: the column is added once, nullable, of the mapped
type, before the batch that first carries it, and its rows land exactly once.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jdbc_support import (
    EACH_DATABASE_AND_PROTOCOL,
    PgTarget,
    mariadb_sql,
    server_fixture,
)

from tests.spark.helpers import run_to_end
from twophase.connectors.jdbc import mariadb_sink
from twophase.errors import AbortRequiredError, ConfigurationError
from twophase.testing import LocalRunner, SimulatedCrash, assert_exactly_once

pytestmark = [pytest.mark.integration]


class Reads:
    """What the tests read of either server: its catalog, its rows; a transaction on a table."""

    database = ""
    table = ""
    server: Any
    #: The identifier quote, and the catalog's ``(name, type, nullable)`` of a table, in order.
    quote = ""
    catalog_sql = ""

    if TYPE_CHECKING:

        def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]: ...

    def catalog_param(self, table: str) -> str:
        return table

    def session(self) -> Any:
        """A connection outside autocommit."""
        return self.server.connect()

    def catalog(self, table: str) -> list[tuple[str, str, bool]]:
        rows = self.sql(self.catalog_sql, (self.catalog_param(table),))
        return [(str(name), str(type_), bool(nullable)) for name, type_, nullable in rows]

    def column(self, table: str, name: str) -> tuple[str, bool] | None:
        """``(type, nullable)`` of a column, None when the table lacks it."""
        return next(((t, null) for n, t, null in self.catalog(table) if n == name), None)

    def columns(self, table: str) -> list[str]:
        return [name for name, _type, _null in self.catalog(table)]

    def select(self, table: str, columns: str) -> list[tuple[Any, ...]]:
        q = self.quote
        return sorted(self.sql(f"SELECT {columns} FROM {q}{table}{q}"))

    def hold(self, table: str) -> Any:
        """A session inside a transaction that has read the table (it holds the table's lock)."""
        conn = self.session()
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {self.quote}{table}{self.quote}")
            cur.fetchall()
        return conn


class Maria(Reads):
    """The MariaDB server."""

    database = "MariaDB"
    quote = "`"
    catalog_sql = (
        "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE = 'YES' FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION"
    )

    def __init__(self, server: Any, protocol: str) -> None:
        self.server = server
        self.protocol = protocol

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        return mariadb_sql(self.server, statement, params)

    def session(self) -> Any:
        return self.server.connect(autocommit=False)

    def sink(self, name: str, table: str, **options: Any) -> Any:
        options.setdefault("protocol", self.protocol)
        options.setdefault("lock_timeout", 5.0)
        return mariadb_sink(name, table=table, url=self.server.password_url, **options)

    def create(self, table: str) -> None:
        self.sql(f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, payload TEXT) ENGINE=InnoDB")

    def prepared(self) -> list[str]:
        return [x for x in self.server.prepared_xids() if x.startswith("tp:")]

    def drop(self, table: str) -> None:
        self.server.rollback_prepared("tp:")
        self.sql(f"SET STATEMENT lock_wait_timeout = 5 FOR DROP TABLE IF EXISTS `{table}`")


class Postgres(Reads, PgTarget):
    """:class:`PgTarget`, read as :class:`Maria` is."""

    database = "PostgreSQL"
    quote = '"'
    catalog_sql = (
        "SELECT attname, format_type(atttypid, atttypmod), NOT attnotnull FROM pg_attribute "
        "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
    )

    def catalog_param(self, table: str) -> str:
        return f'"{table}"'

    def create(self, table: str) -> None:
        self.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, payload text)')

    def drop(self, table: str) -> None:
        self.clean_prepared()
        self.sql("SET lock_timeout = '5s'")
        self.sql(f'DROP TABLE IF EXISTS "{table}"')


#: The type the added ``score`` (Spark DoubleType) column gets.
SCORE_TYPE = {"PostgreSQL": "double precision", "MariaDB": "double"}


@pytest.fixture(params=EACH_DATABASE_AND_PROTOCOL)
def target(request: pytest.FixtureRequest) -> Iterator[Postgres | Maria]:
    """Each database under each protocol, its own fresh table name in ``target.table``."""
    database, protocol = request.param
    server: Postgres | Maria
    fixture = request.getfixturevalue(server_fixture(database, protocol))
    if database == "PostgreSQL":
        server = Postgres(fixture, protocol)
        server.clean_prepared()
    else:
        server = Maria(fixture, protocol)
        server.server.rollback_prepared("tp:")
    server.table = f"evolve_{uuid.uuid4().hex[:12]}"
    yield server
    server.drop(server.table)


def rows(ids: list[int], score: bool) -> pa.RecordBatch:
    columns: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "payload": pa.array([f"p{i}" for i in ids], pa.string()),
    }
    if score:
        columns["score"] = pa.array([i / 4 for i in ids], pa.float64())
    return pa.record_batch(columns)


def parts(batch: int, score: bool) -> list[list[pa.RecordBatch]]:
    """Three partitions of three rows: ids ``batch*100 + partition*10 + i``."""
    return [[rows([batch * 100 + p * 10 + i for i in range(3)], score)] for p in range(3)]


def ids_of(*batches: int) -> list[int]:
    return [b * 100 + p * 10 + i for b in batches for p in range(3) for i in range(3)]


# ------------------------------------------------------------------ a driver restart
def test_a_restart_with_a_new_column_after_a_batch_prepared_under_the_old_schema(
    target: Any,
) -> None:
    """The old batch is finished by recovery first (its transactions hold the table), then added."""
    table = target.table
    target.create(table)
    runner = LocalRunner(target.sink("evolve", table))  # the old deployment: no evolution
    runner.run_batch(0, parts(0, score=False))
    step = "decided" if target.protocol == "coordinated" else "phase1_done"
    runner.crash_at(step, 1)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(1, parts(1, score=False))
    if target.protocol == "coordinated":
        assert len(target.prepared()) == 3  # decided, prepared, holding the table
        assert_exactly_once(target.select(table, "id"), [(i,) for i in ids_of(0)])

    runner.sink = target.sink("evolve", table, schema_evolution="add_columns")  # redeployed
    runner.restart()
    runner.run_batch(1, parts(1, score=False))  # the replay: finished, or skipped, as it was
    assert target.column(table, "score") is None
    runner.run_batch(2, parts(2, score=True))
    assert target.column(table, "score") == (SCORE_TYPE[target.database], True)
    assert target.prepared() == []
    got = target.select(table, "id, score")
    assert_exactly_once([r[0] for r in got], ids_of(0, 1, 2))
    assert [r for r in got if r[1] is not None] == [(i, i / 4) for i in ids_of(2)]

    runner.sink = target.sink("evolve", table, schema_evolution="add_columns")
    runner.restart()
    columns = target.columns(table)
    runner.run_batch(3, parts(3, score=True))
    assert target.columns(table) == columns == ["id", "payload", "score"]  # nothing added again
    assert_exactly_once([r[0] for r in target.select(table, "id")], ids_of(0, 1, 2, 3))


# ------------------------------------------------------------------ upsert's staging tables
def test_an_upsert_merges_the_new_column_through_its_staging_table(target: Any) -> None:
    table = target.table
    target.create(table)
    sink = target.sink(
        "evolve_upsert", table, mode="upsert", key_columns=["id"], schema_evolution="add_columns"
    )
    runner = LocalRunner(sink)
    runner.run_batch(0, [[rows([1, 2], score=False)]])
    runner.run_batch(1, [[rows([2, 3], score=True)], [rows([4], score=True)]])
    assert target.column(table, "score") == (SCORE_TYPE[target.database], True)
    assert target.select(table, "id, payload, score") == [
        (1, "p1", None),
        (2, "p2", 0.5),  # updated: the merge carried the new column
        (3, "p3", 0.75),
        (4, "p4", 1.0),
    ]
    assert target.prepared() == []


# ------------------------------------------------------------------ a hostile name
HOSTILE = 'ünï "q" `b`; DROP TABLE x; --'


def test_a_new_column_of_any_name_is_added_as_it_is(target: Any) -> None:
    table = target.table
    target.create(table)
    runner = LocalRunner(target.sink("evolve_names", table, schema_evolution="add_columns"))
    batch = pa.record_batch(
        {"id": pa.array([1], pa.int64()), HOSTILE: pa.array(["kept"], pa.string())}
    )
    runner.run_batch(0, [[batch]])
    text = {"PostgreSQL": "text", "MariaDB": "longtext"}[target.database]
    assert target.column(table, HOSTILE) == (text, True)
    assert target.columns(table) == ["id", "payload", HOSTILE]


# ------------------------------------------------------------------ lock_timeout
def test_a_table_held_by_another_transaction_fails_the_batch_within_lock_timeout(
    target: Any,
) -> None:
    table = target.table
    target.create(table)
    sink = target.sink("evolve_lock", table, schema_evolution="add_columns", lock_timeout=1.0)
    runner = LocalRunner(sink)
    holder = target.hold(table)
    try:
        with pytest.raises(AbortRequiredError, match="lock_timeout") as caught:
            runner.run_batch(0, parts(0, score=True))
    finally:
        holder.rollback()
        holder.close()
    error = caught.value
    assert (error.sink, error.batch_id, error.column) == ("evolve_lock", 0, "score")
    assert "adding column 'score'" in str(error)
    assert target.column(table, "score") is None
    assert target.select(table, "id") == []
    runner.run_batch(0, parts(0, score=True))  # the retry, once the table is free
    assert target.column(table, "score") == (SCORE_TYPE[target.database], True)
    assert_exactly_once([r[0] for r in target.select(table, "id")], ids_of(0))


def test_two_sinks_adding_the_same_column_at_once_add_it_once(target: Any) -> None:
    table = target.table
    target.create(table)
    sinks = [
        target.sink(f"evolve_{n}", table, schema_evolution="add_columns", max_partitions=1)
        for n in ("a", "b")
    ]
    errors: list[BaseException] = []
    holder = target.hold(table)  # both sinks queue behind it, then add in turn

    def run(n: int) -> None:
        try:
            LocalRunner(sinks[n]).run_batch(0, [[rows([n * 10 + 1, n * 10 + 2], score=True)]])
        except BaseException as exc:  # reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    threading.Event().wait(1.0)
    holder.rollback()
    holder.close()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert target.columns(table) == ["id", "payload", "score"]
    assert target.select(table, "id, score") == [(1, 0.25), (2, 0.5), (11, 2.75), (12, 3.0)]


# ------------------------------------------------------------------ a Spark query restarted
def write_file(source: Path, batch: int, score: bool) -> list[int]:
    source.mkdir(parents=True, exist_ok=True)
    ids = [batch * 1000 + i for i in range(20)]
    pq.write_table(pa.Table.from_batches([rows(ids, score)]), source / f"part-{batch:04d}.parquet")
    os.utime(source / f"part-{batch:04d}.parquet", (1_700_000_000 + batch,) * 2)
    return ids


@pytest.mark.spark
def test_a_spark_query_restarted_with_a_new_column_adds_it_once(
    spark: Any, target: Any, tmp_path: Path
) -> None:
    table = target.table
    target.create(table)
    source, checkpoint = tmp_path / "in", tmp_path / "chk"

    def run(schema: str) -> None:
        sink = target.sink("evolve_spark", table, schema_evolution="add_columns")
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
        run_to_end(df.repartition(2), sink, checkpoint)

    expected = write_file(source, 0, score=False) + write_file(source, 1, score=False)
    run("id long, payload string")
    assert target.columns(table) == ["id", "payload"]
    new = write_file(source, 2, score=True)
    run("id long, payload string, score double")  # the redeployed query, same checkpoint
    assert target.column(table, "score") == (SCORE_TYPE[target.database], True)
    newer = write_file(source, 3, score=True)
    run("id long, payload string, score double")
    assert target.columns(table) == ["id", "payload", "score"]
    got = target.select(table, "id, score")
    assert_exactly_once([r[0] for r in got], expected + new + newer)
    assert [r for r in got if r[1] is not None] == [(i, i / 4) for i in new + newer]
    assert target.prepared() == []


# ------------------------------------------------------------------ who may add
def test_postgres_refuses_evolution_at_open_when_the_sinks_user_does_not_own_the_table(
    pg: PgTarget, table: str
) -> None:
    """Only the owner may ALTER a PostgreSQL table: found when the query starts, not at night."""
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, payload text)')
    pg.sql(f'GRANT SELECT, INSERT ON "{table}" TO twophase_test')
    sink = pg.sink(
        "evolve_owner", table, dsn=pg.server.password_dsn, schema_evolution="add_columns"
    )
    with pytest.raises(ConfigurationError, match="allows only the owner") as caught:
        LocalRunner(sink).run_batch(0, parts(0, score=False))
    assert (caught.value.sink, caught.value.setting) == ("evolve_owner", "schema_evolution")
    assert pg.ids(table) == []
