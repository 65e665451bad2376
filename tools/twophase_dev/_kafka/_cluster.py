"""A throwaway replicated Kafka cluster on 127.0.0.1: three brokers whose leaders can move.

Each member is a :class:`~twophase_dev.KafkaBroker` that is also a KRaft controller (combined
mode), the members together a static quorum of as many voters, formatted with one cluster id.
Topics are replicated as a production cluster's are (replication factor 3, ``min.insync.replicas``
2, the transaction state log and the offsets topic likewise), so that a broker stopped, killed or
restarted moves partition leaders and transaction coordinators to the others -- what a managed
Kafka's rolling restart does -- while every acknowledged write survives.
:meth:`KafkaCluster.leader_of` and :meth:`KafkaCluster.coordinator_of` say which broker to take
away; :meth:`KafkaCluster.wait_in_sync` waits until every replica is back.

Runs on: the developer's or test session's machine, never on Spark executors.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from twophase_dev._errors import DevInfraError
from twophase_dev._host._ports import LOOPBACK, free_ports
from twophase_dev._host._wait import wait_until
from twophase_dev._host._workdirs import make_work_dir
from twophase_dev._kafka._admin import (
    broker_ids,
    create_topic,
    java_string_hash,
    partition_leaders,
    under_replicated,
)
from twophase_dev._kafka._broker import KafkaBroker
from twophase_dev._kafka._install import random_cluster_id
from twophase_dev._server import ServiceContext

__all__ = ["REPLICATED_CONFIG", "ClusterBroker", "KafkaCluster"]

#: What a replicated cluster sets beyond a single broker's settings
#: (``_install.server_properties``): the durability a production cluster, managed ones too, runs
#: with.
REPLICATED_CONFIG = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}

#: The topic whose partition leaders are the transaction coordinators.
TRANSACTION_STATE = "__transaction_state"


class ClusterBroker(KafkaBroker):
    """A broker of a :class:`KafkaCluster`; while ``spawn_only``, its start does not wait.

    No member of a quorum answers before a majority of it runs, so the cluster launches them all
    first and waits for them together.
    """

    spawn_only = False

    def _ready(self) -> bool:
        return self.spawn_only or super()._ready()


class KafkaCluster(ServiceContext):
    """A Kafka cluster of ``size`` brokers on 127.0.0.1, each a KRaft controller as well.

    Parameters
    ----------
    size : int, optional
        Number of brokers (and controller voters), 3 by default: one can be down while
        ``min.insync.replicas`` 2 still accepts writes and the quorum still has a majority.
    log_dir : pathlib.Path, optional
        Where each broker's logs go (``broker-<id>/``); kept after :meth:`stop`. Defaults to
        each broker's work directory (removed by :meth:`stop`).
    heap : str, optional
        JVM heap of each broker.
    config : mapping of str to str, optional
        Settings for every broker, applied over :data:`REPLICATED_CONFIG`.
    startup_timeout : float, optional
        Seconds each broker may take to answer metadata requests.

    Notes
    -----
    The brokers' ports are picked once and kept: a broker stopped, killed or restarted comes back
    on the same ports with its data (:meth:`broker` gives its handle; its ``stop()`` keeps the
    data, which the cluster owns). A cluster of one is refused: use
    :class:`~twophase_dev.KafkaBroker`.

    Examples
    --------
    >>> with KafkaCluster() as cluster:  # doctest: +SKIP
    ...     cluster.create_topic("events", partitions=3)
    ...     cluster.broker(cluster.leader_of("events", 0)).restart()
    ...     cluster.wait_in_sync()
    """

    def __init__(
        self,
        *,
        size: int = 3,
        log_dir: Path | None = None,
        heap: str = "256m",
        config: Mapping[str, str] | None = None,
        startup_timeout: float = 120.0,
    ):
        if size < 2:
            raise DevInfraError(f"a KafkaCluster needs 2 brokers or more, not {size}")
        self.size = size
        self.log_dir = log_dir
        self.heap = heap
        self.config = {**REPLICATED_CONFIG, **(config or {})}
        self.startup_timeout = startup_timeout
        #: Node id -> broker, empty until :meth:`start`.
        self.brokers: dict[int, ClusterBroker] = {}

    # ---------------------------------------------------------------- addresses

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every broker, for clients' ``bootstrap.servers``."""
        if not self.brokers:
            raise DevInfraError("the cluster has no brokers yet: call start() first")
        return ",".join(b.bootstrap_servers for b in self.brokers.values())

    def broker(self, node_id: int) -> ClusterBroker:
        """Return the broker of ``node_id`` (1 to ``size``): ``stop()``, ``kill()``, ``start()``."""
        try:
            return self.brokers[node_id]
        except KeyError:
            raise DevInfraError(
                f"no broker {node_id} in the cluster (ids {sorted(self.brokers)})"
            ) from None

    def running(self) -> list[int]:
        """Return the ids of the brokers whose process is alive."""
        return [i for i, b in self.brokers.items() if b.is_running()]

    def _ask(self) -> str:
        """Return the ``bootstrap.servers`` of the brokers that run (so a live one answers)."""
        alive = self.running()
        if not alive:
            raise DevInfraError("no broker of the cluster is running")
        return ",".join(self.brokers[i].bootstrap_servers for i in alive)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> KafkaCluster:
        """Start every broker that is not running (all at once: the quorum needs a majority).

        Idempotent: brokers that run are left alone, and a cluster made before keeps its ports
        and data. Returns when every broker is registered.

        Returns
        -------
        KafkaCluster
            ``self``, for chaining.

        Raises
        ------
        DevInfraError
            If a broker does not start in time (ports taken three times over, Java missing...).
        """
        if self.brokers:
            self._start_all([b for b in self.brokers.values() if not b.is_running()])
        else:
            for attempt in range(1, 4):
                self._make()
                try:
                    self._start_all(list(self.brokers.values()))
                    break
                except DevInfraError:
                    self.stop()
                    if attempt == 3:
                        raise
        self._wait(lambda: len(broker_ids(self._ask())) >= self.size, "every broker registered")
        return self

    def _make(self) -> None:
        """Pick the ports and make the brokers' handles and work directories."""
        ports = free_ports(2 * self.size)
        clients, controllers = ports[: self.size], ports[self.size :]
        voters = ",".join(f"{i + 1}@{LOOPBACK}:{port}" for i, port in enumerate(controllers))
        cluster_id = random_cluster_id()
        for i in range(self.size):
            node = i + 1
            log_dir = None if self.log_dir is None else self.log_dir / f"broker-{node}"
            self.brokers[node] = ClusterBroker(
                port=clients[i],
                controller_port=controllers[i],
                # Made here, so that the broker's own stop() keeps its data (the cluster's).
                work_dir=make_work_dir("kafka"),
                log_dir=log_dir,
                heap=self.heap,
                config={**self.config, "node.id": str(node), "controller.quorum.voters": voters},
                startup_timeout=self.startup_timeout,
                cluster_id=cluster_id,
            )

    def _start_all(self, brokers: Sequence[ClusterBroker]) -> None:
        """Launch each broker from this thread, then wait until all are ready.

        Not from threads of a pool: the kernel stops a broker when the thread that started it
        ends (its parent-death signal), and no broker of a quorum is ready before a majority is.
        """
        for broker in brokers:
            broker.spawn_only = True
            try:
                broker.start()
            finally:
                broker.spawn_only = False

        def ready() -> bool:
            for broker in brokers:
                if not broker.is_running():
                    raise DevInfraError(
                        f"Kafka broker {broker.bootstrap_servers} exited during startup; "
                        f"see {broker.log_file}"
                    )
            return all(b._ready() for b in brokers)

        if not wait_until(ready, timeout=self.startup_timeout, interval=0.25):
            raise DevInfraError(
                f"the Kafka cluster's brokers did not become ready within "
                f"{self.startup_timeout:.0f} s; see {[str(b.log_file) for b in brokers]}"
            )

    def stop(self, *, timeout: float = 15.0) -> None:
        """Stop every broker at once and remove their data (logs in ``log_dir`` are kept).

        Parameters
        ----------
        timeout : float, optional
            Seconds each broker may take to shut down before it is killed.
        """
        brokers = list(self.brokers.values())
        if brokers:
            with ThreadPoolExecutor(len(brokers)) as pool:
                for _ in pool.map(lambda b: b.stop(timeout=timeout), brokers):
                    pass
        for broker in brokers:
            if broker.work_dir is not None:
                shutil.rmtree(broker.work_dir, ignore_errors=True)
        self.brokers = {}

    # ---------------------------------------------------------------- topics and leaders

    def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        config: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Create a topic replicated on every broker and wait until each replica is in sync.

        Parameters
        ----------
        name : str
            Topic name.
        partitions : int, optional
            Number of partitions.
        config : mapping of str to str, optional
            Topic configuration.
        timeout : float, optional
            Seconds to wait.
        """
        create_topic(self._ask(), name, partitions, config or {}, timeout, self.size)
        self.wait_in_sync([name], timeout=timeout)

    def leader_of(self, topic: str, partition: int) -> int:
        """Return the id of the broker that leads ``partition`` of ``topic`` now.

        Raises
        ------
        DevInfraError
            If the topic or the partition is unknown, or the partition has no leader.
        """
        leader = partition_leaders(self._ask(), topic).get(partition, -1)
        if leader < 0:
            raise DevInfraError(f"{topic}[{partition}] has no leader now")
        return leader

    def coordinator_of(self, transactional_id: str) -> int:
        """Return the id of the broker that coordinates ``transactional_id``'s transactions.

        Kafka's transaction coordinator of an id is the leader of partition
        ``abs(hashCode(transactional_id)) % partitions`` of ``__transaction_state`` (Java's
        ``String.hashCode``; confluent-kafka has no ``describe_transactions``). The topic exists
        once a first transactional producer has initialised.

        Raises
        ------
        DevInfraError
            If ``__transaction_state`` does not exist yet or the partition has no leader.
        """
        leaders = partition_leaders(self._ask(), TRANSACTION_STATE)
        code = java_string_hash(transactional_id)
        # Kafka's Utils.abs: Integer.MIN_VALUE maps to 0.
        partition = (0 if code == -(1 << 31) else abs(code)) % len(leaders)
        return self.leader_of(TRANSACTION_STATE, partition)

    def wait_in_sync(self, topics: Sequence[str] | None = None, *, timeout: float = 60.0) -> None:
        """Wait until every broker is registered and every replica of ``topics`` is in sync.

        Parameters
        ----------
        topics : sequence of str, optional
            The topics to wait for; every topic, the internal ones included, by default.
        timeout : float, optional
            Seconds to wait.

        Raises
        ------
        DevInfraError
            Naming what is still out of sync after ``timeout``.
        """
        problems: list[str] = []

        def in_sync() -> bool:
            try:
                problems[:] = under_replicated(self._ask(), topics, self.size)
            except Exception as exc:
                problems[:] = [f"metadata: {exc}"]
            return not problems

        if not wait_until(in_sync, timeout=timeout, interval=0.25):
            raise DevInfraError(
                f"the Kafka cluster is not in sync after {timeout:.0f} s: " + "; ".join(problems)
            )

    def _wait(self, check: Callable[[], bool], what: str) -> None:
        def safe() -> bool:
            try:
                return check()
            except Exception:
                return False

        if not wait_until(safe, timeout=self.startup_timeout, interval=0.25):
            raise DevInfraError(f"Kafka cluster: not {what} within {self.startup_timeout:.0f} s")

    def __repr__(self) -> str:
        if not self.brokers:
            return f"KafkaCluster(size={self.size}, not started)"
        return f"KafkaCluster({self.bootstrap_servers!r}, running={self.running()})"
