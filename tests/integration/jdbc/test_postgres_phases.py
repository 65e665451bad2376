"""State after each phase, recovery hooks and protocol detection, against the real server."""

from __future__ import annotations

import dataclasses
import logging
import pickle
from typing import Any

import pytest
from jdbc_support import PgTarget, id_batch

from twophase import (
    Fingerprint,
    Marker,
    RecoveryContext,
    SinkContext,
    TaskContext,
    fingerprint_batches,
)
from twophase.connectors.jdbc import (
    PostgresMarkerSink,
    PostgresTwoPhaseSink,
    list_prepared_transactions,
    postgres_sink,
)
from twophase.connectors.jdbc._options import JdbcOptions, QualifiedName
from twophase.connectors.jdbc._postgres._dbapi import postgres_connection
from twophase.connectors.jdbc._postgres._prepared_store import PostgresHandle
from twophase.errors import AbortRequiredError, ConfigurationError, FatalError
from twophase.testing import LocalRunner, SimulatedCrash, assert_exactly_once

pytestmark = pytest.mark.integration

IDENTITY = "it-0123456789abcdef"


def opened(sink: Any, identity: str = IDENTITY) -> Any:
    sink.open(SinkContext(sink.name, identity, "query", "run", "/tmp/unused"))
    return sink


def executor_copy(sink: Any) -> Any:
    return pickle.loads(pickle.dumps(sink))


def create_ids_table(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, payload text)')


def test_prepared_rows_are_invisible_until_commit_prepared(pg_a: PgTarget, table: str) -> None:
    create_ids_table(pg_a, table)
    sink = opened(pg_a.sink("phases", table))
    executor = executor_copy(sink)
    txn = executor.begin_transaction(TaskContext("phases", IDENTITY, 5, 1, 0))
    executor.write(txn, id_batch([1, 2]))
    executor.write(txn, id_batch([3]))
    handle = executor.pre_commit(txn)
    assert isinstance(handle, PostgresHandle)
    assert handle.xid
    assert handle.rows == 3
    assert handle.transaction_id == f"tp:{IDENTITY}:5:1:0"
    assert handle.proof
    # phase 1 done: prepared, listed, invisible -- and so is the transaction's proof row
    assert pg_a.prepared() == [handle.transaction_id]
    assert pg_a.ids(table) == []
    assert _proof(pg_a, handle.transaction_id) == []
    listed = sink.list_in_doubt(RecoveryContext(IDENTITY, 0))
    assert [(h.transaction_id, h.batch_id, h.partition_id, h.attempt) for h in listed] == [
        (handle.transaction_id, 5, 1, 0)
    ]
    # phase 2: committed, visible, gone from pg_prepared_xacts
    sink.commit(pickle.loads(pickle.dumps(handle)))
    assert sorted(pg_a.ids(table)) == [1, 2, 3]
    assert pg_a.prepared() == []
    assert _proof(pg_a, handle.transaction_id) == [(5, 1)]
    sink.commit(handle)  # idempotent: the proof row says committed
    sink.recover_and_commit(handle)
    assert sorted(pg_a.ids(table)) == [1, 2, 3]


def test_commit_of_a_decided_transaction_rolled_back_by_hand_is_fatal(
    pg_a: PgTarget, table: str
) -> None:
    create_ids_table(pg_a, table)
    sink = opened(pg_a.sink("phases", table))
    txn = sink.begin_transaction(TaskContext("phases", IDENTITY, 1, 0, 0))
    sink.write(txn, id_batch([1]))
    handle = sink.pre_commit(txn)
    pg_a.sql("ROLLBACK PREPARED %s", (handle.transaction_id,))
    with pytest.raises(FatalError, match="rows are lost") as info:
        sink.commit(handle)
    assert "sink='phases'" in str(info.value)
    assert "batch=1" in str(info.value)


def _proof(pg: PgTarget, gid: str) -> list[tuple[Any, ...]]:
    """The transaction's row in twophase_commits, as any other session sees it."""
    return pg.sql("SELECT batch_id, partition_id FROM twophase_commits WHERE gid = %s", (gid,))


