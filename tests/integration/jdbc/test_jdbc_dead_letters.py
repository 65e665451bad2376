"""Dead letters on the real servers: PostgreSQL and MariaDB, both protocols.

Poison rows of every class (NOT NULL, too long, a bad value, unique, foreign key, check) mixed
with good rows: the good rows land exactly once, each bad row is in the dead-letter table exactly
once with its class, code, column and faithful row; a replay after a driver crash or a task retry
writes neither twice (the test kit's ``DeadLetterContract``); over ``max_bad_rows`` the batch
fails; ``bad_rows="fail"`` is unchanged; what is wrong with the batch still fails it; a redrive
after the table is fixed moves the rows once and leaves those still refused.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

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
from twophase import DeadLetter
from twophase.connectors.jdbc import mariadb_sink
from twophase.errors import ConfigurationError, DataError, TwoPhaseError
from twophase.testing import (
    DeadLetterContract,
    LocalRunner,
    MarkerSinkContract,
    TwoPhaseSinkContract,
    assert_exactly_once,
    assert_exactly_once_or_dead_lettered,
)

pytestmark = [pytest.mark.integration]


class Maria:
    """The MariaDB server, read as :class:`Postgres` is."""

    database = "MariaDB"
    q = "`"
    #: The poison table: a parent for the foreign key, then the target.
    ddl = (
        "CREATE TABLE `{p}` (id BIGINT PRIMARY KEY) ENGINE=InnoDB",
        "INSERT INTO `{p}` VALUES (1)",
        "CREATE TABLE `{t}` (id BIGINT PRIMARY KEY, name VARCHAR(5) NOT NULL, "
        "amount INT CHECK (amount >= 0), ref BIGINT, FOREIGN KEY (ref) REFERENCES `{p}` (id)) "
        "ENGINE=InnoDB",
    )
    #: A trigger refusing a row with an error that is not a row's (the batch must fail).
    trigger = (
        "CREATE TRIGGER `{t}_deny` BEFORE INSERT ON `{t}` FOR EACH ROW "
        "IF NEW.amount = 666 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'denied'; END IF"
    )
    allow_null = "ALTER TABLE `{t}` MODIFY name VARCHAR(5) NULL"
    typed = (
        "CREATE TABLE `{t}` (id BIGINT PRIMARY KEY, tag VARCHAR(3) NOT NULL, b VARBINARY(10), "
        "ts DATETIME(6), d DECIMAL(10, 2), f DOUBLE, ok BOOLEAN, day DATE) ENGINE=InnoDB"
    )
    widen = "ALTER TABLE `{t}` MODIFY tag VARCHAR(20) NOT NULL"
    codes: ClassVar[dict[str, str]] = {
        "not_null": "1048",
        "too_long": "1406",
        "invalid_value": "1264",
        "unique": "1062",
        "foreign_key": "1452",
        "check": "4025",
    }

    def __init__(self, server: Any, protocol: str) -> None:
        self.server = server
        self.protocol = protocol

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        return mariadb_sql(self.server, statement, params)

    def sink(self, name: str, table: str, **options: Any) -> Any:
        options.setdefault("protocol", self.protocol)
        options.setdefault("lock_timeout", 5.0)
        options.setdefault("url", self.server.password_url)
        return mariadb_sink(name, table=table, **options)

    def prepared(self) -> list[str]:
        return [x for x in self.server.prepared_xids() if x.startswith("tp:")]

    def clean(self) -> None:
        self.server.rollback_prepared("tp:")
        for user in getattr(self, "users", ()):
            self.sql(f"DROP USER IF EXISTS '{user}'@'%'")
            self.sql(f"DROP DATABASE IF EXISTS `{user}`")

    def as_user(self, grants: dict[str, str]) -> dict[str, str]:
        """A sink's connection as a new user granted only ``grants`` (table: privileges).

        Its marker and fence tables are in a database of its own, where it may do anything.
        """
        user = f"dl_{uuid.uuid4().hex[:8]}"
        self.sql(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw-{user}'")
        self.users = [*getattr(self, "users", ()), user]
        self.sql(f"CREATE DATABASE `{user}`")
        self.sql(f"GRANT ALL ON `{user}`.* TO '{user}'@'%'")
        for table, privileges in grants.items():
            self.sql(f"GRANT {privileges} ON `{table}` TO '{user}'@'%'")
        kw = self.server.connect_kwargs(superuser=False)
        url = f"mysql://{user}:pw-{user}@{kw['host']}:{kw['port']}/{kw['database']}"
        return {"url": url, "marker_table": f"{user}.markers"}


class Postgres(PgTarget):
    """:class:`PgTarget`, with the poison table in PostgreSQL's words."""

    database = "PostgreSQL"
    q = '"'
    ddl = (
        'CREATE TABLE "{p}" (id bigint PRIMARY KEY)',
        'INSERT INTO "{p}" VALUES (1)',
        'CREATE TABLE "{t}" (id bigint PRIMARY KEY, name varchar(5) NOT NULL, '
        'amount integer CHECK (amount >= 0), ref bigint REFERENCES "{p}" (id))',
    )
    trigger = (
        'CREATE FUNCTION "{t}_deny"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
        "IF NEW.amount = 666 THEN RAISE EXCEPTION 'denied' USING ERRCODE = '42501'; END IF; "
        'RETURN NEW; END $$; CREATE TRIGGER deny BEFORE INSERT ON "{t}" FOR EACH ROW '
        'EXECUTE FUNCTION "{t}_deny"()'
    )
    allow_null = 'ALTER TABLE "{t}" ALTER COLUMN name DROP NOT NULL'
    typed = (
        'CREATE TABLE "{t}" (id bigint PRIMARY KEY, tag varchar(3) NOT NULL, b bytea, '
        "ts timestamptz, d numeric(10, 2), f double precision, ok boolean, day date)"
    )
    widen = 'ALTER TABLE "{t}" ALTER COLUMN tag TYPE varchar(20)'
    codes: ClassVar[dict[str, str]] = {
        "not_null": "23502",
        "too_long": "22001",
        "invalid_value": "22003",
        "unique": "23505",
        "foreign_key": "23503",
        "check": "23514",
    }

    def prepared(self) -> list[str]:
        return super().prepared()

    def clean(self) -> None:
        self.clean_prepared()

    def as_user(self, grants: dict[str, str]) -> dict[str, str]:
        """A sink's connection as ``twophase_test``, granted ``grants`` (table: privileges).

        Its marker and fence tables are in a schema of its own, where it may create them.
        """
        schema = f"dl_{uuid.uuid4().hex[:8]}"
        self.sql(f'CREATE SCHEMA "{schema}" AUTHORIZATION twophase_test')
        for table, privileges in grants.items():
            self.sql(f'GRANT {privileges} ON "{table}" TO twophase_test')
        return {"dsn": self.server.password_dsn, "marker_table": f"{schema}.markers"}


