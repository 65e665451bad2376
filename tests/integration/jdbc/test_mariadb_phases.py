"""MariaDB: the state after each phase, commit by xid, recovery, both protocols' zombie fences."""

from __future__ import annotations

import pickle
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from jdbc_support import id_batch, mariadb_sql

from twophase import Fingerprint, Marker, RecoveryContext, SinkContext, TaskContext
from twophase.connectors.jdbc import mariadb_sink
from twophase.connectors.jdbc._mariadb._prepared_store import MariaDBHandle
from twophase.errors import ConfigurationError, FatalError, RetriableError

pytestmark = pytest.mark.integration

# The fence tables outlive a test: every test module run gets identities of its own.
IDENTITY = f"it-{uuid.uuid4().hex[:16]}"


class Target:
    """A fresh ``(id BIGINT PRIMARY KEY, payload TEXT)`` table on the MariaDB server."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.table = f"phases_{uuid.uuid4().hex[:12]}"
        self.sql(f"CREATE TABLE `{self.table}` (id BIGINT PRIMARY KEY, payload TEXT) ENGINE=InnoDB")

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        return mariadb_sql(self.server, statement, params)

    def ids(self) -> list[int]:
        return sorted(int(r[0]) for r in self.sql(f"SELECT id FROM `{self.table}`"))

    def prepared(self) -> list[str]:
        return [x for x in self.server.prepared_xids() if x.startswith("tp:")]

    def sink(self, name: str = "phases", **options: Any) -> Any:
        options.setdefault("lock_timeout", 5.0)
        return mariadb_sink(name, table=self.table, url=self.server.password_url, **options)


@pytest.fixture
def target(mariadb_server: Any) -> Iterator[Target]:
    mariadb_server.rollback_prepared("tp:")
    t = Target(mariadb_server)
    yield t
    mariadb_server.rollback_prepared("tp:")
    # an XA transaction a failed test left open holds the table's metadata lock: do not wait
    t.sql(f"SET STATEMENT lock_wait_timeout = 5 FOR DROP TABLE IF EXISTS `{t.table}`")


def opened(sink: Any, identity: str = IDENTITY) -> Any:
    sink.open(SinkContext(sink.name, identity, "query", "run", "/tmp/unused"))
    return sink


def executor_copy(sink: Any) -> Any:
    return pickle.loads(pickle.dumps(sink))


def test_prepared_rows_are_invisible_until_xa_commit(target: Target) -> None:
    sink = opened(target.sink(protocol="coordinated"))
    executor = executor_copy(sink)
    txn = executor.begin_transaction(TaskContext("phases", IDENTITY, 5, 1, 0))
    executor.write(txn, id_batch([1, 2]))
    executor.write(txn, id_batch([3]))
    handle = executor.pre_commit(txn)
    assert isinstance(handle, MariaDBHandle)
    assert (handle.transaction_id, handle.rows) == (f"tp:{IDENTITY}:5:1:0", 3)
    # phase 1 done: prepared, detached from the executor's session, listed, invisible
    assert target.prepared() == [f"tp:{IDENTITY}"]
    assert target.ids() == []
    listed = sink.list_in_doubt(RecoveryContext(IDENTITY, 0))
    assert [(h.transaction_id, h.batch_id, h.partition_id, h.attempt) for h in listed] == [
        (handle.transaction_id, 5, 1, 0)
    ]
    # phase 2: committed, visible, gone from XA RECOVER
    sink.commit(pickle.loads(pickle.dumps(handle)))
    assert target.ids() == [1, 2, 3]
    assert target.prepared() == []
    sink.commit(handle)  # idempotent: its row in twophase_prepared says committed
    sink.recover_and_commit(handle)
    assert target.ids() == [1, 2, 3]


def test_a_mysql_server_is_refused_by_name_at_open_before_any_statement(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MySQL speaks the same protocol; the handshake's version is read before any SET."""
    import pymysql.connections

    monkeypatch.setattr(pymysql.connections.Connection, "get_server_info", lambda _: "8.0.36")
    sink = target.sink("mysql", connect_timeout=9)  # a pool of its own: a new connection
    with pytest.raises(ConfigurationError, match="is not MariaDB") as info:
        sink.open(SinkContext("mysql", IDENTITY, "q", "r", "/tmp/unused"))
    assert "version '8.0.36'" in str(info.value)
    assert "sink='mysql'" in str(info.value)
    assert info.value.setting == "url"
    monkeypatch.undo()
    opened = target.sink("mysql", connect_timeout=9)
    opened.open(SinkContext("mysql", IDENTITY, "q", "r", "/tmp/unused"))  # the real server passes


