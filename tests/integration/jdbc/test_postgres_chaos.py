"""The server restarted or down mid-protocol, a driver SIGKILLed, orphans holding locks."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from jdbc_support import PgTarget, id_batch

from twophase import RetryPolicy, TaskContext
from twophase.errors import AbortRequiredError, CommitFailedError
from twophase.testing import (
    FakeTarget,
    LocalRunner,
    SimulatedCrash,
    assert_exactly_once,
    install_step_listener,
    with_faults,
)

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

ROOT = Path(__file__).resolve().parents[3]


class OnStep:
    """A coordinator step listener that runs an action once at one step."""

    def __init__(self, step: str, batch_id: int, action: Any) -> None:
        self.step, self.batch_id, self.action = step, batch_id, action
        self.fired = False

    def __call__(self, step: str, batch_id: int, index: int | None) -> None:
        if not self.fired and step == self.step and batch_id == self.batch_id:
            self.fired = True
            self.action()


def ids_table(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, payload text)')


def three_partitions(batch_id: int) -> list[list[pa.RecordBatch]]:
    base = batch_id * 100
    return [[id_batch([base + p * 10 + i for i in range(3)])] for p in range(3)]


def expected_ids(*batch_ids: int) -> list[int]:
    return [
        r for b in batch_ids for part in three_partitions(b) for r in part[0].column(0).to_pylist()
    ]


def test_postgres_restarted_between_prepare_and_commit_then_the_batch_finishes(
    pg_a: PgTarget, table: str
) -> None:
    ids_table(pg_a, table)
    sink = pg_a.sink("chaos", table)
    runner = LocalRunner(sink)
    runner.run_batch(0, three_partitions(0))

    def restart() -> None:
        assert len(pg_a.prepared()) == 3  # phase 1 done, decision recorded
        # A crash: prepared transactions survive (PREPARE and COMMIT PREPARED are
        # flushed even with the test cluster's synchronous_commit=off).
        pg_a.server.restart(mode="immediate")
        assert len(pg_a.prepared()) == 3

    listener = OnStep("decided", 1, restart)
    install_step_listener(sink, listener)
    metrics = runner.run_batch(1, three_partitions(1))  # the pooled connection is dead: replaced
    assert listener.fired
    assert metrics.outcome == "committed"
    assert_exactly_once(pg_a.ids(table), expected_ids(0, 1))
    assert pg_a.prepared() == []
    runner.run_batch(2, three_partitions(2))
    assert_exactly_once(pg_a.ids(table), expected_ids(0, 1, 2))


@pytest.mark.extended  # the same path as tests/integration/partition's long cut in phase 2
def test_postgres_down_during_phase_2_then_back_and_restart_finishes_the_batch(
    pg_a: PgTarget, table: str
) -> None:
    ids_table(pg_a, table)
    sink = pg_a.sink("chaos", table, connect_timeout=2, retry=RetryPolicy(max_attempts=3))
    runner = LocalRunner(sink)
    runner.run_batch(0, three_partitions(0))
    install_step_listener(sink, OnStep("decided", 1, lambda: pg_a.server.stop(remove_data=False)))
    try:
        with pytest.raises(CommitFailedError, match="restarting the query commits") as info:
            runner.run_batch(1, three_partitions(1))
        assert "sink='chaos'" in str(info.value)
        assert "batch=1" in str(info.value)
    finally:
        pg_a.server.start()
    assert_exactly_once(pg_a.ids(table), expected_ids(0))  # decided, not committed yet
    assert len(pg_a.prepared()) == 3
    runner.restart()  # recovery commits the decided batch before anything else
    runner.run_batch(1, three_partitions(1))
    assert_exactly_once(pg_a.ids(table), expected_ids(0, 1))
    assert pg_a.prepared() == []


def test_postgres_back_while_phase_2_retries_commits_in_the_same_run(
    pg_a: PgTarget, table: str
) -> None:
    ids_table(pg_a, table)
    sink = pg_a.sink("chaos", table, connect_timeout=2, retry=RetryPolicy(max_attempts=5))
    install_step_listener(sink, OnStep("decided", 0, lambda: pg_a.server.stop(remove_data=False)))
    waits: list[float] = []

    def backoff(seconds: float) -> None:
        # The coordinator's backoff between two commit attempts: the server comes
        # back during the second one (started here, on the test's own thread).
        waits.append(seconds)
        if len(waits) == 2:
            pg_a.server.start()

    runner = LocalRunner(sink, sleep=backoff)
    try:
        metrics = runner.run_batch(0, three_partitions(0))
    finally:
        pg_a.server.start()
    assert metrics.commit_retries == 2, "phase 2 never saw the server down"
    assert_exactly_once(pg_a.ids(table), expected_ids(0))
    assert pg_a.prepared() == []


def test_markers_protocol_survives_a_server_restart_between_batches(
    pg_b: PgTarget, table: str
) -> None:
    ids_table(pg_b, table)
    runner = LocalRunner(pg_b.sink("chaos", table))
    runner.run_batch(0, three_partitions(0))
    # "fast", not "immediate": the test cluster runs with synchronous_commit=off, so a
    # crash may lose its last plain commits (docs/jdbc.md: keep synchronous_commit on).
    pg_b.server.restart(mode="fast")
    runner.run_batch(1, three_partitions(1))  # dead pooled connections are replaced
    assert_exactly_once(pg_b.ids(table), expected_ids(0, 1))


def test_orphan_of_a_dead_attempt_never_blocks_the_retry(pg_a: PgTarget, table: str) -> None:
    pg_a.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, payload text)')
    rules = FakeTarget.in_memory()
    sink = with_faults(
        pg_a.sink("chaos", table, mode="upsert", key_columns=["id"], lock_timeout=30), rules
    )
    runner = LocalRunner(sink, max_task_failures=2)
    runner.run_batch(0, [[id_batch([1])]])
    # Attempt 0 of batch 1, partition 0 prepared key 5 and died (lost executor):
    # its prepared transaction holds the row lock of key 5.
    dead = pickle.loads(pickle.dumps(sink))
    epoch = runner.log.epoch or 0  # an attempt of this run
    txn = dead.begin_transaction(TaskContext("chaos", runner.identity.token, 1, 0, 0, epoch))
    dead.write(txn, id_batch([5], lambda i: "from the dead attempt"))
    dead.pre_commit(txn)
    rules.fail("begin_transaction", batch_id=1, partition_id=0, attempt=0)
    started = time.monotonic()
    runner.run_batch(1, [[id_batch([5])]])  # attempt 1 clears attempt 0 first
    assert time.monotonic() - started < 10, "the retry waited for the orphan's lock"
    assert pg_a.rows(table) == [(1, "row-1"), (5, "row-5")]
    assert pg_a.prepared() == []


def test_a_foreign_lock_fails_after_lock_timeout_with_a_hint(pg: PgTarget, table: str) -> None:
    pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, payload text)')
    pg.sql(f"INSERT INTO \"{table}\" VALUES (1, 'x')")
    blocker = pg.server.connect()
    try:
        with blocker.cursor() as cur:
            cur.execute(f'SELECT * FROM "{table}" WHERE id = 1 FOR UPDATE')  # held, not committed
        sink = pg.sink("chaos", table, mode="upsert", key_columns=["id"], lock_timeout=1)
        started = time.monotonic()
        with pytest.raises(AbortRequiredError, match="the holder is outside this batch") as info:
            LocalRunner(sink).run_batch(0, [[id_batch([1, 2])]])
        assert time.monotonic() - started < 10
        assert "lock timeout" in str(info.value)
        assert "batch=0" in str(info.value)
        assert "pg_prepared_xacts" in str(info.value)
    finally:
        blocker.rollback()
        blocker.close()
    assert pg.ids(table) == [1]


DRIVER = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from twophase.connectors.jdbc import postgres_sink
    from twophase.testing import CrashAt, LocalRunner, install_step_listener

    dsn, table, log_dir, query_id, protocol, step, index = sys.argv[1:8]
    sink = postgres_sink("killed", table=table, dsn=dsn, protocol=protocol)
    runner = LocalRunner(sink, log_dir, query_id=query_id, fsync=True)

    def part(batch, p):
        ids = [batch * 100 + p * 10 + i for i in range(3)]
        payload = [f"row-{i}" for i in ids]
        return [pa.record_batch({"id": pa.array(ids, pa.int64()), "payload": payload})]

    if step != "-":
        crash = CrashAt(step, 1, None if index == "-" else int(index), hard=True)
        install_step_listener(sink, crash)
    for batch in (0, 1, 2):
        runner.run_batch(batch, [part(batch, p) for p in range(3)])
    """
)


