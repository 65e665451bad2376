"""Reading and redriving a sink's dead letters: a consumer group's committed offset is the mark.

A dead letter is "pending" from the committed offset of the sink's redrive group
(:func:`redrive_group`) on partition 0 of the dead-letter topic onwards, read with
``isolation.level=read_committed``, records of other sinks skipped. A redrive produces the
letters' rows to their topics again, the rows still refused back to the dead-letter topic
(new letters, at the end), and advances the group's offset past the letters with
``send_offsets_to_transaction`` -- all in one transaction of the sink's fixed redrive
``transactional.id`` (:func:`redrive_transactional_id`), so that two redrives fence each
other and a crash leaves either everything or nothing done. Offsets are a prefix: the
letters redriven must be the oldest pending ones, in order.

Two redrives of a sink at once (:func:`redrive` read the letters, then claims the
``transactional.id``): the later claim aborts the earlier redrive's open transaction, which
then fails naming the other; and a redrive whose claim comes after the other committed
finds the group's offset moved since it read the letters, and writes nothing. Either fails
with :class:`~twophase.errors.ConcurrentQueryError`; each letter moves once.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from twophase import DeadLetter, RowError, TaskContext
from twophase.errors import ConcurrentQueryError, ConfigurationError

from ._dead_letters import DEAD_LETTER_PARTITION, decode_with_types, produce_letters
from ._errors import is_fenced, kafka_error_of, map_kafka_error, retry_locally
from ._fencing import init_producer
from ._options import KafkaOptions
from ._transaction import KafkaTransaction

__all__ = ["pending", "redrive", "redrive_group", "redrive_transactional_id"]

Pending = tuple[int, DeadLetter, dict[str, str]]


def redrive_group(options: KafkaOptions) -> str:
    """Return the consumer group whose committed offset marks the letters redriven."""
    return f"{options.transactional_id_prefix}{options.sink}-redrive"


def redrive_transactional_id(options: KafkaOptions) -> str:
    """Return the sink's fixed ``transactional.id`` of redrives (one redrive at a time)."""
    return f"{options.transactional_id_prefix}{options.sink}-redrive"


def _topic(options: KafkaOptions) -> str:
    if options.dead_letter_topic is None:
        raise ConfigurationError(
            "the sink has no dead letters (bad_rows='fail'): build it with "
            "bad_rows='dead_letter' (and the dead_letter_topic it wrote to)",
            sink=options.sink,
            setting="bad_rows",
        )
    return options.dead_letter_topic


