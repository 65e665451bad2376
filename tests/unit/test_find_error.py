"""Errors by class out of a failed query: ``twophase.errors.find_error`` and ``await_termination``.

A failed streaming query raises PySpark's ``StreamingQueryException``, whose text holds the Python
traceback of the error raised in ``foreachBatch`` or in a task. These tests feed that text (and
chained exceptions) to the parser; the Spark and Connect tests feed it real query failures.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import twophase
from twophase import errors
from twophase.errors import (
    CommitFailedError,
    ConfigurationError,
    DataError,
    TwoPhaseError,
    find_error,
)

pytestmark = pytest.mark.unit

CLASSES = [getattr(errors, name) for name in errors.__all__ if name.endswith("Error")]
#: What a restart alone can cure: the contract users write their restart policy against.
RESTARTABLE = {
    "TwoPhaseError": False,
    "ConfigurationError": False,
    "UnsafeConfigurationError": False,
    "TransactionError": True,
    "RetriableError": True,
    "AbortRequiredError": True,
    "FatalError": False,
    "DataError": False,
    "NondeterministicBatchError": False,
    "ConcurrentQueryError": False,
    "CoordinatorLogError": False,
    "CommitFailedError": True,
}


def as_traceback(*raised: BaseException) -> str:
    """The text PySpark's exception carries: a Python traceback, causes first."""
    parts = []
    for error in raised:
        parts.append(
            'Traceback (most recent call last):\n  File "x.py", line 1, in f\n'
            f"{type(error).__module__}.{type(error).__qualname__}: {error}\n"
        )
    joined = "\nThe above exception was the direct cause of the following exception:\n\n"
    return "org.apache.spark.SparkException: [FOREACH_BATCH] " + joined.join(parts) + "\n\tat x"


def test_every_class_says_whether_a_restart_cures_it() -> None:
    assert {c.__name__: c.restartable for c in CLASSES} == RESTARTABLE


text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=40
)


@given(
    cls=st.sampled_from(CLASSES),
    message=text,
    sink=st.none() | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True),
    batch_id=st.none() | st.integers(0, 10**12),
    partition_id=st.none() | st.integers(0, 10**5),
    column=st.none() | text,
    setting=st.none() | text,
)
def test_an_error_is_rebuilt_from_the_text_of_a_failed_query(
    cls: type[TwoPhaseError],
    message: str,
    sink: str | None,
    batch_id: int | None,
    partition_id: int | None,
    column: str | None,
    setting: str | None,
) -> None:
    context: dict[str, Any] = {
        "sink": sink,
        "batch_id": batch_id,
        "partition_id": partition_id,
        "column": column,
        "setting": setting,
    }
    original = cls(message, **context)
    found = find_error(RuntimeError(as_traceback(original)))
    assert type(found) is cls
    assert found is not None
    assert found.message == message
    assert {k: getattr(found, k) for k in context} == context
    assert str(found) == str(original)


def test_the_outermost_error_of_a_chain_is_the_one_found() -> None:
    inner = DataError("value too long", sink="s", batch_id=4, partition_id=1, column="c")
    outer = CommitFailedError("phase 2 gave up", sink="s", batch_id=4)
    found = find_error(RuntimeError(as_traceback(inner, outer)))
    assert isinstance(found, CommitFailedError)
    assert (found.sink, found.batch_id, found.message) == ("s", 4, "phase 2 gave up")


def test_a_chained_error_is_returned_itself() -> None:
    original = ConfigurationError("bad", sink="s", setting="dsn")
    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = original
    assert find_error(wrapped) is original
    context = RuntimeError("while handling")
    context.__context__ = wrapped
    assert find_error(context) is original


@pytest.mark.parametrize(
    "error",
    [
        None,
        RuntimeError("java.lang.OutOfMemoryError: heap"),
        RuntimeError("twophase.errors.NoSuchError: [sink='s'] not a class of ours"),
        RuntimeError("twophase.errors.add_note: not an error class"),
    ],
)
def test_no_twophase_error_gives_none(error: BaseException | None) -> None:
    assert find_error(error) is None


class FakeQuery:
    """What await_termination calls: ``awaitTermination`` that returns or raises."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.timeouts: list[float | None] = []

    def awaitTermination(self, timeout: float | None = None) -> Any:  # noqa: N802 (PySpark's name)
        self.timeouts.append(timeout)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def test_await_termination_raises_the_twophase_error_by_class_chained_to_sparks() -> None:
    failure = RuntimeError(as_traceback(DataError("NOT NULL", sink="o", batch_id=2, column="id")))
    with pytest.raises(DataError) as caught:
        twophase.await_termination(FakeQuery(failure), 30)
    assert caught.value.__cause__ is failure
    assert (caught.value.sink, caught.value.batch_id, caught.value.column) == ("o", 2, "id")


def test_await_termination_passes_other_failures_and_results_through() -> None:
    failure = RuntimeError("java.lang.OutOfMemoryError")
    with pytest.raises(RuntimeError) as caught:
        twophase.await_termination(FakeQuery(failure))
    assert caught.value is failure
    query = FakeQuery(True)
    assert twophase.await_termination(query, 5) is True
    assert twophase.await_termination(FakeQuery(None)) is None
    assert query.timeouts == [5]
