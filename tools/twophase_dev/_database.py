"""What a throwaway database server does whatever the product (PostgreSQL and MariaDB share it).

:class:`DatabaseServer` adds to :class:`~twophase_dev._server.ManagedService` the data directory
made on the first start, the port (picked, or given and checked) and the retry when a picked port
is taken meanwhile, stopping with a mode and waiting for what outlives the process, restarting on
the same port, and the records ``twophase-dev`` keeps. A subclass says only what is its own: the
binaries, how the data directory is made, the command line, the settings, the first users.

Runs on: the developer's or test session's machine, never on Spark executors.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from twophase_dev._errors import DevInfraError, PortRaceError
from twophase_dev._host._ports import free_ports
from twophase_dev._server import ManagedService

if TYPE_CHECKING:
    from twophase_dev._netns._namespace import NetworkNamespace

__all__ = ["DatabaseServer"]

_S = TypeVar("_S", bound="DatabaseServer")

#: How often a picked port is tried again when another process takes it first.
_PORT_ATTEMPTS = 3


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
            self._rotate_logs()
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
