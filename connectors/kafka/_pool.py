"""The per-process pool of transactional producers, one per partition slot.

Spark reuses Python worker processes across tasks, so a module-level pool lets
a worker keep one initialised transactional producer per ``transactional.id``
(sink identity and partition slot) across micro-batches: ``init_transactions``
(a coordinator round trip, and the fencing of older instances) runs once per
producer instead of once per batch.

A slot's producer may be idle in several workers (slot 3 ran in worker A for
batch 7 and in worker B for batch 8). Only the most recently initialised one is
live; the others are fenced and find out at their first produce. The sink
therefore probes a reused producer with the first record of the transaction
and, when it turns out fenced, replaces it (``KafkaTransaction.write`` in
:mod:`._transaction`).

A producer also remembers the keys of the markers it committed, so that its
next transactions tombstone those of finished batches: that memory lives and
goes with the producer (and passes to the producer that replaces it).

The pool is guarded by one lock: a process may run several participants in
threads (``twophase.testing.LocalRunner`` does, and so may a user's test). A
producer taken from the pool belongs to one transaction until it is given back.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Producer

from twophase import Marker, TaskContext

__all__ = [
    "MAX_IDLE_PRODUCERS",
    "PooledProducer",
    "clear",
    "close_now",
    "discard_idle",
    "give_back",
    "idle_count",
    "take",
]

#: librdkafka's words for brokers that do not answer.
_NETWORK_ERRORS = frozenset(
    {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT}
)

#: Seconds a producer being dropped gets to close before it is left to close in the background.
_CLOSE_WAIT = 1.0

#: Idle producers kept per process; the least recently used beyond it are closed.
MAX_IDLE_PRODUCERS = 32

#: Delivery errors kept per transaction (the rest are only counted).
_MAX_ERRORS = 100

#: Marker keys a producer remembers per control topic, for garbage collection.
_MAX_REMEMBERED = 256

_lock = threading.Lock()
_generation = itertools.count(1)
_idle: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], PooledProducer] = OrderedDict()


class PooledProducer:
    """A transactional producer, the delivery errors of its transaction, its markers.

    Lives in one executor process and never leaves it.

    Parameters
    ----------
    transactional_id
        The producer's ``transactional.id``.
    conf
        The producer configuration (without ``transactional.id``).
    conf_key
        Hashable form of ``conf`` (:func:`._config.config_key`).
    """

    def __init__(
        self,
        transactional_id: str,
        conf: Mapping[str, Any],
        conf_key: tuple[tuple[str, str], ...],
    ) -> None:
        self.transactional_id = transactional_id
        self.key = (transactional_id, conf_key)
        #: Initialisation order in this process: the higher, the newer.
        self.generation = next(_generation)
        #: Set when the producer hit a fatal error or was fenced: never reuse it.
        self.broken = False
        #: Set once ``init_transactions`` succeeded.
        self.initialised = False
        #: Set once a transaction of this instance committed: the participant read the
        #: markers after ``init_transactions`` (which fenced every other instance) and
        #: before that commit, so while nothing fences this instance no other attempt can
        #: have committed a batch since (``KafkaSink.needs_marker_check``).
        self.checked = False
        #: Delivery errors of the current transaction: (error, message).
        self.errors: list[tuple[KafkaError, Any]] = []
        self.error_count = 0
        #: Committed markers per control topic, as (batch, key), oldest first.
        self.markers: dict[str, list[tuple[int, bytes]]] = {}
        #: The task that initialised it (None: recovery); a real-time retry reuses its own.
        self.owner: TaskContext | None = None
        # The callback holds this object weakly: a bound method would make a reference cycle
        # (self -> producer -> callback -> self), and a closed producer would then live until
        # the cyclic garbage collector ran, each holding one of the process's 1024 thread-local
        # storage keys (fencing 1,000 slots failed with "Failed to initialize thread local
        # storage").
        me = weakref.ref(self)

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            entry = me()
            if entry is not None:
                entry._on_delivery(err, msg)

        users_error_cb = conf.get("error_cb")

        def on_error(err: KafkaError) -> None:
            entry = me()
            if entry is not None and err.code() in _NETWORK_ERRORS:
                entry.unreachable = True
            if users_error_cb is not None:
                users_error_cb(err)

        #: The brokers were unreachable since it was created (a partition, brokers down): its
        #: connections may be stuck in TCP's backoff, so the pool does not lend it again.
        self.unreachable = False
        self.producer = Producer(
            {
                **conf,
                "transactional.id": transactional_id,
                # Only failed deliveries call back into Python: no per-record cost.
                "delivery.report.only.error": True,
                "on_delivery": on_delivery,
                "error_cb": on_error,
            }
        )

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        # As little as possible here: confluent-kafka may call back while a
        # fatal error's exception is pending, and then any call fails.
        if err is not None:
            self.error_count += 1
            if len(self.errors) < _MAX_ERRORS:
                self.errors.append((err, msg))

    def reset_errors(self) -> None:
        """Forget the delivery errors of the previous transaction."""
        self.errors = []
        self.error_count = 0

    def stale_markers(
        self, control_topic: str, marker: Marker, limit: int, context: TaskContext
    ) -> list[bytes]:
        """Return keys of markers this producer committed that ``marker`` makes garbage.

        Those of batches before the marker's: they are finished (a sink's batches
        run one after another). In real-time mode also those of the marker's own
        partition and epoch: the shorter prefixes it extends. The next transaction
        of the slot writes tombstones for them and compaction removes them.

        Parameters
        ----------
        control_topic
            The control topic.
        marker
            The marker being written.
        limit
            At most this many keys.
        context
            The task writing it.

        Returns
        -------
        list of bytes
            Marker keys.
        """
        remembered = self.markers.get(control_topic, [])
        prefix = f"{marker.identity}/{marker.batch_id}/{marker.partition_id}/".encode()
        return [
            key
            for batch, key in remembered
            if batch < marker.batch_id
            or (context.realtime and batch == marker.batch_id and key.startswith(prefix))
        ][:limit]

    def remember_marker(
        self, control_topic: str, batch_id: int, key: bytes, tombstoned: list[bytes]
    ) -> None:
        """Record a committed marker, and forget the keys its transaction tombstoned.

        Parameters
        ----------
        control_topic
            The control topic.
        batch_id
            The marker's batch.
        key
            The marker's key.
        tombstoned
            Keys the same transaction deleted.
        """
        gone = set(tombstoned)
        slot = self.markers.setdefault(control_topic, [])
        slot[:] = [(b, k) for b, k in slot if k not in gone]
        slot.append((batch_id, key))
        del slot[:-_MAX_REMEMBERED]

    def committed_batch(self, control_topic: str, identity: str, batch_id: int) -> bool:
        """Whether this producer committed a marker of ``batch_id`` of ``identity``.

        Parameters
        ----------
        control_topic
            The control topic.
        identity
            The sink identity.
        batch_id
            The batch.

        Returns
        -------
        bool
            True when one of its remembered markers is of that batch.
        """
        prefix = f"{identity}/{batch_id}/".encode()
        return any(
            b == batch_id and k.startswith(prefix) for b, k in self.markers.get(control_topic, [])
        )

    def adopt_markers(self, previous: PooledProducer) -> None:
        """Take over the marker memory of the instance of the slot this one replaces.

        Parameters
        ----------
        previous
            The replaced producer.
        """
        for topic, keys in previous.markers.items():
            mine = self.markers.setdefault(topic, [])
            mine[:0] = keys
            del mine[:-_MAX_REMEMBERED]

    def close(self) -> None:
        """Close the producer quietly, at once (its open transaction is abandoned)."""
        self.broken = True
        close_now(self.producer)

    def __repr__(self) -> str:
        state = "broken" if self.broken else "ok"
        return f"PooledProducer({self.transactional_id!r}, gen={self.generation}, {state})"


def close_now(producer: Producer, wait: float = _CLOSE_WAIT) -> None:
    """Close a producer quietly, waiting ``wait`` seconds at most.

    ``Producer.close()`` aborts the open transaction or flushes, with no
    timeout: with brokers unreachable -- a network partition -- it would wait
    as long as the partition lasts. So the undelivered records are purged (a
    closed producer's records are never committed) and the close runs in a
    daemon thread that ends when the brokers answer again, or with the
    process. The open transaction is left to the slot's next
    ``init_transactions``, which aborts it, or to the broker's
    ``transaction.timeout.ms``.

    Parameters
    ----------
    producer
        The producer.
    wait
        Seconds to wait for the close.
    """
    with contextlib.suppress(Exception):  # best effort: the producer is being dropped
        producer.purge(in_queue=True, in_flight=True, blocking=False)
    closing = threading.Thread(
        target=_close_quietly, args=(producer,), name="twophase-producer-close", daemon=True
    )
    closing.start()
    closing.join(wait)


def _close_quietly(producer: Producer) -> None:
    with warnings.catch_warnings():
        # close() warns when it cannot abort or flush (fenced, fatal, purged): expected here.
        warnings.simplefilter("ignore", RuntimeWarning)
        with contextlib.suppress(Exception):
            producer.close()


def take(transactional_id: str, conf_key: tuple[tuple[str, str], ...]) -> PooledProducer | None:
    """Check out the idle producer of a transactional id, if this process has one.

    Parameters
    ----------
    transactional_id
        The slot's ``transactional.id``.
    conf_key
        The configuration key; a producer built with another configuration is
        not reused.

    Returns
    -------
    PooledProducer or None
        The producer, now owned by the caller until :func:`give_back`.
    """
    with _lock:
        entry = _idle.pop((transactional_id, conf_key), None)
    if entry is not None and entry.unreachable:
        entry.close()  # a new producer connects at once; this one may wait out TCP's backoff
        return None
    return entry


def give_back(entry: PooledProducer) -> None:
    """Return a producer to the pool after its transaction committed or aborted.

    A broken producer is closed instead. When the pool already holds a producer
    for the same id, the newer one (the live one) is kept.

    Parameters
    ----------
    entry
        The producer.
    """
    to_close: list[PooledProducer] = []
    if entry.broken or not entry.initialised:
        to_close.append(entry)
    else:
        with _lock:
            other = _idle.pop(entry.key, None)
            if other is not None and other.generation > entry.generation:
                entry, other = other, entry
            if other is not None:
                to_close.append(other)
            _idle[entry.key] = entry
            while len(_idle) > MAX_IDLE_PRODUCERS:
                to_close.append(_idle.popitem(last=False)[1])
    for stale in to_close:
        stale.close()


def discard_idle(transactional_id: str) -> int:
    """Close the idle producers of a transactional id (after it was fenced).

    Parameters
    ----------
    transactional_id
        The ``transactional.id``.

    Returns
    -------
    int
        How many were closed.
    """
    with _lock:
        keys = [k for k in _idle if k[0] == transactional_id]
        entries = [_idle.pop(k) for k in keys]
    for entry in entries:
        entry.close()
    return len(entries)


def idle_count() -> int:
    """Return the number of idle producers in this process.

    Returns
    -------
    int
        Pool size.
    """
    with _lock:
        return len(_idle)


def clear() -> None:
    """Close every idle producer (tests, exit)."""
    with _lock:
        entries = list(_idle.values())
        _idle.clear()
    for entry in entries:
        entry.close()


atexit.register(clear)
