"""``KafkaSink``: exactly-once into Kafka with transactional producers (protocol B).

How a micro-batch is written
----------------------------
Every non-empty partition of the batch is one Kafka transaction, opened on the
executor by a transactional producer whose ``transactional.id`` is stable per
(sink identity, partition slot)::

    <transactional_id_prefix><identity>-<partition>

The participant produces the partition's rows, then the idempotence marker
(partition 0 of the compacted control topic, same transaction), flushes and
commits, all on the executor. A ``read_committed`` consumer sees the rows and
the marker together or not at all. On a replay the coordinator reads the
markers of the batch before writing anything and skips the partitions that
are committed (see :class:`twophase.MarkerCommitSink`).

Zombies and crashes
-------------------
The stable ``transactional.id`` fences zombies: ``init_transactions`` of a new
producer for a slot bumps the producer epoch, aborts the previous instance's
open transaction and makes any later write or commit of that instance fail.
At recovery (a driver restart with an unfinished batch) the coordinator calls
:meth:`KafkaSink.recover_and_abort` for every slot the sink ever used, so that
no transaction left by a crash stays open (holding back ``read_committed``
consumers) and no zombie from the previous run can commit after the replay
check. Transactions live only as long as one task, so the short default
``transaction.timeout.ms`` (60 s) never loses data.

Where a coordinated (KIP-939) implementation would plug in
---------------------------------------------------------
librdkafka cannot yet prepare a transaction in one process and complete it
in another (KIP-939: ``initTransactions(keepPreparedTxn=true)``,
``prepareTransaction()``, ``completeTransaction()``). When it can, a
``KafkaCoordinatedSink(TwoPhaseCommitSink)`` reuses this module's writer half
unchanged -- the producer pool (:mod:`._pool`), the Arrow produce loop
(:mod:`._records`), the error mapping (:mod:`._errors`) -- and changes three
hooks: ``pre_commit`` calls ``prepare_transaction()`` and puts the prepared
state (producer id and epoch) into :class:`KafkaTransactionHandle`;
``commit``/``recover_and_commit`` run on the driver and complete the prepared
transaction from a producer initialised with ``keep_prepared_txn``;
``list_in_doubt`` lists prepared transactions by prefix. Markers and
:meth:`read_markers` are then unnecessary.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from twophase import (
    Marker,
    MarkerCommitSink,
    RecoveryContext,
    RetryPolicy,
    SinkContext,
    TaskContext,
    TransactionHandle,
)
from twophase.errors import (
    AbortRequiredError,
    ConfigurationError,
    FatalError,
    RetriableError,
    TwoPhaseError,
)

from . import _pool
from ._admin import broker_max_transaction_timeout, check_topic_exists, ensure_control_topic
from ._config import (
    client_config,
    config_key,
    normalise_producer_config,
    translate_spark_options,
    validate_topic_name,
)
from ._errors import ErrorContext, is_fenced, kafka_error_of, map_kafka_error, retry_locally
from ._markers import (
    CONTROL_PARTITION,
    MarkerReader,
    encode_marker,
    marker_key,
    new_nonce,
)
from ._records import RecordPlan, plan_records, produce_one, produce_rows

__all__ = ["KafkaSink", "KafkaTransaction", "KafkaTransactionHandle"]

_log = logging.getLogger("twophase.connectors.kafka")

#: Tombstones a transaction writes at most for markers of finished batches.
_GC_PER_TRANSACTION = 64


@dataclass(frozen=True)
class KafkaTransactionHandle(TransactionHandle):
    """Names one partition's Kafka transaction. Small and picklable.

    Attributes
    ----------
    transaction_id
        ``"<identity>:<batch>:<partition>:<attempt>"``, unique per attempt
        (for in-doubt handles from :meth:`KafkaSink.list_in_doubt`: the
        transactional id).
    batch_id, partition_id, attempt
        As in :class:`twophase.TransactionHandle` (``attempt`` is -1 for
        in-doubt handles: the slot is fenced whatever attempt used it last).
    transactional_id
        The producer's ``transactional.id`` (per sink identity and slot).
    records
        Records the transaction produced, the marker excluded.
    """

    transactional_id: str = ""
    records: int = 0


class KafkaTransaction:
    """One partition's open Kafka transaction. Lives on one executor, never pickled.

    Parameters
    ----------
    context
        The task.
    producer
        The pooled producer running the transaction.
    probe
        True when the producer was reused from the pool: the first record
        written checks that no newer instance fenced it.
    """

    def __init__(self, context: TaskContext, producer: _pool.PooledProducer, probe: bool) -> None:
        self.context = context
        self.producer = producer
        self.probe = probe
        self.started = time.monotonic()
        self.records = 0
        #: "open" -> "prepared" -> "committed", or "aborted" from any.
        self.state = "open"
        self.marker: Marker | None = None
        self.marker_key: bytes | None = None
        self.tombstoned: list[bytes] = []
        self._plan: tuple[pa.Schema, RecordPlan] | None = None

    @property
    def transactional_id(self) -> str:
        """Return the producer's ``transactional.id``."""
        return self.producer.transactional_id

    def elapsed(self) -> float:
        """Return seconds since the transaction began."""
        return time.monotonic() - self.started

    def __repr__(self) -> str:
        return (
            f"KafkaTransaction({self.context.transaction_id!r}, {self.state}, "
            f"records={self.records})"
        )


