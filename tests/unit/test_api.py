"""Public API rules: final entry point, names, pickling, errors, retry policy."""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import twophase
from twophase import (
    AbortRequiredError,
    ConfigurationError,
    DataError,
    Fingerprint,
    Marker,
    NondeterministicBatchError,
    RecoveryContext,
    RetriableError,
    RetryPolicy,
    TaskContext,
    TransactionHandle,
    TwoPhaseError,
    UnsafeConfigurationError,
    iter_rows,
)
from twophase._spark._dataframe import check_speculation
from twophase.testing import FakeMarkerSink, FakeSink, FakeTarget, LocalRunner

pytestmark = pytest.mark.unit


def test_subclass_cannot_override_the_entry_point() -> None:
    with pytest.raises(TypeError, match="final"):

        class Bad(FakeSink):
            def __call__(self, df: Any, batch_id: int) -> None:
                pass


@pytest.mark.parametrize("name", ["", "has space", "a:b", "x" * 65, "-lead"])
def test_invalid_sink_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="sink name") as info:
        FakeSink(name, FakeTarget.in_memory())
    assert info.value.setting == "name"


def test_commit_and_abort_are_abstract() -> None:
    class Incomplete(twophase.TwoPhaseCommitSink[Any, TransactionHandle]):
        def begin_transaction(self, context: TaskContext) -> Any: ...
        def write(self, txn: Any, batch: pa.RecordBatch) -> None: ...
        def pre_commit(self, txn: Any) -> TransactionHandle: ...

    with pytest.raises(TypeError, match="abstract"):
        Incomplete("x")  # type: ignore[abstract]


def test_sink_holds_settings_only_and_metrics_live_in_the_runtime() -> None:
    sink = FakeSink("s", FakeTarget.in_memory())
    assert twophase.batch_metrics(sink) == []
    runner = LocalRunner(sink)
    runner.run_batch(0, [[{"id": 1}]])
    runner.run_batch(1, [[{"id": 2}]])
    assert [m.batch_id for m in twophase.batch_metrics(sink)] == [0, 1]
    assert [m.batch_id for m in runner.metrics_history] == [0, 1]
    # Pickled the default way: nothing of the driver travels with the sink.
    settings = {"name", "checkpoint_location", "retry", "bad_rows", "max_bad_rows"}
    assert set(vars(sink)) == {*settings, "target"}
    clone = pickle.loads(pickle.dumps(sink))
    assert twophase.batch_metrics(clone) == []
    assert clone.name == "s"


class _TransientStateSink(FakeMarkerSink):
    """A user sink with a cache it does not want pickled: its own __getstate__."""

    def __init__(self, name: str, target: FakeTarget) -> None:
        super().__init__(name, target)
        self.cache: dict[str, int] | None = {"warm": 1}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["cache"] = None
        return state


def test_subclass_may_keep_transient_state_and_control_its_pickling() -> None:
    target = FakeTarget.in_memory()
    sink = _TransientStateSink("t", target)
    assert pickle.loads(pickle.dumps(sink)).cache is None
    LocalRunner(sink).run_batch(0, [[{"id": 1}], [{"id": 2}]])
    assert sorted(r["id"] for r in target.committed_rows()) == [1, 2]
    assert sink.cache == {"warm": 1}


def test_a_marker_sink_needs_five_hooks_and_fences_nothing_by_default() -> None:
    class Minimal(twophase.MarkerCommitSink[list[pa.RecordBatch]]):
        def begin_transaction(self, context: TaskContext) -> list[pa.RecordBatch]:
            return []

        def write(self, txn: list[pa.RecordBatch], batch: pa.RecordBatch) -> None:
            txn.append(batch)

        def commit_with_marker(self, txn: list[pa.RecordBatch], marker: Marker) -> None:
            pass

        def abort(self, txn: list[pa.RecordBatch]) -> None:
            txn.clear()

        def read_markers(self, identity: str, batch_id: int) -> list[Marker]:
            return []

    sink = Minimal("m")
    assert sink.list_in_doubt(RecoveryContext("m.1", 4, (2,))) == ()
    with pytest.raises(NotImplementedError, match="recover_and_abort"):
        sink.recover_and_abort(TransactionHandle("m.1:2:0:0", 2, 0, 0))


def test_the_coordinated_protocol_requires_its_recovery_hooks() -> None:
    class NoRecovery(twophase.TwoPhaseCommitSink[Any, TransactionHandle]):
        def begin_transaction(self, context: TaskContext) -> Any: ...
        def write(self, txn: Any, batch: pa.RecordBatch) -> None: ...
        def pre_commit(self, txn: Any) -> TransactionHandle: ...
        def abort(self, txn: Any) -> None: ...
        def commit(self, handle: TransactionHandle) -> None: ...

    with pytest.raises(TypeError, match="list_in_doubt") as info:
        NoRecovery("x")  # type: ignore[abstract]
    assert "recover_and_abort" in str(info.value)


