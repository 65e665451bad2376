"""MariaDB: upsert and CDC on the real server, both protocols (test_postgres_modes's scenarios)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from jdbc_support import mariadb_sql

from twophase.connectors.jdbc import mariadb_sink
from twophase.errors import ConfigurationError
from twophase.testing import LocalRunner

pytestmark = pytest.mark.integration


class Target:
    """A fresh table name on the MariaDB server, for one protocol."""

    def __init__(self, server: Any, protocol: str) -> None:
        self.server = server
        self.protocol = protocol
        self.table = f"modes_{uuid.uuid4().hex[:12]}"

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        return mariadb_sql(self.server, statement)

    def rows(self) -> list[tuple[Any, ...]]:
        return self.sql(f"SELECT * FROM `{self.table}` ORDER BY 1, 2")

    def sink(self, **options: Any) -> Any:
        return mariadb_sink(
            "modes",
            table=self.table,
            url=self.server.password_url,
            protocol=self.protocol,
            lock_timeout=5.0,
            **options,
        )


@pytest.fixture(params=["coordinated", "markers"])
def target(request: pytest.FixtureRequest, mariadb_server: Any) -> Iterator[Target]:
    t = Target(mariadb_server, request.param)
    yield t
    mariadb_server.rollback_prepared("tp:")
    t.sql(f"SET STATEMENT lock_wait_timeout = 5 FOR DROP TABLE IF EXISTS `{t.table}`")


def kv(ids: list[int], values: list[str | None], **extra: pa.Array) -> pa.RecordBatch:
    return pa.record_batch(
        {"id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.string()), **extra}
    )


def cdc(
    ids: list[int], ops: list[str], values: list[str | None], lsn: list[int] | None = None
) -> pa.RecordBatch:
    columns = {
        "id": pa.array(ids, pa.int64()),
        "op": pa.array(ops, pa.string()),
        "v": pa.array(values, pa.string()),
    }
    if lsn is not None:
        columns["lsn"] = pa.array(lsn, pa.int64())
    return pa.record_batch(columns)


def test_upsert_inserts_updates_and_keeps_the_last_row_of_a_key(target: Target) -> None:
    target.sql(
        f"CREATE TABLE `{target.table}` (id BIGINT PRIMARY KEY, v TEXT NOT NULL, "
        "untouched VARCHAR(10) DEFAULT 'd') ENGINE=InnoDB"
    )
    target.sql(f"INSERT INTO `{target.table}` VALUES (1, 'old', 'keep'), (2, 'old', 'keep')")
    runner = LocalRunner(target.sink(mode="upsert", key_columns=["id"]))
    # Key 3 comes twice in one partition, in two record batches: the later row wins.
    runner.run_batch(
        0, [[kv([1, 3], ["new1", "first3"]), kv([3], ["second3"])], [kv([4], ["new4"])]]
    )
    assert target.rows() == [
        (1, "new1", "keep"),
        (2, "old", "keep"),
        (3, "second3", "d"),
        (4, "new4", "d"),
    ]


def test_upsert_order_column_decides_between_rows_of_one_key(target: Target) -> None:
    target.sql(
        f"CREATE TABLE `{target.table}` (id BIGINT PRIMARY KEY, v TEXT, version BIGINT) "
        "ENGINE=InnoDB"
    )
    sink = target.sink(mode="upsert", key_columns=["id"], order_column="version")
    versions = pa.array([3, 1, None, 2], pa.int64())
    LocalRunner(sink).run_batch(
        0, [[kv([1, 1, 1, 1], ["v3", "v1", "vnull", "v2"], version=versions)]]
    )
    assert target.rows() == [(1, "v3", 3)]


def test_upsert_with_only_key_columns_ignores_duplicates(target: Target) -> None:
    target.sql(f"CREATE TABLE `{target.table}` (id BIGINT PRIMARY KEY) ENGINE=InnoDB")
    runner = LocalRunner(target.sink(mode="upsert", key_columns=["id"]))
    ids = lambda xs: pa.record_batch({"id": pa.array(xs, pa.int64())})  # noqa: E731
    runner.run_batch(0, [[ids([1, 2, 2])]])
    runner.run_batch(1, [[ids([2, 3])]])
    assert target.sql(f"SELECT id FROM `{target.table}` ORDER BY id") == [(1,), (2,), (3,)]


def test_upsert_on_a_composite_key_created_by_create_table(target: Target) -> None:
    sink = target.sink(mode="upsert", key_columns=["id", "v"], create_table=True)
    runner = LocalRunner(sink)
    runner.run_batch(0, [[kv([1, 1], ["a", "b"], n=pa.array([1, 2], pa.int32()))]])
    runner.run_batch(1, [[kv([1], ["a"], n=pa.array([9], pa.int32()))]])
    assert target.rows() == [(1, "a", 9), (1, "b", 2)]
    pk = target.sql(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
        f"AND TABLE_NAME = '{target.table}' AND INDEX_NAME = 'PRIMARY' ORDER BY COLUMN_NAME"
    )
    assert [r[0] for r in pk] == ["id", "v"]


def test_cdc_applies_the_changes_of_each_key_in_order(target: Target) -> None:
    target.sql(f"CREATE TABLE `{target.table}` (id BIGINT PRIMARY KEY, v TEXT NOT NULL)")
    target.sql(f"INSERT INTO `{target.table}` VALUES (1, 'snap1'), (2, 'snap2'), (5, 'snap5')")
    runner = LocalRunner(target.sink(mode="cdc", key_columns=["id"]))
    runner.run_batch(
        0,
        [
            [
                cdc([1, 1], ["u", "u"], ["u1a", "u1b"]),  # updated twice: the last update
                cdc([2], ["d"], [None]),  # deleted (no after-image)
                cdc([3, 3], ["c", "d"], ["c3", None]),  # created then deleted: absent
            ],
            [
                cdc([4, 4], ["d", "c"], [None, "c4"]),  # deleted (missing), re-created
                cdc([6], ["r"], ["r6"]),  # a snapshot read
                cdc([7], ["d"], [None]),  # delete of a key that never existed
            ],
        ],
    )
    assert target.rows() == [(1, "u1b"), (4, "c4"), (5, "snap5"), (6, "r6")]


def test_cdc_creates_and_deletes_of_one_key_in_two_partitions_end_deleted(
    target: Target,
) -> None:
    """The case that was silently wrong on PostgreSQL once: the sink groups a key's rows itself."""
    target.sql(f"CREATE TABLE `{target.table}` (id BIGINT PRIMARY KEY, v TEXT)")
    runner = LocalRunner(target.sink(mode="cdc", key_columns=["id"]))
    runner.run_batch(
        0,
        [
            [cdc([1, 2, 3], ["c", "c", "c"], ["a", "b", "c"])],
            [cdc([1, 2], ["d", "d"], [None, None])],
        ],
    )
    assert target.rows() == [(3, "c")]