class KafkaSink(MarkerCommitSink[KafkaTransaction, KafkaTransactionHandle]):
    r"""Exactly-once sink into Apache Kafka, with transactional producers and markers.

    Takes the columns of Spark's own Kafka sink -- ``value`` (required),
    ``key``, ``topic``, ``partition``, ``headers``; string or binary -- and
    writes every partition of a micro-batch in one Kafka transaction together
    with an idempotence marker in a compacted control topic. Consumers reading
    with ``isolation.level=read_committed`` see every record exactly once,
    across task retries, driver crashes and restarts. See ``docs/kafka.md``.

    The sink is pickled to the executors: it holds settings only; producers
    live in a per-process pool on the executors.

    Parameters
    ----------
    name
        Name of the sink: 1-64 characters from ``[A-Za-z0-9_.-]``. Part of the
        sink identity, hence of transactional ids and markers.
    bootstrap_servers
        ``host:port[,host:port...]``; a shortcut for
        ``producer_config["bootstrap.servers"]``.
    producer_config
        librdkafka producer properties, passed through (security, compression,
        ``linger.ms``...). ``enable.idempotence`` and ``acks=all`` are enforced;
        ``transactional.id`` is set by the sink.
    topic
        Default topic. Like Spark's ``topic`` option it overrides a ``topic``
        column. Required unless the batch has a ``topic`` column.
    control_topic
        Compacted topic holding the markers; ``"<name>-twophase-markers"`` by
        default. Give every sink its own.
    create_control_topic
        Create the control topic (compacted) in :meth:`open` when missing.
    control_topic_partitions, control_topic_replication_factor
        Partitions and replication of a created control topic (markers use
        partition 0 only; -1 takes the broker's default replication factor).
    transactional_id_prefix
        Prefix of every ``transactional.id``; grant the principal WRITE and
        DESCRIBE on it as a PREFIXED TransactionalId ACL.
    transaction_timeout_ms
        ``transaction.timeout.ms`` (default 60000): the broker aborts a
        transaction that stays open longer, so a crashed task holds back
        ``read_committed`` consumers at most this long. A partition must be
        written and committed within it. Checked against the brokers'
        ``transaction.max.timeout.ms`` in :meth:`open`.
    operation_timeout
        Seconds for one ``init_transactions``, ``flush``, ``commit_transaction``
        or ``abort_transaction`` call, and for admin requests.
    local_retries
        Calls in all of a transaction operation that fails retriably before
        :class:`~twophase.errors.RetriableError` is raised.
    staging
        Publish every batch from a copy staged in the checkpoint, so that
        replays are deterministic even when the pipeline is not.
    checkpoint_location, retry, history
        As for :class:`twophase.MarkerCommitSink`.

    Raises
    ------
    ConfigurationError
        For a setting that would break exactly-once or that librdkafka does not
        know, naming it.

    Examples
    --------
    Before, with Spark's own (at-least-once) Kafka sink::

        df.writeStream.format("kafka") \
            .option("kafka.bootstrap.servers", "broker:9092") \
            .option("topic", "events") \
            .option("checkpointLocation", "/chk/events").start()

    After, exactly-once (``foreachBatch`` replaces ``format("kafka")``)::

        from twophase.connectors.kafka import KafkaSink
        sink = KafkaSink("events", bootstrap_servers="broker:9092", topic="events")
        df.writeStream.foreachBatch(sink) \
            .option("checkpointLocation", "/chk/events").start()

    or keep the option map as it was::

        sink = KafkaSink.from_spark_options(
            "events", {"kafka.bootstrap.servers": "broker:9092", "topic": "events"}
        )
    """

    def __init__(
        self,
        name: str,
        *,
        bootstrap_servers: str | None = None,
        producer_config: Mapping[str, Any] | None = None,
        topic: str | None = None,
        control_topic: str | None = None,
        create_control_topic: bool = True,
        control_topic_partitions: int = 1,
        control_topic_replication_factor: int = -1,
        transactional_id_prefix: str = "twophase-",
        transaction_timeout_ms: int | None = None,
        operation_timeout: float = 30.0,
        local_retries: int = 3,
        staging: bool = False,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
        history: int = 100,
    ) -> None:
        super().__init__(
            name,
            staging=staging,
            checkpoint_location=checkpoint_location,
            retry=retry,
            history=history,
        )
        self.producer_config = normalise_producer_config(
            name,
            bootstrap_servers=bootstrap_servers,
            producer_config=producer_config,
            transaction_timeout_ms=transaction_timeout_ms,
        )
        self.topic = None if topic is None else validate_topic_name(topic, "topic", sink=name)
        self.control_topic = validate_topic_name(
            control_topic if control_topic is not None else f"{name}-twophase-markers",
            "control_topic",
            sink=name,
        )
        if self.topic is not None and self.topic == self.control_topic:
            raise ConfigurationError(
                "topic and control_topic must differ: consumers of the topic would read markers",
                sink=name,
                setting="control_topic",
            )
        if not isinstance(transactional_id_prefix, str) or any(
            c.isspace() for c in transactional_id_prefix
        ):
            raise ConfigurationError(
                f"transactional_id_prefix must be a string without whitespace, got "
                f"{transactional_id_prefix!r}",
                sink=name,
                setting="transactional_id_prefix",
            )
        if control_topic_partitions < 1:
            raise ConfigurationError(
                "control_topic_partitions must be >= 1",
                sink=name,
                setting="control_topic_partitions",
            )
        if control_topic_replication_factor == 0 or control_topic_replication_factor < -1:
            raise ConfigurationError(
                "control_topic_replication_factor must be >= 1, or -1 for the broker default",
                sink=name,
                setting="control_topic_replication_factor",
            )
        if not operation_timeout > 0:
            raise ConfigurationError(
                f"operation_timeout must be > 0 seconds, got {operation_timeout!r}",
                sink=name,
                setting="operation_timeout",
            )
        if local_retries < 1:
            raise ConfigurationError(
                f"local_retries must be >= 1, got {local_retries!r}",
                sink=name,
                setting="local_retries",
            )
        self.create_control_topic = create_control_topic
        self.control_topic_partitions = control_topic_partitions
        self.control_topic_replication_factor = control_topic_replication_factor
        self.transactional_id_prefix = transactional_id_prefix
        self.operation_timeout = float(operation_timeout)
        self.local_retries = local_retries
        self._conf_key = config_key(self.producer_config)
        self._client_config = client_config(self.producer_config)

    @classmethod
    def from_spark_options(cls, name: str, options: Mapping[str, Any], **kwargs: Any) -> KafkaSink:
        """Build the sink from the options of Spark's ``format("kafka")`` sink.

        ``kafka.*`` options become producer properties (Java-only properties
        are refused with what to use instead; a PLAIN or SCRAM
        ``kafka.sasl.jaas.config`` becomes ``sasl.username``/``sasl.password``)
        and ``topic`` becomes the default topic.

        Parameters
        ----------
        name
            The sink name.
        options
            The Kafka sink options, e.g. ``{"kafka.bootstrap.servers": "b:9092",
            "topic": "events"}``.
        **kwargs
            Other :class:`KafkaSink` arguments.

        Returns
        -------
        KafkaSink
            The sink.

        Examples
        --------
        >>> sink = KafkaSink.from_spark_options(
        ...     "events", {"kafka.bootstrap.servers": "localhost:9092", "topic": "events"}
        ... )
        >>> sink.topic, sink.producer_config["bootstrap.servers"]
        ('events', 'localhost:9092')
        """
        producer, topic = translate_spark_options(name, options)
        extra = dict(kwargs.pop("producer_config", None) or {})
        clash = sorted(set(extra) & set(producer))
        if clash:
            raise ConfigurationError(
                f"{clash} set both as kafka.* options and in producer_config; set them once",
                sink=name,
                setting=clash[0],
            )
        if topic is not None and kwargs.get("topic") is not None:
            raise ConfigurationError(
                "topic set both in the options and as an argument; set it once",
                sink=name,
                setting="topic",
            )
        if topic is not None:
            kwargs["topic"] = topic
        return cls(name, producer_config={**producer, **extra}, **kwargs)

    # ------------------------------------------------------------ helpers
    @property
    def transaction_timeout_ms(self) -> int:
        """Return the configured ``transaction.timeout.ms``."""
        return int(self.producer_config["transaction.timeout.ms"])

    def transactional_id(self, identity: str, slot: int) -> str:
        """Return the ``transactional.id`` of a partition slot.

        Parameters
        ----------
        identity
            The sink identity token.
        slot
            The Spark partition index.

        Returns
        -------
        str
            ``"<transactional_id_prefix><identity>-<slot>"``.
        """
        return f"{self.transactional_id_prefix}{identity}-{slot}"

    def _error_context(
        self,
        action: str,
        *,
        txn: KafkaTransaction | None = None,
        context: TaskContext | None = None,
        topic: str | None = None,
        transactional_id: str | None = None,
    ) -> ErrorContext:
        ctx = txn.context if txn is not None else context
        return ErrorContext(
            action,
            self.name,
            batch_id=None if ctx is None else ctx.batch_id,
            partition_id=None if ctx is None else ctx.partition_id,
            topic=topic,
            transactional_id=(txn.transactional_id if txn is not None else transactional_id),
            transaction_timeout_ms=self.transaction_timeout_ms,
            elapsed=None if txn is None else txn.elapsed(),
        )

    def _new_producer(
        self, transactional_id: str, context: TaskContext | None
    ) -> _pool.PooledProducer:
        """Create a producer and run ``init_transactions`` (fencing older instances)."""
        try:
            entry = _pool.PooledProducer(transactional_id, self.producer_config, self._conf_key)
        except KafkaException as exc:
            raise ConfigurationError(
                f"librdkafka refused the producer configuration: {exc.args[0].str()}",
                sink=self.name,
                setting="producer_config",
            ) from exc
        ectx = self._error_context(
            "init_transactions", context=context, transactional_id=transactional_id
        )
        try:
            retry_locally(
                lambda: entry.producer.init_transactions(self.operation_timeout),
                ectx,
                attempts=self.local_retries,
            )
        except BaseException:
            entry.close()
            raise
        entry.initialised = True
        return entry

    def _error_behind(self, txn: KafkaTransaction, exc: BaseException) -> KafkaError | None:
        """Find the Kafka error behind an exception of a producer call.

        confluent-kafka sometimes loses the ``KafkaException`` of a fatal
        error raised while delivery callbacks run (``flush`` then raises a
        bare ``SystemError``). The producer is then in its fatal state, in
        which any transactional call reports the fatal error again: ask
        ``abort_transaction``, which is what happens next anyway.
        """
        err = kafka_error_of(exc)
        if err is not None or not isinstance(exc, SystemError):
            return err
        try:
            txn.producer.producer.abort_transaction(1.0)
        except Exception as again:
            return kafka_error_of(again)
        txn.state = "aborted"
        return KafkaError(
            KafkaError._FATAL, f"the producer failed inside confluent-kafka: {exc}", fatal=True
        )

    def _fail(
        self, txn: KafkaTransaction, exc: BaseException, action: str, topic: str | None
    ) -> NoReturn:
        """Raise the twophase error for a Kafka failure inside a transaction."""
        if isinstance(exc, TwoPhaseError):
            raise exc
        err = self._error_behind(txn, exc)
        if err is None:
            raise exc
        if err.fatal() or is_fenced(err):
            txn.producer.broken = True
        raise map_kafka_error(err, self._error_context(action, txn=txn, topic=topic)) from exc

    def _raise_delivery_errors(self, txn: KafkaTransaction, action: str) -> None:
        entry = txn.producer
        if not entry.errors:
            return
        err, msg = entry.errors[0]
        topic = msg.topic() if msg is not None else None
        if err.fatal() or is_fenced(err):
            entry.broken = True
        mapped = map_kafka_error(err, self._error_context(action, txn=txn, topic=topic))
        if entry.error_count > 1:
            mapped.add_note(f"{entry.error_count} records of the transaction failed delivery")
        raise mapped from KafkaException(err)

    def _poll(self, txn: KafkaTransaction, action: str) -> None:
        try:
            txn.producer.producer.poll(0)
        except Exception as exc:
            self._fail(txn, exc, action, None)

    def _flush(self, txn: KafkaTransaction, action: str) -> None:
        """Wait until every produced record is delivered (or failed)."""
        remaining = 0
        for _ in range(self.local_retries):
            try:
                remaining = txn.producer.producer.flush(self.operation_timeout)
            except Exception as exc:
                self._fail(txn, exc, action, None)
            if remaining == 0:
                return
        raise RetriableError(
            f"{action}: {remaining} records still undelivered after "
            f"{self.local_retries * self.operation_timeout:.0f} s (brokers slow or unreachable)",
            sink=self.name,
            batch_id=txn.context.batch_id,
            partition_id=txn.context.partition_id,
        )

    def _probe(
        self, txn: KafkaTransaction, first: Callable[[Any], object], topic: str | None
    ) -> None:
        """Write the first record of a reused producer's transaction and wait for it.

        A producer reused from the pool may have been fenced since its last
        transaction by an instance in another worker (slots move between
        workers). The first record tells: a fenced producer cannot add the
        partition to its transaction. Then the producer is replaced (its
        ``init_transactions`` fences the other, idle, instance) and the record
        written again. Nothing else of the transaction exists yet, so nothing
        is lost.
        """
        txn.probe = False
        fenced: KafkaError | None = None
        try:
            first(txn.producer.producer)
            txn.producer.producer.flush(self.operation_timeout)
        except Exception as exc:
            err = self._error_behind(txn, exc)
            if err is None or not (err.fatal() or is_fenced(err)):
                self._fail(txn, exc, "write", topic)
            fenced = err
        if fenced is None:
            for err, _msg in txn.producer.errors:
                if is_fenced(err) or err.code() == KafkaError._PURGE_QUEUE:
                    fenced = err
                    break
        if fenced is None:
            self._raise_delivery_errors(txn, "write")
            return
        _log.info(
            "sink %s: pooled producer %s was fenced by a newer instance (the slot ran in "
            "another worker); replacing it (%s)",
            self.name,
            txn.transactional_id,
            fenced.str(),
        )
        txn.producer.close()
        txn.producer = self._new_producer(txn.transactional_id, txn.context)
        try:
            txn.producer.producer.begin_transaction()
            txn.state = "open"
            txn.started = time.monotonic()
            first(txn.producer.producer)
        except Exception as exc:
            self._fail(txn, exc, "write", topic)

    def _plan_for(self, txn: KafkaTransaction, schema: pa.Schema) -> RecordPlan:
        cached = txn._plan
        if cached is not None and (cached[0] is schema or cached[0].equals(schema)):
            return cached[1]
        plan = plan_records(
            schema, default_topic=self.topic, sink=self.name, batch_id=txn.context.batch_id
        )
        txn._plan = (schema, plan)
        return plan

    # ============================================ coordinator hooks (driver)
    def open(self, context: SinkContext) -> None:
        """Check the cluster and create the control topic.

        Runs on
            the driver.
        Called
            once per run of the query, at its first batch, before recovery.
        Idempotent
            yes: a control topic that exists (or appears concurrently) is
            only checked.
        On failure
            the batch fails before anything is written:
            :class:`~twophase.errors.ConfigurationError` when
            ``transaction.timeout.ms`` exceeds the brokers'
            ``transaction.max.timeout.ms``, librdkafka refuses the producer
            settings, the default topic does not exist, or the control topic is
            missing and cannot be created (or is not compacted).

        Parameters
        ----------
        context
            The query id, run id and sink identity.
        """
        _log.info(
            "sink %s: opening (identity %s, control topic %s, transaction.timeout.ms %d)",
            self.name,
            context.identity,
            self.control_topic,
            self.transaction_timeout_ms,
        )
        admin = AdminClient(self._client_config)
        limit = broker_max_transaction_timeout(
            admin, sink=self.name, timeout=self.operation_timeout
        )
        if limit is not None and self.transaction_timeout_ms > limit:
            raise ConfigurationError(
                f"transaction.timeout.ms={self.transaction_timeout_ms} exceeds the brokers' "
                f"transaction.max.timeout.ms={limit}; lower transaction_timeout_ms",
                sink=self.name,
                setting="transaction_timeout_ms",
            )
        # librdkafka checks the producer settings when a producer is built;
        # build one now so that a typo fails here, not inside a task.
        try:
            probe = _pool.PooledProducer(
                self.transactional_id(context.identity, -1), self.producer_config, self._conf_key
            )
        except KafkaException as exc:
            raise ConfigurationError(
                f"librdkafka refused the producer configuration: {exc.args[0].str()}",
                sink=self.name,
                setting="producer_config",
            ) from exc
        probe.close()
        ensure_control_topic(
            admin,
            self.control_topic,
            sink=self.name,
            create=self.create_control_topic,
            partitions=self.control_topic_partitions,
            replication_factor=self.control_topic_replication_factor,
            timeout=self.operation_timeout,
        )
        if self.topic is not None and not check_topic_exists(
            admin, self.topic, sink=self.name, timeout=self.operation_timeout
        ):
            raise ConfigurationError(
                f"topic {self.topic!r} does not exist; create it before starting the query",
                sink=self.name,
                setting="topic",
            )

    def check_schema(self, schema: pa.Schema, batch_id: int) -> None:
        """Check the batch's columns against those of Spark's Kafka sink.

        Runs on
            the driver.
        Called
            once per batch, before anything is written.
        Idempotent
            yes (reads the schema only).
        On failure
            :class:`~twophase.errors.ConfigurationError` naming the column
            (missing ``value``, a type other than string/binary, no topic);
            the batch fails with nothing written.

        Parameters
        ----------
        schema
            The Arrow schema the participants will receive.
        batch_id
            The micro-batch id.
        """
        plan_records(schema, default_topic=self.topic, sink=self.name, batch_id=batch_id)

    def list_in_doubt(self, context: RecoveryContext) -> list[KafkaTransactionHandle]:
        """List every partition slot this sink identity may have left a transaction in.

        Runs on
            the driver, at recovery, when the coordinator log shows an
            unfinished batch.
        Called
            once per run with an unfinished batch.
        Idempotent
            yes (computes names; talks to no broker). Kafka cannot list the
            open transactions of a ``transactional.id`` prefix cheaply and
            portably, so every slot ``0 .. context.partition_slots - 1`` is
            returned: fencing an idle slot is harmless.
        On failure
            cannot fail.

        Parameters
        ----------
        context
            The identity and the high-water mark of partition slots.

        Returns
        -------
        list of KafkaTransactionHandle
            One per slot, with ``attempt=-1``.
        """
        batch = max(context.unfinished_batches) if context.unfinished_batches else -1
        handles = []
        for slot in range(context.partition_slots):
            tid = self.transactional_id(context.identity, slot)
            handles.append(KafkaTransactionHandle(tid, batch, slot, -1, transactional_id=tid))
        return handles

    def recover_and_abort(self, handle: KafkaTransactionHandle) -> None:
        """Fence a partition slot: abort its open transaction and disable its zombies.

        Runs on
            the driver at recovery (or an executor, for its own slot).
        Called
            once per handle of :meth:`list_in_doubt`.
        Idempotent
            yes: ``init_transactions`` of a fresh producer with the slot's
            ``transactional.id`` aborts an open transaction of any previous
            instance and bumps the epoch; with nothing open it only bumps the
            epoch.
        On failure
            :class:`~twophase.errors.RetriableError` (brokers unreachable) or
            :class:`~twophase.errors.ConfigurationError` (not authorised);
            the batch fails before writing and the next start retries.

        Parameters
        ----------
        handle
            From :meth:`list_in_doubt`.
        """
        tid = handle.transactional_id or handle.transaction_id
        started = time.monotonic()
        entry = self._new_producer(tid, None)
        entry.close()
        _pool.discard_idle(tid)  # older instances in this process are fenced now
        _log.info(
            "sink %s: fenced %s (batch %s) in %.3f s",
            self.name,
            tid,
            handle.batch_id,
            time.monotonic() - started,
        )

    def read_markers(self, identity: str, batch_id: int) -> list[Marker]:
        """Read the committed markers of one batch from the control topic.

        Runs on
            the driver when a started batch is replayed; an executor when a
            task is retried.
        Called
            before anything of the batch is written (only on replays and
            retries, never in the steady state).
        Idempotent
            yes (reads with ``isolation.level=read_committed``, so only
            markers of committed transactions are returned). It first waits
            until every transaction open on the control partition has ended
            (at most ``transaction.timeout.ms``), then reads backwards from
            the end and stops at the first marker of an earlier batch.
        On failure
            :class:`~twophase.errors.RetriableError` (brokers unreachable,
            control partition unstable for too long) or
            :class:`~twophase.errors.CoordinatorLogError` (a record of this
            identity is not a marker); the batch fails with nothing written.

        Parameters
        ----------
        identity
            The sink identity token.
        batch_id
            The micro-batch id.

        Returns
        -------
        list of Marker
            One per committed partition of the batch.
        """
        reader = MarkerReader(
            self._client_config,
            self.control_topic,
            sink=self.name,
            stable_timeout=self.transaction_timeout_ms / 1000 + 30,
            operation_timeout=max(self.operation_timeout, 60.0),
        )
        return reader.read(identity, batch_id)

    # ========================================= participant hooks (executor)
    def begin_transaction(self, context: TaskContext) -> KafkaTransaction:
        """Open the partition's Kafka transaction on a pooled producer.

        Runs on
            an executor.
        Called
            once per non-empty partition per task attempt.
        Idempotent
            not required. A first attempt reuses this worker's producer of the
            slot when it has one (no ``init_transactions`` round trip); a retry
            (``attempt > 0``) always initialises a new producer, which fences
            every earlier instance of the slot at once.
        On failure
            the task fails: :class:`~twophase.errors.RetriableError` when the
            transaction coordinator is unreachable,
            :class:`~twophase.errors.ConfigurationError` when the principal may
            not use the transactional id or the timeout is above the broker's
            limit.

        Parameters
        ----------
        context
            Identity, batch, partition and attempt.

        Returns
        -------
        KafkaTransaction
            The open transaction.
        """
        tid = self.transactional_id(context.identity, context.partition_id)
        entry: _pool.PooledProducer | None = None
        if context.attempt == 0:
            entry = _pool.take(tid, self._conf_key)
        else:
            _pool.discard_idle(tid)
        reused = entry is not None
        if entry is None:
            entry = self._new_producer(tid, context)
        entry.reset_errors()
        try:
            entry.producer.begin_transaction()
        except Exception as exc:
            entry.close()
            err = kafka_error_of(exc)
            if err is None:
                raise
            if not reused:
                raise map_kafka_error(
                    err,
                    self._error_context("begin_transaction", context=context, transactional_id=tid),
                ) from exc
            # A pooled producer in a bad state: start over with a new one.
            entry = self._new_producer(tid, context)
            entry.producer.begin_transaction()
            reused = False
        _log.debug("sink %s: began %s on %r", self.name, context.transaction_id, entry)
        return KafkaTransaction(context, entry, probe=reused)

    def write(self, txn: KafkaTransaction, batch: pa.RecordBatch) -> None:
        """Produce the rows of one Arrow record batch into the transaction.

        Runs on
            an executor.
        Called
            zero or more times per transaction, in partition order.
        Idempotent
            not required: on any failure the whole transaction is aborted.
        On failure
            the framework aborts the transaction and fails the task:
            :class:`~twophase.errors.DataError` for a record that is too
            large, a null topic or a bad partition (naming the column);
            :class:`~twophase.errors.ConfigurationError` for an unknown or
            unauthorised topic; :class:`~twophase.errors.FatalError` when the
            producer was fenced mid-transaction (a zombie attempt, or two
            queries sharing the sink identity).

        Parameters
        ----------
        txn
            The transaction.
        batch
            Rows with Spark Kafka sink columns.
        """
        if batch.num_rows == 0:
            return
        plan = self._plan_for(txn, batch.schema)
        ctx = txn.context
        start = 0
        if txn.probe:
            self._probe(
                txn,
                lambda producer: produce_rows(
                    producer,
                    plan,
                    batch.slice(0, 1),
                    start=0,
                    on_error=lambda exc, topic: self._fail(txn, exc, "write", topic),
                    sink=self.name,
                    batch_id=ctx.batch_id,
                    partition_id=ctx.partition_id,
                ),
                plan.default_topic,
            )
            start = 1
            txn.records += 1
        txn.records += produce_rows(
            txn.producer.producer,
            plan,
            batch,
            start=start,
            on_error=lambda exc, topic: self._fail(txn, exc, "write", topic),
            sink=self.name,
            batch_id=ctx.batch_id,
            partition_id=ctx.partition_id,
        )
        self._poll(txn, "write")
        self._raise_delivery_errors(txn, "write")

    def write_marker(self, txn: KafkaTransaction, marker: Marker) -> None:
        """Produce the marker into partition 0 of the control topic, in the transaction.

        Also produces tombstones for markers this worker committed for
        earlier (finished) batches of the slot, so that compaction keeps the
        control topic small.

        Runs on
            an executor.
        Called
            once per transaction, after the last ``write``, before
            ``pre_commit``.
        Idempotent
            not required (every marker has a key of its own).
        On failure
            the framework aborts the transaction and fails the task.

        Parameters
        ----------
        txn
            The transaction.
        marker
            Identity, batch, partition, attempt and the rows' fingerprint.
        """
        key = marker_key(marker, new_nonce())
        value = encode_marker(marker, transactional_id=txn.transactional_id, records=txn.records)
        topic = self.control_topic
        stale = _pool.stale_markers(
            txn.transactional_id, topic, marker.batch_id, _GC_PER_TRANSACTION
        )

        def produce_marker(producer: Any) -> None:
            produce_one(producer, topic, value, key, CONTROL_PARTITION)

        try:
            if txn.probe:
                self._probe(txn, produce_marker, topic)
            else:
                produce_marker(txn.producer.producer)
            for old in stale:
                produce_one(txn.producer.producer, topic, None, old, CONTROL_PARTITION)
        except Exception as exc:
            self._fail(txn, exc, "write_marker", topic)
        txn.marker = marker
        txn.marker_key = key
        txn.tombstoned = stale

    def pre_commit(self, txn: KafkaTransaction) -> KafkaTransactionHandle:
        """Flush the transaction and check that every record was delivered.

        Runs on
            an executor.
        Called
            once per transaction, after ``write_marker``.
        Idempotent
            not required.
        On failure
            the framework aborts the transaction and fails the task; the
            error names the first failed record's cause (too large, unknown
            topic, not authorised...).

        Parameters
        ----------
        txn
            The transaction.

        Returns
        -------
        KafkaTransactionHandle
            Names the transaction; :meth:`commit` finds it by this handle.
        """
        if txn.marker_key is None:
            raise FatalError(
                "pre_commit() without a marker: protocol B needs write_marker() in every "
                "transaction, or a replay could write the partition twice",
                sink=self.name,
                batch_id=txn.context.batch_id,
                partition_id=txn.context.partition_id,
            )
        self._flush(txn, "pre_commit")
        self._raise_delivery_errors(txn, "pre_commit")
        ctx = txn.context
        handle = KafkaTransactionHandle(
            ctx.transaction_id,
            ctx.batch_id,
            ctx.partition_id,
            ctx.attempt,
            transactional_id=txn.transactional_id,
            records=txn.records,
        )
        txn.state = "prepared"
        _pool.register_prepared(handle.transaction_id, txn)
        return handle

    def commit(self, handle: KafkaTransactionHandle) -> None:
        """Commit the partition's transaction: rows and marker become visible.

        Runs on
            the executor, right after ``pre_commit``, on the producer that
            pre-committed (found by the handle in this process).
        Called
            once per transaction.
        Idempotent
            yes: a second call for a handle this process already committed
            returns at once. librdkafka retries a ``commit_transaction`` that
            timed out itself, up to ``local_retries`` calls.
        On failure
            the framework aborts the transaction and fails the task; Spark's
            retry reads the markers first, so a commit that did land is not
            written twice. :class:`~twophase.errors.AbortRequiredError` when
            the broker refused the commit (the transaction is aborted here),
            :class:`~twophase.errors.FatalError` when the producer was fenced,
            :class:`~twophase.errors.RetriableError` when the outcome is
            unknown after the retries.

        Parameters
        ----------
        handle
            From :meth:`pre_commit`.
        """
        txn: KafkaTransaction | None = _pool.pop_prepared(handle.transaction_id)
        if txn is None:
            if _pool.was_committed(handle.transaction_id):
                return
            raise FatalError(
                f"no pre-committed Kafka transaction {handle.transaction_id!r} in this process: "
                "Kafka transactions are committed by the producer that wrote them, on the "
                "executor, right after pre_commit",
                sink=self.name,
                batch_id=handle.batch_id,
                partition_id=handle.partition_id,
            )
        producer = txn.producer.producer
        try:
            retry_locally(
                lambda: producer.commit_transaction(self.operation_timeout),
                self._error_context("commit", txn=txn),
                attempts=self.local_retries,
            )
        except AbortRequiredError:
            self.abort(txn)
            raise
        except FatalError:
            txn.producer.broken = True
            raise
        txn.state = "committed"
        _pool.mark_committed(handle.transaction_id)
        if txn.marker_key is not None and txn.marker is not None:
            _pool.remember_marker(
                txn.transactional_id,
                self.control_topic,
                txn.marker.batch_id,
                txn.marker_key,
                txn.tombstoned,
            )
        _pool.give_back(txn.producer)
        _log.debug(
            "sink %s: committed %s (%d records, %.3f s)",
            self.name,
            handle.transaction_id,
            txn.records,
            txn.elapsed(),
        )

    def abort(self, txn: KafkaTransaction) -> None:
        """Abort the partition's transaction; nothing of it ever becomes visible.

        Runs on
            an executor.
        Called
            when ``write``, ``write_marker``, ``pre_commit`` or ``commit``
            failed, at most once per transaction.
        Idempotent
            yes: a transaction already committed or aborted is left alone.
        On failure
            the producer is closed and dropped from the pool (a fatal or
            fenced producer is dropped without trying); its transaction ends
            when the next instance of the slot initialises, or when the broker
            times it out. The error is raised and the framework attaches it to
            the original one as a note.

        Parameters
        ----------
        txn
            The transaction.
        """
        if txn.state in ("committed", "aborted"):
            return
        if txn.state == "prepared":
            _pool.pop_prepared(txn.context.transaction_id)
        entry = txn.producer
        txn.state = "aborted"
        if entry.broken:
            # Fenced or fatal: the producer cannot abort, and the newer
            # instance (or the broker's timeout) ends the transaction.
            entry.close()
            return

        def abort_once() -> None:
            try:
                entry.producer.abort_transaction(self.operation_timeout)
            except KafkaException as exc:
                if exc.args and exc.args[0].code() == KafkaError._STATE:
                    return  # nothing open: already ended
                raise

        try:
            retry_locally(
                abort_once, self._error_context("abort", txn=txn), attempts=self.local_retries
            )
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
        _log.debug("sink %s: aborted %s", self.name, txn.context.transaction_id)
