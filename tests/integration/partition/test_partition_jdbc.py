"""Silent network partitions between the JDBC sinks and their servers, in every phase.

The server runs in a network namespace of its own; a cut loses every packet both ways ("wire":
the frames leave and are dropped, nothing is reset, a new connect hangs). The sinks run through
the production coordinator (``LocalRunner``), with ``network_timeout=2`` and ``connect_timeout=1``,
so a "long" partition costs seconds. For PostgreSQL and MariaDB, each protocol:

- long, in phase 1 (COPY / LOAD DATA), in phase 2 (``COMMIT PREPARED`` / ``XA COMMIT``; the
  markers protocol's commit with its marker) and in recovery: the step fails with a
  ``RetriableError`` naming the sink, the batch, the step and the server within the bound plus a
  stated slack, never for as long as the partition lasts; once healed, the batch run again is
  exact with nothing left prepared;
- short (below the bound), in phase 1 and phase 2: a pause, and the batch commits.

Every test asserts that its cut really lost packets (the namespace's counters).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from twophase import RetryPolicy
from twophase.connectors.jdbc import close_connections, mariadb_sink, postgres_sink
from twophase.connectors.jdbc._base import JdbcSinkMixin
from twophase.connectors.jdbc._sink import JdbcMarkerSink, JdbcTwoPhaseSink
from twophase.errors import CommitFailedError, RetriableError, TwoPhaseError, find_error
from twophase.testing import LocalRunner

from .support import Cut, cut_before

pytestmark = [pytest.mark.root, pytest.mark.integration]

#: The sinks' bounds in these tests (seconds).
NETWORK_TIMEOUT = 2
CONNECT_TIMEOUT = 1
#: A long step fails within this: one silent statement (the bound, plus TCP's retransmission
#: timer, which checks the user timeout at its own ticks: up to about 1.6 s late at 2 s), then
#: a reconnect that hangs (connect_timeout), and the driver's own attempt to clean up the failed
#: batch (one more of each).
SLACK = 4.0
LIMIT = 2 * (NETWORK_TIMEOUT + CONNECT_TIMEOUT) + SLACK
#: A short partition: healed before the bound, so only a pause.
SHORT = 0.8
#: Driver-side retries of a step (phase 2, recovery): two attempts, little backoff.
RETRY = RetryPolicy(max_attempts=2, initial_backoff=0.1, max_backoff=0.1, deadline=30.0)


@dataclass
class Target:
    """One server in its namespace, one protocol, one table."""

    kind: str  # "postgres" or "mariadb"
    protocol: str
    partitioned: Any  # PartitionedServer: .server, .netns
    table: str

    @property
    def netns(self) -> Any:
        return self.partitioned.netns

    @property
    def server(self) -> Any:
        return self.partitioned.server

    def sink(self, name: str, *, defaults: bool = False) -> Any:
        """The sink; with ``defaults``, at the factory's default bounds and retry policy."""
        common: dict[str, Any] = {
            "table": self.table,
            "protocol": self.protocol,
            "create_table": True,
        }
        if not defaults:
            common.update(
                network_timeout=NETWORK_TIMEOUT,
                connect_timeout=CONNECT_TIMEOUT,
                lock_timeout=5.0,
                retry=RETRY,
            )
        if self.kind == "postgres":
            return postgres_sink(name, dsn=self.server.dsn, **common)
        return mariadb_sink(name, url=self.server.url, **common)

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        conn = self.server.connect(autocommit=True) if self.kind == "mariadb" else None
        if conn is None:
            conn = self.server.connect()
            conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    def ids(self) -> list[int]:
        quote = "`" if self.kind == "mariadb" else '"'
        return sorted(r[0] for r in self.sql(f"SELECT id FROM {quote}{self.table}{quote}"))

    def prepared(self) -> list[str]:
        if self.kind == "mariadb":
            return [x for x in self.server.prepared_xids() if x.startswith("tp:")]
        return [g for g, _ in self.server.prepared_transactions() if g.startswith("tp:")]

    def open_transactions(self) -> int:
        """Sessions of the sinks still inside a transaction on the server."""
        if self.kind == "mariadb":
            return int(self.sql("SELECT COUNT(*) FROM information_schema.INNODB_TRX")[0][0])
        return int(
            self.sql(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name LIKE 'twophase%' "
                "AND state LIKE 'idle in transaction%'"
            )[0][0]
        )

    def clean(self) -> None:
        self.server.rollback_prepared("tp:")


TARGETS = [
    ("postgres", "coordinated"),
    ("postgres", "markers"),
    ("mariadb", "coordinated"),
    ("mariadb", "markers"),
]


def open_target(request: pytest.FixtureRequest) -> Iterator[Target]:
    """The body of a ``target`` fixture parametrized by ``TARGETS``: a fresh table, clean state."""
    kind, protocol = request.param
    partitioned = request.getfixturevalue(
        "pg_partition" if kind == "postgres" else "maria_partition"
    )
    found = Target(kind, protocol, partitioned, f"t_{uuid.uuid4().hex[:12]}")
    found.clean()
    close_connections()
    yield found
    partitioned.netns.heal()
    close_connections()
    found.clean()


@pytest.fixture(
    params=[pytest.param(t, id=f"{t[0]}-{t[1]}", marks=getattr(pytest.mark, t[0])) for t in TARGETS]
)
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    yield from open_target(request)


def batch(batch_id: int, partitions: int = 2, rows: int = 50) -> list[list[pa.RecordBatch]]:
    """``partitions`` partitions of ``rows`` rows, ids unique across batches."""
    out = []
    for p in range(partitions):
        ids = [batch_id * 10_000 + p * 1_000 + i for i in range(rows)]
        out.append(
            [
                pa.record_batch(
                    {
                        "id": pa.array(ids, pa.int64()),
                        "payload": pa.array([f"row-{i}" for i in ids], pa.string()),
                    }
                )
            ]
        )
    return out


