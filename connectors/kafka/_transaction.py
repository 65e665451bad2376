"""One partition's Kafka transaction on its executor: produce, probe, flush, commit, abort.

A :class:`KafkaTransaction` owns the pooled producer it runs on from
:meth:`KafkaTransaction.begin` until it commits or aborts; then the producer
goes back to the pool (or is closed when it is broken). Every Kafka failure
inside it is raised by its base, :class:`._transaction_failures.TransactionFailures`,
mapped by :mod:`._errors`, naming the sink, batch, partition and topic.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException

from twophase import DeadLetter, Marker, RowError, TaskContext
from twophase.errors import (
    AbortRequiredError,
    FatalError,
    RetriableError,
)

from .._set_aside import SetAside
from . import _pool
from ._columns import RecordPlan, plan_records
from ._dead_letters import column_types, produce_letters
from ._errors import is_fenced, kafka_error_of, map_kafka_error, retry_locally
from ._fencing import init_producer, task_producer
from ._marker_records import CONTROL_PARTITION, encode_marker, marker_key, new_nonce
from ._options import KafkaOptions
from ._records import produce_one, produce_rows
from ._row_errors import merged, refused_by_producer, screen, without_rows
from ._topics import check_topic_column
from ._transaction_failures import TransactionFailures

__all__ = ["KafkaTransaction"]

_log = logging.getLogger("twophase.connectors.kafka")

#: Tombstones a transaction writes at most for markers of finished batches.
_GC_PER_TRANSACTION = 64


class KafkaTransaction(TransactionFailures):
    """One partition's open Kafka transaction. Lives on one executor, never pickled.

    Open one with :meth:`begin`. The sink's hooks call :meth:`write` for the
    rows, then :meth:`write_marker` and :meth:`commit`, or :meth:`abort`.

    Parameters
    ----------
    options
        The sink's settings.
    context
        The task.
    producer
        The pooled producer running the transaction, owned by it.
    probe
        True when the producer was reused from the pool: the first record
        written checks that no newer instance fenced it.
    """

    def __init__(
        self,
        options: KafkaOptions,
        context: TaskContext,
        producer: _pool.PooledProducer,
        probe: bool,
    ) -> None:
        self.options = options
        self.context = context
        self.producer = producer
        self.probe = probe
        self.started = time.monotonic()
        self.records = 0
        self.set_aside = SetAside()  # refused rows against dead letters (bad_rows="dead_letter")
        #: "open" -> "committed", or "aborted".
        self.state = "open"
        #: A step timed out on the brokers (a partition, brokers down): the abort tries once.
        self.unreachable = False
        self.marker: Marker | None = None
        self.marker_key: bytes | None = None
        self.tombstoned: list[bytes] = []
        self._plan: tuple[pa.Schema, RecordPlan] | None = None

    @classmethod
    def begin(cls, options: KafkaOptions, context: TaskContext) -> KafkaTransaction:
        """Open the partition's transaction on this worker's producer of the slot.

        The slot's id is that of this worker's lane (:mod:`._lanes`). A first
        attempt reuses the pooled producer when there is one (no
        ``init_transactions`` round trip); a retry fences every lane of the
        slot and initialises a new producer, so that no earlier attempt of the
        partition, in whatever worker, can write or commit any more.

        Parameters
        ----------
        options
            The sink's settings.
        context
            Identity, batch, partition and attempt.

        Returns
        -------
        KafkaTransaction
            The open transaction.
        """
        tid, entry = task_producer(options, context)
        reused = entry is not None
        if entry is None:
            entry = init_producer(options, tid, context)
        entry.reset_errors()
        try:
            entry.producer.begin_transaction()
        except Exception as exc:
            entry.close()
            err = kafka_error_of(exc)
            if err is None:
                raise
            if not reused:
                ectx = options.error_context(
                    "begin_transaction", context=context, transactional_id=tid
                )
                raise map_kafka_error(err, ectx) from exc
            # A pooled producer in a bad state: start over with a new one.
            fresh = init_producer(options, tid, context)
            fresh.adopt_markers(entry)
            entry = fresh
            entry.producer.begin_transaction()
            reused = False
        _log.debug("sink %s: began %s on %r", options.sink, context.transaction_id, entry)
        return cls(options, context, entry, probe=reused)

    def __repr__(self) -> str:
        ctx = self.context
        return f"KafkaTransaction({ctx.transaction_id!r}, {self.state}, records={self.records})"

    # ---------------------------------------------------------------- steps
    def write(self, batch: pa.RecordBatch) -> list[RowError]:
        """Produce the rows of one Arrow record batch (Spark Kafka sink columns).

        The topics of a ``topic`` column are looked up first (:mod:`._topics`): a
        missing or forbidden one fails at once, naming it, with nothing produced. With a
        dead-letter topic, the rows the brokers would refuse (:func:`._row_errors.screen`)
        and those ``produce()`` refuses are not produced but returned.

        Parameters
        ----------
        batch
            The rows.

        Returns
        -------
        list of RowError
            The rows refused (always empty without a dead-letter topic).
        """
        if batch.num_rows == 0:
            return []
        self._require_open("write")
        plan = self._plan_for(batch.schema)
        refused: list[RowError] = []
        if self.options.dead_letter_topic is not None:
            refused = screen(batch, plan, options=self.options, context=self.context)
        elif plan.topic is not None:
            check_topic_column(batch.column(plan.topic), options=self.options, context=self.context)
        batch, kept = without_rows(batch, refused)
        skipped: list[RowError] = []  # rows of ``batch`` produce() refused
        start = 0
        if self.probe and batch.num_rows:
            first = batch.slice(0, 1)
            self._probe(
                lambda producer: self._produce(producer, plan, first, 0, skipped),
                plan.default_topic,
            )
            start = 1
            self.records += 1
        self.records += self._produce(self.producer.producer, plan, batch, start, skipped)
        try:
            self.producer.producer.poll(0)
        except Exception as exc:
            self._fail(exc, "write", None)
        self._raise_delivery_errors("write")
        self.records -= len(skipped)
        return merged(refused, skipped, kept)

    def write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        """Produce the dead letters into partition 0 of the dead-letter topic.

        Raises
        ------
        DataError
            A letter too large for the producer or the topic (the batch fails).
        """
        self._require_open("write_dead_letters")
        try:
            types = [column_types(self._plan[0] if self._plan else None)] * len(letters)
            producer = self.producer.producer
            self.records += produce_letters(producer, self.options, letters, self.where, types)
        except Exception as exc:
            self._fail(exc, "write_dead_letters", self.options.dead_letter_topic)

    def write_marker(self, marker: Marker) -> None:
        """Produce the marker into partition 0 of the control topic.

        Also produces tombstones for markers this producer committed for
        earlier (finished) batches, so that compaction keeps the control
        topic small.

        Parameters
        ----------
        marker
            Identity, batch, partition, attempt and the rows' fingerprint.
        """
        self._require_open("write_marker")
        key = marker_key(marker, new_nonce())
        value = encode_marker(marker, transactional_id=self.transactional_id, records=self.records)
        topic = self.options.control_topic
        stale = self.producer.stale_markers(topic, marker, _GC_PER_TRANSACTION, self.context)

        def produce_marker(producer: Any) -> None:
            produce_one(producer, topic, value, key, CONTROL_PARTITION)

        try:
            if self.probe:
                self._probe(produce_marker, topic)
            else:
                produce_marker(self.producer.producer)
            for old in stale:
                produce_one(self.producer.producer, topic, None, old, CONTROL_PARTITION)
        except Exception as exc:
            self._fail(exc, "write_marker", topic)
        self.marker = marker
        self.marker_key = key
        self.tombstoned = stale

    def flush(self) -> None:
        """Wait until every produced record is delivered, and raise the first failure.

        Raises
        ------
        TwoPhaseError
            Naming the first failed record's cause (too large, unknown topic,
            not authorised, fenced...), or :class:`~twophase.errors.RetriableError`
            when records stay undelivered.
        """
        self._require_open("flush")
        options = self.options
        remaining = 0
        for _ in range(options.local_retries):
            try:
                remaining = self.producer.producer.flush(options.operation_timeout)
            except Exception as exc:
                self._fail(exc, "flush", None)
            if remaining == 0:
                self._raise_delivery_errors("flush")
                return
        self.unreachable = True
        raise RetriableError(
            f"flush: {remaining} records still undelivered after "
            f"{options.local_retries * options.operation_timeout:.0f} s "
            f"(brokers at {options.brokers} slow or unreachable)",
            **self.where.keywords(),
        )

    def commit(self) -> None:
        """Flush and commit: the rows and the marker become visible together.

        Idempotent: a committed transaction returns at once. librdkafka
        retries a ``commit_transaction`` that timed out itself, up to
        ``local_retries`` calls. Gives the producer back to the pool.

        Raises
        ------
        FatalError
            Without a marker (the markers protocol needs one in every
            transaction), or
            when the producer was fenced.
        AbortRequiredError
            When the broker refused the commit (the transaction is aborted).
        RetriableError
            When the outcome is unknown after the retries.
        """
        if self.state == "committed":
            return
        self._require_open("commit")
        if self.marker is None or self.marker_key is None:
            raise FatalError(
                "commit() without a marker: the markers protocol needs write_marker() in every "
                "transaction, or a replay could write the partition twice",
                **self.where.keywords(),
            )
        self.flush()
        producer = self.producer.producer
        try:
            retry_locally(
                lambda: producer.commit_transaction(self.options.operation_timeout),
                self._ctx("commit"),
                attempts=self.options.local_retries,
            )
        except AbortRequiredError:
            self.abort()
            raise
        except FatalError:
            self.producer.broken = True
            raise
        except RetriableError:
            self.unreachable = True
            raise
        self.state = "committed"
        self.producer.checked = True
        self.producer.remember_marker(
            self.options.control_topic, self.marker.batch_id, self.marker_key, self.tombstoned
        )
        _pool.give_back(self.producer)
        _log.debug(
            "sink %s: committed %s (%d records, %.3f s)",
            self.options.sink,
            self.context.transaction_id,
            self.records,
            self.elapsed(),
        )

    def abort(self) -> None:
        """Abort the transaction; nothing of it ever becomes visible.

        Idempotent: a committed or aborted transaction is left alone. When
        the abort fails the producer is closed, not pooled: its transaction
        ends when the next instance of the slot initialises, or when the
        broker times it out.
        """
        if self.state in ("committed", "aborted"):
            return
        entry = self.producer
        self.state = "aborted"
        if entry.broken:
            # Fenced or fatal: the producer cannot abort, and the newer
            # instance (or the broker's timeout) ends the transaction.
            entry.close()
            return

        def abort_once() -> None:
            try:
                entry.producer.abort_transaction(self.options.operation_timeout)
            except KafkaException as exc:
                if exc.args and exc.args[0].code() == KafkaError._STATE:
                    return  # nothing open: already ended
                raise

        # After the brokers timed out, one attempt: a failed abort only leaves the transaction to
        # the slot's next init_transactions (or the broker's timeout), and each attempt would wait
        # operation_timeout again on a partitioned network.
        attempts = 1 if self.unreachable else self.options.local_retries
        try:
            retry_locally(abort_once, self._ctx("abort"), attempts=attempts)
        except FatalError as exc:
            entry.close()
            if isinstance(exc.__cause__, BaseException):
                err = kafka_error_of(exc.__cause__)
                if err is not None and is_fenced(err):
                    return  # the newer instance aborted it already
            raise
        except BaseException:
            entry.close()
            raise
        _pool.give_back(entry)
        _log.debug("sink %s: aborted %s", self.options.sink, self.context.transaction_id)

    # -------------------------------------------------------------- helpers
    def _produce(
        self,
        producer: Any,
        plan: RecordPlan,
        batch: pa.RecordBatch,
        start: int,
        skipped: list[RowError],
    ) -> int:
        def on_error(exc: BaseException, topic: str, index: int) -> None:
            refused = refused_by_producer(exc, start + index, topic)
            if refused is None or self.options.dead_letter_topic is None:
                self._fail(exc, "write", topic)
            skipped.append(refused)

        return produce_rows(
            producer, plan, batch, start=start, on_error=on_error, **self.where.keywords()
        )

    def _plan_for(self, schema: pa.Schema) -> RecordPlan:
        cached = self._plan
        if cached is not None and (cached[0] is schema or cached[0].equals(schema)):
            return cached[1]
        plan = plan_records(
            schema,
            default_topic=self.options.topic,
            sink=self.options.sink,
            batch_id=self.context.batch_id,
        )
        self._plan = (schema, plan)
        return plan

    def _probe(self, first: Callable[[Any], object], topic: str | None) -> None:
        """Write the first record of a reused producer's transaction and wait for it.

        A producer reused from the pool may have been fenced since its last
        transaction by an instance in another worker (slots move between
        workers). The first record tells: a fenced producer cannot add the
        partition to its transaction. Then the producer is replaced (its
        ``init_transactions`` fences the other, idle, instance) and the record
        written again. Nothing else of the transaction exists yet, so nothing
        is lost.
        """
        self.probe = False
        fenced: KafkaError | None = None
        try:
            first(self.producer.producer)
            self.producer.producer.flush(self.options.operation_timeout)
        except Exception as exc:
            err = self._error_behind(exc)
            if err is None or not (err.fatal() or is_fenced(err)):
                self._fail(exc, "write", topic)
            fenced = err
        if fenced is None:
            for err, _msg in self.producer.errors:
                if is_fenced(err) or err.code() == KafkaError._PURGE_QUEUE:
                    fenced = err
                    break
        if fenced is None:
            self._raise_delivery_errors("write")
            return
        _log.info(
            "sink %s: pooled producer %s was fenced by a newer instance (the slot ran in "
            "another worker); replacing it (%s)",
            self.options.sink,
            self.transactional_id,
            fenced.str(),
        )
        stale = self.producer
        stale.close()
        self.producer = init_producer(self.options, stale.transactional_id, self.context)
        self.producer.adopt_markers(stale)
        try:
            self.producer.producer.begin_transaction()
            self.state = "open"
            self.started = time.monotonic()
            first(self.producer.producer)
        except Exception as exc:
            self._fail(exc, "write", topic)
