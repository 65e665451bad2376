"""Public API rules: final entry point, names, pickling, errors, retry policy."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

import twophase
from twophase import (
    AbortRequiredError,
    ConfigurationError,
    DataError,
    Fingerprint,
    Marker,
    NondeterministicBatchError,
    RetriableError,
    RetryPolicy,
    TaskContext,
    TransactionHandle,
    TwoPhaseError,
    UnsafeConfigurationError,
    iter_rows,
)
from twophase._spark import check_speculation
from twophase.testing import FakeSink, FakeTarget, LocalRunner

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


def test_sink_pickles_without_driver_state() -> None:
    sink = FakeSink("s", FakeTarget.in_memory())
    runner = LocalRunner(sink)
    runner.run_batch(0, [[{"id": 1}]])
    assert sink._driver is not None
    assert sink.last_metrics is not None
    clone = pickle.loads(pickle.dumps(sink))
    assert clone._driver is None
    assert clone.last_metrics is None
    assert clone.name == "s"


@pytest.mark.parametrize(
    "value",
    [
        TransactionHandle("t", 1, 2, 3),
        TaskContext("s", "s.1", 1, 2, 3),
        Marker("s.1", 4, 0, 1, Fingerprint(3, 99)),
        Fingerprint(0, 0),
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