def test_cdc_order_column_reorders_changes_within_a_batch(target: Target) -> None:
    sink = target.sink(mode="cdc", key_columns=["id"], order_column="lsn", create_table=True)
    runner = LocalRunner(sink)
    # Arrival order is c(lsn 10), d(lsn 30), u(lsn 20): by lsn, the delete is last.
    runner.run_batch(0, [[cdc([1, 1, 1], ["c", "d", "u"], ["a", None, "b"], [10, 30, 20])]])
    assert target.rows() == []
    runner.run_batch(1, [[cdc([1, 1], ["u", "c"], ["late", "early"], [50, 40])]])
    assert target.rows() == [(1, "late", 50)]
    columns = target.sql(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        f"AND TABLE_NAME = '{target.table}' ORDER BY ORDINAL_POSITION"
    )
    assert [c[0] for c in columns] == ["id", "v", "lsn"]  # the op column is not created


def test_a_second_unique_index_on_written_columns_is_refused(target: Target) -> None:
    target.sql(
        f"CREATE TABLE `{target.table}` (id BIGINT PRIMARY KEY, v VARCHAR(20), UNIQUE (v)) "
        "ENGINE=InnoDB"
    )
    with pytest.raises(ConfigurationError, match="unique index on \\(v\\)") as info:
        LocalRunner(target.sink(mode="upsert", key_columns=["id"])).run_batch(0, [[kv([1], ["a"])]])
    assert info.value.setting == "key_columns"
    assert target.rows() == []