def test_commit_of_a_decided_transaction_rolled_back_by_hand_is_fatal(target: Target) -> None:
    sink = opened(target.sink(protocol="coordinated"))
    txn = sink.begin_transaction(TaskContext("phases", IDENTITY, 1, 0, 0))
    sink.write(txn, id_batch([1]))
    handle = sink.pre_commit(txn)
    assert target.server.rollback_prepared("tp:") == [f"tp:{IDENTITY}"]
    with pytest.raises(FatalError, match="rows are lost") as info:
        sink.commit(handle)
    assert "sink='phases'" in str(info.value)
    assert "batch=1" in str(info.value)


def test_a_transaction_still_attached_to_its_session_is_retried_not_taken_as_gone(
    target: Target,
) -> None:
    """MariaDB answers 'unknown XID' while the preparing session lives: that is no outcome."""
    sink = opened(target.sink(protocol="coordinated"))
    conn = target.server.connect(autocommit=True)
    with conn.cursor() as cur:
        params = (f"tp:{IDENTITY}", "3:0:0", 0x7470)
        cur.execute("XA START %s, %s, %s", params)
        cur.execute(f"INSERT INTO `{target.table}` VALUES (9, 'x')")
        cur.execute("XA END %s, %s, %s", params)
        cur.execute("XA PREPARE %s, %s, %s", params)
    handle = MariaDBHandle(f"tp:{IDENTITY}:3:0:0", 3, 0, 0)
    with pytest.raises(RetriableError, match="still attached"):
        sink.commit(handle)
    with pytest.raises(RetriableError, match="still attached"):
        sink.recover_and_abort(handle)
    conn.close()  # the session ends: the transaction is detached and can be committed
    time.sleep(0.2)
    sink.commit(handle)
    assert target.ids() == [9]


def test_recover_and_abort_rolls_back_and_tolerates_unknown_xids(target: Target) -> None:
    sink = opened(target.sink(protocol="coordinated"))
    txn = sink.begin_transaction(TaskContext("phases", IDENTITY, 2, 0, 0))
    sink.write(txn, id_batch([7]))
    handle = sink.pre_commit(txn)
    sink.recover_and_abort(handle)
    sink.recover_and_abort(handle)  # already gone: success
    assert target.prepared() == []
    assert target.ids() == []
    with pytest.raises(ConfigurationError, match="not a transaction id of this connector"):
        sink.recover_and_abort(MariaDBHandle("someone-elses-xid", 2, 0, 0))


def test_list_in_doubt_sees_only_this_identity(target: Target) -> None:
    sink = opened(target.sink(protocol="coordinated"))
    others = ["other", f"{IDENTITY}:x", IDENTITY[:-1]]
    for n, identity in enumerate([IDENTITY, *others]):
        txn = sink.begin_transaction(TaskContext("phases", identity, 1, n, 0))
        sink.write(txn, id_batch([100 + n]))
        sink.pre_commit(txn)
    listed = sink.list_in_doubt(RecoveryContext(IDENTITY, 0))
    assert [h.transaction_id for h in listed] == [f"tp:{IDENTITY}:1:0:0"]


def test_an_abort_of_an_open_xa_transaction_leaves_nothing(target: Target) -> None:
    sink = opened(target.sink(protocol="coordinated"))
    txn = sink.begin_transaction(TaskContext("phases", IDENTITY, 1, 0, 0))
    sink.write(txn, id_batch([1]))
    sink.abort(txn)
    sink.abort(txn)
    assert target.prepared() == []
    assert target.ids() == []


def test_a_zombie_cannot_prepare_after_the_fence(target: Target) -> None:
    sink = opened(target.sink(protocol="coordinated"))
    zombie = executor_copy(sink)
    txn = zombie.begin_transaction(TaskContext("phases", IDENTITY, 4, 0, 0, epoch=1))
    zombie.write(txn, id_batch([1]))
    assert sink.fence_attempts(IDENTITY, 1, 4) is True  # the coordinator gave up on batch 4
    with pytest.raises(FatalError, match="is fenced"):
        zombie.pre_commit(txn)
    zombie.abort(txn)
    assert target.prepared() == []
    # the next batch prepares as usual
    txn = zombie.begin_transaction(TaskContext("phases", IDENTITY, 5, 0, 0, epoch=1))
    zombie.write(txn, id_batch([2]))
    sink.commit(zombie.pre_commit(txn))
    assert target.ids() == [2]


def test_a_zombie_that_prepared_holds_up_the_fence_until_it_is_rolled_back(
    target: Target,
) -> None:
    identity = f"it-{uuid.uuid4().hex[:16]}"  # not fenced by the test before
    sink = opened(target.sink(protocol="coordinated"), identity)
    zombie = executor_copy(sink)
    txn = zombie.begin_transaction(TaskContext("phases", identity, 4, 0, 0, epoch=1))
    zombie.write(txn, id_batch([1]))
    handle = zombie.pre_commit(txn)  # read the old rank: prepared before the fence
    started = time.monotonic()
    assert sink.fence_attempts(identity, 1, 4) is False
    assert time.monotonic() - started < 5
    sink.recover_and_abort(handle)  # the coordinator's sweep
    assert sink.fence_attempts(identity, 1, 4) is True
    assert target.prepared() == []
    assert target.ids() == []


