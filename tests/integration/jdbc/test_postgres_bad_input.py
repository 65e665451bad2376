"""Bad input: a clear error naming sink, batch and column, and nothing of the batch visible.

The coordinated protocol gives "nothing of the batch visible" for every error:
the failing batch's prepared transactions are rolled back. The markers protocol
commits partition by partition, so a row-level error (NOT NULL, too long, bad value) leaves the
failing partition invisible but partitions that committed before it stay
committed; the replay skips them by their markers, so once the input or the
table is fixed the batch completes exactly once. Schema-level errors are found
before anything is written, in both protocols.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest
from jdbc_support import PgTarget

from twophase.errors import ConfigurationError, DataError, RetriableError, TwoPhaseError
from twophase.testing import LocalRunner, assert_exactly_once

pytestmark = pytest.mark.integration


#: The fence table as docs/jdbc.md gives it (the coordinated protocol).
FENCES_DDL = (
    "CREATE TABLE IF NOT EXISTS {name} (identity text PRIMARY KEY, epoch bigint NOT NULL, "
    "batch_id bigint NOT NULL, fenced_at timestamptz NOT NULL DEFAULT now())"
)


def rows(
    ids: list[int], values: list[Any], value_type: pa.DataType | None = None
) -> pa.RecordBatch:
    values_array = pa.array(values, value_type or pa.string())
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "v": values_array})


def run_bad_batch(
    pg: PgTarget,
    table: str,
    bad: pa.RecordBatch,
    expected: type[TwoPhaseError],
    *,
    column: str | None,
    mode: str = "append",
    match: str = "",
) -> LocalRunner:
    """Batch 0 is good; batch 1 has ``bad`` in its last partition and must fail cleanly."""
    keys = {"key_columns": ["id"]} if mode != "append" else {}
    runner = LocalRunner(pg.sink("bad", table, mode=mode, **keys))
    runner.run_batch(0, [[rows([1], ["ok"])]])
    good = [[rows([10], ["ok"])], [rows([11], ["ok"])]]
    with pytest.raises(expected, match=match) as info:
        runner.run_batch(1, [*good, [bad]])
    text = str(info.value)
    assert "sink='bad'" in text, text
    assert "batch=1" in text, text
    if column is not None:
        assert info.value.column == column, text
        assert f"column={column!r}" in text, text
    visible = pg.ids(table)
    bad_ids = bad.column(0).to_pylist()
    assert not set(bad_ids) & set(visible), "a row of the failing partition is visible"
    if pg.protocol == "coordinated":
        assert_exactly_once(visible, [1])  # nothing of batch 1
        assert pg.prepared() == [], "the failed batch left prepared transactions"
    else:
        assert set(visible) <= {1, 10, 11}
    return runner


def test_not_null_violation_in_copy(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint, v text NOT NULL)')
    run_bad_batch(pg, table, rows([20, 21], ["ok", None]), DataError, column="v", match="not-null")


def test_not_null_violation_in_the_upsert_merge(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v text NOT NULL)')
    run_bad_batch(
        pg, table, rows([20], [None]), DataError, column="v", mode="upsert", match="not-null"
    )


def test_over_long_varchar(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v varchar(3))')
    run_bad_batch(pg, table, rows([20], ["toolong"]), DataError, column="v", match="too long")


def test_over_long_varchar_in_upsert_staging(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v varchar(3))')
    run_bad_batch(
        pg, table, rows([20], ["toolong"]), DataError, column="v", mode="upsert", match="too long"
    )


def test_value_the_column_type_cannot_parse(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint, v uuid)')
    runner = LocalRunner(pg.sink("bad", table))
    good = str(uuid.uuid4())
    with pytest.raises(DataError, match="invalid input syntax for type uuid") as info:
        runner.run_batch(0, [[rows([1], [good])], [rows([2, 3], [good, "not-a-uuid"])]])
    assert info.value.column == "v"
    assert "batch=0" in str(info.value)
    if pg.protocol == "coordinated":
        assert pg.ids(table) == []
    else:
        assert pg.ids(table) == [1]


def test_integer_out_of_range_for_a_narrower_column(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint, v smallint)')
    bad = rows([20], [70_000], pa.int64())
    runner = LocalRunner(pg.sink("bad", table))
    with pytest.raises(DataError, match="out of range") as info:
        runner.run_batch(0, [[bad]])
    assert info.value.column == "v"
    assert pg.ids(table) == []


def test_schema_type_mismatch_is_found_before_writing(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint, v integer)')
    runner = LocalRunner(pg.sink("bad", table))
    with pytest.raises(
        ConfigurationError, match="is integer but the input column is string"
    ) as info:
        runner.run_batch(0, [[rows([1], ["x"])]])
    assert info.value.column == "v"
    assert "sink='bad'" in str(info.value)
    assert "batch=0" in str(info.value)
    assert pg.ids(table) == []


def test_missing_column_is_found_before_writing(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint, "V" text)')
    runner = LocalRunner(pg.sink("bad", table))
    with pytest.raises(ConfigurationError, match="case-sensitive") as info:
        runner.run_batch(0, [[rows([1], ["x"])]])
    assert info.value.column == "v"
    assert "batch=0" in str(info.value)
    assert pg.ids(table) == []


def test_required_column_missing_from_the_input(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint, v text, must text NOT NULL)')
    runner = LocalRunner(pg.sink("bad", table))
    with pytest.raises(ConfigurationError, match="NOT NULL without a default") as info:
        runner.run_batch(0, [[rows([1], ["x"])]])
    assert info.value.column == "must"


def test_missing_table(pg: PgTarget, table: str) -> None:
    runner = LocalRunner(pg.sink("bad", table))
    with pytest.raises(ConfigurationError, match=f"table {table} does not exist") as info:
        runner.run_batch(0, [[rows([1], ["x"])]])
    assert "sink='bad'" in str(info.value)
    assert "batch=0" in str(info.value)


def test_upsert_without_a_unique_key(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint, v text)')
    runner = LocalRunner(pg.sink("bad", table, mode="upsert", key_columns=["id"]))
    with pytest.raises(ConfigurationError, match="unique index or primary key"):
        runner.run_batch(0, [[rows([1], ["x"])]])


def test_cdc_operation_outside_c_r_u_d(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v text)')
    runner = LocalRunner(pg.sink("bad", table, mode="cdc", key_columns=["id"]))
    batch = pa.record_batch(
        {"id": pa.array([1, 2], pa.int64()), "op": ["c", "t"], "v": ["a", None]}
    )
    with pytest.raises(DataError, match="other than 'c', 'r', 'u', 'd' \\(first: 't'\\)") as info:
        runner.run_batch(0, [[batch]])
    assert info.value.column == "op"
    assert "batch=0" in str(info.value)
    assert pg.ids(table) == []


def test_permission_denied_is_found_at_start(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint, v text)')
    pg.sql(f'GRANT SELECT ON "{table}" TO twophase_test')
    sink = pg.sink("bad", table, dsn=pg.server.password_dsn)
    with pytest.raises(ConfigurationError, match=r"permission denied.*lacks INSERT") as info:
        LocalRunner(sink).run_batch(0, [[rows([1], ["x"])]])
    assert "sink='bad'" in str(info.value)
    assert pg.ids(table) == []


@pytest.mark.parametrize("mode", ["upsert", "cdc"])
def test_markers_merge_without_temp_on_the_database_is_refused_at_open(
    pg_b: PgTarget, table: str, mode: str
) -> None:
    """The markers protocol stages upsert/CDC rows in temporary tables: TEMP is checked at open."""
    from twophase import SinkContext

    pg_b.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v text)')
    pg_b.sql(f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{table}" TO twophase_test')
    ((database,),) = pg_b.sql("SELECT current_database()")
    pg_b.sql(f'REVOKE TEMP ON DATABASE "{database}" FROM PUBLIC, twophase_test')
    try:
        sink = pg_b.sink(
            "notemp", table, dsn=pg_b.server.password_dsn, mode=mode, key_columns=["id"]
        )
        with pytest.raises(ConfigurationError, match="GRANT TEMP ON DATABASE") as info:
            sink.open(SinkContext("notemp", "ident-temp", "q", "r", "/tmp/unused"))
    finally:
        pg_b.sql(f'GRANT TEMP ON DATABASE "{database}" TO PUBLIC, twophase_test')
    assert info.value.setting == "mode"
    assert "sink='notemp'" in str(info.value)
    assert f"mode={mode!r}" in str(info.value)


def test_permission_denied_while_writing(pg: PgTarget, table: str) -> None:
    """Privileges revoked after the start: COPY fails with 42501, mapped, nothing visible."""
    from twophase import Marker, SinkContext, TaskContext, fingerprint_batches

    pg.sql(f'CREATE TABLE "{table}" (id bigint, v text)')
    pg.sql(f'GRANT SELECT, INSERT ON "{table}" TO twophase_test')
    if pg.protocol == "coordinated":  # the fence table, as an administrator would set it up
        pg.sql(FENCES_DDL.format(name="twophase_fences"))
        pg.sql("GRANT SELECT, INSERT, UPDATE ON twophase_fences TO twophase_test")
    sink = pg.sink("bad", table, dsn=pg.server.password_dsn, marker_table=f"{table}_markers")
    sink.open(SinkContext("bad", "ident-perm", "q", "r", "/tmp/unused"))
    pg.sql(f'REVOKE INSERT ON "{table}" FROM twophase_test')
    txn = sink.begin_transaction(TaskContext("bad", "ident-perm", 3, 0, 0))

    def write_and_finish() -> None:
        batch = rows([1], ["x"])
        sink.write(txn, batch)  # the COPY streams: its error may come at the end
        if pg.protocol == "coordinated":
            sink.pre_commit(txn)
        else:
            marker = Marker("ident-perm", 3, 0, 0, fingerprint_batches([batch]))
            sink.commit_with_marker(txn, marker)

    with pytest.raises(ConfigurationError, match="permission denied") as info:
        write_and_finish()
    sink.abort(txn)
    assert "batch=3" in str(info.value)
    assert pg.ids(table) == []


def test_a_fence_table_the_sinks_user_may_not_use_is_refused_at_open(
    pg_a: PgTarget, table: str
) -> None:
    from twophase import SinkContext

    schema = f"s_{table}"
    pg_a.sql(f'CREATE SCHEMA "{schema}"')
    pg_a.sql(f'GRANT USAGE ON SCHEMA "{schema}" TO twophase_test')
    pg_a.sql(FENCES_DDL.format(name=f'"{schema}".twophase_fences'))  # owned by another role
    pg_a.sql(f'CREATE TABLE "{table}" (id bigint, v text)')
    pg_a.sql(f'GRANT SELECT, INSERT ON "{table}" TO twophase_test')
    sink = pg_a.sink("bad", table, dsn=pg_a.server.password_dsn, marker_table=f"{schema}.m")
    with pytest.raises(ConfigurationError, match="permission denied") as info:
        sink.open(SinkContext("bad", "ident-fence", "q", "r", "/tmp/unused"))
    assert info.value.setting == "marker_table"
    assert "SELECT, INSERT, UPDATE" in str(info.value)
    assert f"{schema}.twophase_fences" in str(info.value)


def test_prepared_transaction_slots_exhausted(pg_a: PgTarget, table: str) -> None:
    pg_a.sql(f'CREATE TABLE "{table}" (id bigint, v text)')
    sink = pg_a.sink("bad", table)
    runner = LocalRunner(sink)
    runner.run_batch(0, [[rows([1], ["ok"])]])
    free = 64 - len(pg_a.server.prepared_transactions())
    fillers = [f"filler-{uuid.uuid4().hex}" for _ in range(free - 1)]  # one slot left
    conn = pg_a.server.connect()
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for gid in fillers:
                cur.execute("BEGIN")
                cur.execute("PREPARE TRANSACTION %s", (gid,))
        with pytest.raises(RetriableError, match="maximum number of prepared transactions") as info:
            runner.run_batch(1, [[rows([10], ["ok"])], [rows([11], ["ok"])]])
        assert info.value.setting == "max_prepared_transactions"
        assert "sink='bad'" in str(info.value)
        assert "batch=1" in str(info.value)
        assert "pg_prepared_xacts" in str(info.value)
        assert "Sizing max_prepared_transactions" in str(info.value)
        assert_exactly_once(pg_a.ids(table), [1])
        assert pg_a.prepared() == []
    finally:
        with conn.cursor() as cur:
            for gid in fillers:
                cur.execute("ROLLBACK PREPARED %s", (gid,))
        conn.close()
    runner.restart()
    runner.run_batch(1, [[rows([10], ["ok"])], [rows([11], ["ok"])]])
    assert_exactly_once(pg_a.ids(table), [1, 10, 11])


def test_markers_protocol_completes_exactly_once_after_the_data_is_fixed(
    pg_b: PgTarget, table: str
) -> None:
    pg_b.sql(f'CREATE TABLE "{table}" (id bigint, v varchar(3))')
    runner = run_bad_batch(
        pg_b, table, rows([20], ["toolong"]), DataError, column="v", match="too long"
    )
    assert sorted(pg_b.ids(table)) == [1, 10, 11]  # the partitions before the bad one
    pg_b.sql(f'ALTER TABLE "{table}" ALTER COLUMN v TYPE varchar(10)')
    runner.restart()
    runner.run_batch(1, [[rows([10], ["ok"])], [rows([11], ["ok"])], [rows([20], ["toolong"])]])
    assert_exactly_once(pg_b.ids(table), [1, 10, 11, 20])


def test_generated_and_identity_columns_are_refused_then_filled(pg: PgTarget, table: str) -> None:
    pg.sql(
        f'CREATE TABLE "{table}" (id bigint GENERATED ALWAYS AS IDENTITY, v text, '
        "n int GENERATED ALWAYS AS (length(v)) STORED)"
    )
    runner = LocalRunner(pg.sink("bad", table))
    with pytest.raises(ConfigurationError, match="cannot be written") as info:
        runner.run_batch(0, [[rows([1], ["x"])]])
    assert info.value.column == "id"
    runner.run_batch(0, [[pa.record_batch({"v": ["abc"]})]])
    assert pg.sql(f'SELECT id, v, n FROM "{table}"') == [(1, "abc", 3)]
