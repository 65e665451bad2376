"""Fencing the earlier producers of a partition slot, by ``init_transactions``.

Every partition slot of a sink identity has ``producer_lanes`` stable
``transactional.id`` values, one per lane (:func:`transactional_id`, and
:mod:`._lanes` for which lane a Python worker uses). ``init_transactions`` of a
new producer with that id bumps the producer epoch: the broker aborts the
transaction an earlier instance left open, and any later write or commit of
that instance fails. That is the whole abort strategy of the connector:

* a task retry (``attempt > 0``) fences every lane of its slot
  (:func:`fence_lanes`) and begins on a new producer, so the earlier attempts of
  its partition, whatever worker ran them, are disabled before it writes;
* at recovery, and before a retried task reads the markers, the coordinator
  fences slots through :func:`list_in_doubt` and :func:`fence_slot`, so that
  no transaction left by a crash holds back ``read_committed`` consumers and
  no zombie can commit after the replay check.

Kafka cannot list the open transactions of a ``transactional.id`` prefix
cheaply and portably, so every lane of every slot the identity ever used is
fenced; fencing an idle one is harmless.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaException, Producer

from twophase import RecoveryContext, TaskContext, TransactionHandle
from twophase.errors import ConfigurationError, RetriableError

from . import _pool
from ._attempt_fence import Fence, encode_fence, fence_key
from ._errors import KafkaErrorContext, kafka_error_of, map_kafka_error, retry_locally
from ._lanes import lane_of_this_process
from ._marker_records import CONTROL_PARTITION
from ._options import KafkaOptions

__all__ = [
    "build_producer",
    "fence_lanes",
    "fence_slot",
    "init_producer",
    "list_in_doubt",
    "record_fence",
    "task_producer",
    "transactional_id",
]

_log = logging.getLogger("twophase.connectors.kafka")


def transactional_id(options: KafkaOptions, identity: str, slot: int, lane: int = 0) -> str:
    """Return the ``transactional.id`` of a slot's lane.

    ``<transactional_id_prefix><identity>-<slot>`` for lane 0 (the id of every
    slot before lanes existed, so recovery still fences what an older version
    left open), ``...-<slot>.<lane>`` for the others.
    """
    base = f"{options.transactional_id_prefix}{identity}-{slot}"
    return base if lane == 0 else f"{base}.{lane}"


def build_producer(options: KafkaOptions, transactional_id: str) -> _pool.PooledProducer:
    """Create a slot's producer, without talking to the brokers.

    Raises :class:`~twophase.errors.ConfigurationError` when librdkafka refuses
    the producer configuration.
    """
    try:
        return _pool.PooledProducer(transactional_id, options.producer_config, options.conf_key)
    except KafkaException as exc:
        raise ConfigurationError(
            f"librdkafka refused the producer configuration: {exc.args[0].str()}",
            sink=options.sink,
            setting="producer_config",
        ) from exc


def init_producer(
    options: KafkaOptions, transactional_id: str, context: TaskContext | None
) -> _pool.PooledProducer:
    """Create a slot's producer and run ``init_transactions``, fencing every older instance.

    ``context`` names the task in errors (None at recovery). The caller owns
    the returned producer.
    """
    entry = build_producer(options, transactional_id)
    ectx = options.error_context(
        "init_transactions", context=context, transactional_id=transactional_id
    )
    try:
        retry_locally(
            lambda: entry.producer.init_transactions(options.operation_timeout),
            ectx,
            attempts=options.local_retries,
        )
    except BaseException:
        entry.close()
        raise
    entry.initialised = True
    entry.owner = context
    return entry


def list_in_doubt(options: KafkaOptions, context: RecoveryContext) -> list[TransactionHandle]:
    """Name every partition slot the identity may have left a transaction in.

    One handle per lane of every slot ``0 .. partition_slots - 1``: the
    ``transactional.id`` as ``transaction_id``, the newest unfinished batch (-1
    when none) and ``attempt=-1`` (the lane is fenced whatever attempt used it
    last).
    """
    batch = max(context.unfinished_batches) if context.unfinished_batches else -1
    return [
        TransactionHandle(transactional_id(options, context.identity, slot, lane), batch, slot, -1)
        for slot in range(context.partition_slots)
        for lane in range(options.producer_lanes)
    ]


def fence_slot(options: KafkaOptions, handle: TransactionHandle) -> None:
    """Fence one slot of :func:`list_in_doubt`: abort its open transaction, disable its zombies."""
    tid = handle.transaction_id
    started = time.monotonic()
    _fence(options, tid, None)
    _log.info(
        "sink %s: fenced %s (batch %s) in %.3f s",
        options.sink,
        tid,
        handle.batch_id,
        time.monotonic() - started,
    )


def fence_lanes(options: KafkaOptions, context: TaskContext, skip_lane: int) -> None:
    """Fence every lane of the task's slot but ``skip_lane``, all at once (a retry's first step).

    An earlier attempt of the partition ran in some worker, on that worker's
    lane: fencing them all disables it wherever it ran. Raises the mapped
    error of the first lane that could not be fenced.
    """
    lanes = [lane for lane in range(options.producer_lanes) if lane != skip_lane]
    if not lanes:
        return
    slot = context.partition_id
    ids = [transactional_id(options, context.identity, slot, lane) for lane in lanes]

    with ThreadPoolExecutor(len(ids), thread_name_prefix="twophase-fence") as pool:
        for future in [pool.submit(_fence, options, tid, context) for tid in ids]:
            future.result()


def _fence(options: KafkaOptions, tid: str, context: TaskContext | None) -> None:
    """Initialise and close a producer of ``tid``: every other instance is fenced."""
    init_producer(options, tid, context).close()
    _pool.discard_idle(tid)  # older instances in this process are fenced now


def task_producer(
    options: KafkaOptions, context: TaskContext
) -> tuple[str, _pool.PooledProducer | None]:
    """Return the id a task's transaction runs under, and its pooled producer if it may reuse one.

    The id is that of the slot in this worker's lane (:mod:`._lanes`). A first
    attempt takes the pooled producer of that id, if any. A retry gets None,
    after every lane of its slot was fenced: an earlier attempt ran in some
    worker's lane, and is disabled wherever it ran. With None the caller
    initialises a new producer, which fences the id's other instances. A
    real-time retry does so at its first commit, then gets the producer it
    initialised back.
    """
    lane = lane_of_this_process(
        f"{options.transactional_id_prefix}{context.identity}", options.producer_lanes
    )
    tid = transactional_id(options, context.identity, context.partition_id, lane)
    if context.attempt == 0:
        return tid, _pool.take(tid, options.conf_key)
    if context.realtime:
        # A real-time retry commits many times: it fences the slot at its first commit only,
        # then reuses the producer that did (a zombie that fences it back fails its commit).
        entry = _pool.take(tid, options.conf_key)
        if entry is not None and entry.owner == context:
            return tid, entry
        if entry is not None:
            entry.close()
    fence_lanes(options, context, skip_lane=lane)
    _pool.discard_idle(tid)
    return tid, None


def record_fence(options: KafkaOptions, identity: str, fence: Fence, nonce: str) -> None:
    """Write ``fence`` to partition 0 of the control topic and wait until it is acknowledged.

    A plain producer (no transaction, no idempotence: a duplicate record
    means the same), so ``read_committed`` readers see the record as soon as
    it is written. Raises the mapped error
    (retriable when the brokers are unreachable).
    """
    batch = fence.batch if fence.batch >= 0 else None
    ectx = KafkaErrorContext(
        options.sink,
        batch_id=batch,
        action="recording a fence in the control topic",
        topic=options.control_topic,
        brokers=options.brokers,
    )
    # One record, sent at once; an idempotent producer would first wait for a producer id
    # (librdkafka's 500 ms timer: 0.5 s against 0.01 s measured), and a duplicate is harmless.
    config = dict(options.client_config)
    config.update({"enable.idempotence": False, "acks": "all", "linger.ms": 0})
    errors: list[KafkaException] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(KafkaException(err))

    producer = Producer(config)
    try:
        producer.produce(
            options.control_topic,
            encode_fence(fence),
            fence_key(identity, nonce),
            partition=CONTROL_PARTITION,
            on_delivery=delivered,
        )
        left = producer.flush(options.operation_timeout)
    except KafkaException as exc:
        errors.append(exc)
        left = 0
    finally:
        _pool.close_now(producer)  # not left to the garbage collector: it would flush forever
    if errors or left:
        err = kafka_error_of(errors[0]) if errors else None
        if err is None:
            raise RetriableError(
                f"the fence record was not acknowledged within {options.operation_timeout:.0f} s",
                sink=options.sink,
                batch_id=batch,
            )
        raise map_kafka_error(err, ectx) from errors[0]