def _consumer(options: KafkaOptions) -> Consumer:
    return Consumer(
        {
            **options.client_config,
            "group.id": redrive_group(options),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )


def _committed(options: KafkaOptions, consumer: Consumer, topic: str) -> int:
    """Return the redrive group's committed offset (once no transaction holds it pending)."""
    part = TopicPartition(topic, DEAD_LETTER_PARTITION)
    return int(consumer.committed([part], timeout=options.operation_timeout)[0].offset)


def pending(options: KafkaOptions, consumer: Consumer | None = None) -> Iterator[Pending]:
    """Yield ``(offset, letter, column types)`` of the sink's pending dead letters, oldest first."""
    topic = _topic(options)
    own = consumer is None
    consumer = consumer or _consumer(options)
    timeout = options.operation_timeout
    try:
        committed = _committed(options, consumer, topic)
        start = committed if committed >= 0 else OFFSET_BEGINNING
        consumer.assign([TopicPartition(topic, DEAD_LETTER_PARTITION, start)])
        sink = options.sink.encode()
        while True:
            msg = consumer.poll(timeout)
            if msg is None:
                raise TimeoutError(f"no answer reading {topic!r} within {timeout:.0f} s")
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return
                ctx = options.error_context("reading the dead letters", topic=topic)
                raise map_kafka_error(err, ctx)
            value, offset = msg.value(), msg.offset()
            if dict(msg.headers() or ()).get("twophase.sink") != sink or value is None:
                continue  # another sink's letter
            letter, types = decode_with_types(value)
            yield (offset if offset is not None else -1), letter, types
    finally:
        if own:
            consumer.close()


def _value(text: Any, kind: str | None) -> bytes | None:
    if text is None:
        return None
    return str(text).encode() if kind == "string" else base64.b64decode(text)


def rows_of(found: Sequence[Pending]) -> pa.RecordBatch:
    """Return the letters' rows as a record batch of the Kafka sink's columns (bytes)."""
    rows = [(letter.values(), types) for _, letter, types in found]
    names = set().union(*(row.keys() for row, _ in rows))
    columns: dict[str, pa.Array] = {
        "value": pa.array([_value(r.get("value"), t.get("value")) for r, t in rows], pa.binary())
    }
    if "key" in names:
        columns["key"] = pa.array(
            [_value(r.get("key"), t.get("key")) for r, t in rows], pa.binary()
        )
    if "topic" in names:
        columns["topic"] = pa.array([r.get("topic") for r, _ in rows], pa.string())
    if "partition" in names:
        columns["partition"] = pa.array([r.get("partition") for r, _ in rows], pa.int32())
    if "headers" in names:
        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        columns["headers"] = pa.array(
            [
                None
                if r.get("headers") is None
                else [{"key": h["key"], "value": _value(h["value"], None)} for h in r["headers"]]
                for r, _ in rows
            ],
            pa.list_(header),
        )
    return pa.record_batch(columns)


def redrive(options: KafkaOptions, letters: Sequence[DeadLetter]) -> list[RowError]:
    """Move the letters' rows back to their topics in one transaction (module docstring).

    Returns
    -------
    list of RowError
        The rows still refused, by index in ``letters``: set aside again.

    Raises
    ------
    ValueError
        ``letters`` are not the oldest pending letters of the sink, in order.
    ConcurrentQueryError
        Another redrive of the sink fenced this one, or committed since the letters
        were read: nothing of this one is written.
    """
    if not letters:
        return []
    topic = _topic(options)
    consumer = _consumer(options)
    try:
        read_at = _committed(options, consumer, topic)
        found: list[Pending] = []
        for item in pending(options, consumer):
            if len(found) == len(letters):
                break
            if item[1] != letters[len(found)]:
                raise ValueError(
                    f"letters[{len(found)}] is not the oldest pending dead letter of sink "
                    f"{options.sink!r} left: redrive moves the oldest ones, in order (read them "
                    f"with read_dead_letters()); expected {_named(item[1])}, got "
                    f"{_named(letters[len(found)])}"
                )
            found.append(item)
        if len(found) < len(letters):
            raise ValueError(
                f"only {len(found)} dead letters of sink {options.sink!r} are pending, "
                f"{len(letters)} were given: one was redriven meanwhile?"
            )
        return _move(options, consumer, topic, found, read_at)
    finally:
        consumer.close()


def _error(e: RowError) -> dict[str, Any]:
    return {"error_class": e.error_class, "code": e.code, "message": e.message, "column": e.column}


def _named(letter: DeadLetter) -> str:
    return f"{letter.sink}/{letter.batch_id}/{letter.partition_id}/{letter.position}"


def _move(
    options: KafkaOptions, consumer: Consumer, topic: str, found: list[Pending], read_at: int
) -> list[RowError]:
    tid = redrive_transactional_id(options)
    # A context of its own per redrive: the topics' limits are asked again, not cached.
    context = TaskContext(options.sink, f"{options.sink}.redrive-{uuid.uuid4().hex}", 0, 0, 0)
    # Fences an earlier redrive of the sink, and waits until its transaction has ended.
    entry = init_producer(options, tid, context)
    try:
        now = _committed(options, consumer, topic)
        if now != read_at:
            raise ConcurrentQueryError(
                f"another redrive of sink {options.sink!r} committed since this one read "
                f"the dead letters (the redrive group's offset moved from {read_at} to "
                f"{now}): nothing of this redrive was written, so no letter moves twice. "
                "List the dead letters again (twophase dead-letters list)",
                sink=options.sink,
            )
        entry.producer.begin_transaction()
        txn = KafkaTransaction(options, context, entry, probe=False)
        refused = txn.write(rows_of(found))
        if refused:  # set aside again, with the new error, at the end of the topic
            again = [dataclasses.replace(found[e.row][1], **_error(e)) for e in refused]
            types = [found[e.row][2] for e in refused]
            produce_letters(entry.producer, options, again, txn.where, types)
        txn.flush()
        offsets = [TopicPartition(topic, DEAD_LETTER_PARTITION, found[-1][0] + 1)]
        ctx = options.error_context("redrive", context=context, transactional_id=tid)
        retry_locally(
            lambda: entry.producer.send_offsets_to_transaction(
                offsets, consumer.consumer_group_metadata(), options.operation_timeout
            ),
            ctx,
            attempts=options.local_retries,
        )
        retry_locally(
            lambda: entry.producer.commit_transaction(options.operation_timeout),
            ctx,
            attempts=options.local_retries,
        )
        txn.state = "committed"
        return refused
    except BaseException as exc:
        with contextlib.suppress(Exception):  # closing the producer ends it anyway
            entry.producer.abort_transaction(options.operation_timeout)
        err = kafka_error_of(exc)
        if err is not None and is_fenced(err):
            raise ConcurrentQueryError(
                f"another redrive of sink {options.sink!r} fenced this one (both use the "
                f"transactional.id {tid!r}): this redrive's transaction was aborted and "
                "nothing of it was written; the other moves the letters. List them again "
                f"(twophase dead-letters list). Kafka said: {err.str()}",
                sink=options.sink,
            ) from exc
        if err is not None and not isinstance(exc, ConfigurationError):
            raise map_kafka_error(err, options.error_context("redrive", topic=topic)) from exc
        raise
    finally:
        entry.close()