def test_a_vanished_gid_whose_xid_the_server_calls_committed_is_lost_not_committed(
    pg_a: PgTarget, table: str
) -> None:
    """What a failover to an asynchronous standby did: the prepared transaction never reached
    the promoted server, whose own transactions reused its xid, and ``txid_status`` of that xid
    said "committed" -- the batch's rows were lost and the sink reported a commit. The xid is
    not an identity across a failover; the transaction's own proof row is."""
    create_ids_table(pg_a, table)
    sink = opened(pg_a.sink("phases", table))
    txn = sink.begin_transaction(TaskContext("phases", IDENTITY, 3, 0, 0))
    sink.write(txn, id_batch([1, 2]))
    handle = sink.pre_commit(txn)
    pg_a.sql("ROLLBACK PREPARED %s", (handle.transaction_id,))  # gone: never on this server
    ((reused,),) = pg_a.sql("SELECT txid_current()")  # an xid this server did commit
    assert pg_a.sql("SELECT txid_status(%s)", (reused,)) == [("committed",)]
    as_after_failover = dataclasses.replace(handle, xid=reused)
    with pytest.raises(FatalError, match="did not commit on this server") as info:
        sink.commit(as_after_failover)
    assert "asynchronous replication" in str(info.value)
    assert "batch=3" in str(info.value)
    assert not info.value.restartable
    assert pg_a.ids(table) == []


def test_the_commit_proofs_of_finished_batches_are_pruned(pg_a: PgTarget, table: str) -> None:
    create_ids_table(pg_a, table)
    sink = pg_a.sink("proofs", table)
    runner = LocalRunner(sink)
    for batch in range(4):
        runner.run_batch(batch, [[id_batch([batch * 10 + p])] for p in range(2)])
    kept = pg_a.sql(
        "SELECT DISTINCT batch_id FROM twophase_commits WHERE identity = %s ORDER BY batch_id",
        (runner.identity.token,),
    )
    assert kept == [(3,)], "only the last finished batch's proofs are kept"
    assert sorted(pg_a.ids(table)) == [0, 1, 10, 11, 20, 21, 30, 31]


