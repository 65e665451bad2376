"""Dead letters as Kafka records: the format, the topic, and producing them in the transaction.

A dead letter is one record in partition 0 of ``dead_letter_topic`` (one partition keeps
the letters in order, so that redrive's committed offset is a prefix of them):

* key: ``<sink>/<batch>/<partition>/<position>``, unique per refused input row;
* value: JSON (:data:`VERSION` 1) of the :class:`~twophase.DeadLetter`, its row an object;
* headers: ``twophase.error.*`` and ``twophase.sink`` / ``.batch`` / ``.partition`` /
  ``.position``, the way Kafka Connect adds ``__connect.errors.*``.

Layout and rules: ``docs/kafka.md``, "Dead letters".
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from twophase import DeadLetter
from twophase.errors import ConfigurationError, DataError

from .._context import ErrorContext
from ._compat import ConfigResource, NewTopic, ResourceType
from ._errors import KafkaErrorContext, kafka_error_of, map_kafka_error
from ._options import KafkaOptions
from ._records import produce_one
from ._row_errors import HEADER_OVERHEAD, RECORD_OVERHEAD, topic_limits

__all__ = [
    "DEAD_LETTER_PARTITION",
    "HEADER_NAMES",
    "VERSION",
    "column_types",
    "decode",
    "decode_with_types",
    "encode",
    "ensure_dead_letter_topic",
    "letter_key",
    "produce_letters",
]

#: The only partition dead letters go to.
DEAD_LETTER_PARTITION = 0
#: Version of the value's JSON layout.
VERSION = 1

Headers = list[tuple[str, bytes]]

#: The headers of a dead-letter record (``docs/kafka.md`` names them; a test holds it to this).
HEADER_NAMES = (
    "twophase.error.class",
    "twophase.error.column",
    "twophase.error.code",
    "twophase.error.message",
    "twophase.sink",
    "twophase.batch",
    "twophase.partition",
    "twophase.position",
)


def letter_key(sink: str, batch_id: int, partition_id: int, position: int) -> bytes:
    """Return a dead letter's key: ``<sink>/<batch>/<partition>/<position>``."""
    return f"{sink}/{batch_id}/{partition_id}/{position}".encode()


def column_types(schema: pa.Schema | None) -> dict[str, str]:
    """Return ``"string"`` or ``"binary"`` for the ``key`` and ``value`` columns of a schema.

    A dead letter carries them: in its row's JSON a string is text and bytes base64, so
    redrive needs to know which it was.
    """
    if schema is None:
        return {}
    return {
        name: "string" if pa.types.is_string(t) or pa.types.is_large_string(t) else "binary"
        for name in ("key", "value")
        if (t := schema.field(name).type if name in schema.names else None) is not None
    }


def encode(letter: DeadLetter, types: Mapping[str, str]) -> tuple[bytes, bytes, Headers]:
    """Return a dead letter's key, value and headers.

    Parameters
    ----------
    letter
        The dead letter (its row already JSON text, bytes in base64).
    types
        :func:`column_types` of its rows.

    Returns
    -------
    tuple
        ``(key, value, headers)``.
    """
    fields = {
        "version": VERSION,
        "sink": letter.sink,
        "batch_id": letter.batch_id,
        "partition_id": letter.partition_id,
        "position": letter.position,
        "error_class": letter.error_class,
        "code": letter.code,
        "message": letter.message,
        "column": letter.column,
        "types": dict(types),
    }
    # The row is JSON text already: spliced in as an object, not parsed again.
    value = (json.dumps(fields)[:-1] + ', "row": ' + letter.row + "}").encode()
    headers: Headers = [
        ("twophase.error.class", letter.error_class.encode()),
        ("twophase.error.message", letter.message.encode()),
        ("twophase.sink", letter.sink.encode()),
        ("twophase.batch", str(letter.batch_id).encode()),
        ("twophase.partition", str(letter.partition_id).encode()),
        ("twophase.position", str(letter.position).encode()),
    ]
    if letter.code is not None:
        headers.insert(1, ("twophase.error.code", letter.code.encode()))
    if letter.column is not None:
        headers.insert(1, ("twophase.error.column", letter.column.encode()))
    key = letter_key(letter.sink, letter.batch_id, letter.partition_id, letter.position)
    return key, value, headers


def decode(value: bytes) -> DeadLetter:
    """Return the dead letter a record's value holds (:func:`decode_with_types`)."""
    return decode_with_types(value)[0]