def expected_ids(*batch_ids: int) -> list[int]:
    return sorted(i for b in batch_ids for part in batch(b) for i in part[0].column(0).to_pylist())


def run_failing(runner: LocalRunner, batch_id: int) -> tuple[TwoPhaseError, float]:
    started = time.monotonic()
    with pytest.raises(Exception) as caught:  # noqa: PT011  -- the class is asserted below
        runner.run_batch(batch_id, batch(batch_id))
    took = time.monotonic() - started
    found = caught.value if isinstance(caught.value, TwoPhaseError) else find_error(caught.value)
    assert found is not None, f"not a twophase error: {caught.value!r}"
    return found, took


def phase_2_hook(target: Target) -> tuple[type[Any], str]:
    """Where phase 2 talks to the server: the driver's commit, or the markers protocol's."""
    if target.protocol == "coordinated":
        return JdbcTwoPhaseSink, "commit"
    return JdbcMarkerSink, "commit_with_marker"


def assert_named(error: TwoPhaseError, target: Target, batch_id: int) -> None:
    """Restartable, naming the sink, the batch, the step's server and the bound; no secret."""
    text = str(error) + str(error.__cause__ or "")
    assert error.restartable, text
    assert error.sink is not None, text
    assert error.batch_id == batch_id, text
    # A statement that got no answer names network_timeout; a reconnect that hung, connect_timeout.
    assert (
        f"network_timeout={NETWORK_TIMEOUT} s" in text
        or f"connect_timeout={CONNECT_TIMEOUT} s" in text
    ), text
    assert target.netns.address in text, text
    assert "secret" not in text.lower(), text  # the test role's password


def finish_after_heal(runner: LocalRunner, target: Target, *batch_ids: int) -> None:
    """Heal, restart the driver, run the batches again: exact, nothing prepared or open."""
    target.netns.heal()
    runner.restart()
    started = time.monotonic()
    for batch_id in batch_ids:
        runner.run_batch(batch_id, batch(batch_id))
    assert time.monotonic() - started < 10, "the first attempt after the heal waited too long"
    assert target.ids() == expected_ids(*range(max(batch_ids) + 1)), "lost or duplicated rows"
    assert target.prepared() == []
    deadline = time.monotonic() + NETWORK_TIMEOUT + 8
    while target.open_transactions() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert target.open_transactions() == 0


def test_a_long_partition_in_phase_1_fails_the_batch_within_the_bound(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = LocalRunner(target.sink("p1long"))
    runner.run_batch(0, batch(0))
    with cut_before(monkeypatch, JdbcSinkMixin, "write", target.netns) as cut:
        error, took = run_failing(runner, 1)
        cut.heal()
    cut.assert_blocked()
    assert isinstance(error, RetriableError), error
    assert took < LIMIT, f"the batch failed after {took:.1f} s (bound {LIMIT} s)"
    assert_named(error, target, 1)
    assert target.ids() == expected_ids(0)
    finish_after_heal(runner, target, 1, 2)


def test_a_long_partition_in_phase_2_fails_the_batch_within_the_bound(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = LocalRunner(target.sink("p2long"))
    runner.run_batch(0, batch(0))
    with cut_before(monkeypatch, *phase_2_hook(target), target.netns) as cut:
        error, took = run_failing(runner, 1)
        cut.heal()
    cut.assert_blocked()
    limit = LIMIT + RETRY.max_attempts * (NETWORK_TIMEOUT + CONNECT_TIMEOUT)
    assert took < limit, f"the batch failed after {took:.1f} s (bound {limit} s)"
    if target.protocol == "coordinated":
        # The decision is recorded: phase 2 gives up, restartable, and the restart finishes it.
        assert isinstance(error, CommitFailedError), error
        assert "phase 2 could not commit" in str(error), error
    else:
        assert isinstance(error, RetriableError), error
    assert_named(error, target, 1)
    finish_after_heal(runner, target, 1)


def test_a_long_partition_in_recovery_fails_the_start_within_the_bound(
    target: Target,
) -> None:
    runner = LocalRunner(target.sink("reclong"))
    runner.run_batch(0, batch(0))
    runner.restart()
    cut = Cut(target.netns)
    cut.start()
    error, took = run_failing(runner, 1)
    cut.heal()
    cut.assert_blocked()
    assert isinstance(error, RetriableError), error
    limit = LIMIT + RETRY.max_attempts * (NETWORK_TIMEOUT + CONNECT_TIMEOUT)
    assert took < limit, f"the start failed after {took:.1f} s (bound {limit} s)"
    assert_named(error, target, 1)
    finish_after_heal(runner, target, 1)


@pytest.mark.parametrize("phase", ["phase1", "phase2"])
def test_a_short_partition_is_a_pause(
    target: Target, monkeypatch: pytest.MonkeyPatch, phase: str
) -> None:
    runner = LocalRunner(target.sink("short"))
    runner.run_batch(0, batch(0))
    cls, hook = (JdbcSinkMixin, "write") if phase == "phase1" else phase_2_hook(target)
    with cut_before(monkeypatch, cls, hook, target.netns, heal_after=SHORT) as cut:
        started = time.monotonic()
        metrics = runner.run_batch(1, batch(1))
        took = time.monotonic() - started
    cut.assert_blocked()
    assert metrics.outcome == "committed"
    assert took >= SHORT, "the batch did not wait for the partition"
    assert target.ids() == expected_ids(0, 1)
    assert target.prepared() == []
