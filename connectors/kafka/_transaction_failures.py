"""How a failure inside a partition's Kafka transaction is raised: its cause found and named.

:class:`TransactionFailures` is the private base of
:class:`._transaction.KafkaTransaction`. It turns what confluent-kafka reports
(the exception of a producer call, the delivery reports of the records) into
the one twophase error that names the cause (mapped by :mod:`._errors`, with
the sink, batch, partition, topic and ``transactional.id``), and on the way
marks the producer broken (fenced or fatal) or the brokers unreachable (the
abort then tries once). When a record fails, librdkafka purges the records
queued behind it and reports those too; confluent-kafka sometimes loses the
exception of a fatal error raised inside a delivery callback. Both are seen
through here.
"""

from __future__ import annotations

import time
from typing import NoReturn

from confluent_kafka import KafkaError, KafkaException

from twophase import TaskContext
from twophase.errors import (
    AbortRequiredError,
    FatalError,
    RetriableError,
    TwoPhaseError,
    add_note,
)

from .._context import ErrorContext
from . import _pool
from ._errors import KafkaErrorContext, is_fenced, kafka_error_of, map_kafka_error
from ._options import KafkaOptions

__all__ = ["TransactionFailures"]

#: Delivery errors of records librdkafka dropped because another one failed.
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})


class TransactionFailures:
    """The failures of one partition's open Kafka transaction, raised as twophase errors.

    The attributes are those :class:`._transaction.KafkaTransaction` sets.
    """

    options: KafkaOptions
    context: TaskContext
    producer: _pool.PooledProducer
    started: float
    state: str
    unreachable: bool

    @property
    def transactional_id(self) -> str:
        """Return the producer's ``transactional.id``."""
        return self.producer.transactional_id

    def elapsed(self) -> float:
        """Return seconds since the transaction began."""
        return time.monotonic() - self.started

    @property
    def where(self) -> ErrorContext:
        """Return the sink, batch and partition, for errors."""
        return ErrorContext(self.options.sink, self.context.batch_id, self.context.partition_id)

    # -------------------------------------------------------------- helpers
    def _ctx(self, action: str, topic: str | None = None) -> KafkaErrorContext:
        return self.options.error_context(
            action,
            context=self.context,
            topic=topic,
            transactional_id=self.transactional_id,
            elapsed=self.elapsed(),
        )

    def _require_open(self, action: str) -> None:
        if self.state != "open":
            raise FatalError(
                f"{action}() on a Kafka transaction that is {self.state}: a transaction is "
                "written and committed once, on the executor that began it, by its own producer",
                **self.where.keywords(),
            )

    def _error_behind(self, exc: BaseException) -> KafkaError | None:
        """Find the Kafka error behind an exception of a producer call.

        confluent-kafka 2.16 sometimes loses the ``KafkaException`` of a fatal
        error raised while delivery callbacks run (``flush`` then raises a
        bare ``SystemError``). The producer is then in its fatal state, in
        which any transactional call reports the fatal error again: ask
        ``abort_transaction``, which is what happens next anyway.
        """
        err = kafka_error_of(exc)
        if err is not None or not isinstance(exc, SystemError):
            return err
        try:
            self.producer.producer.abort_transaction(1.0)
        except Exception as again:
            return kafka_error_of(again)
        self.state = "aborted"
        return KafkaError(
            KafkaError._FATAL, f"the producer failed inside confluent-kafka: {exc}", fatal=True
        )

    def _fail(self, exc: BaseException, action: str, topic: str | None) -> NoReturn:
        """Raise the twophase error for a Kafka failure inside the transaction."""
        if isinstance(exc, TwoPhaseError):
            raise exc
        err = self._error_behind(exc)
        if err is None:
            raise exc
        if err.fatal() or is_fenced(err):
            self.producer.broken = True
        mapped = map_kafka_error(err, self._ctx(action, topic))
        self.unreachable = isinstance(mapped, RetriableError)
        raise mapped from exc

    def _raise_delivery_errors(self, action: str) -> None:
        entry = self.producer
        if not entry.errors:
            return
        # When one record fails the transaction, librdkafka purges the records still
        # queued, whose reports may come first: name the cause, not a purged record.
        causes = [e for e in entry.errors if e[0].code() not in _PURGED]
        err, msg = (causes or entry.errors)[0]
        topic = msg.topic() if msg is not None else None
        if err.fatal() or is_fenced(err):
            entry.broken = True
        mapped = map_kafka_error(err, self._ctx(action, topic))
        # Records timed out (message.timeout.ms): the brokers did not answer.
        self.unreachable = isinstance(mapped, RetriableError)
        if not causes:
            # Only purged records: the transaction failed (the brokers refused to add a
            # partition to it, or fenced the producer) and librdkafka logged why (TXNERR)
            # without a delivery report saying so. Name the topics at least.
            topics = sorted({m.topic() for _, m in entry.errors if m is not None})
            mapped = AbortRequiredError(
                f"{action}: the transaction failed and librdkafka dropped its records, of "
                f"topic(s) {', '.join(map(repr, topics))}, before the brokers took them; the "
                "reason is in the producer's log (TXNERR). Likely: this principal may not WRITE "
                "to one of these topics (grant it WRITE and DESCRIBE), or a newer attempt of "
                f"the task fenced this producer. Kafka said: {err.str()} ({err.name()})",
                **self.where.keywords(),
            )
        if entry.error_count > 1:
            add_note(mapped, f"{entry.error_count} records of the transaction failed delivery")
        raise mapped from KafkaException(err)
