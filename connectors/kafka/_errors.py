"""Map confluent-kafka errors onto :mod:`twophase.errors`.

librdkafka classifies every error with three flags, which decide what the
participant does next:

==========================  ====================================================
KafkaError says             twophase raises
==========================  ====================================================
``fatal()``, fenced codes   :class:`~twophase.errors.FatalError` naming the
                            likely cause (a zombie task, two queries sharing a
                            sink identity, a transaction that outlived its
                            timeout)
``txn_requires_abort()``    :class:`~twophase.errors.AbortRequiredError` (the
                            transaction is aborted and the task fails, so that
                            Spark retries it)
``retriable()``             retried locally a bounded number of times, then
                            :class:`~twophase.errors.RetriableError`
size, record, topic, ACL    :class:`~twophase.errors.DataError` or
                            :class:`~twophase.errors.ConfigurationError` naming
                            sink, batch, topic and the setting or ACL to fix
==========================  ====================================================

Every mapped error is raised ``from`` the original ``KafkaException`` and
pickles (it travels from the executor to the driver inside Spark's task
failure).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from twophase.errors import (
    AbortRequiredError,
    ConfigurationError,
    DataError,
    FatalError,
    RetriableError,
    TwoPhaseError,
)

from .._context import ErrorContext

__all__ = [
    "FENCED_CODES",
    "KafkaErrorContext",
    "is_fenced",
    "kafka_error_of",
    "map_kafka_error",
    "raise_mapped",
    "retry_locally",
]

T = TypeVar("T")

#: Codes meaning "a newer producer with this transactional.id exists".
FENCED_CODES = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.TRANSACTION_COORDINATOR_FENCED,
    }
)

_UNKNOWN_TOPIC_CODES = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
_TOO_LARGE_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})


#: The codes told apart by what the user can do: (class, message, setting, column). The message
#: names ``{action}``, ``{topic}``, ``{tid}`` (the transactional id) and ``{timeout}``.
_ADVICE: dict[int, tuple[type[TwoPhaseError], str, str | None, str | None]] = {
    **dict.fromkeys(
        _TOO_LARGE_CODES,
        (
            DataError,
            "{action}: a record is too large for {topic}. Raise the producer's message.max.bytes "
            "and the topic's max.message.bytes, or make the records smaller.",
            "message.max.bytes",
            None,
        ),
    ),
    KafkaError.INVALID_RECORD: (
        DataError,
        "{action}: the brokers refused a record of {topic} as invalid. Most often a record "
        "without a key (a null or missing 'key' column) sent to a compacted topic "
        "(cleanup.policy=compact), where every record needs a key. Fix the rows or the topic.",
        None,
        "key",
    ),
    **dict.fromkeys(
        _UNKNOWN_TOPIC_CODES,
        (
            ConfigurationError,
            "{action}: {topic} does not exist (or this principal may not describe it). "
            "Create it before starting the query.",
            "topic",
            None,
        ),
    ),
    KafkaError._UNKNOWN_PARTITION: (
        DataError,
        "{action}: a row names a partition that {topic} does not have.",
        None,
        "partition",
    ),
    KafkaError.TOPIC_AUTHORIZATION_FAILED: (
        ConfigurationError,
        "{action}: not authorized to write to {topic}. Grant the principal WRITE and DESCRIBE "
        "on it (and READ on the control topic for replays).",
        "topic",
        None,
    ),
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (
        ConfigurationError,
        "{action}: not authorized to use transactional.id{tid}. Grant the principal WRITE and "
        "DESCRIBE on the TransactionalId resource with the sink's transactional_id_prefix as a "
        "PREFIXED pattern.",
        "transactional_id_prefix",
        None,
    ),
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: (
        ConfigurationError,
        "{action}: not authorized on the cluster. Brokers older than 2.8 require "
        "IDEMPOTENT_WRITE on the Cluster resource for transactional producers.",
        "producer_config",
        None,
    ),
    KafkaError.INVALID_TRANSACTION_TIMEOUT: (
        ConfigurationError,
        "{action}: transaction.timeout.ms ({timeout}) is larger than the broker's "
        "transaction.max.timeout.ms; lower transaction_timeout_ms.",
        "transaction_timeout_ms",
        None,
    ),
    **dict.fromkeys(
        (KafkaError._INVALID_ARG, KafkaError.INVALID_CONFIG),
        (ConfigurationError, "{action}: invalid configuration.", None, None),
    ),
    **dict.fromkeys(
        (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED),
        (
            ConfigurationError,
            "{action}: authentication with the brokers failed; check the security settings "
            "(security.protocol, sasl.*, ssl.*).",
            "producer_config",
            None,
        ),
    ),
}


@dataclass(frozen=True, kw_only=True)
class KafkaErrorContext(ErrorContext):
    """Where a Kafka call failed: the sink, batch and partition, and what of Kafka was involved.

    Attributes
    ----------
    action
        What the sink was doing ("init_transactions", "produce", "commit", ...).
    topic
        The topic involved, when known.
    transactional_id
        The producer's ``transactional.id``, when known.
    transaction_timeout_ms
        The configured ``transaction.timeout.ms``.
    elapsed
        Seconds since the transaction began, when known.
    brokers
        ``bootstrap.servers``, to name the target of a failure to reach it.
    """

    action: str
    topic: str | None = None
    transactional_id: str | None = None
    transaction_timeout_ms: int | None = None
    elapsed: float | None = None
    brokers: str | None = None


def kafka_error_of(exc: BaseException) -> KafkaError | None:
    """Find the ``KafkaError`` behind an exception raised by confluent-kafka.

    ``flush()`` and ``poll()`` may raise a ``SystemError`` whose cause is the
    ``KafkaException`` (a fatal error raised while a delivery callback runs),
    so the chain of causes is searched too.

    Parameters
    ----------
    exc
        The exception.

    Returns
    -------
    KafkaError or None
        The error, or None when the exception does not come from Kafka.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KafkaException) and current.args:
            first = current.args[0]
            if isinstance(first, KafkaError):
                return first
        current = current.__cause__ or current.__context__
    return None


