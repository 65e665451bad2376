"""What every throwaway server of this package does, written once.

:class:`ManagedService` holds what every managed server process needs (its work directory and
owner file, its log, starting it and waiting until it is ready or died, the ``external`` handles);
:class:`~twophase_dev.KafkaBroker` builds on it. :class:`DatabaseServer` adds the life cycle shared
by :class:`~twophase_dev.PostgresServer` and
:class:`~twophase_dev.MariaDBServer`: the work directory and its owner file, the port (picked, or
given and checked) and the retry when a picked port is taken meanwhile, launching the server and
waiting until it accepts connections or dies, stopping it with a mode and waiting for it, restarting
it on the same port, and the records ``twophase-dev`` keeps. A subclass says only what is its own:
the binaries, how the data directory is made, the command line, the settings, the first users.

Runs on: the developer's or test session's machine, never on Spark executors.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from twophase_dev._common import (
    LOOPBACK,
    DevInfraError,
    ManagedProcess,
    PortRaceError,
    ServiceContext,
    free_ports,
    make_work_dir,
    port_is_free,
    rotate_log,
    tail,
    wait_until,
    write_owner,
)

if TYPE_CHECKING:
    from twophase_dev._netns import NetworkNamespace

__all__ = ["DatabaseServer", "ManagedService"]

_S = TypeVar("_S", bound="DatabaseServer")
_M = TypeVar("_M", bound="ManagedService")

#: How often a picked port is tried again when another process takes it first.
_PORT_ATTEMPTS = 3


class ManagedService(ServiceContext):
    """A server process on 127.0.0.1 started and watched by this package (or an external one).

    Parameters
    ----------
    port : int, optional
        TCP port; a free one is picked if omitted.
    work_dir : pathlib.Path, optional
        The server's directory; a throwaway ``twophase-dev-<kind>-*`` directory in the system
        temporary directory by default (removed by ``stop``).
    log_dir : pathlib.Path, optional
        Where the logs go; kept after ``stop``. Defaults to ``<work_dir>/logs``.
    detach : bool, optional
        ``True`` for a server that outlives this Python process; ``False`` makes the kernel stop it
        if this process dies first.
    startup_timeout : float, optional
        Seconds to wait for the server to be ready.
    netns : NetworkNamespace, optional
        Run the server inside this (created) network namespace, listening on its
        :attr:`~twophase_dev.NetworkNamespace.address` instead of 127.0.0.1, so that a test can
        cut it off (:meth:`~twophase_dev.NetworkNamespace.cut`). Such a server has no record.
    """

    #: ``kind`` of the records and of the work directory's name (``postgres``, ``kafka``, ...).
    kind: ClassVar[str]
    #: The product's name in messages (``PostgreSQL``, ``MariaDB``, ``Kafka``).
    product: ClassVar[str]
    #: What the product calls one running instance, in messages (``server``, ``broker``).
    noun: ClassVar[str] = "server"
    #: The environment variable that points at an external server of this kind.
    address_env: ClassVar[str]
    #: The server log's file name in :attr:`log_dir`.
    log_name: ClassVar[str]
    #: Signals (and seconds to wait after each) that stop a server which must go at once; after
    #: them ``SIGKILL``.
    crash_signals: ClassVar[tuple[tuple[int, float], ...]] = ()
    #: Signal the kernel sends the server when this process dies (unless ``detach``).
    death_signal: ClassVar[str] = "TERM"
    #: Seconds between two readiness checks while it starts.
    ready_interval: ClassVar[float] = 0.1
    #: The end of the log shown when it does not become ready, in lines.
    log_lines: ClassVar[int] = 30
    #: What it failed to do in time, for the message (``did not accept connections``).
    not_ready: ClassVar[str] = "did not accept connections"

    def __init__(
        self,
        *,
        port: int | None,
        work_dir: Path | None,
        log_dir: Path | None,
        detach: bool,
        startup_timeout: float,
        netns: NetworkNamespace | None = None,
    ):
        #: The network namespace the server runs in, ``None`` for this process's.
        self.netns = netns
        self.host = LOOPBACK if netns is None else netns.address
        self.port = port
        self._fixed_port = port is not None
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir
        self._log_dir = log_dir
        self.detach = detach
        self.startup_timeout = startup_timeout
        self._process: ManagedProcess | None = None
        #: ``False`` for a server this package did not start (see ``external``).
        self.managed = True
        #: Seconds the last :meth:`start` took.
        self.startup_seconds: float | None = None

    # ---------------------------------------------------------------- what a subclass says

    def _address(self) -> str:
        """Return where clients find it, for messages."""
        return f"{self.host}:{self.port}"

    def _reachable(self) -> bool:
        """Tell whether an external server answers."""
        raise NotImplementedError

    def _locate(self) -> None:
        """Find the binaries (and the OS user) before anything is created; raise if missing."""
        raise NotImplementedError

    def _start_in(self, work_dir: Path) -> None:
        """Prepare ``work_dir``, choose the ports and :meth:`_launch` the server."""
        raise NotImplementedError

    def _forget_data(self) -> None:
        """Note that the data directory is gone (the next start makes it again)."""

    def _spawn(self) -> ManagedProcess:
        """Start the server process (its output appended to a log)."""
        raise NotImplementedError

    def _ready(self) -> bool:
        """Tell whether the starting server is ready for clients."""
        raise NotImplementedError

    def _is_port_race(self, log: str) -> bool:
        """Tell whether the end of the log says a port was taken."""
        raise NotImplementedError

    def _startup_log(self) -> str:
        """Return the end of the logs, shown when the server died while starting."""
        return tail(self.log_file, 30)

    # ---------------------------------------------------------------- network namespace

    def _namespace_prefix(self) -> list[str] | None:
        """Return the prefix that runs the server in :attr:`netns`, ``None`` without one."""
        return None if self.netns is None else self.netns.exec_prefix()

    def _port_free(self, port: int) -> bool:
        """Tell whether ``port`` can be listened on where the server runs (its namespace)."""
        if self.netns is None:
            return port_is_free(port)
        return self.netns.port_is_free(port)

    # ---------------------------------------------------------------- records

    def _marker(self) -> str:
        """Return what the server's command line names, by which its pid is trusted."""
        return str(self._require_work_dir())

    def _adopt(self, record: Mapping[str, Any]) -> None:
        """Take over the running server that ``record`` (see ``to_record``) describes."""
        self._own_work_dir = bool(record.get("own_work_dir", True))
        self._process = ManagedProcess(int(record["pid"]), self._marker())

    def _service_record(
        self, address: Mapping[str, Any], options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Return this running server's record (see ``to_record``).

        Parameters
        ----------
        address : mapping
            Where clients find it, after ``kind``, ``pid`` and ``port``.
        options : mapping
            How it was made, after the work directory and logs.

        Returns
        -------
        dict
            The record.
        """
        if self._process is None or self.work_dir is None:
            raise DevInfraError(f"the {self.noun} has not been started")
        if self.netns is not None:
            raise DevInfraError(
                f"a {self.product} {self.noun} in network namespace {self.netns.name} has no "
                "record: it lives only as long as the test session that made the namespace"
            )
        return {
            "kind": self.kind,
            "pid": self._process.pid,
            "port": self.port,
            **address,
            "work_dir": str(self.work_dir),
            "own_work_dir": self._own_work_dir,
            "log_dir": str(self.log_dir),
            "log_file": str(self.log_file),
            **options,
        }

    # ---------------------------------------------------------------- paths and state

    def _require_work_dir(self) -> Path:
        if self.work_dir is None:
            raise DevInfraError(f"the {self.noun} has no work directory yet: call start() first")
        return self.work_dir

    @property
    def log_dir(self) -> Path:
        """Directory holding the server's logs."""
        if self._log_dir is not None:
            return self._log_dir
        return self._require_work_dir() / "logs"

    @property
    def log_file(self) -> Path:
        """The server log."""
        return self.log_dir / self.log_name

    @property
    def pid(self) -> int | None:
        """Process id of the server, ``None`` when not started."""
        return None if self._process is None else self._process.pid

    def is_running(self) -> bool:
        """Tell whether the server process is alive.

        Returns
        -------
        bool
            ``True`` while the server process started by this handle runs; for an ``external``
            server, whether it answers.
        """
        if not self.managed:
            return self._reachable()
        return self._process is not None and self._process.alive()

    # ---------------------------------------------------------------- lifecycle

    def _require_managed(self, action: str) -> None:
        if not self.managed:
            raise DevInfraError(
                f"cannot {action} the {self.product} {self.noun} at {self._address()}: it was not "
                f"started by twophase_dev in this environment ({self.address_env} points at it)"
            )

    def start(self: _M) -> _M:
        """Make the data directory on the first call, start the server, wait until it is ready.

        Returns
        -------
        ManagedService
            ``self``, for chaining.

        Raises
        ------
        DevInfraError
            If the server is not installed, the port is taken (when given explicitly), or the server
            does not start in time; the message includes the end of its log.
        """
        self._require_managed("start")
        if self.is_running():
            return self
        if self.netns is not None and not self.netns.created:
            raise DevInfraError(
                f"network namespace {self.netns.name} of the {self.product} {self.noun} is gone"
            )
        started = time.monotonic()
        self._locate()
        created = self.work_dir is None
        if self.work_dir is None:
            self.work_dir = make_work_dir(self.kind)
        try:
            self._start_in(self.work_dir)
        except BaseException:
            if created:
                if self._process is not None and self._process.alive():
                    self._process.stop(self.crash_signals)
                shutil.rmtree(self.work_dir, ignore_errors=True)
                self.work_dir = None
                self._forget_data()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _launch(self) -> None:
        work_dir = self._require_work_dir()
        self._process = process = self._spawn()
        write_owner(work_dir, process.pid)

        def died() -> None:
            if process.alive():
                return
            log = self._startup_log()
            if self._is_port_race(log) and not self._fixed_port:
                raise PortRaceError()
            raise DevInfraError(
                f"{self.product} exited during startup (exit {process.returncode()}). "
                f"Log {self.log_file}:\n{log}"
            )

        if not wait_until(
            self._ready, timeout=self.startup_timeout, interval=self.ready_interval, abort=died
        ):
            process.stop(self.crash_signals)
            raise DevInfraError(
                f"{self.product} {self.not_ready} within {self.startup_timeout:.0f} s. "
                f"Log {self.log_file}:\n{tail(self.log_file, self.log_lines)}"
            )


class DatabaseServer(ManagedService):
    """A throwaway database server on 127.0.0.1: the part that does not depend on the product.

    Parameters
    ----------
    port : int, optional
        TCP port; a free one is picked if omitted. An explicit port that is taken fails with a clear
        :class:`DevInfraError`; a picked one that is taken meanwhile is retried with a new port.
    work_dir : pathlib.Path, optional
        Directory for the data (``<work_dir>/data``); a throwaway ``twophase-dev-<kind>-*``
        directory in the system temporary directory by default (removed by :meth:`stop`).
    log_dir : pathlib.Path, optional
        Where the server log goes; kept after :meth:`stop`. Defaults to ``<work_dir>/logs``.
    settings : mapping of str to str, optional
        Extra server settings, written as given.
    detach : bool, optional
        ``True`` for a server that outlives this Python process; ``False`` makes the kernel shut it
        down if this process dies first.
    startup_timeout : float, optional
        Seconds to wait for the server to accept connections.
    netns : NetworkNamespace, optional
        Run the server inside this network namespace (see :class:`ManagedService`).
    """

    #: Signal of each shutdown mode of :meth:`stop`.
    stop_signals: ClassVar[Mapping[str, int]]

    def __init__(
        self,
        *,
        port: int | None,
        work_dir: Path | None,
        log_dir: Path | None,
        settings: Mapping[str, str] | None,
        detach: bool,
        startup_timeout: float,
        netns: NetworkNamespace | None = None,
    ):
        super().__init__(
            port=port,
            work_dir=work_dir,
            log_dir=log_dir,
            detach=detach,
            startup_timeout=startup_timeout,
            netns=netns,
        )
        self.extra_settings = dict(settings or {})
        self._initialized = False

    # ---------------------------------------------------------------- what a subclass says

    def _record_options(self) -> dict[str, Any]:
        """Return the record's entries of this product (its address and options)."""
        raise NotImplementedError

    @classmethod
    def _options_of_record(cls, record: Mapping[str, Any]) -> dict[str, Any]:
        """Return the constructor's product-specific keyword arguments stored in ``record``."""
        raise NotImplementedError

    def _repr_options(self) -> str:
        """Return the product's options as shown by ``repr``."""
        raise NotImplementedError

    def _prepare_work_dir(self, work_dir: Path) -> None:
        """Make ``work_dir`` usable by the server's OS user (nothing to do by default)."""

    def _configure(self) -> None:
        """Write what the server reads at every start and does not depend on the port."""

    def _initialize(self) -> None:
        """Make the data directory (first start only)."""
        raise NotImplementedError

    def _configure_port(self) -> None:
        """Write what depends on the port, once it is chosen (nothing by default)."""

    def _accepts_connections(self) -> bool:
        """Tell whether a superuser connection succeeds."""
        raise NotImplementedError

    def _bootstrap(self) -> None:
        """Create the test user and database (first start only)."""
        raise NotImplementedError

    def _after_stop(self) -> None:
        """Wait for what outlives the server process, so that a restart can take its place."""

    def _reachable(self) -> bool:
        return self._accepts_connections()

    def _marker(self) -> str:
        return str(self.data_dir)

    def _ready(self) -> bool:
        return self._accepts_connections()

    def _forget_data(self) -> None:
        self._initialized = False

    # ---------------------------------------------------------------- records

    @classmethod
    def from_record(cls: type[_S], record: Mapping[str, Any]) -> _S:
        """Re-create the handle of a server started by another process (see :meth:`to_record`).

        Parameters
        ----------
        record : mapping
            What :meth:`to_record` returned.

        Returns
        -------
        DatabaseServer
            A handle (of this class) that can stop or restart that server.
        """
        server = cls(
            port=int(record["port"]),
            work_dir=Path(record["work_dir"]),
            log_dir=Path(record["log_dir"]),
            settings=dict(record.get("settings", {})),
            detach=True,
            **cls._options_of_record(record),
        )
        server._initialized = True
        server._adopt(record)
        return server

    def to_record(self) -> dict[str, Any]:
        """Describe this running server as JSON-serialisable data (for ``twophase-dev`` state).

        Returns
        -------
        dict
            Enough to re-create the handle with :meth:`from_record`.
        """
        return self._service_record(self._record_options(), {"settings": self.extra_settings})

    # ---------------------------------------------------------------- paths and state

    def _require_port(self) -> int:
        if self.port is None:
            raise DevInfraError("the server has no port yet: call start() first")
        return self.port

    @property
    def data_dir(self) -> Path:
        """The server's data directory, ``<work_dir>/data`` (``PGDATA``, MariaDB's ``datadir``)."""
        return self._require_work_dir() / "data"

    # ---------------------------------------------------------------- lifecycle

    def _start_in(self, work_dir: Path) -> None:
        self._prepare_work_dir(work_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._configure()
        first_start = not self._initialized
        if first_start:
            self._initialize()
            self._initialized = True
        attempts = 1 if self._fixed_port else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            if self.port is None:
                self.port = free_ports(1)[0]
            if not self._port_free(self.port):
                if self._fixed_port:
                    raise DevInfraError(
                        f"{self.product} port {self.port} on {self.host} is already in use by "
                        f"another process (see 'ss -ltnp | grep :{self.port}'); pick another port "
                        "or omit it to get a free one"
                    )
                self.port = None
                continue
            self._configure_port()
            rotate_log(self.log_file)
            try:
                self._launch()
                break
            except PortRaceError:
                if attempt == attempts:
                    raise DevInfraError(
                        f"{self.product} could not bind a port after {attempts} attempts; "
                        f"see {self.log_file}"
                    ) from None
                self.port = None
        else:
            raise DevInfraError(f"no free port found for {self.product} after {attempts} attempts")
        if first_start:
            self._bootstrap()

    def stop(self, *, mode: str = "fast", timeout: float = 30.0, remove_data: bool = True) -> None:
        """Shut the server down and, by default, delete its data.

        Parameters
        ----------
        mode : str, optional
            One of :attr:`stop_signals` (see the subclass); ``fast`` by default.
        timeout : float, optional
            Seconds to wait before escalating to :attr:`crash_signals`, then ``SIGKILL``.
        remove_data : bool, optional
            Delete the work directory if this handle created it (logs in an explicit ``log_dir``
            are kept).
        """
        self._require_managed("stop")
        if mode not in self.stop_signals:
            raise ValueError(f"mode must be one of {sorted(self.stop_signals)}, got {mode!r}")
        if self._process is not None:
            self._process.stop([(self.stop_signals[mode], timeout), *self.crash_signals])
            self._after_stop()
        if remove_data and self._own_work_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self._initialized = False

    def restart(self, *, mode: str = "fast", timeout: float = 30.0) -> None:
        """Stop the server and start it again on the same port with the same data.

        Parameters
        ----------
        mode : str, optional
            How to stop it, see :meth:`stop`.
        timeout : float, optional
            Seconds to wait for the shutdown.
        """
        self.stop(mode=mode, timeout=timeout, remove_data=False)
        self._fixed_port = True
        self.start()

    def __repr__(self) -> str:
        state = "external" if not self.managed else "running" if self.is_running() else "stopped"
        return f"{type(self).__name__}(port={self.port}, {self._repr_options()}, {state})"