@pytest.fixture(params=EACH_DATABASE_AND_PROTOCOL)
def target(request: pytest.FixtureRequest) -> Iterator[Postgres | Maria]:
    """Each database under each protocol, with the poison table ``target.table``."""
    yield from _target(request)


@pytest.fixture(params=[p for p in EACH_DATABASE_AND_PROTOCOL if "coordinated" in p.values[0]])
def database(request: pytest.FixtureRequest) -> Iterator[Postgres | Maria]:
    """Each database (what the protocol does not change), with the poison table."""
    yield from _target(request)


def _target(request: pytest.FixtureRequest) -> Iterator[Postgres | Maria]:
    database, protocol = request.param
    fixture = request.getfixturevalue(server_fixture(database, protocol))
    server = Postgres(fixture, protocol) if database == "PostgreSQL" else Maria(fixture, protocol)
    server.clean()
    server.table = f"dl_{uuid.uuid4().hex[:12]}"  # type: ignore[union-attr]
    server.parent = f"{server.table}_parent"  # type: ignore[union-attr]
    for statement in server.ddl:
        server.sql(statement.format(t=server.table, p=server.parent))  # type: ignore[union-attr]
    yield server
    server.clean()


#: Each poison: its position in the 20 rows of a batch, and the class it must be set aside as.
POISONS = {3: "not_null", 5: "too_long", 8: "invalid_value", 11: "unique", 14: "foreign_key"}
POISONS[17] = "check"
COLUMNS = {"not_null": "name", "too_long": "name", "invalid_value": "amount", "foreign_key": "ref"}


