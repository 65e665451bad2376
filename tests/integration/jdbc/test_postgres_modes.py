"""Write modes (append, upsert, CDC) through the real coordinator, both protocols."""

from __future__ import annotations

import pyarrow as pa
import pytest
from jdbc_support import PgTarget, id_batch

from twophase.testing import LocalRunner

pytestmark = pytest.mark.integration


def kv(ids: list[int], values: list[str | None], **extra: pa.Array) -> pa.RecordBatch:
    return pa.record_batch(
        {"id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.string()), **extra}
    )


def test_append_creates_the_table_and_copies_every_row(pg: PgTarget, table: str) -> None:
    sink = pg.sink("append", table, create_table=True)
    runner = LocalRunner(sink)
    runner.run_batch(0, [[id_batch(list(range(0, 500)))], [id_batch(list(range(500, 1000)))], []])
    runner.run_batch(1, [[id_batch([1000])]])
    assert sorted(pg.ids(table)) == list(range(1001))
    columns = pg.sql(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_name = %s ORDER BY ordinal_position",
        (table,),
    )
    assert columns == [("id", "bigint", "YES"), ("payload", "text", "YES")]


def test_upsert_inserts_updates_and_keeps_the_last_row_of_a_key(pg: PgTarget, table: str) -> None:
    columns = "id bigint PRIMARY KEY, v text NOT NULL, untouched text DEFAULT 'd'"
    pg.sql(f'CREATE TABLE "{table}" ({columns})')
    pg.sql(f"INSERT INTO \"{table}\" VALUES (1, 'old', 'keep'), (2, 'old', 'keep')")
    sink = pg.sink("upsert", table, mode="upsert", key_columns=["id"])
    runner = LocalRunner(sink)
    # Key 3 appears twice in one partition: the later row wins (row order).
    runner.run_batch(
        0,
        [
            [kv([1, 3], ["new1", "first3"]), kv([3], ["second3"])],
            [kv([4], ["new4"])],
        ],
    )
    assert pg.rows(table) == [
        (1, "new1", "keep"),
        (2, "old", "keep"),
        (3, "second3", "d"),
        (4, "new4", "d"),
    ]


def test_upsert_order_column_decides_between_rows_of_one_key(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v text, version bigint)')
    sink = pg.sink("upsert", table, mode="upsert", key_columns=["id"], order_column="version")
    versions = pa.array([3, 1, None, 2], pa.int64())
    LocalRunner(sink).run_batch(
        0, [[kv([1, 1, 1, 1], ["v3", "v1", "vnull", "v2"], version=versions)]]
    )
    assert pg.rows(table) == [(1, "v3", 3)]


def test_upsert_with_only_key_columns_ignores_duplicates(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY)')
    sink = pg.sink("upsert", table, mode="upsert", key_columns=["id"])
    runner = LocalRunner(sink)
    ids = lambda xs: pa.record_batch({"id": pa.array(xs, pa.int64())})  # noqa: E731
    runner.run_batch(0, [[ids([1, 2, 2])]])
    runner.run_batch(1, [[ids([2, 3])]])
    assert pg.rows(table) == [(1,), (2,), (3,)]


def test_upsert_on_a_composite_key_created_by_create_table(pg: PgTarget, table: str) -> None:
    sink = pg.sink("upsert", table, mode="upsert", key_columns=["id", "v"], create_table=True)
    runner = LocalRunner(sink)
    extra = {"n": pa.array([1, 2], pa.int32())}
    runner.run_batch(0, [[kv([1, 1], ["a", "b"], **extra)]])
    runner.run_batch(1, [[kv([1], ["a"], n=pa.array([9], pa.int32()))]])
    assert pg.rows(table, order_by="v") == [(1, "a", 9), (1, "b", 2)]
    pk = pg.sql(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
        "ORDER BY a.attname",
        (f'"{table}"',),
    )
    assert [r[0] for r in pk] == ["id", "v"]


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


def test_cdc_applies_the_changes_of_each_key_in_order(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v text NOT NULL)')
    pg.sql(f"INSERT INTO \"{table}\" VALUES (1, 'snap1'), (2, 'snap2'), (5, 'snap5')")
    sink = pg.sink("cdc", table, mode="cdc", key_columns=["id"])
    runner = LocalRunner(sink)
    runner.run_batch(
        0,
        [
            [
                # key 1: updated twice -> last update
                cdc([1, 1], ["u", "u"], ["u1a", "u1b"]),
                # key 2: deleted (a Debezium delete carries no after-image)
                cdc([2], ["d"], [None]),
                # key 3: created then deleted in the same batch -> absent
                cdc([3, 3], ["c", "d"], ["c3", None]),
            ],
            [
                # key 4: deleted (missing) then re-created -> present
                cdc([4, 4], ["d", "c"], [None, "c4"]),
                # key 6: snapshot read
                cdc([6], ["r"], ["r6"]),
                # key 7: delete of a key that never existed -> nothing
                cdc([7], ["d"], [None]),
            ],
        ],
    )
    assert pg.rows(table) == [(1, "u1b"), (4, "c4"), (5, "snap5"), (6, "r6")]
    columns = [
        r[0]
        for r in pg.sql(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s", (table,)
        )
    ]
    assert "op" not in columns


def test_cdc_order_column_reorders_changes_within_a_batch(pg: PgTarget, table: str) -> None:
    sink = pg.sink(
        "cdc", table, mode="cdc", key_columns=["id"], order_column="lsn", create_table=True
    )
    runner = LocalRunner(sink)
    # Arrival order is c(lsn 10), d(lsn 30), u(lsn 20): by lsn, the delete is last.
    runner.run_batch(0, [[cdc([1, 1, 1], ["c", "d", "u"], ["a", None, "b"], [10, 30, 20])]])
    assert pg.rows(table) == []
    runner.run_batch(1, [[cdc([1, 1], ["u", "c"], ["late", "early"], [50, 40])]])
    assert pg.rows(table) == [(1, "late", 50)]
    columns = [
        r[0]
        for r in pg.sql(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "ORDER BY ordinal_position",
            (table,),
        )
    ]
    assert columns == ["id", "v", "lsn"]  # the op column is not created


def test_upsert_replay_after_a_crash_is_exact(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v text)')
    sink = pg.sink("upsert", table, mode="upsert", key_columns=["id"])
    runner = LocalRunner(sink)
    step = "decided" if pg.protocol == "coordinated" else "phase1_done"
    runner.crash_at(step, 0)
    from twophase.testing import SimulatedCrash

    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, [[kv([1], ["a"])], [kv([2], ["b"])]])
    runner.restart()
    runner.run_batch(0, [[kv([1], ["a"])], [kv([2], ["b"])]])
    runner.run_batch(1, [[kv([1], ["a2"])]])
    assert pg.rows(table) == [(1, "a2"), (2, "b")]
