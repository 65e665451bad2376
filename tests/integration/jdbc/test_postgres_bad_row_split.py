"""PostgreSQL names the COPY's refused record: the bad rows are found by splitting there.

``COPY t, line N`` in the error's context gives the record; the rows before it are written again,
the record alone, and the rest the same way, so a write with ``k`` bad rows costs about two writes
of its rows (halving costs ``2 k log2(n / k)`` smaller ones). PostgreSQL's line count also counts
line breaks inside quoted CSV values (and, in the first record, carriage returns instead): with
such values the count is no row's, and the rows are halved -- each refused row must still be the
one set aside.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

from twophase.connectors.jdbc import postgres_sink
from twophase.connectors.jdbc._postgres._writer import PostgresWriter
from twophase.testing import LocalRunner

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ROWS = 2_000
BAD = (5, 700, 701, 1_999)


def _run(server: Any, monkeypatch: pytest.MonkeyPatch, text: str) -> list[int]:
    """Write ROWS rows (BAD ones with a NULL payload); check the letters; return the loads."""
    table = f"split_{uuid.uuid4().hex[:8]}"
    conn = server.connect()
    with conn, conn.cursor() as cur:
        cur.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, payload text NOT NULL)')
    conn.close()
    payloads = [None if i in BAD else text.format(i=i) for i in range(ROWS)]
    batch = pa.record_batch(
        {"id": pa.array(range(ROWS), pa.int64()), "payload": pa.array(payloads, pa.string())}
    )
    loads: list[int] = []
    load = PostgresWriter.load

    def counted(self: PostgresWriter, txn: Any, rows: pa.RecordBatch, *, settle: bool) -> None:
        loads.append(rows.num_rows)
        load(self, txn, rows, settle=settle)

    monkeypatch.setattr(PostgresWriter, "load", counted)
    sink = postgres_sink("split", table=table, dsn=server.dsn, bad_rows="dead_letter")
    metrics = LocalRunner(sink).run_batch(0, [[batch]])

    letters = list(sink.read_dead_letters())
    assert [(d.position, d.error_class, d.column) for d in letters] == [
        (i, "not_null", "payload") for i in BAD
    ]
    assert metrics.rows == ROWS - len(BAD)
    conn = server.connect()
    with conn, conn.cursor() as cur:
        cur.execute(f'SELECT payload FROM "{table}" WHERE id = 6')
        assert cur.fetchall() == [(text.format(i=6),)]
        cur.execute(f'SELECT count(*) FROM "{table}"')
        assert cur.fetchone() == (ROWS - len(BAD),)
    conn.close()
    return loads


def test_bad_rows_are_found_at_the_record_the_server_names(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = _run(postgres_server, monkeypatch, 'row {i}, "quoted", plain')
    # Split, not halved: per bad row one failed write of the rest, the rows before it and the
    # row alone; the rows after the last. Halving 2,000 rows down to 4 would take about 60.
    assert len(loads) <= 3 * len(BAD) + 2, loads


def test_values_with_line_breaks_are_halved_and_the_same_rows_set_aside(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = _run(postgres_server, monkeypatch, 'line {i}\nnext, "quoted"\r\n{i}')
    assert len(loads) > 3 * len(BAD) + 2, loads  # halved: the line numbers were not trusted
