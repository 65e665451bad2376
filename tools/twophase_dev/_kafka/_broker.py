"""A throwaway single-node Apache Kafka broker (KRaft, no ZooKeeper) on 127.0.0.1.

The broker's jars come from Maven Central (:mod:`._install`); the JVM is started directly
(``java -cp ... kafka.Kafka server.properties``). Its work directory, owner file, logs, startup and
records are :class:`~twophase_dev._server.ManagedService`'s; topics are made through
:mod:`._admin`.

With ``netns=`` the broker runs inside a :class:`~twophase_dev.NetworkNamespace`: its ``PLAINTEXT``
listener (and the advertised one) is on the namespace's address, its KRaft controller listener on
127.0.0.1 inside the namespace.

Runs on: the developer's or test session's machine, never on Spark executors.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twophase_dev._errors import DevInfraError, PortRaceError
from twophase_dev._host._files import tail
from twophase_dev._host._ports import LOOPBACK, free_ports, wait_for_port
from twophase_dev._host._process import ManagedProcess, run_logged
from twophase_dev._kafka._admin import create_topic, has_broker
from twophase_dev._kafka._install import (
    KAFKA_VERSION,
    LOG4J2_PROPERTIES,
    java_executable,
    kafka_classpath,
    kafka_jvm_options,
    random_cluster_id,
    server_properties,
)
from twophase_dev._server import ManagedService

if TYPE_CHECKING:
    from twophase_dev._netns._namespace import NetworkNamespace

__all__ = ["KafkaBroker"]


class KafkaBroker(ManagedService):
    """A single-node Kafka broker (combined KRaft broker and controller) on 127.0.0.1.

    Parameters
    ----------
    port : int, optional
        Client (``PLAINTEXT``) port; a free one is picked if omitted. An explicit port that is taken
        fails with a clear :class:`DevInfraError`, a picked one is retried with new ports.
    controller_port : int, optional
        KRaft controller port; picked like ``port``.
    work_dir : pathlib.Path, optional
        Directory for config and data; a throwaway ``twophase-dev-kafka-*`` directory in the
        system temporary directory by default (removed by :meth:`stop`).
    log_dir : pathlib.Path, optional
        Where ``kafka.log`` (broker log) and ``kafka.out`` (JVM stdout/stderr) go; kept after
        :meth:`stop`. Defaults to ``<work_dir>/logs`` (removed with the work dir).
    version : str, optional
        Kafka version, :data:`KAFKA_VERSION` by default.
    heap : str, optional
        JVM heap (``-Xmx``), small by default: a test broker holds little data.
    config : mapping of str to str, optional
        Extra or overriding ``server.properties`` entries.
    detach : bool, optional
        ``True`` for a broker that outlives this Python process (``twophase-dev up``); ``False``
        (default) makes the kernel stop it if this process dies without calling :meth:`stop`.
    startup_timeout : float, optional
        Seconds to wait for the broker to answer a metadata request.
    netns : NetworkNamespace, optional
        Run the broker inside this (created) network namespace: clients (and
        :attr:`bootstrap_servers`) then use the namespace's address, and the controller listens
        on 127.0.0.1 inside it. :meth:`to_record` refuses such a broker.
    cluster_id : str, optional
        The KRaft cluster id its storage is formatted with (the same for every member of a
        :class:`~twophase_dev.KafkaCluster`); a random one by default.

    Notes
    -----
    Configuration chosen for tests: replication factor 1 and min ISR 1 for the internal topics
    (offsets, transactions, share groups), ``group.initial.rebalance.delay.ms=0`` so that consumers
    get partitions at once, 4 partitions for the internal topics so that they are created quickly,
    ``transaction.max.timeout.ms`` left at Kafka's default (900000) and
    ``auto.create.topics.enable=false`` so that a test that forgets to create its topic fails loudly
    instead of silently getting a 1-partition topic (use :meth:`create_topic`).

    Examples
    --------
    >>> with KafkaBroker() as broker:  # doctest: +SKIP
    ...     broker.create_topic("events", partitions=2)
    ...     print(broker.bootstrap_servers)
    127.0.0.1:40123
    """

    kind = "kafka"
    product = "Kafka"
    noun = "broker"
    address_env = "TWOPHASE_KAFKA_BOOTSTRAP"
    log_name = "kafka.log"
    crash_signals = ((signal.SIGTERM, 10.0),)
    ready_interval = 0.25
    log_lines = 40
    not_ready = "did not become ready"

    def __init__(
        self,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        work_dir: Path | None = None,
        log_dir: Path | None = None,
        version: str = KAFKA_VERSION,
        heap: str = "512m",
        config: Mapping[str, str] | None = None,
        detach: bool = False,
        startup_timeout: float = 90.0,
        netns: NetworkNamespace | None = None,
        cluster_id: str | None = None,
    ):
        super().__init__(
            port=port,
            work_dir=work_dir,
            log_dir=log_dir,
            detach=detach,
            startup_timeout=startup_timeout,
            netns=netns,
        )
        self.controller_port = controller_port
        self._fixed_port = port is not None or controller_port is not None
        self.version = version
        self.heap = heap
        self.extra_config = dict(config or {})
        self.cluster_id = cluster_id
        self._formatted = False
        self._external_bootstrap: str | None = None
        self._classpath: list[Path] = []

    # ---------------------------------------------------------------- attaching

    @classmethod
    def external(cls, bootstrap_servers: str) -> KafkaBroker:
        """Describe a broker that this package did not start (e.g. ``$TWOPHASE_KAFKA_BOOTSTRAP``).

        Parameters
        ----------
        bootstrap_servers : str
            ``host:port`` of the broker.

        Returns
        -------
        KafkaBroker
            A handle whose :attr:`bootstrap_servers` and :meth:`create_topic` work, while
            :meth:`start`, :meth:`stop` and :meth:`restart` raise :class:`DevInfraError`.
        """
        host, _, port = bootstrap_servers.split(",")[0].rpartition(":")
        broker = cls(port=int(port))
        broker._external_bootstrap = bootstrap_servers
        broker.host = host or LOOPBACK
        broker.managed = False
        return broker

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> KafkaBroker:
        """Re-create the handle of a broker started by another process (see :meth:`to_record`).

        Parameters
        ----------
        record : mapping
            What :meth:`to_record` returned.

        Returns
        -------
        KafkaBroker
            A handle that can stop or restart that broker.
        """
        broker = cls(
            port=int(record["port"]),
            controller_port=int(record["controller_port"]),
            work_dir=Path(record["work_dir"]),
            log_dir=Path(record["log_dir"]),
            version=str(record["version"]),
            heap=str(record.get("heap", "512m")),
            config=dict(record.get("config", {})),
            detach=True,
        )
        broker._formatted = True
        broker._adopt(record)
        return broker

    def to_record(self) -> dict[str, Any]:
        """Describe this running broker as JSON-serialisable data (for ``twophase-dev`` state).

        Returns
        -------
        dict
            Enough to re-create the handle with :meth:`from_record`.
        """
        return self._service_record(
            {"controller_port": self.controller_port, "bootstrap_servers": self.bootstrap_servers},
            {"version": self.version, "heap": self.heap, "config": self.extra_config},
        )

    # ---------------------------------------------------------------- properties

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for Kafka clients (``bootstrap.servers``)."""
        if self._external_bootstrap is not None:
            return self._external_bootstrap
        if self.port is None:
            raise DevInfraError("the broker has no port yet: call start() first")
        return f"{self.host}:{self.port}"

    @property
    def stdout_file(self) -> Path:
        """The JVM's stdout and stderr (startup errors, crashes)."""
        return self.log_dir / "kafka.out"

    def _address(self) -> str:
        return self.bootstrap_servers

    def _reachable(self) -> bool:
        return self.port is not None and wait_for_port(self.host, self.port, timeout=0)

    # ---------------------------------------------------------------- lifecycle

    def _server_properties(self, data_dir: Path) -> str:
        assert self.port is not None
        assert self.controller_port is not None
        return server_properties(
            self.host, self.port, self.controller_port, data_dir, self.extra_config
        )

    def _jvm_options(self, classpath: list[Path], main: str) -> str:
        """Return the options of a JVM running ``main`` (broker, storage tool), heap aside."""
        return kafka_jvm_options(classpath)

    def _java_command(self, classpath: list[Path], main: str, *args: str) -> list[str]:
        assert self.work_dir is not None
        return [
            java_executable(),
            f"-Xmx{self.heap}",
            "-Xms128m",
            *self._jvm_options(classpath, main).split(),
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
            # The marker ManagedProcess looks for, so a recorded pid is only trusted while the
            # process still belongs to this work directory.
            f"-Dtwophase.dev.workdir={self.work_dir}",
            "-cp",
            os.pathsep.join(map(str, classpath)),
            main,
            *args,
        ]

    def _format_storage(self, classpath: list[Path]) -> None:
        assert self.work_dir is not None
        config = self.work_dir / "server.properties"
        run_logged(
            self._java_command(
                classpath,
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                self.cluster_id or random_cluster_id(),
                "--config",
                str(config),
                "--ignore-formatted",
            ),
            what="formatting Kafka storage",
            cwd=self.work_dir,
            log_file=self.log_dir / "kafka-storage-format.log",
        )
        self._formatted = True

    def start(self) -> KafkaBroker:
        """Start the broker and wait until it answers metadata requests.

        Returns
        -------
        KafkaBroker
            ``self``, for chaining.

        Raises
        ------
        DevInfraError
            If Java or Maven is missing, the port is taken (when given explicitly), or the broker
            does not become ready in time; the message includes the end of its log.
        """
        return super().start()

    def _locate(self) -> None:
        self._classpath = kafka_classpath(self.version)

    def _forget_data(self) -> None:
        self._formatted = False

    def _start_in(self, work_dir: Path) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        attempts = 1 if (self._fixed_port or self._formatted) else 3
        for attempt in range(1, attempts + 1):
            picked = iter(free_ports(2))
            if self.port is None:
                self.port = next(picked)
            if self.controller_port is None:
                self.controller_port = next(picked)
            try:
                self._check_ports()
                (work_dir / "log4j2.properties").write_text(
                    LOG4J2_PROPERTIES.format(log_file=self.log_file)
                )
                (work_dir / "server.properties").write_text(
                    self._server_properties(work_dir / "data")
                )
                self._rotate_logs()
                if not self._formatted:
                    self._format_storage(self._classpath)
                self._launch()
                return
            except PortRaceError:
                if attempt == attempts:
                    raise DevInfraError(
                        f"Kafka could not bind its ports after {attempts} attempts; "
                        f"see {self.log_file}"
                    ) from None
                # New ports (none was given explicitly), and storage formatted again for them.
                self.port = self.controller_port = None
                shutil.rmtree(work_dir / "data", ignore_errors=True)
                self._formatted = False

    def _check_ports(self) -> None:
        for name, port in (("port", self.port), ("controller_port", self.controller_port)):
            assert port is not None
            if not self._port_free(port):
                if not self._fixed_port:
                    raise PortRaceError()
                raise DevInfraError(
                    f"Kafka {name} {port} on {self.host} is already in use by another process "
                    f"(see 'ss -ltnp | grep :{port}'); pick another port or omit it to get a "
                    "free one"
                )

    def _spawn(self) -> ManagedProcess:
        work_dir = self._require_work_dir()
        return ManagedProcess.spawn(
            self._java_command(self._classpath, "kafka.Kafka", str(work_dir / "server.properties")),
            marker=self._marker(),
            log_file=self.stdout_file,
            cwd=work_dir,
            detach=self.detach,
            death_signal=self.death_signal,
            namespace_prefix=self._namespace_prefix(),
        )

    def _logs(self) -> list[Path]:
        return [self.log_file, self.stdout_file]

    def _startup_log(self) -> str:
        return tail(self.log_file, 40) + "\n" + tail(self.stdout_file, 20)

    def _is_port_race(self, log: str) -> bool:
        return "Address already in use" in log

    def _ready(self) -> bool:
        return wait_for_port(self.host, self.port or 0, timeout=0) and has_broker(
            self.bootstrap_servers
        )

    def stop(self, *, timeout: float = 30.0, remove_data: bool = True) -> None:
        """Stop the broker (controlled shutdown, ``SIGKILL`` after ``timeout``) and clean up.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait for a clean shutdown.
        remove_data : bool, optional
            Remove the work directory if this handle created it (logs in an explicit ``log_dir``
            are kept).
        """
        self._require_managed("stop")
        if self._process is not None:
            self._process.stop([(signal.SIGTERM, timeout)])
        if remove_data and self._own_work_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self._formatted = False

    def kill(self) -> None:
        """Kill the broker with ``SIGKILL`` (a crash); data stays, :meth:`start` brings it back."""
        self._require_managed("kill")
        if self._process is not None:
            self._process.stop([(signal.SIGKILL, 10.0)])

    def restart(self, *, timeout: float = 30.0) -> None:
        """Stop the broker and start it again with the same ports and data.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait for the clean shutdown.
        """
        self._require_managed("restart")
        if self._process is not None:
            self._process.stop([(signal.SIGTERM, timeout)])
        self._fixed_port = True
        self.start()

    # ---------------------------------------------------------------- helpers

    def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        config: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Create a topic and wait until its partitions have leaders.

        Parameters
        ----------
        name : str
            Topic name.
        partitions : int, optional
            Number of partitions.
        config : mapping of str to str, optional
            Topic configuration, e.g. ``{"cleanup.policy": "compact"}``.
        timeout : float, optional
            Seconds to wait.

        Raises
        ------
        DevInfraError
            If the topic cannot be created (e.g. it exists) or has no leaders in time.
        """
        create_topic(self.bootstrap_servers, name, partitions, config or {}, timeout)

    def __repr__(self) -> str:
        state = "running" if self.managed and self.is_running() else "stopped"
        if not self.managed:
            state = "external"
        return f"KafkaBroker(bootstrap_servers={self.port and self.bootstrap_servers!r}, {state})"
