"""Small value types shared by the coordinator, the participants and the sinks.

Everything here crosses the wire between driver and executors or is stored in
the coordinator log, so every class is a frozen dataclass that pickles.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FINGERPRINT_VERSION",
    "FINGERPRINT_VERSIONS",
    "CommitProtocol",
    "DeadLetter",
    "Fingerprint",
    "Marker",
    "RecoveryContext",
    "RowError",
    "SinkContext",
    "TaskContext",
    "TransactionHandle",
    "TransactionStatus",
    "parse_transaction_id",
]

#: The fingerprint algorithm new markers are written with (:attr:`Fingerprint.version`).
FINGERPRINT_VERSION = 2
#: Every algorithm this release can compute: markers of earlier releases carry version 1.
FINGERPRINT_VERSIONS = (1, 2)


class CommitProtocol(str, enum.Enum):
    """The two commit protocols (``docs/protocol.md``).

    Attributes
    ----------
    COORDINATED
        The coordinated protocol: executors prepare, the driver records a decision and
        commits every prepared transaction (PostgreSQL ``PREPARE TRANSACTION``).
    MARKERS
        The markers protocol: each executor commits its own transaction together with an
        idempotence marker; replays are checked against the markers (Kafka,
        PostgreSQL without prepared transactions).
    """

    COORDINATED = "coordinated"
    MARKERS = "markers"

    def __str__(self) -> str:
        return str(self.value)


class TransactionStatus(str, enum.Enum):
    """What the target holds of a prepared transaction named by a commit decision.

    Returned by :meth:`TwoPhaseCommitSink.transaction_status` at recovery.

    Attributes
    ----------
    PREPARED
        Still prepared: it can be committed or rolled back.
    COMMITTED
        Committed: its rows are visible.
    LOST
        Neither prepared nor committed: the target does not have it any more
        (a failover to a replica that had not received it, a rollback by hand).
    """

    PREPARED = "prepared"
    COMMITTED = "committed"
    LOST = "lost"

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class TaskContext:
    """Where a participant runs: one attempt of one partition of one batch.

    Built by the framework on the executor and passed to
    :meth:`TwoPhaseCommitSink.begin_transaction`. Picklable.

    Attributes
    ----------
    sink_name
        The sink's configured name.
    identity
        The sink identity token (stable across restarts of the query from one
        checkpoint, new after a checkpoint reset). Use it as the prefix of
        transaction ids.
    batch_id
        The micro-batch id.
    partition_id
        The Spark partition index (the participant's slot).
    attempt
        The task attempt number, 0 for the first attempt.
    epoch
        The run of the query that runs the task: a number that grows with every
        (re)start of the query from its checkpoint (the coordinator log's epoch).
        ``(epoch, attempt)`` orders the attempts of a partition slot across
        runs: a target that must fence zombie attempts (an executor lost while
        its process lives on) lets only the newest one commit.
    realtime
        The task runs in real-time mode (``docs/realtime.md``): it commits
        several transactions in one epoch (``batch_id``), each with a marker of
        the partition's longer committed prefix, and an earlier attempt of the
        partition may have committed a prefix of it before. So markers of an
        earlier ``(epoch, attempt)`` of this partition are expected; only one
        of a newer attempt makes this one a zombie.
    """

    sink_name: str
    identity: str
    batch_id: int
    partition_id: int
    attempt: int
    epoch: int = 0
    realtime: bool = False

    @property
    def transaction_id(self) -> str:
        """A transaction id unique to this (identity, batch, partition, attempt).

        Returns
        -------
        str
            ``"<identity>:<batch>:<partition>:<attempt>"``.
        """
        return f"{self.identity}:{self.batch_id}:{self.partition_id}:{self.attempt}"


@dataclass(frozen=True)
class TransactionHandle:
    """What a participant hands the coordinator after ``pre_commit``.

    Subclass it (frozen dataclass) to carry more, e.g. a topic or a file
    path. It must be small and picklable: it travels from the executor to the
    driver and is stored in the coordinator log as part of the commit
    decision.

    Attributes
    ----------
    transaction_id
        The target's name for the prepared transaction (a PostgreSQL gid, a
        staged file name, ...). Unique per attempt.
    batch_id
        The micro-batch the transaction belongs to.
    partition_id
        The partition that wrote it.
    attempt
        The task attempt that wrote it.
    """

    transaction_id: str
    batch_id: int
    partition_id: int
    attempt: int


@dataclass(frozen=True, order=True)
class Fingerprint:
    """An order-independent summary of a partition's rows.

    Two partitions holding the same multiset of rows have equal
    fingerprints, whatever the row order. ``digest`` is the sum modulo 2**64 of
    a 64-bit hash of every row.

    Fingerprints are stored in markers and compared on replay, so the row hash
    is versioned: ``version`` names the algorithm, and fingerprints of different
    versions never compare equal. A replay compares a marker with the replayed
    rows fingerprinted by the marker's own version.

    Attributes
    ----------
    count
        Number of rows.
    digest
        Sum of the 64-bit row hashes, modulo 2**64.
    version
        The row hash algorithm: 2 since the vectorised hash of long values, 1
        for markers written before (they are still read and compared).
    """

    count: int
    digest: int
    version: int = FINGERPRINT_VERSION

    def __str__(self) -> str:
        text = f"{self.count}:{self.digest:016x}"
        return text if self.version == 1 else f"v{self.version}:{text}"

    @classmethod
    def parse(cls, text: str) -> Fingerprint:
        """Parse the ``str()`` form back.

        Parameters
        ----------
        text
            ``"v<version>:<count>:<16 hex digits>"``, or ``"<count>:<16 hex
            digits>"`` for version 1 (markers written before versions).

        Returns
        -------
        Fingerprint
            The parsed fingerprint.

        Examples
        --------
        >>> Fingerprint.parse("v2:3:00000000000000ff")
        Fingerprint(count=3, digest=255, version=2)
        >>> Fingerprint.parse("3:00000000000000ff").version
        1
        """
        version = 1
        if text.startswith("v"):
            tag, _, text = text.partition(":")
            version = int(tag[1:])
        count, _, digest = text.partition(":")
        return cls(int(count), int(digest, 16), version)


@dataclass(frozen=True)
class Marker:
    """An idempotence marker of the markers protocol: this partition's rows are committed.

    Written by the participant inside the same transaction as the rows
    (:meth:`MarkerCommitSink.commit_with_marker`) and read back by the coordinator on
    replay (:meth:`MarkerCommitSink.read_markers`).

    Attributes
    ----------
    identity
        The sink identity token.
    batch_id
        The micro-batch id.
    partition_id
        The partition that committed (informational: replays may use another
        layout, so matching is by fingerprint).
    attempt
        The task attempt that committed.
    fingerprint
        The fingerprint of the committed rows.
    """

    identity: str
    batch_id: int
    partition_id: int
    attempt: int
    fingerprint: Fingerprint

    @property
    def key(self) -> str:
        """A key unique per committed partition: identity, batch and partition.

        Returns
        -------
        str
            ``"<identity>:<batch>:<partition>"``.
        """
        return f"{self.identity}:{self.batch_id}:{self.partition_id}"


@dataclass(frozen=True)
class SinkContext:
    """What the driver knows about the query when a sink is opened.

    Attributes
    ----------
    sink_name
        The sink's configured name.
    identity
        The sink identity token.
    query_id
        The streaming query id (the ``id`` in ``<checkpoint>/metadata``).
    run_id
        An id unique to this run of the query (changes on every restart).
    log_location
        Where the coordinator log lives (inside the checkpoint).
    """

    sink_name: str
    identity: str
    query_id: str
    run_id: str
    log_location: str


@dataclass(frozen=True)
class RecoveryContext:
    """What the coordinator tells a sink when it lists in-doubt transactions.

    Attributes
    ----------
    identity
        The sink identity token: only transactions carrying it belong to the
        sink.
    partition_slots
        The highest number of partitions any batch of this identity has used
        (a high-water mark kept in the coordinator log). Sinks whose
        transactions are named per partition slot (Kafka ``transactional.id``)
        list slots ``0 .. partition_slots - 1``.
    unfinished_batches
        Batches that were started but not recorded as committed.
    epoch
        The run that recovers (:attr:`TaskContext.epoch`); 0 when no run does
        (the command-line tool). Every attempt of an earlier run is a zombie
        from now on: a target whose attempts do not all fence each other may
        record the epoch before it aborts, for late attempts to check.
    task
        The retrying task, when the listing clears what earlier attempts of
        its partition left (an executor, before ``begin_transaction``); None
        at the driver's recovery.
    """

    identity: str
    partition_slots: int
    unfinished_batches: tuple[int, ...] = field(default=())
    epoch: int = 0
    task: TaskContext | None = None


_ERROR_CLASS = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


@dataclass(frozen=True)
class RowError:
    """One row the target refused, as a sink's ``write`` hands it back. Picklable.

    Attributes
    ----------
    row
        The row's position in the record batch ``write`` was given (0-based).
    error_class
        A short fixed word for the kind of error: ``not_null``, ``too_long``,
        ``invalid_value``, ``unique``, ``foreign_key``, ``check``, ``too_large``
        or ``other`` (lowercase letters, digits and ``_``, at most 32): it labels the
        ``twophase.rows.dead_lettered`` metric, so never a message or a value.
    message
        The target's message, for a person. The sink redacts it: never a password,
        a connection string or a value the user did not write.
    code
        The target's own code (a SQLSTATE, a librdkafka error name), or None.
    column
        The column at fault, when the target says.
    """

    row: int
    error_class: str
    message: str
    code: str | None = None
    column: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.row, bool) or not isinstance(self.row, int) or self.row < 0:
            raise ValueError(f"RowError.row must be a row position (an int >= 0), got {self.row!r}")
        if not isinstance(self.error_class, str) or not _ERROR_CLASS.match(self.error_class):
            raise ValueError(
                f"RowError.error_class must be a short word of [a-z0-9_] (at most 32, a letter "
                f"first) such as 'not_null', got {self.error_class!r}: it labels a metric"
            )


@dataclass(frozen=True)
class DeadLetter:
    """A row set aside in the dead letters, in the same transaction as its batch's good rows.

    Built by the framework on the executor from a :class:`RowError` and handed to the
    sink's ``write_dead_letters``. Picklable; the row is JSON text, so a dead letter is
    plain data a sink can store as it is.

    Attributes
    ----------
    sink
        The sink's name.
    batch_id
        The micro-batch.
    partition_id
        The partition (the participant's slot).
    position
        The row's position in its partition, counted across the partition's record
        batches from 0: the same on a replay of the same input.
    error_class, code, message, column
        As the sink's :class:`RowError` gave them.
    row
        The row as a JSON object of its columns, every type kept (bytes as base64,
        timestamps ISO 8601 with their zone, decimals as strings, nested lists, structs
        and maps; see :meth:`values`).
    """

    sink: str
    batch_id: int
    partition_id: int
    position: int
    error_class: str
    code: str | None
    message: str
    column: str | None
    row: str

    def values(self) -> dict[str, Any]:
        """Return the row parsed from its JSON text.

        Returns
        -------
        dict
            ``{column: value}``, values as JSON has them.
        """
        return dict(json.loads(self.row))


def parse_transaction_id(transaction_id: str) -> TransactionHandle | None:
    """Parse a :attr:`TaskContext.transaction_id` back into a handle.

    Useful in :meth:`~twophase.TwoPhaseCommitSink.list_in_doubt` for targets
    that name their transactions with the framework's transaction ids.

    Parameters
    ----------
    transaction_id
        ``"<identity>:<batch>:<partition>:<attempt>"``.

    Returns
    -------
    TransactionHandle or None
        None if the id has another shape.

    Examples
    --------
    >>> parse_transaction_id("orders-1a2b:7:3:0")
    TransactionHandle(transaction_id='orders-1a2b:7:3:0', batch_id=7, partition_id=3, attempt=0)
    >>> parse_transaction_id("unrelated") is None
    True
    """
    parts = transaction_id.rsplit(":", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        return None
    return TransactionHandle(transaction_id, int(parts[1]), int(parts[2]), int(parts[3]))