def test_commit_of_an_unknown_gid_without_xid_is_taken_as_committed(
    pg_a: PgTarget, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    create_ids_table(pg_a, table)
    sink = opened(pg_a.sink("phases", table))
    with caplog.at_level(logging.WARNING):
        sink.commit(PostgresHandle(f"tp:{IDENTITY}:9:0:0", 9, 0, 0))
    assert "taken as committed" in caplog.text


def test_recover_and_abort_rolls_back_and_tolerates_unknown_gids(
    pg_a: PgTarget, table: str
) -> None:
    create_ids_table(pg_a, table)
    sink = opened(pg_a.sink("phases", table))
    txn = sink.begin_transaction(TaskContext("phases", IDENTITY, 2, 0, 0))
    sink.write(txn, id_batch([7]))
    handle = sink.pre_commit(txn)
    sink.recover_and_abort(handle)
    sink.recover_and_abort(handle)  # already gone: success
    assert pg_a.prepared() == []
    assert pg_a.ids(table) == []
    with pytest.raises(ConfigurationError, match="not a transaction id of this connector"):
        sink.recover_and_abort(PostgresHandle("someone-elses-gid", 2, 0, 0))


def test_list_in_doubt_sees_only_this_identity(pg_a: PgTarget, table: str) -> None:
    create_ids_table(pg_a, table)
    sink = opened(pg_a.sink("phases", table))
    others = ["other", f"{IDENTITY}:x", IDENTITY[:-1]]
    for n, identity in enumerate([IDENTITY, *others]):
        txn = sink.begin_transaction(TaskContext("phases", identity, 1, n, 0))
        sink.write(txn, id_batch([100 + n]))
        sink.pre_commit(txn)
    conn = pg_a.server.connect()
    conn.autocommit = True
    with conn.cursor() as cur:  # a foreign prepared transaction that is not ours at all
        cur.execute("BEGIN")
        cur.execute("PREPARE TRANSACTION 'foreign-app-gid'")
    conn.close()
    try:
        mine = sink.list_in_doubt(RecoveryContext(IDENTITY, 0))
        assert [h.transaction_id for h in mine] == [f"tp:{IDENTITY}:1:0:0"]
        listed = list_prepared_transactions(pg_a.dsn)
        assert {p.identity for p in listed} == {IDENTITY, *others}
        assert all(p.database == "twophase" for p in listed)
    finally:
        pg_a.sql("ROLLBACK PREPARED 'foreign-app-gid'")


def test_abort_rolls_back_open_and_prepared_transactions(pg_a: PgTarget, table: str) -> None:
    create_ids_table(pg_a, table)
    sink = opened(pg_a.sink("phases", table))
    open_txn = sink.begin_transaction(TaskContext("phases", IDENTITY, 3, 0, 0))
    sink.write(open_txn, id_batch([1]))
    sink.abort(open_txn)
    sink.abort(open_txn)
    prepared = sink.begin_transaction(TaskContext("phases", IDENTITY, 3, 1, 0))
    sink.write(prepared, id_batch([2]))
    sink.pre_commit(prepared)
    sink.abort(prepared)
    assert pg_a.prepared() == []
    assert pg_a.ids(table) == []


def test_auto_detection_picks_the_protocol_and_logs_it_once(
    pg: PgTarget, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    create_ids_table(pg, table)
    with caplog.at_level(logging.INFO, logger="twophase.connectors.jdbc"):
        sink = postgres_sink("detect", table=table, dsn=pg.dsn)
        opened(sink)
    expected = PostgresTwoPhaseSink if pg.protocol == "coordinated" else PostgresMarkerSink
    assert isinstance(sink, expected)
    lines = [
        r.getMessage() for r in caplog.records if "max_prepared_transactions=" in r.getMessage()
    ]
    assert len(lines) == 1
    assert f"protocol '{pg.protocol}'" in lines[0]
    if pg.protocol == "coordinated":
        assert sink.max_transactions_per_batch == 48


def test_coordinated_sinks_on_one_server_share_its_prepared_transaction_slots(
    pg_a: PgTarget, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    create_ids_table(pg_a, table)
    first = opened(pg_a.sink("first", table), "it-first")
    assert first.max_transactions_per_batch == 48  # 64 slots, 16 kept free, alone
    # The first sink's fence row moved just now: it is active, so the next one shares.
    second = opened(pg_a.sink("second", table), "it-second")
    assert second.max_transactions_per_batch == 24
    # A sink of another identity holding a prepared transaction counts too.
    stray = first.begin_transaction(TaskContext("first", "it-stray", 1, 0, 0))
    first.write(stray, id_batch([1]))
    first.pre_commit(stray)
    with caplog.at_level(logging.WARNING, logger="twophase.connectors.jdbc"):
        third = opened(pg_a.sink("third", table), "it-third")
        capped = opened(pg_a.sink("capped", table, max_partitions=40), "it-capped")
    assert third.max_transactions_per_batch == 48 // 4  # first, second, it-stray and itself
    assert capped.max_transactions_per_batch == 40  # as given, with a warning
    (warning,) = [r.getMessage() for r in caplog.records if "used as given" in r.getMessage()]
    assert "it-first, it-second, it-stray" in warning
    assert "48 shared by 5 coordinated sinks" in warning


def test_forcing_coordinated_without_prepared_transactions_fails_at_start_with_the_server_hint(
    pg_b: PgTarget, table: str
) -> None:
    create_ids_table(pg_b, table)
    with pytest.raises(ConfigurationError) as info:
        postgres_sink("forced", table=table, dsn=pg_b.dsn, protocol="coordinated")
    text = str(info.value)
    assert "prepared transactions are disabled" in text
    assert "Set max_prepared_transactions to a nonzero value" in text  # the server's own hint
    assert info.value.setting == "max_prepared_transactions"
    # The class built directly fails in open(), before any batch.
    direct = PostgresTwoPhaseSink(
        "forced", JdbcOptions(table=QualifiedName(None, table)), postgres_connection(pg_b.dsn)
    )
    with pytest.raises(ConfigurationError, match="nonzero value"):
        opened(direct)


def test_markers_are_written_read_and_pruned(pg_b: PgTarget, table: str) -> None:
    create_ids_table(pg_b, table)
    sink = pg_b.sink("markers", table, marker_retention=3, marker_table="it_markers")
    runner = LocalRunner(sink)
    for batch_id in range(7):
        runner.run_batch(batch_id, [[id_batch([batch_id * 10])], [id_batch([batch_id * 10 + 1])]])
    identity = runner.identity.token
    markers = sink.read_markers(identity, 6)
    assert sorted(m.partition_id for m in markers) == [0, 1]
    assert all(m.fingerprint.count == 1 for m in markers)
    kept = pg_b.sql("SELECT DISTINCT batch_id FROM it_markers WHERE identity = %s", (identity,))
    assert sorted(r[0] for r in kept) == [4, 5, 6]  # pruned at batch 6 (6 % 3 == 0)
    assert_exactly_once(pg_b.ids(table), [b * 10 + p for b in range(7) for p in range(2)])
    assert list(sink.list_in_doubt(RecoveryContext(identity, 2))) == []
    pg_b.sql("DROP TABLE it_markers")


def test_markers_of_the_release_before_fingerprint_versions_still_match_a_replay(
    pg_b: PgTarget, table: str
) -> None:
    create_ids_table(pg_b, table)
    sink = pg_b.sink("markers", table, marker_table="it_markers_v1")
    runner = LocalRunner(sink)
    parts = [[id_batch([1, 2], payload=lambda i: f"{i:03d}" * 20)], [id_batch([3])]]
    runner.crash_at("phase1_done", 0)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, parts)
    identity = runner.identity.token
    for partition, batches in enumerate(parts):  # as that release stored them: "2:<digest>"
        old = str(fingerprint_batches(batches, version=1))
        pg_b.sql(
            "UPDATE it_markers_v1 SET fingerprint = %s WHERE identity = %s AND partition_id = %s",
            (old, identity, partition),
        )
    assert {m.fingerprint.version for m in sink.read_markers(identity, 0)} == {1}
    runner.restart()
    metrics = runner.run_batch(0, parts)
    assert metrics.skipped_partitions == 2
    assert_exactly_once(pg_b.ids(table), [1, 2, 3])
    pg_b.sql("DROP TABLE it_markers_v1")


def test_marker_commit_is_not_repeated_and_abort_of_committed_keeps_it(
    pg_b: PgTarget, table: str
) -> None:
    create_ids_table(pg_b, table)
    sink = opened(pg_b.sink("markers", table))
    txn = sink.begin_transaction(TaskContext("markers", IDENTITY, 4, 0, 0))
    sink.write(txn, id_batch([1, 2]))
    assert pg_b.ids(table) == []
    marker = Marker(IDENTITY, 4, 0, 0, Fingerprint(2, 99))
    sink.commit_with_marker(txn, marker)
    assert sorted(pg_b.ids(table)) == [1, 2]
    assert sink.read_markers(IDENTITY, 4) == [marker]
    with pytest.raises(AbortRequiredError, match="committed"):
        sink.commit_with_marker(txn, marker)  # a committed transaction is not committed twice
    sink.abort(txn)  # its commit landed: a committed local transaction is not rolled back
    assert sorted(pg_b.ids(table)) == [1, 2]
    assert list(sink.list_in_doubt(RecoveryContext(IDENTITY, 1))) == []  # nothing to fence
    gone = sink.begin_transaction(TaskContext("markers", IDENTITY, 4, 1, 0))
    sink.write(gone, id_batch([3]))
    sink.abort(gone)  # never committed: rolled back with its session
    assert sorted(pg_b.ids(table)) == [1, 2]
    assert sink.read_markers(IDENTITY, 4) == [marker]
    pg_b.sql("DELETE FROM twophase_markers WHERE identity = %s", (IDENTITY,))