def test_public_api_is_the_documented_surface() -> None:
    engine = {"Coordinator", "BatchExecution", "CoordinatorLog", "HadoopFileStore", "LogStore"}
    assert not engine & set(twophase.__all__), "engine classes must stay private"
    for name in twophase.__all__:
        assert getattr(twophase, name) is not None, name
    # The whole surface, pinned: a name added or removed is a decision, made here.
    assert sorted(twophase.__all__) == [
        "AbortRequiredError",
        "BatchMetrics",
        "CommitFailedError",
        "CommitProtocol",
        "ConcurrentQueryError",
        "ConfigurationError",
        "CoordinatorLogError",
        "DataError",
        "DeadLetter",
        "FatalError",
        "Fingerprint",
        "Marker",
        "MarkerCommitSink",
        "NondeterministicBatchError",
        "RecoveryContext",
        "RetriableError",
        "RetryPolicy",
        "RowError",
        "SinkContext",
        "TaskContext",
        "TransactionError",
        "TransactionHandle",
        "TransactionStatus",
        "TwoPhaseCommitSink",
        "TwoPhaseError",
        "UnsafeConfigurationError",
        "__version__",
        "await_termination",
        "batch_metrics",
        "fingerprint_batches",
        "iter_rows",
        "parse_transaction_id",
        "register_format",
        "write_stream",
    ]


def test_parse_transaction_id_round_trips_a_task_context() -> None:
    ctx = TaskContext("orders", "orders.abc", 7, 3, 1)
    assert twophase.parse_transaction_id(ctx.transaction_id) == TransactionHandle(
        ctx.transaction_id, 7, 3, 1
    )
    assert twophase.parse_transaction_id("orders.abc:x:3:1") is None


@pytest.mark.parametrize(
    "value",
    [
        TransactionHandle("t", 1, 2, 3),
        TaskContext("s", "s.1", 1, 2, 3),
        Marker("s.1", 4, 0, 1, Fingerprint(3, 99)),
        Fingerprint(0, 0),
        twophase.RowError(3, "not_null", "null value", "23502", "payload"),
        twophase.DeadLetter("s", 1, 2, 7, "too_long", None, "too long", "name", '{"id": 1}'),
    ],
)
def test_wire_types_round_trip_through_pickle(value: object) -> None:
    assert pickle.loads(pickle.dumps(value)) == value


@pytest.mark.parametrize(
    "cls",
    [
        TwoPhaseError,
        ConfigurationError,
        UnsafeConfigurationError,
        RetriableError,
        AbortRequiredError,
        DataError,
        NondeterministicBatchError,
    ],
)
def test_errors_pickle_with_their_context(cls: type[TwoPhaseError]) -> None:
    exc = cls("bad value", sink="orders", batch_id=7, column="amount")
    exc.with_context(partition_id=3)
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is cls
    assert str(copy) == str(exc)
    assert (copy.sink, copy.batch_id, copy.partition_id, copy.column) == ("orders", 7, 3, "amount")
    assert "sink='orders'" in str(copy)
    assert "batch=7" in str(copy)
    assert "column='amount'" in str(copy)


def test_with_context_never_overwrites_known_fields() -> None:
    exc = DataError("x", sink="a").with_context(sink="b", batch_id=1)
    assert exc.sink == "a"
    assert exc.batch_id == 1


def test_iter_rows() -> None:
    assert list(iter_rows(pa.record_batch({"a": [1, 2]}))) == [{"a": 1}, {"a": 2}]


def test_retry_policy_backoff_and_limits() -> None:
    policy = RetryPolicy(max_attempts=4, initial_backoff=1, multiplier=2, max_backoff=3, jitter=0)
    assert [policy.backoff(n) for n in (1, 2, 3, 4)] == [1, 2, 3, 3]
    slept: list[float] = []
    calls = []

    def flaky() -> str:
        calls.append(1)
        raise RetriableError("later")

    with pytest.raises(RetriableError):
        policy.call(flaky, sleep=slept.append)
    assert len(calls) == 4
    assert slept == [1, 2, 3]
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