def is_fenced(err: KafkaError) -> bool:
    """Tell whether an error means this producer instance was fenced.

    Parameters
    ----------
    err
        The error.

    Returns
    -------
    bool
        True for ``_FENCED``, ``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH``
        and ``TRANSACTION_COORDINATOR_FENCED``.
    """
    return err.code() in FENCED_CODES


def _fenced_message(err: KafkaError, ctx: KafkaErrorContext) -> str:
    timed_out = (
        ctx.elapsed is not None
        and ctx.transaction_timeout_ms is not None
        and ctx.elapsed * 1000 >= ctx.transaction_timeout_ms
    )
    if timed_out:
        assert ctx.elapsed is not None
        cause = (
            f"the transaction ran for {ctx.elapsed:.1f} s, longer than transaction.timeout.ms "
            f"({ctx.transaction_timeout_ms} ms), so the broker aborted it and fenced the "
            "producer; raise transaction_timeout_ms (up to the broker's "
            "transaction.max.timeout.ms) or split the batch into more, smaller partitions"
        )
    else:
        cause = (
            "another producer with the same transactional.id started after this one. Likely "
            "causes: a newer attempt of this Spark task fenced this zombie attempt (harmless, "
            "the newer attempt writes the partition); two running queries share this sink "
            "identity or transactional_id_prefix (give each query its own checkpoint and sink "
            "name); or the query was restarted while this task was still running"
        )
    tid = f" (transactional.id {ctx.transactional_id!r})" if ctx.transactional_id else ""
    return f"{ctx.action} failed: producer fenced{tid}: {cause}. Kafka said: {err.str()}"


