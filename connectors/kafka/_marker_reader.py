"""Reading one batch's markers back from the control topic, fast: backwards from the end.

The markers' format is :mod:`._marker_records`; the fence records the reader passes on
the way are :mod:`._attempt_fence`'s.

Why reading stays fast
----------------------
Batches of one sink run one after another: every transaction of batch ``M``
commits before batch ``M + 1`` begins, so in partition 0 every marker of an
earlier batch sits at a lower offset than every record of batch ``N``.
:class:`MarkerReader` therefore reads backwards from the end, in windows that
grow fourfold, and stops at the first window holding a marker of this
identity from a batch before ``N``. A replay typically reads one window of
a few thousand small records whatever the topic's size.

Before reading, the reader waits until the last stable offset reaches the
high-water mark seen at the start, so that a marker committed after an open
transaction (a sibling task's) is not missed: ``read_committed`` readers
stop at the first open transaction.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from twophase import Marker
from twophase.errors import RetriableError

from ._attempt_fence import Fence, decode_fence, is_fence_key
from ._compat import earliest_offset, latest_offset
from ._config import SecretConfig
from ._errors import KafkaErrorContext, kafka_error_of, map_kafka_error
from ._marker_records import CONTROL_PARTITION, decode_marker, identity_prefix

__all__ = ["MarkerReader", "close_idle_clients"]

_log = logging.getLogger("twophase.connectors.kafka")

_FIRST_WINDOW = 4096
_READER_GROUP = "twophase-marker-reader"
#: Seconds an offsets request may take beyond ``operation_timeout`` (its own request timeout)
#: before the reader stops waiting for it.
_OFFSETS_GRACE = 5.0


@dataclass
class _Window:
    markers: list[Marker]
    older_seen: bool
    keys: set[bytes] = field(default_factory=set)
    fences: list[Fence] = field(default_factory=list)


#: Idle (admin client, consumer) pairs per client configuration, kept by the process between
#: reads: a Python worker reads the markers before a retry and before the commit of a new
#: producer, and opening both clients (connections, metadata) took about 100 ms of each read.
_MAX_IDLE_CLIENTS = 4
#: Seconds a pooled reader gets to answer before it is replaced by a new one.
_HEALTH_TIMEOUT = 1.0
#: Client configurations (clusters, credentials) a process keeps clients for, most recent last.
_MAX_CONFIGS = 4
_idle_lock = threading.Lock()
_idle: OrderedDict[tuple[tuple[str, str], ...], list[tuple[AdminClient, Consumer]]] = OrderedDict()


@contextlib.contextmanager
def _clients(
    conf: Mapping[str, Any], probe: TopicPartition
) -> Iterator[tuple[AdminClient, Consumer]]:
    """Lend an admin client and a ``read_committed`` consumer for one read, then keep them.

    A kept pair is lent only if it answers for ``probe`` (the partition the read is about) at
    once; otherwise it is replaced by a new one. A read that fails closes its consumer instead of
    keeping it.
    """
    key = tuple(sorted((str(k), str(v)) for k, v in conf.items()))
    with _idle_lock:
        pool = _idle.setdefault(key, [])
        pair = pool.pop() if pool else None
    if pair is not None and not _answers(pair, probe):
        # Its connections may be stuck in TCP's backoff since a partition, or its metadata may
        # still name a leader of ``probe`` that died: new clients learn the cluster anew.
        pair[1].close()
        pair = None
    if pair is None:
        consumer = Consumer(
            {
                **conf,
                "group.id": _READER_GROUP,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 5,
            }
        )
        pair = (AdminClient(dict(conf)), consumer)
    try:
        yield pair
    except BaseException:
        pair[1].close()
        raise
    pair[1].unassign()
    unused = [pair]
    with _idle_lock:
        pool = _idle.setdefault(key, [])
        _idle.move_to_end(key)
        if len(pool) < _MAX_IDLE_CLIENTS:
            pool.append(pair)
            unused.clear()
        while len(_idle) > _MAX_CONFIGS:
            unused.extend(_idle.popitem(last=False)[1])
    for _admin, consumer in unused:
        consumer.close()


def _answers(pair: tuple[AdminClient, Consumer], probe: TopicPartition) -> bool:
    """Whether a kept pair reaches the brokers at once, and the leader of ``probe``.

    The consumer makes one metadata round trip; the admin client asks the leader of ``probe`` for
    its end offset. An admin client whose metadata names a leader since killed keeps such a
    request queued for that broker until it is back (seen on a 3-broker cluster): within
    ``_HEALTH_TIMEOUT`` or not at all.
    """
    admin, consumer = pair
    try:
        consumer.list_topics(timeout=_HEALTH_TIMEOUT)
        futures = admin.list_offsets(
            {probe: latest_offset()},
            isolation_level=IsolationLevel.READ_UNCOMMITTED,
            request_timeout=_HEALTH_TIMEOUT,
        )
        offset = next(iter(futures.values())).result(timeout=_HEALTH_TIMEOUT)
    except (KafkaException, concurrent.futures.TimeoutError):
        return False
    return int(offset.offset) >= 0


def close_idle_clients() -> None:
    """Close the clients kept between reads (tests, exit)."""
    with _idle_lock:
        pairs = [pair for pool in _idle.values() for pair in pool]
        _idle.clear()
    for _admin, consumer in pairs:
        consumer.close()


atexit.register(close_idle_clients)


class MarkerReader:
    """Reads the committed markers of one batch from the control topic.

    Runs on the driver (replays) or an executor (task retries, and the
    check before a new producer's commit). The process keeps the admin
    client and consumer of a read for the next one.

    Parameters
    ----------
    client_conf
        Connection and security settings (see :func:`._config.client_config`).
    control_topic
        The control topic.
    sink
        The sink name (named in errors).
    stable_timeout
        Seconds to wait for open transactions on the control partition to
        finish (they end within ``transaction.timeout.ms``).
    operation_timeout
        Seconds for each broker request and for the whole scan.
    """

    def __init__(
        self,
        client_conf: Mapping[str, Any],
        control_topic: str,
        *,
        sink: str,
        stable_timeout: float,
        operation_timeout: float,
    ) -> None:
        self.client_conf = SecretConfig(client_conf)
        self.control_topic = control_topic
        self.sink = sink
        self.stable_timeout = stable_timeout
        self.operation_timeout = operation_timeout
        #: Records read by the last :meth:`read` (for tests and metrics).
        self.records_read = 0
        #: The identity's fence records the last :meth:`read` passed (:mod:`._attempt_fence`):
        #: every one written since the batch's previous batch committed, at least.
        self.fences: list[Fence] = []

    def _ctx(self, action: str, batch_id: int) -> KafkaErrorContext:
        brokers = self.client_conf.get("bootstrap.servers")
        return KafkaErrorContext(
            self.sink,
            batch_id=batch_id,
            action=action,
            topic=self.control_topic,
            brokers=str(brokers) if brokers else None,
        )

    def _offsets(self, admin: AdminClient, spec: Any, level: Any, batch_id: int) -> int:
        tp = TopicPartition(self.control_topic, CONTROL_PARTITION)
        try:
            futures = admin.list_offsets(
                {tp: spec}, isolation_level=level, request_timeout=self.operation_timeout
            )
            # Bounded here: librdkafka can keep an offsets request queued for a partition leader
            # that was killed, past request_timeout, until that broker is back (seen on a
            # 3-broker cluster: the reader waited for ever while the leader had moved).
            result = next(iter(futures.values())).result(
                timeout=self.operation_timeout + _OFFSETS_GRACE
            )
        except concurrent.futures.TimeoutError as exc:
            brokers = self.client_conf.get("bootstrap.servers")
            raise RetriableError(
                f"reading the control topic {self.control_topic!r}: no answer to an offsets "
                f"request within {self.operation_timeout + _OFFSETS_GRACE:.0f} s (the leader of "
                f"its partition {CONTROL_PARTITION} down or moving; brokers at {brokers})",
                sink=self.sink,
                batch_id=batch_id,
            ) from exc
        except Exception as exc:
            err = kafka_error_of(exc)
            if err is None:
                raise
            raise map_kafka_error(err, self._ctx("reading the control topic", batch_id)) from exc
        offset = int(result.offset)
        if offset < 0:
            # An admin client whose metadata named a leader since killed answered -1001 (no
            # offset) after its request timeout, without an error: never read that as "empty".
            raise RetriableError(
                f"reading the control topic {self.control_topic!r}: the offsets request of its "
                f"partition {CONTROL_PARTITION} returned no offset ({offset}; its leader down or "
                f"moving; brokers at {self.client_conf.get('bootstrap.servers')})",
                sink=self.sink,
                batch_id=batch_id,
            )
        return offset

    def read(self, identity: str, batch_id: int) -> list[Marker]:
        """Return the committed markers of one batch of one identity.

        Parameters
        ----------
        identity
            The sink identity token.
        batch_id
            The micro-batch id.

        Returns
        -------
        list of Marker
            Sorted by partition and attempt.

        Raises
        ------
        RetriableError
            If an open transaction keeps the control partition unstable for
            longer than ``stable_timeout``, or the scan does not finish in
            time.
        CoordinatorLogError
            If a record of this identity is not a valid marker.
        """
        self.records_read = 0
        self.fences = []
        probe = TopicPartition(self.control_topic, CONTROL_PARTITION)
        with _clients(self.client_conf, probe) as (admin, consumer):
            low = self._offsets(admin, earliest_offset(), IsolationLevel.READ_UNCOMMITTED, batch_id)
            high = self._offsets(admin, latest_offset(), IsolationLevel.READ_UNCOMMITTED, batch_id)
            if high <= low:
                return []
            self._wait_stable(admin, high, batch_id)
            prefix = identity_prefix(identity)
            found: list[Marker] = []
            deadline = time.monotonic() + self.operation_timeout
            end = high
            window = _FIRST_WINDOW
            while True:
                start = max(low, end - window)
                part = self._read_window(consumer, prefix, batch_id, start, end, deadline)
                found.extend(m for m in part.markers if m.batch_id == batch_id)
                self.fences.extend(part.fences)
                if part.older_seen or start <= low:
                    break
                end = start
                window *= 4
        found.sort(key=lambda m: (m.partition_id, m.attempt))
        _log.debug(
            "sink %s: %d marker(s) of batch %d in %s (%d records read)",
            self.sink,
            len(found),
            batch_id,
            self.control_topic,
            self.records_read,
        )
        return found

    def _wait_stable(self, admin: AdminClient, high: int, batch_id: int) -> None:
        deadline = time.monotonic() + self.stable_timeout
        pause = 0.05
        while True:
            stable = self._offsets(admin, latest_offset(), IsolationLevel.READ_COMMITTED, batch_id)
            if stable >= high:
                return
            if time.monotonic() > deadline:
                raise RetriableError(
                    f"an open transaction has held the control topic {self.control_topic!r} "
                    f"unstable for {self.stable_timeout:.0f} s (last stable offset {stable}, "
                    f"high-water mark {high}); it ends when the broker aborts it after "
                    "transaction.timeout.ms. Retry, or check for a stuck producer",
                    sink=self.sink,
                    batch_id=batch_id,
                )
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _read_window(
        self,
        consumer: Consumer,
        prefix: bytes,
        batch_id: int,
        start: int,
        end: int,
        deadline: float,
    ) -> _Window:
        consumer.assign([TopicPartition(self.control_topic, CONTROL_PARTITION, start)])
        out = _Window([], False)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RetriableError(
                    f"reading the markers of batch {batch_id} from {self.control_topic!r} did "
                    f"not finish within {self.operation_timeout:.0f} s",
                    sink=self.sink,
                    batch_id=batch_id,
                )
            for msg in consumer.consume(num_messages=1000, timeout=min(remaining, 0.005)):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                        # The consumer needs a group.id but never uses the group (it
                        # assigns the partition and commits nothing); librdkafka still
                        # looks the group's coordinator up, which a principal without a
                        # group ACL may not do. The fetches do not need it.
                        continue
                    raise map_kafka_error(err, self._ctx("reading the control topic", batch_id))
                offset = msg.offset()
                if offset is None or offset >= end:
                    return out
                self.records_read += 1
                key = msg.key()
                value = msg.value()
                if not isinstance(key, bytes) or not isinstance(value, bytes):
                    continue  # a tombstone, or not ours
                if not key.startswith(prefix):
                    continue  # a tombstone, or another identity's marker
                if key in out.keys:
                    continue  # the same commit's marker twice (never written so, but cheap)
                out.keys.add(key)
                where = f"{self.control_topic}[0]@{offset}"
                if is_fence_key(key, prefix):
                    out.fences.append(decode_fence(value, where=where))
                    continue
                marker = decode_marker(value, where=where)
                if marker.identity != prefix[:-1].decode():
                    continue  # an identity that merely starts like this one
                if marker.batch_id < batch_id:
                    out.older_seen = True
                else:
                    out.markers.append(marker)
