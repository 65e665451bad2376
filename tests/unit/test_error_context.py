"""The connectors' one error context: what it names, how it narrows, that it pickles."""

from __future__ import annotations

import pickle

import pytest

from twophase import TaskContext, TransactionHandle
from twophase.connectors._context import ErrorContext, keywords_of
from twophase.connectors.kafka._errors import KafkaErrorContext
from twophase.errors import ConfigurationError, DataError

pytestmark = pytest.mark.unit


def test_an_error_built_from_the_context_names_sink_batch_partition_and_the_setting() -> None:
    where = ErrorContext("orders", 4, 2)
    exc = ConfigurationError("no such table", setting="table", **where.keywords())
    assert str(exc) == "[sink='orders', batch=4, partition=2, setting='table'] no such table"
    filled = DataError("bad row", column="id").with_context(**where.keywords())
    assert str(filled) == "[sink='orders', batch=4, partition=2, column='id'] bad row"


def test_a_context_comes_from_a_task_or_a_handle_and_narrows_to_a_batch() -> None:
    task = TaskContext("orders", "orders.abc", 7, 3, attempt=1, epoch=2)
    assert ErrorContext.of_task(task) == ErrorContext("orders", 7, 3)
    assert ErrorContext.of_handle("orders", TransactionHandle("t", 7, 3, 0)) == ErrorContext(
        "orders", 7, 3
    )
    assert ErrorContext("orders").for_batch(5) == ErrorContext("orders", 5)
    kafka = KafkaErrorContext("orders", action="commit", topic="events")
    narrowed = kafka.for_batch(5, 1)
    assert isinstance(narrowed, KafkaErrorContext)
    assert (narrowed.batch_id, narrowed.partition_id, narrowed.topic) == (5, 1, "events")


def test_an_unknown_context_adds_nothing_and_every_context_pickles() -> None:
    assert keywords_of(None) == {}
    assert str(ConfigurationError("x", **keywords_of(None))) == "x"
    for where in (ErrorContext("orders", 1), KafkaErrorContext("orders", action="produce")):
        assert pickle.loads(pickle.dumps(where)) == where