def map_kafka_error(err: KafkaError, ctx: KafkaErrorContext) -> TwoPhaseError:
    """Turn a ``KafkaError`` into the matching twophase exception.

    The caller raises the result ``from`` the original exception.

    Parameters
    ----------
    err
        The error reported by confluent-kafka.
    ctx
        Where it happened.

    Returns
    -------
    TwoPhaseError
        A :class:`~twophase.errors.DataError`,
        :class:`~twophase.errors.ConfigurationError`,
        :class:`~twophase.errors.FatalError`,
        :class:`~twophase.errors.AbortRequiredError` or
        :class:`~twophase.errors.RetriableError`.
    """
    code = err.code()
    where = ctx.keywords()
    topic = f"topic {ctx.topic!r}" if ctx.topic else "the topic"
    said = f"Kafka said: {err.str()} ({err.name()})"
    if code in FENCED_CODES:
        return FatalError(_fenced_message(err, ctx), **where)
    advice = _ADVICE.get(code)
    if advice is not None:
        raised_as, text, setting, column = advice
        tid = f" {ctx.transactional_id!r}" if ctx.transactional_id else ""
        text = text.format(
            action=ctx.action, topic=topic, tid=tid, timeout=ctx.transaction_timeout_ms
        )
        return raised_as(f"{text} {said}", setting=setting, column=column, **where)
    if err.fatal():
        return FatalError(
            f"{ctx.action} failed with a fatal producer error; the producer cannot be used "
            f"again and the batch's transaction is lost (nothing of it is visible). {said}",
            **where,
        )
    if err.txn_requires_abort():
        return AbortRequiredError(
            f"{ctx.action} failed; the transaction must be aborted (nothing of it becomes "
            f"visible) and the task retried. {said}",
            **where,
        )
    if err.retriable() or code in (
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    ):
        brokers = f"brokers at {ctx.brokers}" if ctx.brokers else "brokers"
        return RetriableError(
            f"{ctx.action} failed transiently ({brokers} unreachable or busy); retrying may "
            f"succeed. {said}",
            **where,
        )
    return AbortRequiredError(
        f"{ctx.action} failed; the transaction is aborted (nothing of it becomes visible). {said}",
        **where,
    )


def raise_mapped(exc: BaseException, ctx: KafkaErrorContext) -> None:
    """Re-raise a Kafka exception as the matching twophase error.

    Exceptions that do not come from Kafka are re-raised unchanged.

    Parameters
    ----------
    exc
        The exception caught around a confluent-kafka call.
    ctx
        Where it happened.

    Raises
    ------
    TwoPhaseError
        The mapped error, ``from exc``.
    """
    if isinstance(exc, TwoPhaseError):
        raise exc
    err = kafka_error_of(exc)
    if err is None:
        raise exc
    raise map_kafka_error(err, ctx) from exc


def retry_locally(
    fn: Callable[[], T],
    ctx: KafkaErrorContext,
    *,
    attempts: int,
    backoff: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn``, retrying errors that librdkafka marks retriable.

    Used for ``init_transactions``, ``commit_transaction`` and
    ``abort_transaction``, which librdkafka documents as safe to call again
    after a retriable error.

    Parameters
    ----------
    fn
        The confluent-kafka call.
    ctx
        Where it happens (for the raised error).
    attempts
        Calls in all (>= 1).
    backoff
        Seconds to wait after the first failure; doubles after each.
    sleep
        Injectable for tests.

    Returns
    -------
    T
        What ``fn`` returned.

    Raises
    ------
    TwoPhaseError
        The mapped error once the call fails for good (a retriable one after
        ``attempts`` calls becomes :class:`~twophase.errors.RetriableError`).
    """
    failures = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            err = kafka_error_of(exc)
            if err is None:
                raise
            mapped = map_kafka_error(err, ctx)
            failures += 1
            if not isinstance(mapped, RetriableError) or failures >= attempts:
                if isinstance(mapped, RetriableError):
                    mapped = RetriableError(
                        f"{mapped.message} (gave up after {failures} attempts)",
                        sink=mapped.sink,
                        batch_id=mapped.batch_id,
                        partition_id=mapped.partition_id,
                    )
                raise mapped from exc
            sleep(backoff * 2 ** (failures - 1))