def test_markers_a_newer_attempt_kills_an_older_holder_of_the_slot(target: Target) -> None:
    sink = opened(target.sink(protocol="markers"))
    older = executor_copy(sink)
    txn = older.begin_transaction(TaskContext("phases", IDENTITY, 1, 0, 0))
    older.write(txn, id_batch([1]))
    newer = executor_copy(sink)
    retry = newer.begin_transaction(TaskContext("phases", IDENTITY, 1, 0, 1))
    newer.write(retry, id_batch([2]))
    newer.commit_with_marker(retry, Marker(IDENTITY, 1, 0, 1, Fingerprint.parse("0:" + "0" * 64)))
    assert target.ids() == [2]
    with pytest.raises(RetriableError, match=r"Lost connection|gone away|killed"):
        older.commit_with_marker(txn, Marker(IDENTITY, 1, 0, 0, Fingerprint.parse("0:" + "0" * 64)))
    assert target.ids() == [2]


def test_markers_an_older_attempt_stops_when_a_newer_one_holds_the_slot(target: Target) -> None:
    sink = opened(target.sink(protocol="markers"))
    newer = executor_copy(sink)
    retry = newer.begin_transaction(TaskContext("phases", IDENTITY, 1, 0, 1))
    older = executor_copy(sink)
    errors: list[BaseException] = []

    def zombie() -> None:
        try:
            older.begin_transaction(TaskContext("phases", IDENTITY, 1, 0, 0))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=zombie)
    thread.start()
    thread.join(10)
    assert len(errors) == 1, errors
    assert isinstance(errors[0], FatalError)
    assert "zombie" in str(errors[0])
    newer.abort(retry)


def _holds_the_slot(sink: Any, identity: str, batch: int, attempt: int) -> tuple[Any, Any]:
    """An attempt of partition 0 that began, wrote, and holds its slot."""
    attempt_sink = executor_copy(sink)
    txn = attempt_sink.begin_transaction(TaskContext("phases", identity, batch, 0, attempt))
    attempt_sink.write(txn, id_batch([batch * 100 + attempt]))
    return attempt_sink, txn


def test_markers_a_zombie_of_an_earlier_batch_never_fences_a_later_batch(target: Target) -> None:
    """Seed 2911's trial 113: batch 1's attempt 5 is a zombie, not a newer attempt."""
    identity = f"it-{uuid.uuid4().hex[:16]}"
    sink = opened(target.sink(protocol="markers"), identity)
    zombie, zombie_txn = _holds_the_slot(sink, identity, batch=1, attempt=5)
    later, txn = _holds_the_slot(sink, identity, batch=2, attempt=0)  # kills the zombie's session
    later.commit_with_marker(txn, Marker(identity, 2, 0, 0, Fingerprint.parse("0:" + "0" * 64)))
    assert target.ids() == [200]
    with pytest.raises(RetriableError, match=r"Lost connection|gone away|killed"):
        zombie.commit_with_marker(
            zombie_txn, Marker(identity, 1, 0, 5, Fingerprint.parse("0:" + "0" * 64))
        )
    assert target.ids() == [200]


def test_markers_a_zombie_of_an_earlier_batch_stops_when_a_later_batch_holds_the_slot(
    target: Target,
) -> None:
    identity = f"it-{uuid.uuid4().hex[:16]}"
    sink = opened(target.sink(protocol="markers"), identity)
    later, txn = _holds_the_slot(sink, identity, batch=2, attempt=0)
    with pytest.raises(FatalError, match=r"attempt 5 of batch 1 .* attempt 0 of batch 2"):
        _holds_the_slot(sink, identity, batch=1, attempt=5)
    later.commit_with_marker(txn, Marker(identity, 2, 0, 0, Fingerprint.parse("0:" + "0" * 64)))
    assert target.ids() == [200]


def test_markers_the_attempts_registry_keeps_one_row_per_slot(target: Target) -> None:
    identity = f"it-{uuid.uuid4().hex[:16]}"
    sink = opened(target.sink(protocol="markers"), identity)
    for batch in range(4):
        for partition in (0, 1):
            executor = executor_copy(sink)
            context = TaskContext("phases", identity, batch, partition, batch % 2)
            txn = executor.begin_transaction(context)
            executor.write(txn, id_batch([batch * 10 + partition]))
            marker = Marker(
                identity, batch, partition, batch % 2, Fingerprint.parse("0:" + "0" * 64)
            )
            executor.commit_with_marker(txn, marker)
    rows = target.sql(
        "SELECT partition_id, batch_id, attempt FROM twophase_attempts WHERE identity = %s "
        "ORDER BY partition_id",
        (identity,),
    )
    assert rows == [(0, 3, 1), (1, 3, 1)], "the older attempts' rows were deleted"
    assert target.ids() == [0, 1, 10, 11, 20, 21, 30, 31]