def poisoned(batch: int, positions: dict[int, str] = POISONS) -> list[dict[str, Any]]:
    """Twenty rows of batch ``batch`` (ids ``batch*100 + i``), those at ``positions`` poisoned."""
    rows = []
    for i in range(20):
        row: dict[str, Any] = {"id": batch * 100 + i, "name": f"n{i}", "amount": i, "ref": 1}
        kind = positions.get(i)
        if kind == "not_null":
            row["name"] = None
        elif kind == "too_long":
            row["name"] = "much too long"
        elif kind == "invalid_value":
            row["amount"] = 2**40
        elif kind == "unique":
            row["id"] = batch * 100 + i - 1  # the row before's id, in the same partition
        elif kind == "foreign_key":
            row["ref"] = 99
        elif kind == "check":
            row["amount"] = -1
        rows.append(row)
    return rows


def record_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.int64())])
    schema = schema.append(pa.field("ref", pa.int64()))
    return pa.RecordBatch.from_pylist(rows, schema)


def two_partitions(rows: list[dict[str, Any]]) -> list[list[pa.RecordBatch]]:
    """Rows 0-9 and 10-19: a unique poison's twin is in its own partition."""
    return [[record_batch(rows[:10])], [record_batch(rows[10:])]]


def read_ids(target: Any) -> list[int]:
    return [r[0] for r in target.sql(f"SELECT id FROM {target.q}{target.table}{target.q}")]