def test_retry_policy_respects_the_deadline_with_a_settable_clock() -> None:
    now = [0.0]
    policy = RetryPolicy(
        max_attempts=100, initial_backoff=10, max_backoff=100, jitter=0, deadline=25
    )

    def sleep(seconds: float) -> None:
        now[0] += seconds

    calls = []

    def flaky() -> None:
        calls.append(now[0])
        raise RetriableError("later")

    with pytest.raises(RetriableError):
        policy.call(flaky, sleep=sleep, clock=lambda: now[0])
    assert calls == [0.0, 10.0, 30.0]


def test_non_retriable_errors_are_not_retried() -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise AbortRequiredError("no")

    with pytest.raises(AbortRequiredError):
        RetryPolicy().call(broken, sleep=lambda s: None)
    assert calls == [1]


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class _Spark:
    def __init__(self, values: dict[str, str]) -> None:
        self.conf = _Conf({})
        conf = _Conf(values)
        self.sparkContext = type("SC", (), {"getConf": lambda _self: conf})()


def test_speculation_is_refused_with_the_setting_named() -> None:
    with pytest.raises(UnsafeConfigurationError, match=r"spark\.speculation=false") as info:
        check_speculation(_Spark({"spark.speculation": "true"}), "orders", 3)
    assert info.value.setting == "spark.speculation"
    assert info.value.batch_id == 3
    check_speculation(_Spark({"spark.speculation": "false"}), "orders")
    check_speculation(_Spark({}), "orders")


def test_the_public_api_contract_names_every_private_module() -> None:
    # import-linter wildcards cannot say "twophase._*": the contract lists the private rooms
    # (a package's modules are forbidden with it) and the test kit's private modules, and this
    # keeps the list complete when one is added.
    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "public-api-only"]
    rooms = {
        f"twophase.{path.name.removesuffix('.py')}"
        for path in (root / "twophase").glob("_*")
        if not path.name.startswith("__") and (path.suffix == ".py" or path.is_dir())
    }
    kit = {
        f"twophase.testing.{path.stem}"
        for path in (root / "twophase" / "testing").glob("_*.py")
        if not path.name.startswith("__")
    }
    private = rooms | kit
    assert private == set(contract["forbidden_modules"])


def test_every_module_of_the_wheel_is_one_idea_of_at_most_450_lines() -> None:
    root = Path(__file__).resolve().parents[2]
    packages = [root / "twophase", root / "connectors", root / "tools" / "twophase_dev"]
    modules = [module for package in packages for module in package.rglob("*.py")]
    too_long = {
        str(m.relative_to(root)): n for m in modules if (n := len(m.read_text().splitlines())) > 450
    }
    assert not too_long, too_long
    for module in modules:
        tree = ast.parse(module.read_text())
        doc = ast.get_docstring(tree)
        assert doc, f"{module.relative_to(root)} has no docstring stating its idea"


def test_the_connectors_public_names_are_pinned() -> None:
    # What a user of each connector needs: the sinks (and the Kafka sink's transaction and
    # settings, for subclasses), one factory per database, the PostgreSQL format and the
    # prepared-transaction listing, and closing the clients each process pools, for users'
    # tests. Nothing else.
    from twophase.connectors import jdbc, kafka

    assert sorted(jdbc.__all__) == [
        "MariaDBMarkerSink",
        "MariaDBTwoPhaseSink",
        "PostgresMarkerSink",
        "PostgresTwoPhaseSink",
        "PreparedTransaction",
        "close_connections",
        "list_prepared_transactions",
        "mariadb_sink",
        "postgres_sink",
        "register_mariadb_format",
        "register_postgres_format",
    ]
    assert sorted(kafka.__all__) == [
        "KafkaOptions",
        "KafkaSink",
        "KafkaTransaction",
        "close_clients",
    ]
    for module in (jdbc, kafka):
        public = {n for n in vars(module) if not n.startswith("_")}
        assert public - set(module.__all__) <= {"annotations"}, public - set(module.__all__)
        for name in module.__all__:
            assert getattr(module, name).__doc__, f"{module.__name__}.{name} has no docstring"


def test_each_jdbc_dialect_imports_without_the_other_dialects_driver() -> None:
    # A MariaDB user installs PyMySQL, not psycopg2, and the reverse: the package imports a
    # dialect's modules only when one of its names is used.
    script = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == sys.argv[1]:\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import twophase.connectors.jdbc as jdbc\n"
        "getattr(jdbc, sys.argv[2])\n"
        "print('ok')\n"
    )
    for blocked, name in (("psycopg2", "mariadb_sink"), ("pymysql", "postgres_sink")):
        done = subprocess.run(
            [sys.executable, "-c", script, blocked, name], capture_output=True, text=True
        )
        assert done.stdout.strip() == "ok", done.stderr
