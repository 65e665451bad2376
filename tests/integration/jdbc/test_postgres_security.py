"""Identifiers quoted, values never in SQL, passwords never shown, TLS settings passed through."""

from __future__ import annotations

import logging
import pickle
import traceback
from typing import Any

import pyarrow as pa
import pytest
from jdbc_support import PgTarget

from twophase.connectors.jdbc import postgres_sink
from twophase.errors import FatalError, TwoPhaseError
from twophase.testing import LocalRunner

pytestmark = pytest.mark.integration

WRONG_PASSWORD = "Wr0ng-Pa55word-Z9"


def test_hostile_identifiers_and_values_are_data_not_sql(pg: PgTarget) -> None:
    table = 'we"ird; DROP TABLE victim; --'
    pg.sql("CREATE TABLE IF NOT EXISTS victim (x int)")
    batch = pa.record_batch(
        {
            'Key "K"': pa.array([1, 2], pa.int64()),
            "sp ace": ["'); DROP TABLE victim; --", "$$; SELECT 1; $$"],
            "op": ["c", "u"],
        }
    )
    sink = pg.sink("hostile", table, mode="cdc", key_columns=['Key "K"'], create_table=True)
    LocalRunner(sink).run_batch(0, [[batch]])
    sink = pg.sink("hostile", table, mode="upsert", key_columns=['Key "K"'])
    LocalRunner(sink).run_batch(0, [[batch.drop_columns(["op"])]])
    assert pg.sql('SELECT * FROM "we""ird; DROP TABLE victim; --" ORDER BY 1') == [
        (1, "'); DROP TABLE victim; --"),
        (2, "$$; SELECT 1; $$"),
    ]
    assert pg.sql("SELECT to_regclass('victim') IS NOT NULL") == [(True,)]
    pg.sql('DROP TABLE "we""ird; DROP TABLE victim; --"')
    pg.sql("DROP TABLE victim")


def test_schema_qualified_and_mixed_case_names(pg: PgTarget) -> None:
    pg.sql('CREATE SCHEMA IF NOT EXISTS "Sales"')
    pg.sql('DROP TABLE IF EXISTS "Sales"."Orders"')
    pg.sql('CREATE TABLE "Sales"."Orders" ("OrderId" bigint PRIMARY KEY, "Total" numeric)')
    batch = pa.record_batch({"OrderId": pa.array([1], pa.int64()), "Total": pa.array([2.5])})
    sink = pg.sink("mixed", "Sales.Orders", mode="upsert", key_columns=["OrderId"])
    LocalRunner(sink).run_batch(0, [[batch]])
    sink = pg.sink("mixed", ("Sales", "Orders"), mode="upsert", key_columns=["OrderId"])
    LocalRunner(sink).run_batch(0, [[batch]])
    assert pg.sql('SELECT "OrderId", "Total"::float FROM "Sales"."Orders"') == [(1, 2.5)]


def _everything(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc.__dict__)


def test_wrong_password_is_reported_without_the_password(
    pg: PgTarget, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = pg.server.port
    kwargs: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": port,
        "dbname": "twophase",
        "user": "twophase_test",
        "password": WRONG_PASSWORD,
    }
    with pytest.raises(FatalError, match="authentication failed") as info:
        postgres_sink("pw", table=table, protocol="auto", **kwargs)
    assert WRONG_PASSWORD not in _everything(info.value)
    dsn = f"postgresql://twophase_test:{WRONG_PASSWORD}@127.0.0.1:{port}/twophase"
    sink = postgres_sink("pw", table=table, dsn=dsn, protocol="markers")  # no connection yet
    assert WRONG_PASSWORD not in repr(sink)
    assert WRONG_PASSWORD not in str(sink.__dict__)
    with pytest.raises(TwoPhaseError) as again:
        LocalRunner(sink).run_batch(0, [[pa.record_batch({"id": pa.array([1], pa.int64())})]])
    assert "authentication failed" in str(again.value)
    assert WRONG_PASSWORD not in _everything(again.value)
    assert WRONG_PASSWORD not in caplog.text
    assert (
        WRONG_PASSWORD in pickle.loads(pickle.dumps(sink)).connection.connect_kwargs()["password"]
    )


def test_tls_settings_are_passed_through_to_libpq(pg: PgTarget, table: str) -> None:
    with pytest.raises(TwoPhaseError, match="SSL") as info:
        postgres_sink("tls", table=table, dsn=pg.dsn, sslmode="require", protocol="auto")
    assert "does not support SSL" in str(info.value)  # libpq tried TLS: the setting arrived
    sink = postgres_sink("tls", table=table, dsn=pg.dsn, sslmode="disable", create_table=True)
    LocalRunner(sink).run_batch(0, [[pa.record_batch({"id": pa.array([1], pa.int64())})]])
    assert pg.ids(table) == [1]


def test_sessions_carry_the_sink_settings(pg: PgTarget, table: str) -> None:
    sink = pg.sink("settings", table, lock_timeout=2.5, statement_timeout=60)
    conn, _reused = sink._writer.pool().acquire()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT current_setting('lock_timeout'), current_setting('statement_timeout'), "
                "current_setting('TimeZone'), current_setting('application_name')"
            )
            assert cur.fetchone() == ("2500ms", "1min", "UTC", "twophase:settings")
    finally:
        sink._writer.pool().release(conn)


def test_connections_are_reused_across_batches(pg: PgTarget, table: str) -> None:
    sink = pg.sink("reuse", table, create_table=True)
    pool = sink._writer.pool()
    runner = LocalRunner(sink)
    runner.run_batch(0, [[pa.record_batch({"id": pa.array([p], pa.int64())})] for p in range(3)])
    opened = pool.opened
    for batch_id in range(1, 6):
        parts = [
            [pa.record_batch({"id": pa.array([batch_id * 10 + p], pa.int64())})] for p in range(3)
        ]
        runner.run_batch(batch_id, parts)
    assert pool.opened == opened, "a batch opened new connections instead of reusing them"
    assert opened <= 2
    assert len(pg.ids(table)) == 18
