"""MariaDB crashed (SIGKILL) or shut down in phase 1 and in phase 2, for both protocols.

Each test runs its own server (the session's may be one that ``twophase-dev up``
started, which a test must not restart) and asserts that its fault fired.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from jdbc_support import id_batch, mariadb_sql

from twophase import RetryPolicy
from twophase.connectors.jdbc import mariadb_sink
from twophase.connectors.jdbc._mariadb._dialect import MariaDBMarkerSink, MariaDBTwoPhaseSink
from twophase.errors import CommitFailedError
from twophase.testing import LocalRunner, assert_exactly_once, install_step_listener
from twophase_dev import DevInfraError, MariaDBServer, find_mariadb_binaries

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

#: What the crashing sinks below reach: the server to crash and where to record the crash.
#: (Executor copies are unpickled in this process by LocalRunner, so a module global is shared.)
CRASH: dict[str, Any] = {}


class _CrashAfterFirstWrite:
    """Crash the server (SIGKILL, then start it) after the first write of partition 1, batch 1."""

    def write(self, txn: Any, batch: pa.RecordBatch) -> None:
        super().write(txn, batch)  # type: ignore[misc]
        ctx = txn.context
        if ctx.batch_id == 1 and ctx.partition_id == 1 and "fired" not in CRASH:
            CRASH["fired"] = ctx.transaction_id
            server: MariaDBServer = CRASH["server"]
            server.kill()
            server.start()


class CrashingCoordinatedSink(_CrashAfterFirstWrite, MariaDBTwoPhaseSink):
    pass


class CrashingMarkerSink(_CrashAfterFirstWrite, MariaDBMarkerSink):
    pass


def crashing_copy(sink: Any, cls: type[Any]) -> Any:
    """``sink`` (built by ``mariadb_sink``) as an instance of ``cls``, its subclass."""
    clone = object.__new__(cls)
    clone.__dict__.update(vars(sink))
    return clone


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    try:
        find_mariadb_binaries()
    except DevInfraError as exc:
        pytest.skip(f"MariaDB is not installed: {exc}")
    db = MariaDBServer(log_dir=tmp_path_factory.mktemp("mariadb-restarts"))
    db.start()
    try:
        yield db
    finally:
        db.stop()


class Target:
    def __init__(self, server: MariaDBServer, name: str) -> None:
        self.server = server
        self.table = name
        self.sql(f"DROP TABLE IF EXISTS `{name}`")
        self.sql(f"CREATE TABLE `{name}` (id BIGINT PRIMARY KEY, payload TEXT) ENGINE=InnoDB")

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        return mariadb_sql(self.server, statement)

    def ids(self) -> list[int]:
        return sorted(int(r[0]) for r in self.sql(f"SELECT id FROM `{self.table}`"))

    def prepared(self) -> list[str]:
        return [x for x in self.server.prepared_xids() if x.startswith("tp:")]

    def sink(self, protocol: str, **options: Any) -> Any:
        options.setdefault("lock_timeout", 5.0)
        options.setdefault("connect_timeout", 2)
        return mariadb_sink(
            f"restarts-{protocol}",
            table=self.table,
            url=self.server.password_url,
            protocol=protocol,  # type: ignore[arg-type]
            **options,
        )


@pytest.fixture
def target(server: MariaDBServer, request: pytest.FixtureRequest) -> Iterator[Target]:
    CRASH.clear()
    CRASH["server"] = server
    server.rollback_prepared("tp:")
    name = "restart_" + request.node.name.split("[")[-1].strip("]").replace("-", "_")[:40]
    yield Target(server, name)
    CRASH.clear()
    server.rollback_prepared("tp:")


def three_partitions(batch_id: int) -> list[list[pa.RecordBatch]]:
    base = batch_id * 100
    return [
        [id_batch([base + p * 10 + i for i in range(3)]), id_batch([base + p * 10 + 5])]
        for p in range(3)
    ]


def expected(*batch_ids: int) -> list[int]:
    return [
        i
        for b in batch_ids
        for part in three_partitions(b)
        for rb in part
        for i in rb.column(0).to_pylist()
    ]


@pytest.mark.parametrize(
    ("protocol", "crashing"),
    [("coordinated", CrashingCoordinatedSink), ("markers", CrashingMarkerSink)],
)
def test_a_crash_in_phase_1_loses_the_open_attempt_and_its_retry_writes_once(
    target: Target, protocol: str, crashing: type[Any]
) -> None:
    sink = crashing_copy(target.sink(protocol), crashing)
    runner = LocalRunner(sink, max_task_failures=3)
    runner.run_batch(0, three_partitions(0))
    metrics = runner.run_batch(1, three_partitions(1))
    assert CRASH.get("fired", "").endswith(":1:1:0"), CRASH  # attempt 0 of partition 1
    assert metrics.outcome == "committed"
    # Partition 0 was already prepared (coordinated) or committed (markers): it survived.
    assert_exactly_once(target.ids(), expected(0, 1))
    assert target.prepared() == []
    runner.run_batch(2, three_partitions(2))  # the pooled connections were replaced
    assert_exactly_once(target.ids(), expected(0, 1, 2))


def test_a_crash_between_prepare_and_commit_keeps_the_prepared_branches_and_commits_them(
    target: Target,
) -> None:
    sink = target.sink("coordinated")
    runner = LocalRunner(sink)
    runner.run_batch(0, three_partitions(0))
    seen: dict[str, list[str]] = {}

    def crash(step: str, batch_id: int, index: int | None) -> None:
        if step == "decided" and batch_id == 1 and not seen:
            seen["before"] = target.prepared()
            assert target.ids() == sorted(expected(0))  # prepared, not visible
            target.server.kill()
            target.server.start()
            seen["after"] = target.prepared()

    install_step_listener(sink, crash)
    metrics = runner.run_batch(1, three_partitions(1))
    assert len(seen.get("before", [])) == 3, seen
    assert seen["after"] == seen["before"]  # XA PREPARE survived the crash
    assert metrics.outcome == "committed"
    assert_exactly_once(target.ids(), expected(0, 1))
    assert target.prepared() == []


@pytest.mark.extended  # the same path as tests/integration/partition's long cut in phase 2
def test_the_server_down_in_phase_2_fails_the_batch_and_the_restarted_query_commits_it(
    target: Target,
) -> None:
    sink = target.sink("coordinated", retry=RetryPolicy(max_attempts=2))
    runner = LocalRunner(sink)
    runner.run_batch(0, three_partitions(0))
    fired: list[int] = []

    def shut_down(step: str, batch_id: int, index: int | None) -> None:
        if step == "decided" and batch_id == 1 and not fired:
            fired.append(batch_id)
            target.server.stop(mode="fast", remove_data=False)

    install_step_listener(sink, shut_down)
    try:
        with pytest.raises(CommitFailedError, match="restarting the query commits") as info:
            runner.run_batch(1, three_partitions(1))
    finally:
        target.server.start()
    assert fired == [1]
    assert "sink='restarts-coordinated'" in str(info.value)
    assert "batch=1" in str(info.value)
    # A clean shutdown keeps prepared branches: decided, not committed, not visible.
    assert len(target.prepared()) == 3
    assert_exactly_once(target.ids(), expected(0))
    runner.restart()  # recovery commits the decided batch first
    runner.run_batch(1, three_partitions(1))  # the replay of batch 1 writes nothing again
    assert_exactly_once(target.ids(), expected(0, 1))
    assert target.prepared() == []
