"""A local Spark Connect server, started from the installed PySpark.

The PySpark wheel ships the Connect server (``jars/spark-connect_*.jar``) from 4.0 on; for 3.5,
whose wheel has none, :func:`~twophase_dev._spark._jars.spark_connect_jars` resolves the server
jar of the same version with Maven (cached). It is started with ``bin/spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` on a free port of 127.0.0.1, in local
mode, with Spark's Kafka jars and this project's Python for its Python workers -- including the
``foreachBatch`` worker, which is where a twophase sink runs under Spark Connect. Clients
connect with :meth:`SparkConnectServer.session` (``sc://...``).

Every process of the server (the JVM and the Python workers it starts) carries the environment
variable :data:`CONNECT_ENV_MARKER`, so :meth:`SparkConnectServer.kill` -- a driver crash --
and :meth:`SparkConnectServer.stop` find all of them. The work directory, owner file, log,
startup and failed-start clean-up are :class:`~twophase_dev._server.ManagedService`'s.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from twophase_dev._errors import DevInfraError
from twophase_dev._host._ports import LOOPBACK, free_ports
from twophase_dev._host._proc import ProcStat, processes_with_env, signal_each
from twophase_dev._host._process import ManagedProcess
from twophase_dev._host._wait import wait_until
from twophase_dev._jvm import find_java, pyspark_home, spark_jvm_options
from twophase_dev._server import ManagedService
from twophase_dev._spark._jars import spark_connect_jars, spark_kafka_jars
from twophase_dev._spark._local import spark_test_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CONNECT_ENV_MARKER", "SparkConnectServer"]

#: Environment variable set on every process of a Connect server (value: its work directory).
CONNECT_ENV_MARKER = "TWOPHASE_DEV_SPARK_CONNECT"

_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_STARTED = "Spark Connect server started at"


class SparkConnectServer(ManagedService):
    """A Spark Connect server in local mode on ``127.0.0.1``.

    Parameters
    ----------
    master : str, optional
        The server's Spark master (``local[2,2]`` retries a failed task once).
    conf : mapping of str to str, optional
        Extra Spark settings of the server (on top of :func:`spark_test_conf`).
    kafka : bool, optional
        Put Spark's Kafka connector on the server's classpath.
    jars : sequence of pathlib.Path, optional
        More jars for the server's classpath (a Hadoop file system's connector).
    env : mapping of str to str, optional
        More environment variables of the server and its Python workers.
    python_path : sequence of str, optional
        Directories added to the Python workers' ``PYTHONPATH`` (test modules whose functions
        are pickled by reference).
    port : int, optional
        The gRPC port; a free one by default. A restarted server keeps its port.
    startup_timeout : float, optional
        Seconds to wait for the server.

    Examples
    --------
    >>> with SparkConnectServer() as server:  # doctest: +SKIP
    ...     spark = server.session()
    ...     spark.range(3).count()
    3
    """

    kind: ClassVar[str] = "spark-connect"
    product: ClassVar[str] = "Spark Connect"
    #: None: a Connect server is always started here, never attached to.
    address_env: ClassVar[str] = ""
    log_name: ClassVar[str] = "connect-server.log"
    ready_interval: ClassVar[float] = 0.2
    log_lines: ClassVar[int] = 40
    not_ready: ClassVar[str] = "server did not start"

    def __init__(
        self,
        *,
        master: str = "local[2]",
        conf: Mapping[str, str] | None = None,
        kafka: bool = True,
        jars: tuple[Path, ...] = (),
        env: Mapping[str, str] | None = None,
        python_path: tuple[str, ...] = (),
        port: int | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        super().__init__(
            port=port if port is not None else free_ports(1)[0],
            work_dir=None,
            log_dir=None,
            detach=False,
            startup_timeout=startup_timeout,
        )
        self.master = master
        self.conf = dict(conf or {})
        self.kafka = kafka
        self.jars = jars
        self.env = dict(env or {})
        self.python_path = python_path

    @property
    def url(self) -> str:
        """Return the ``sc://`` URL clients connect to."""
        return f"sc://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Return the JVM's pid while it runs."""
        return self._process.pid if self._process is not None and self._process.alive() else None

    def _env(self) -> dict[str, str]:
        work_dir = self._require_work_dir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        paths = [*self.python_path, env.get("PYTHONPATH", "")]
        env.update(
            {
                "SPARK_HOME": str(pyspark_home()),
                "SPARK_LOCAL_IP": LOOPBACK,
                "SPARK_LOCAL_DIRS": str(work_dir / "local"),
                "PYSPARK_PYTHON": sys.executable,
                "PYTHONPATH": os.pathsep.join(p for p in paths if p),
                CONNECT_ENV_MARKER: str(work_dir),
                **self.env,
            }
        )
        return env

    def _argv(self) -> list[str]:
        conf = spark_test_conf(kafka=False)
        conf.update(
            {
                "spark.connect.grpc.binding.address": LOOPBACK,
                "spark.connect.grpc.binding.port": str(self.port),
                "spark.driver.extraJavaOptions": (
                    f"-Dtwophase.dev.workdir={self.work_dir} {spark_jvm_options()}"
                ),
            }
        )
        conf.update(self.conf)
        argv = [str(pyspark_home() / "bin" / "spark-submit"), "--master", self.master]
        jars = [*spark_connect_jars(), *(spark_kafka_jars() if self.kafka else []), *self.jars]
        if jars:
            argv += ["--jars", ",".join(str(j) for j in jars)]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        return [*argv, "--class", _SERVER_CLASS, "--name", "twophase-connect", "spark-internal"]

    def start(self) -> SparkConnectServer:
        """Start the server and wait until it accepts sessions.

        Returns
        -------
        SparkConnectServer
            ``self``, for chaining.

        Raises
        ------
        DevInfraError
            If Java is missing or the server does not come up; the message ends with its log.
        """
        return super().start()

    def _locate(self) -> None:
        if find_java() is None:
            raise DevInfraError("Java was not found: run 'bash scripts/setup.sh'")

    def _start_in(self, work_dir: Path) -> None:
        (work_dir / "local").mkdir(exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._rotate_logs()
        self._launch()

    def _spawn(self) -> ManagedProcess:
        return ManagedProcess.spawn(
            self._argv(),
            marker=self._marker(),
            log_file=self.log_file,
            cwd=self._require_work_dir(),
            env=self._env(),
            detach=self.detach,
            death_signal=self.death_signal,
        )

    def _ready(self) -> bool:
        try:
            return _STARTED in self.log_file.read_text(errors="replace")
        except OSError:
            return False

    def _is_port_race(self, log: str) -> bool:
        return False  # the port is kept across restarts: a taken one is an error

    def _abandon_start(self, created: bool) -> None:
        self.kill()

    def _processes(self) -> list[ProcStat]:
        """Return every process of this server (the JVM and its Python workers)."""
        if self.work_dir is None:
            return []
        return processes_with_env(CONNECT_ENV_MARKER, str(self.work_dir))

    def python_worker_pids(self) -> list[int]:
        """Return the pids of the server's Python processes (``foreachBatch`` worker included)."""
        jvm = self.pid
        return [p.pid for p in self._processes() if p.pid != jvm]

    def kill(self) -> None:
        """Crash the server: ``SIGKILL`` the JVM and every Python process it started."""
        if self.work_dir is None:
            return
        signal_each(self._processes(), signal.SIGKILL)
        if self._process is not None:
            self._process.wait(10.0)
        wait_until(lambda: not self._processes(), timeout=10.0)

    def restart(self) -> SparkConnectServer:
        """Start the server again (same port and work directory) after :meth:`kill`."""
        self.kill()
        return self.start()

    def stop(self) -> None:
        """Stop the server (``SIGTERM``, then ``SIGKILL``) and remove its work directory."""
        if self._process is not None:
            with contextlib.suppress(DevInfraError):
                self._process.stop([(signal.SIGTERM, 15.0)])
        self.kill()
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    def session(self) -> SparkSession:
        """Return a new Spark Connect session on this server.

        Returns
        -------
        pyspark.sql.SparkSession
            A Connect session (``pyspark.sql.connect``); stop it with ``spark.stop()``.
        """
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(self.url).create()