@pytest.mark.parametrize(
    ("protocol", "step", "index"),
    [
        ("coordinated", "committed_handle", "0"),
        ("coordinated", "decided", "-"),
        ("markers", "phase1_done", "-"),
    ],
)
@pytest.mark.postgres  # pg_a or pg_b, fetched by protocol
def test_sigkilled_driver_then_restart_is_exactly_once(
    request: pytest.FixtureRequest, table: str, tmp_path: Path, protocol: str, step: str, index: str
) -> None:
    pg: PgTarget = request.getfixturevalue("pg_a" if protocol == "coordinated" else "pg_b")
    ids_table(pg, table)
    query_id = str(uuid.uuid4())

    def drive(*crash: str) -> subprocess.CompletedProcess[str]:
        args = [pg.dsn, table, str(tmp_path / "log"), query_id, protocol, *crash]
        return subprocess.run(
            [sys.executable, "-c", DRIVER, *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    killed = drive(step, index)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    visible = pg.ids(table)
    assert set(expected_ids(0)) <= set(visible)
    assert len(visible) < 27
    restarted = drive("-", "-")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert_exactly_once(pg.ids(table), expected_ids(0, 1, 2))
    assert pg.prepared() == []


def test_simulated_crash_leaves_nothing_visible_before_phase_2(pg_a: PgTarget, table: str) -> None:
    ids_table(pg_a, table)
    runner = LocalRunner(pg_a.sink("chaos", table))
    runner.crash_at("decided", 0)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, three_partitions(0))
    assert pg_a.ids(table) == []
    assert len(pg_a.prepared()) == 3
    runner.restart()
    runner.run_batch(1, three_partitions(1))  # recovery first commits batch 0 from its decision
    assert_exactly_once(pg_a.ids(table), expected_ids(0, 1))