# ------------------------------------------------------------------ every class, once
def test_poison_rows_of_every_class_are_set_aside_once_with_their_error(target: Any) -> None:
    sink = target.sink("dl", target.table, bad_rows="dead_letter")
    rows = poisoned(0)
    metrics = LocalRunner(sink).run_batch(0, two_partitions(rows))
    assert metrics.dead_lettered == len(POISONS)
    good = [r["id"] for i, r in enumerate(rows) if i not in POISONS]
    assert_exactly_once(read_ids(target), good)
    letters = list(sink.read_dead_letters())
    assert [(d.partition_id, d.position, d.error_class) for d in letters] == [
        (i // 10, i % 10, kind) for i, kind in sorted(POISONS.items())
    ]
    for letter in letters:
        at = letter.partition_id * 10 + letter.position
        assert letter.values() == rows[at], "the row is kept as it was written"
        assert (letter.sink, letter.batch_id) == ("dl", 0)
        assert letter.code == target.codes[letter.error_class]
        if letter.error_class in COLUMNS:
            assert letter.column == COLUMNS[letter.error_class], letter
        assert letter.message
    assert target.prepared() == []


def test_a_replayed_batch_writes_neither_rows_nor_dead_letters_twice(target: Any) -> None:
    """The driver dies after the decision (coordinated) or after the commits (markers)."""
    from twophase.testing import SimulatedCrash

    runner = LocalRunner(target.sink("dl", target.table, bad_rows="dead_letter"))
    runner.run_batch(0, two_partitions(poisoned(0)))
    runner.crash_at("decided" if target.protocol == "coordinated" else "phase1_done", 1)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(1, two_partitions(poisoned(1)))
    runner.restart()
    runner.run_batch(1, two_partitions(poisoned(1)))
    every = [r for b in (0, 1) for r in poisoned(b)]
    bad = [r for b in (0, 1) for i, r in enumerate(poisoned(b)) if i in POISONS]
    sink = target.sink("dl", target.table, bad_rows="dead_letter")
    dead = [letter.values() for letter in sink.read_dead_letters()]
    key = ["id", "name", "amount", "ref"]
    good = target.sql(f"SELECT id, name, amount, ref FROM {target.q}{target.table}{target.q}")
    assert_exactly_once_or_dead_lettered(
        [tuple(r) for r in good],
        [tuple(d[k] for k in key) for d in dead],
        [tuple(r[k] for k in key) for r in every],
        refused=[tuple(r[k] for k in key) for r in bad],
    )
    assert target.prepared() == []


def test_bad_rows_fail_fails_the_batch_at_the_first_bad_row_as_before(target: Any) -> None:
    sink = target.sink("dl", target.table)
    with pytest.raises(DataError) as caught:
        LocalRunner(sink).run_batch(0, [[record_batch(poisoned(0, {4: "not_null"}))]])
    assert (caught.value.sink, caught.value.batch_id, caught.value.column) == ("dl", 0, "name")
    assert read_ids(target) == []
    missing = f"{target.table}_dead_letters"
    assert target.sql(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = %s", (missing,)
    ) == [(0,)], "bad_rows='fail' creates no dead-letter table"


def test_more_bad_rows_than_max_bad_rows_fail_the_batch_with_the_count(target: Any) -> None:
    sink = target.sink("dl", target.table, bad_rows="dead_letter", max_bad_rows=2)
    positions = {1: "not_null", 2: "too_long", 3: "check"}
    with pytest.raises(DataError, match=r"3 rows were refused, more than max_bad_rows=2"):
        LocalRunner(sink).run_batch(0, [[record_batch(poisoned(0, positions))]])
    assert read_ids(target) == []
    assert list(sink.read_dead_letters()) == []
    assert target.prepared() == []


def test_an_error_that_is_not_a_rows_fails_the_batch(target: Any) -> None:
    """A trigger raising a privilege error (PostgreSQL) or a SIGNAL (MariaDB) for one row."""
    target.sql(target.trigger.format(t=target.table))
    sink = target.sink("dl", target.table, bad_rows="dead_letter")
    rows = poisoned(0, {2: "not_null"})
    rows[6]["amount"] = 666
    with pytest.raises(TwoPhaseError, match="denied") as caught:
        LocalRunner(sink).run_batch(0, [[record_batch(rows)]])
    assert not isinstance(caught.value, DataError)
    assert read_ids(target) == []
    assert list(sink.read_dead_letters()) == []


def test_a_dropped_table_still_fails_the_batch(target: Any) -> None:
    runner = LocalRunner(target.sink("dl", target.table, bad_rows="dead_letter"))
    runner.run_batch(0, two_partitions(poisoned(0)))
    target.sql(f"DROP TABLE {target.q}{target.table}{target.q}")
    with pytest.raises(ConfigurationError, match="does not exist"):
        runner.run_batch(1, two_partitions(poisoned(1)))


# ------------------------------------------------------------------ redrive
def test_redrive_after_a_fix_moves_the_rows_once_and_leaves_the_still_bad(target: Any) -> None:
    sink = target.sink("dl", target.table, bad_rows="dead_letter")
    LocalRunner(sink).run_batch(0, two_partitions(poisoned(0)))
    letters = list(sink.read_dead_letters())
    target.sql(target.allow_null.format(t=target.table))  # the fix: name may be null
    refused = sink.redrive_dead_letters(letters)
    assert sorted(letters[e.row].error_class for e in refused) == sorted(
        k for k in POISONS.values() if k != "not_null"
    )
    moved = 0 * 100 + 3  # the not-null row
    assert read_ids(target).count(moved) == 1
    left = list(sink.read_dead_letters())
    assert [d.position for d in left] == [
        d.position for d in letters if d.error_class != "not_null"
    ]
    again = sink.redrive_dead_letters(letters)  # run again: nothing moves twice
    assert [e.row for e in again] == [e.row for e in refused]
    assert read_ids(target).count(moved) == 1
    assert len(list(sink.read_dead_letters())) == len(left)


def test_redrive_rolls_back_everything_on_an_error_that_is_not_a_rows(target: Any) -> None:
    sink = target.sink("dl", target.table, bad_rows="dead_letter")
    LocalRunner(sink).run_batch(0, two_partitions(poisoned(0)))
    letters = list(sink.read_dead_letters())
    target.sql(target.allow_null.format(t=target.table))
    target.sql(target.trigger.format(t=target.table))
    forged = dataclasses.replace(letters[-1], row=letters[-1].row.replace("-1", "666"))
    assert forged.values()["amount"] == 666
    with pytest.raises(TwoPhaseError, match="denied"):
        sink.redrive_dead_letters([letters[0], forged])
    assert 3 not in read_ids(target), "the not-null row's move was rolled back"
    assert len(list(sink.read_dead_letters())) == len(letters)


def test_redrive_writes_every_type_back_as_it_was(target: Any) -> None:
    """Bytes (base64 in the letter), a timestamp with its zone, a decimal, a float, a date."""
    import datetime as dt
    import decimal

    table, q = f"{target.table}_typed", target.q
    target.sql(target.typed.format(t=table))
    moment = dt.datetime(2026, 11, 28, 10, 30, 15, 123456, tzinfo=dt.timezone.utc)
    rows = [
        {"id": i, "tag": "abc" if i % 2 else "much too long", "b": bytes([0, 255, i]),
         "ts": moment + dt.timedelta(hours=i), "d": decimal.Decimal(f"{i}.25"), "f": i / 3,
         "ok": bool(i % 2), "day": dt.date(2026, 1, 1 + i)}
        for i in range(6)
    ]  # fmt: skip
    schema = pa.schema(
        [("id", pa.int64()), ("tag", pa.string()), ("b", pa.binary()),
         ("ts", pa.timestamp("us", tz="UTC")), ("d", pa.decimal128(10, 2)), ("f", pa.float64()),
         ("ok", pa.bool_()), ("day", pa.date32())]
    )  # fmt: skip
    sink = target.sink("dl_typed", table, bad_rows="dead_letter")
    LocalRunner(sink).run_batch(0, [[pa.RecordBatch.from_pylist(rows, schema)]])
    letters = list(sink.read_dead_letters())
    assert [d.values()["id"] for d in letters] == [0, 2, 4]
    target.sql(target.widen.format(t=table))
    assert sink.redrive_dead_letters(letters) == []
    assert list(sink.read_dead_letters()) == []
    got = target.sql(f"SELECT id, tag, b, ts, d, f, ok, day FROM {q}{table}{q} ORDER BY id")
    for row, want in zip(got, rows, strict=True):
        ts = row[3] if row[3].tzinfo else row[3].replace(tzinfo=dt.timezone.utc)
        assert (row[0], row[1], bytes(row[2]), ts, row[4], row[5], bool(row[6]), row[7]) == (
            tuple(want.values())
        ), f"row {want['id']} came back changed"


# ------------------------------------------------------------------ the contract suite
class _ContractFixtures(DeadLetterContract):
    """The test kit's dead-letter contract over a ``payload NOT NULL`` table of one server."""

    database: ClassVar[str]
    protocol_name: ClassVar[str]

    @pytest.fixture
    def server(self, request: pytest.FixtureRequest) -> Iterator[Any]:
        fixture = request.getfixturevalue(server_fixture(self.database, self.protocol_name))
        kind = Maria if self.database == "MariaDB" else Postgres
        server: Any = kind(fixture, self.protocol_name)
        server.clean()
        server.table = f"dlc_{uuid.uuid4().hex[:12]}"
        q = server.q
        server.sql(f"CREATE TABLE {q}{server.table}{q} (id BIGINT NOT NULL, payload TEXT NOT NULL)")
        yield server
        server.clean()

    @pytest.fixture
    def make_sink(self, server: Any) -> Callable[[str], Any]:
        return lambda name: server.sink(name, server.table, bad_rows="dead_letter")

    @pytest.fixture
    def read_ids(self, server: Any) -> Callable[[], list[int]]:
        return lambda: read_ids(server)

    @pytest.fixture
    def read_dead_letters(self, server: Any) -> Callable[[], list[DeadLetter]]:
        return lambda: list(server.sink("contract", server.table).read_dead_letters())


def _contract(database: str, protocol: str) -> type[_ContractFixtures]:
    base = TwoPhaseSinkContract if protocol == "coordinated" else MarkerSinkContract
    mark = pytest.mark.postgres if database == "PostgreSQL" else pytest.mark.mariadb
    attributes = {
        "database": database,
        "protocol_name": protocol,
        "protocol": base.protocol,
        "steps": base.steps,
        "finishing_hook": base.finishing_hook,
        "pytestmark": [mark],
    }
    # The contract's other tests run against these servers in test_*_contract.py already.
    for name in dir(_ContractFixtures):
        if name.startswith("test_") and name not in DeadLetterContract.__dict__:
            attributes[name] = None
    return type(
        f"TestDeadLetterContract{database}{protocol.title()}", (_ContractFixtures,), attributes
    )


TestDeadLetterContractPostgresCoordinated = _contract("PostgreSQL", "coordinated")
TestDeadLetterContractPostgresMarkers = _contract("PostgreSQL", "markers")
TestDeadLetterContractMariaDBCoordinated = _contract("MariaDB", "coordinated")
TestDeadLetterContractMariaDBMarkers = _contract("MariaDB", "markers")


# ------------------------------------------------------------------ a Spark query
@pytest.mark.spark
def test_a_spark_query_with_poison_rows_keeps_running(
    spark: Any, target: Any, tmp_path: Path
) -> None:
    """Not the unique poison: its twin may be in the other partition, whose prepared
    transaction holds the key until the batch commits (the coordinated protocol then waits
    out lock_timeout, as it would without dead letters: docs/jdbc.md, "Dead letters")."""
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    source.mkdir()
    poisons = {i: k for i, k in POISONS.items() if k != "unique"}
    every: list[dict[str, Any]] = []
    for batch in range(2):
        rows = poisoned(batch, poisons)
        every += rows
        pq.write_table(pa.Table.from_batches([record_batch(rows)]), source / f"{batch}.parquet")
    schema = "id long, name string, amount long, ref long"
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
    sink = target.sink("dl_spark", target.table, bad_rows="dead_letter")
    run_to_end(df.repartition(2), sink, checkpoint)
    bad = [r["id"] for n, r in enumerate(every) if n % 20 in poisons]
    dead = [d.values()["id"] for d in sink.read_dead_letters()]
    assert_exactly_once_or_dead_lettered(
        read_ids(target), dead, [r["id"] for r in every], refused=bad
    )
    assert target.prepared() == []


# ------------------------------------------------------------------ the sink user's rights
@pytest.mark.postgres
def test_a_user_who_may_not_create_the_dead_letter_table_is_told_at_open(
    postgres_server: Any,
) -> None:
    pg = Postgres(postgres_server, "coordinated")
    table = f"dl_{uuid.uuid4().hex[:12]}"
    pg.sql(f'CREATE SCHEMA "{table}_s"')
    pg.sql(f'CREATE TABLE "{table}_s"."{table}" (id bigint PRIMARY KEY, payload text)')
    pg.sql(f'GRANT USAGE ON SCHEMA "{table}_s" TO twophase_test')
    pg.sql(f'GRANT SELECT, INSERT ON "{table}_s"."{table}" TO twophase_test')
    sink = pg.sink(
        "dl_rights", f"{table}_s.{table}", dsn=postgres_server.password_dsn, bad_rows="dead_letter"
    )
    batch = pa.record_batch({"id": pa.array([1], pa.int64()), "payload": pa.array(["a"])})
    with pytest.raises(ConfigurationError, match="needs the dead-letter table") as caught:
        LocalRunner(sink).run_batch(0, [[batch]])
    assert (caught.value.sink, caught.value.setting) == ("dl_rights", "dead_letter_table")
    assert pg.sql("SELECT to_regclass(%s)", (f'"{table}_s"."{table}_dead_letters"',)) == [(None,)]


def test_a_user_who_may_not_insert_into_the_dead_letter_table_is_told_at_open(
    database: Any,
) -> None:
    """The table exists and the user may read it, not insert: refused at open, before any
    batch, not mid-stream at the first bad row (this batch has none)."""
    table = database.table
    owner = database.sink("dl_rights", table, bad_rows="dead_letter")
    LocalRunner(owner).run_batch(0, [[record_batch(poisoned(0, {}))]])  # creates the table
    user = database.as_user({table: "SELECT, INSERT", f"{table}_dead_letters": "SELECT"})
    sink = database.sink("dl_rights", table, bad_rows="dead_letter", **user)
    with pytest.raises(ConfigurationError, match="lacks INSERT") as caught:
        LocalRunner(sink).run_batch(1, [[record_batch(poisoned(1, {}))]])
    error = caught.value
    assert (error.sink, error.setting) == ("dl_rights", "dead_letter_table")
    assert f"{table}_dead_letters" in str(error)
    assert "bad_rows='dead_letter' needs SELECT, INSERT" in str(error)
    assert urlsplit(user.get("dsn") or user["url"]).password not in str(error)
    assert sorted(read_ids(database)) == list(range(20)), "batch 1 wrote nothing"
    assert database.prepared() == []


def test_a_redrive_by_a_user_who_may_not_delete_letters_is_refused_before_it_moves_one(
    database: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``twophase dead-letters redrive --yes``: DELETE is checked as the redrive starts."""
    from twophase._cli._commands import main

    table = database.table
    owner = database.sink("dl_redrive", table, bad_rows="dead_letter")
    LocalRunner(owner).run_batch(0, [[record_batch(poisoned(0, {3: "not_null"}))]])
    letters = list(owner.read_dead_letters())
    assert [d.position for d in letters] == [3]
    database.sql(database.allow_null.format(t=table))  # fixed: a redrive would move it
    user = database.as_user(
        {table: "SELECT, INSERT", f"{table}_dead_letters": "SELECT, INSERT, UPDATE"}
    )
    factory = "postgres_sink" if database.database == "PostgreSQL" else "mariadb_sink"
    options = {"table": table, "bad_rows": "dead_letter", **user}
    args = ["dead-letters", "redrive", "--sink", "dl_redrive", "--yes"]
    args += ["--target", f"twophase.connectors.jdbc:{factory}"]
    for key, value in options.items():
        args += ["-o", f"{key}={value}"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "[sink='dl_redrive', setting='dead_letter_table']" in err
    assert "a redrive of dead letters needs SELECT, DELETE, UPDATE" in err
    assert "lacks DELETE." in err
    assert urlsplit(user.get("dsn") or user["url"]).password not in err
    assert list(owner.read_dead_letters()) == letters, "no letter moved"
    assert 3 not in read_ids(database), "no row written"


def test_two_redrives_at_once_move_each_letter_once(
    database: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second starts while the first holds its letter deleted, uncommitted: it waits for
    the first's lock, then finds the letter gone and skips it."""
    from twophase.connectors.jdbc._dead_letter_table import DeadLetterTable

    table = database.table
    sink = database.sink("dl_twice", table, bad_rows="dead_letter")
    LocalRunner(sink).run_batch(0, [[record_batch(poisoned(0, {3: "not_null"}))]])
    letters = list(sink.read_dead_letters())
    database.sql(database.allow_null.format(t=table))
    inserted, started = threading.Event(), threading.Event()
    insert, redrive = DeadLetterTable._insert, DeadLetterTable.redrive

    def first_insert(self: Any, *args: Any) -> Any:
        error = insert(self, *args)
        inserted.set()  # the letter deleted and its row inserted, not committed
        assert started.wait(30), "the second redrive never started"
        time.sleep(0.5)  # it waits on the letter's lock now
        return error

    def second_redrive(self: Any, *args: Any) -> Any:
        assert inserted.wait(30), "the first redrive never inserted"
        started.set()
        return redrive(self, *args)

    results: dict[str, Any] = {}

    def run(name: str, patch: str, fn: Any) -> None:
        other = database.sink("dl_twice", table, bad_rows="dead_letter")
        monkeypatch.setattr(other._dead_letters, patch, fn.__get__(other._dead_letters))
        results[name] = other.redrive_dead_letters(letters)

    threads = [
        threading.Thread(target=run, args=("first", "_insert", first_insert)),
        threading.Thread(target=run, args=("second", "redrive", second_redrive)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert started.is_set(), "the two redrives did not overlap"
    assert results == {"first": [], "second": []}
    assert read_ids(database).count(3) == 1, "the row moved once"
    assert list(sink.read_dead_letters()) == []