def decode_with_types(value: bytes) -> tuple[DeadLetter, dict[str, str]]:
    """Return the dead letter a record's value holds, and its :func:`column_types`.

    Raises
    ------
    ValueError
        A value of another layout version (a newer release's), refused by name.
    """
    fields: dict[str, Any] = json.loads(value)
    if fields.get("version") != VERSION:
        raise ValueError(
            f"a dead letter of layout version {fields.get('version')!r}; this release reads "
            f"version {VERSION}: upgrade twophase"
        )
    letter = DeadLetter(
        fields["sink"],
        int(fields["batch_id"]),
        int(fields["partition_id"]),
        int(fields["position"]),
        fields["error_class"],
        fields["code"],
        fields["message"],
        fields["column"],
        json.dumps(fields["row"]),
    )
    return letter, dict(fields.get("types") or {})


def record_size(key: bytes, value: bytes, headers: Headers) -> int:
    """Return a record's size as :mod:`._row_errors` counts it."""
    return (
        RECORD_OVERHEAD
        + len(key)
        + len(value)
        + sum(HEADER_OVERHEAD + len(k) + len(v) for k, v in headers)
    )


def check_fits(
    options: KafkaOptions, records: Sequence[tuple[bytes, bytes, Headers]], where: ErrorContext
) -> None:
    """Refuse dead letters too large for the producer or the dead-letter topic (the batch fails)."""
    assert options.dead_letter_topic is not None
    producer_max = int(options.producer_config["message.max.bytes"])
    limit = min(
        producer_max,
        topic_limits(options, None, [options.dead_letter_topic])[
            options.dead_letter_topic
        ].max_message_bytes,
    )
    for key, value, headers in records:
        size = record_size(key, value, headers)
        if size > limit:
            raise DataError(
                f"the dead letter {key.decode()!r} takes {size} bytes (its row in JSON, bytes "
                f"as base64), over {limit}, the smaller of the producer's message.max.bytes and "
                f"dead_letter_topic {options.dead_letter_topic!r}'s max.message.bytes: the row "
                "can be set aside in neither place. Raise the dead-letter topic's "
                "max.message.bytes (the sink creates it with the producer's)",
                setting="message.max.bytes",
                **where.keywords(),
            )


def produce_letters(
    producer: Any,
    options: KafkaOptions,
    letters: Sequence[DeadLetter],
    where: ErrorContext,
    types: Sequence[Mapping[str, str]],
) -> int:
    """Produce dead letters (with each one's :func:`column_types`) into the open transaction.

    Returns how many.

    Raises
    ------
    DataError
        A letter too large for the producer or the topic (the batch fails).
    """
    topic = options.dead_letter_topic
    assert topic is not None
    records = [encode(letter, t) for letter, t in zip(letters, types, strict=True)]
    check_fits(options, records, where)
    for key, value, headers in records:
        produce_one(producer, topic, value, key, DEAD_LETTER_PARTITION, headers)
    return len(records)


def ensure_dead_letter_topic(admin: AdminClient, options: KafkaOptions) -> None:
    """Create the dead-letter topic, found missing (one partition), in ``open`` on the driver.

    Its ``max.message.bytes`` is the producer's ``message.max.bytes``, so every letter the
    producer takes the brokers take too. Idempotent: a topic created meanwhile counts.

    Raises
    ------
    ConfigurationError
        The topic is missing and this principal may not create it
        (``setting='dead_letter_topic'``).
    """
    topic = options.dead_letter_topic
    assert topic is not None
    producer_max = int(options.producer_config["message.max.bytes"])
    new = NewTopic(
        topic,
        1,
        options.control_topic_replication_factor,
        config={"max.message.bytes": str(producer_max)},
    )
    futures = admin.create_topics(
        [new],
        operation_timeout=options.operation_timeout,
        request_timeout=options.operation_timeout,
    )
    try:
        futures[topic].result()
        _await_described(admin, options, topic)
    except Exception as exc:
        err = kafka_error_of(exc)
        if err is None:
            raise
        if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        if err.code() in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        ):
            raise ConfigurationError(
                f"the dead-letter topic {topic!r} does not exist and this principal may not "
                f"create it ({err.str()}). Create it once (kafka-topics.sh --create --topic "
                f"{topic} --partitions 1) or grant CREATE on it",
                sink=options.sink,
                setting="dead_letter_topic",
            ) from exc
        ctx = KafkaErrorContext(options.sink, action="creating the dead-letter topic", topic=topic)
        raise map_kafka_error(err, ctx) from exc


def _await_described(admin: AdminClient, options: KafkaOptions, topic: str) -> None:
    """Wait until a topic created a moment ago can be described (its limits read)."""
    deadline = time.monotonic() + options.operation_timeout
    resource = ConfigResource(ResourceType.TOPIC, topic)
    while True:
        try:
            admin.describe_configs([resource], request_timeout=options.operation_timeout)[
                resource
            ].result()
            return
        except Exception as exc:
            err = kafka_error_of(exc)
            if err is None or err.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
