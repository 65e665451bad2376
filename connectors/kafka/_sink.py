"""``KafkaSink``: exactly-once into Kafka with transactional producers (``markers``).

Design (zombies, recovery, code layout, where KIP-939 plugs in): ``docs/kafka.md``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from twophase import (
    DeadLetter,
    Marker,
    MarkerCommitSink,
    RecoveryContext,
    RetryPolicy,
    RowError,
    SinkContext,
    TaskContext,
    TransactionHandle,
)
from twophase.errors import ConfigurationError, FatalError

from .._settings import check_number, refuse_unknown
from . import _fencing, _redrive
from ._attempt_fence import Fence
from ._checks import check_cluster
from ._columns import plan_records
from ._marker_reader import MarkerReader
from ._marker_records import new_nonce
from ._options import KafkaOptions, arguments_from_spark_options
from ._transaction import KafkaTransaction

if TYPE_CHECKING:
    from typing_extensions import Never

__all__ = ["KafkaSink"]


class KafkaSink(MarkerCommitSink[KafkaTransaction]):
    r"""Exactly-once sink into Apache Kafka, with transactional producers and markers.

    Takes the columns of Spark's own Kafka sink -- ``value`` (required),
    ``key``, ``topic``, ``partition``, ``headers``; string or binary -- and
    writes every partition of a micro-batch in one Kafka transaction together
    with an idempotence marker in a compacted control topic. Consumers reading
    with ``isolation.level=read_committed`` see every record exactly once,
    across task retries, driver crashes and restarts. See ``docs/kafka.md``.

    The sink is pickled to the executors: it holds settings only
    (:attr:`options`); producers live in a per-process pool on the executors.
    Its hooks route to the connector's parts: :class:`KafkaTransaction`
    writes and commits, ``_fencing`` fences slots, ``_checks`` checks the
    cluster, ``MarkerReader`` reads markers.

    Parameters
    ----------
    name
        Name of the sink: 1-64 characters from ``[A-Za-z0-9_.-]``, the first a
        letter or a digit. Part of the sink identity, hence of transactional
        ids and markers: changing it is like resetting the checkpoint for this
        sink.
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
    producer_lanes
        Transactional ids per partition slot (1-64, default 4): each Python
        worker on a host claims a lane of its own, so a slot's producer stays
        initialised in every worker that runs it, whichever Spark picks. Set
        it to the task slots of your largest executor or more. Attempts of one
        partition on different lanes do not fence each other, so recovery and
        task retries write a fence record before fencing every lane, and an
        attempt on a new producer checks the records before it commits
        (``docs/kafka.md``, "Zombies on other lanes"). The ids in use are at
        most ``partitions * producer_lanes``. Lower it only after a clean
        stop: recovery fences the lanes the setting names. 1 is the single
        id per slot of before lanes.
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
    max_partitions
        Upper bound on transactions per batch (None: no bound); a batch with
        more partitions is coalesced to it before phase 1. Under Spark
        Connect, where a batch's partitions are not known before it runs, it
        is also the number of partition slots a batch records and recovery
        fences (default there: ``spark.sql.shuffle.partitions``).
    staging
        Publish every batch from a copy staged in the checkpoint, so that
        replays are deterministic even when the pipeline is not.
    checkpoint_location
        The query's checkpoint location; optional: found from the running
        query when omitted, checked against it when given.
    retry
        Backoff of the driver's commit steps that fail transiently (a
        :class:`twophase.RetryPolicy`; its defaults when omitted).
    bad_rows
        ``"fail"`` (default): a record the brokers would refuse fails its partition.
        ``"dead_letter"``: it goes to ``dead_letter_topic`` instead, in the same
        transaction as the batch's good records (``docs/kafka.md``, "Dead letters").
    dead_letter_topic
        Where ``bad_rows="dead_letter"`` puts refused rows; ``"<name>-dead-letters"`` by
        default, created in :meth:`open` (one partition) when missing. Only with
        ``"dead_letter"``.
    max_bad_rows
        Rows a batch may set aside; more fail the batch with a
        :class:`~twophase.errors.DataError` (the core's default when omitted).
    **unexpected
        None is taken: a keyword not above is refused by name, with the
        closest valid one (a :class:`~twophase.errors.ConfigurationError`).

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

    #: Recovery fences the lanes of the slots this many at a time. Fencing an id
    #: whose transaction is open makes the broker abort it and answer
    #: CONCURRENT_TRANSACTIONS meanwhile, and librdkafka asks again only after a
    #: fixed 500 ms: each ``init_transactions`` then costs 0.5-1 s, mostly waiting,
    #: so one wide wave beats several narrow ones (100 slots of 4 lanes: 2.5 s at
    #: 64, 1.6 s at 256, on 2 cores).
    recovery_concurrency = 256
    metrics_target = "kafka"

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
        producer_lanes: int = 4,
        transaction_timeout_ms: int | None = None,
        operation_timeout: float = 30.0,
        local_retries: int = 3,
        max_partitions: int | None = None,
        staging: bool = False,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
        bad_rows: Literal["fail", "dead_letter"] = "fail",
        dead_letter_topic: str | None = None,
        max_bad_rows: int | None = None,
        **unexpected: Never,
    ) -> None:
        # A misspelt keyword is refused by name here, not by a TypeError (nor later).
        refuse_unknown("KafkaSink", name, unexpected, _KEYWORDS)
        super().__init__(
            name,
            staging=staging,
            checkpoint_location=checkpoint_location,
            retry=retry,
            bad_rows=bad_rows,
            **({} if max_bad_rows is None else {"max_bad_rows": max_bad_rows}),
        )
        if dead_letter_topic is not None and bad_rows != "dead_letter":
            raise ConfigurationError(
                f"dead_letter_topic={dead_letter_topic!r} is set but bad_rows={bad_rows!r}: "
                "set bad_rows='dead_letter' to use it, or drop it",
                sink=name,
                setting="dead_letter_topic",
            )
        if bad_rows == "dead_letter" and dead_letter_topic is None:
            dead_letter_topic = f"{name}-dead-letters"
        if max_partitions is not None:
            check_number(max_partitions, "max_partitions", minimum=1, integer=True, sink=name)
            self.max_transactions_per_batch = max_partitions
        #: The validated settings every part of the connector reads.
        self.options = KafkaOptions.from_arguments(
            name,
            bootstrap_servers=bootstrap_servers,
            producer_config=producer_config,
            transaction_timeout_ms=transaction_timeout_ms,
            topic=topic,
            control_topic=control_topic,
            create_control_topic=create_control_topic,
            control_topic_partitions=control_topic_partitions,
            control_topic_replication_factor=control_topic_replication_factor,
            transactional_id_prefix=transactional_id_prefix,
            producer_lanes=producer_lanes,
            operation_timeout=operation_timeout,
            local_retries=local_retries,
            dead_letter_topic=dead_letter_topic,
        )

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
        return cls(name, **arguments_from_spark_options(name, options, kwargs))

    def __repr__(self) -> str:
        servers = self.options.producer_config.get("bootstrap.servers")
        where = f"topic={self.topic!r}, control_topic={self.control_topic!r}"
        return f"KafkaSink({self.name!r}, bootstrap_servers={servers!r}, {where})"

    # ----------------------------------------------------------- settings
    @property
    def topic(self) -> str | None:
        """The default topic (it overrides a ``topic`` column); settable."""
        return self.options.topic

    @topic.setter
    def topic(self, value: str | None) -> None:
        self.options = self.options.replace(topic=value)

    @property
    def control_topic(self) -> str:
        """The compacted topic holding the markers."""
        return self.options.control_topic

    @property
    def producer_config(self) -> Mapping[str, Any]:
        """The normalised producer configuration (no ``transactional.id``; repr masks secrets)."""
        return self.options.producer_config

    @property
    def transaction_timeout_ms(self) -> int:
        """The configured ``transaction.timeout.ms``."""
        return self.options.transaction_timeout_ms

    def transactional_id(self, identity: str, slot: int, lane: int = 0) -> str:
        """Return the ``transactional.id`` of a lane of partition ``slot`` of ``identity``."""
        return _fencing.transactional_id(self.options, identity, slot, lane)

    # ============================================ coordinator hooks (driver)
    def open(self, context: SinkContext) -> None:
        """Check settings, credentials and ACLs against the cluster; create the control topic.

        Mistakes (a setting librdkafka refuses, a missing topic, refused credentials...) fail
        here, before any task; brokers unreachable for ``operation_timeout``: ``RetriableError``.
        """
        check_cluster(self.options, context.identity)

    def check_schema(self, schema: pa.Schema, batch_id: int) -> None:
        """Check the batch's columns against those of Spark's Kafka sink."""
        plan_records(schema, default_topic=self.topic, sink=self.name, batch_id=batch_id)

    def list_in_doubt(self, context: RecoveryContext) -> list[TransactionHandle]:
        """Name every lane of every partition slot the identity ever used, to be fenced.

        Kafka cannot list open transactions by ``transactional.id`` prefix, so
        every lane of every slot ``0 .. partition_slots - 1`` is returned
        (``attempt=-1``, the transactional id as ``transaction_id``). With
        ``producer_lanes > 1`` a fence record naming the run (recovery) or
        the retried attempt is written to the control topic first
        (:mod:`._attempt_fence`); otherwise no broker is contacted.
        """
        if self.options.producer_lanes > 1:
            fence = (
                Fence.of_retry(context.task)
                if context.task is not None
                else Fence(context.epoch)
                if context.epoch > 0
                else None
            )
            if fence is not None:
                _fencing.record_fence(self.options, context.identity, fence, new_nonce())
        return _fencing.list_in_doubt(self.options, context)

    def recover_and_abort(self, handle: TransactionHandle) -> None:
        """Fence the slot: ``init_transactions`` aborts what it left open and disables zombies."""
        _fencing.fence_slot(self.options, handle)

    def read_markers(self, identity: str, batch_id: int) -> list[Marker]:
        """Read the batch's markers from the control topic with ``read_committed``.

        It waits until no transaction is open on the control partition (at
        most ``transaction.timeout.ms``), then reads backwards from the end.
        """
        return self._reader().read(identity, batch_id)

    def _reader(self) -> MarkerReader:
        return MarkerReader(
            self.options.client_config,
            self.control_topic,
            sink=self.name,
            stable_timeout=self.transaction_timeout_ms / 1000 + 30,
            operation_timeout=max(self.options.operation_timeout, 60.0),
        )

    # ========================================= participant hooks (executor)
    def begin_transaction(self, context: TaskContext) -> KafkaTransaction:
        """Open the transaction on this worker's pooled producer of the slot.

        A retry (``attempt > 0``) always initialises a new producer, fencing
        every earlier instance of the slot.
        """
        return KafkaTransaction.begin(self.options, context)

    def write(self, txn: KafkaTransaction, batch: pa.RecordBatch) -> list[RowError]:
        """Produce the rows; a reused producer is probed (and replaced if fenced) first.

        With ``bad_rows="dead_letter"`` the rows the brokers would refuse are not
        produced and are returned (the row errors of ``docs/kafka.md``).
        """
        return list(txn.set_aside.refusing(txn.write(batch)))

    def write_dead_letters(self, txn: KafkaTransaction, letters: Sequence[DeadLetter]) -> None:
        """Produce the letters to partition 0 of ``dead_letter_topic``, in ``txn``."""
        txn.write_dead_letters(txn.set_aside.lettering(letters))

    def commit_with_marker(self, txn: KafkaTransaction, marker: Marker) -> None:
        """Produce the marker (and tombstones of finished batches' markers), flush, commit.

        The marker goes to partition 0 of the control topic in the same
        transaction, which commits on ``txn``'s own producer.
        """
        txn.set_aside.check(txn.where)  # before anything commits: a lost letter rolls back
        txn.write_marker(marker)
        txn.commit()

    def needs_marker_check(self, txn: KafkaTransaction) -> bool:
        """Check unless the producer is a pooled one, checked and still live, new to the batch.

        A producer initialised in this task (first use, a retry, or a pooled
        one found fenced) may have been preceded by a zombie's commit. A pooled
        producer that committed since its ``init_transactions`` and was not
        fenced since (its first record told) cannot have been -- unless it
        committed this very batch itself, for a task of a stopped query that
        ran in this Python worker: its own markers tell.

        With ``producer_lanes > 1``, an unchecked producer first reads the fence records
        (:mod:`._attempt_fence`): a fenced attempt stops with ``FatalError``, as a zombie must.
        """
        producer = txn.producer
        ctx = txn.context
        if producer.checked:
            return producer.committed_batch(self.control_topic, ctx.identity, ctx.batch_id)
        if self.options.producer_lanes > 1:
            reader = self._reader()
            reader.read(ctx.identity, ctx.batch_id)
            for fence in reader.fences:
                if fence.excludes(ctx):
                    raise FatalError(
                        f"this attempt ({ctx.transaction_id}, run {ctx.epoch}) is a zombie: "
                        f"{fence.describe()}, so it must not commit; nothing of it is visible",
                        sink=self.name,
                        batch_id=ctx.batch_id,
                        partition_id=ctx.partition_id,
                    )
        return True

    def abort(self, txn: KafkaTransaction) -> None:
        """Abort the transaction; a fenced or failed producer is closed, not pooled."""
        txn.abort()

    # ================================================ dead letters (the CLI)
    def read_dead_letters(self) -> Iterator[DeadLetter]:
        """Read ``dead_letter_topic`` (``read_committed``) from the redrive group's offset."""
        return (letter for _, letter, _types in _redrive.pending(self.options))

    def redrive_dead_letters(self, letters: Sequence[DeadLetter]) -> Sequence[RowError]:
        """Produce the rows again and advance the redrive group, in one transaction.

        ``letters`` must be the oldest pending ones, in order (offsets are a prefix);
        rows still refused are set aside again at the end of ``dead_letter_topic``.
        """
        return _redrive.redrive(self.options, letters)


#: The keywords :class:`KafkaSink` takes, to name the closest to a misspelt one.
_KEYWORDS = frozenset(inspect.signature(KafkaSink.__init__).parameters) - {"self", "unexpected"}
