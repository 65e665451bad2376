"""Cloud-storage emulators for the coordinator-log tests, running: fake-gcs-server and Azurite.

The idea: a store for Google Cloud Storage or Azure Blob Storage is tested against a real server
program that speaks the service's HTTP API, not against a mock inside the test process, just as the
S3 store is tested against moto's S3 server (``tests/conftest.py``). Each emulator is pinned to one
version, installed once into twophase's cache by the ordinary client of its registry
(:mod:`._install`), and started on a free port of 127.0.0.1 with a throwaway backend;
it dies with the Python process that started it (parent-death signal).

- :class:`FakeGcsServer`: `fake-gcs-server <https://github.com/fsouza/fake-gcs-server>`_, a Go
  program built by ``go install`` from the Go module proxy (:func:`install_fake_gcs`; with the
  machine's Go, or else the toolchain :mod:`twophase_dev._go` fetches), serving the
  GCS JSON API over plain HTTP with an in-memory backend. Clients find it through
  ``STORAGE_EMULATOR_HOST``.
- :class:`AzuriteServer`: the blob service of `Azurite <https://github.com/Azure/Azurite>`_, the
  npm package, installed with ``npm install --prefix`` into a directory of its own
  (:func:`install_azurite`), keeping its data in the throwaway work directory. Clients use the
  well-known development account through :attr:`AzuriteServer.connection_string`.

The versions are the newest that install here and that refuse a second conditional create, also
when 20 writers race for the same name: ``ifGenerationMatch=0`` on GCS (412 for all but one) and
``If-None-Match: *`` on Azure (409 ``BlobAlreadyExists`` for all but one), which is what a
coordinator log needs from its store. Azurite runs without ``--loose``, so a header it does not
implement is refused instead of silently ignored.

Runs on: the developer's or test session's machine, never on Spark executors.
"""

from __future__ import annotations

import shutil
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import ClassVar

from twophase_dev._emulators._install import (
    AZURITE_ACCOUNT_KEY,
    AZURITE_ACCOUNT_NAME,
    install_azurite,
    install_fake_gcs,
    tool,
)
from twophase_dev._errors import DevInfraError, PortRaceError
from twophase_dev._host._ports import free_ports
from twophase_dev._host._process import ManagedProcess
from twophase_dev._server import ManagedService

__all__ = ["AzuriteServer", "FakeGcsServer"]

#: How often a picked port is tried again when another process takes it first.
_PORT_ATTEMPTS = 3


def _answers(url: str, *, ok_only: bool) -> bool:
    """Tell whether an HTTP server answers ``url`` (with 2xx only, if ``ok_only``)."""
    try:
        with urllib.request.urlopen(url, timeout=1.0):
            return True
    except urllib.error.HTTPError:
        return not ok_only  # it answered, if only to refuse an unsigned request
    except OSError:
        return False


class _Emulator(ManagedService):
    """A storage emulator on a free port of 127.0.0.1: the part both products share."""

    noun = "emulator"
    crash_signals = ((signal.SIGTERM, 10.0),)
    ready_interval = 0.05
    not_ready = "did not answer HTTP requests"
    #: Path probed while it starts, and whether only a 2xx answer counts.
    probe_path: ClassVar[str] = "/"
    probe_ok_only: ClassVar[bool] = False

    def __init__(
        self, *, port: int | None = None, log_dir: Path | None = None, startup_timeout: float = 60.0
    ) -> None:
        super().__init__(
            port=port, work_dir=None, log_dir=log_dir, detach=False, startup_timeout=startup_timeout
        )
        self._program: Path | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, where clients reach the emulator."""
        if self.port is None:
            raise DevInfraError(f"the {self.product} {self.noun} has no port yet: call start()")
        return f"http://{self.host}:{self.port}"

    def _reachable(self) -> bool:
        return _answers(self.url + self.probe_path, ok_only=self.probe_ok_only)

    def _ready(self) -> bool:
        return self._reachable()

    def _is_port_race(self, log: str) -> bool:
        return "address already in use" in log.lower() or "EADDRINUSE" in log

    def _argv(self, program: Path, work_dir: Path) -> list[str]:
        """Return the emulator's command line (its port is chosen)."""
        raise NotImplementedError

    def _start_in(self, work_dir: Path) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        attempts = 1 if self._fixed_port else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            if self.port is None:
                (self.port,) = free_ports(1)
            try:
                if not self._port_free(self.port):
                    if self._fixed_port:
                        raise DevInfraError(f"port {self.port} of {self.product} is taken")
                    raise PortRaceError()
                self._rotate_logs()
                self._launch()
                return
            except PortRaceError:
                self.port = None
                if attempt == attempts:
                    raise DevInfraError(
                        f"{self.product} could not bind a port after {attempts} attempts; "
                        f"see {self.log_file}"
                    ) from None

    def _spawn(self) -> ManagedProcess:
        work_dir = self._require_work_dir()
        assert self._program is not None
        return ManagedProcess.spawn(
            self._argv(self._program, work_dir),
            marker=self._marker(),
            log_file=self.log_file,
            cwd=work_dir,
            death_signal=self.death_signal,
        )

    def stop(self) -> None:
        """Stop the emulator (``SIGTERM``, then ``SIGKILL``) and delete its data; logs stay."""
        if self._process is not None:
            self._process.stop(self.crash_signals)
            self._process = None
        if self.work_dir is not None and self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None
        if not self._fixed_port:
            self.port = None


class FakeGcsServer(_Emulator):
    """fake-gcs-server on 127.0.0.1: the GCS JSON API over HTTP, objects in memory.

    Upload and media links point back at it (``-external-url`` and ``-public-host``). Buckets are
    created with ``POST {url}/storage/v1/b?project=test`` and a JSON body ``{"name": ...}``; the
    Google client libraries find it through ``STORAGE_EMULATOR_HOST={url}``.

    Parameters
    ----------
    port : int, optional
        The HTTP port; a free one by default.
    log_dir : pathlib.Path, optional
        Where ``fake-gcs-server.log`` (its request log) goes; kept after :meth:`stop`. Defaults to
        the throwaway work directory.
    startup_timeout : float, optional
        Seconds to wait for its health check to answer.
    log_level : str, optional
        ``info`` logs every request; ``warn`` only problems.

    Examples
    --------
    >>> with FakeGcsServer() as gcs:  # doctest: +SKIP
    ...     print(gcs.url)
    http://127.0.0.1:40123
    """

    kind = "fake-gcs"
    product = "fake-gcs-server"
    address_env = "TWOPHASE_GCS_ENDPOINT"
    log_name = "fake-gcs-server.log"
    probe_path = "/_internal/healthcheck"
    probe_ok_only = True

    def __init__(
        self,
        *,
        port: int | None = None,
        log_dir: Path | None = None,
        startup_timeout: float = 60.0,
        log_level: str = "info",
    ) -> None:
        super().__init__(port=port, log_dir=log_dir, startup_timeout=startup_timeout)
        self.log_level = log_level

    def _locate(self) -> None:
        self._program = install_fake_gcs()

    def _argv(self, program: Path, work_dir: Path) -> list[str]:
        seed = work_dir / "seed"  # objects to preload, one directory per bucket: none
        seed.mkdir(exist_ok=True)
        options = {
            "-scheme": "http",
            "-host": self.host,
            "-port": str(self.port),
            "-backend": "memory",
            "-data": str(seed),
            "-external-url": self.url,  # upload sessions' Location
            "-public-host": f"{self.host}:{self.port}",  # media links
            "-log-level": self.log_level,
        }
        return [str(program), *(part for pair in options.items() for part in pair)]


class AzuriteServer(_Emulator):
    """Azurite's blob service on 127.0.0.1, with its data in the throwaway work directory.

    Parameters
    ----------
    port : int, optional
        The blob port; a free one by default.
    log_dir : pathlib.Path, optional
        Where ``azurite-blob.log`` goes; kept after :meth:`stop`. Defaults to the throwaway work
        directory.
    startup_timeout : float, optional
        Seconds to wait for it to answer.
    debug : bool, optional
        Also write Azurite's debug log (every request with its headers) to
        ``azurite-debug.log`` in ``log_dir``.

    Examples
    --------
    >>> from azure.storage.blob import BlobServiceClient  # doctest: +SKIP
    >>> with AzuriteServer() as azure:  # doctest: +SKIP
    ...     client = BlobServiceClient.from_connection_string(azure.connection_string)
    ...     client.create_container("log")
    """

    kind = "azurite"
    product = "Azurite"
    address_env = "TWOPHASE_AZURE_CONNECTION_STRING"
    log_name = "azurite-blob.log"
    probe_path = f"/{AZURITE_ACCOUNT_NAME}?comp=list"  # 403 to an unsigned request: it answers

    def __init__(
        self,
        *,
        port: int | None = None,
        log_dir: Path | None = None,
        startup_timeout: float = 60.0,
        debug: bool = False,
    ) -> None:
        super().__init__(port=port, log_dir=log_dir, startup_timeout=startup_timeout)
        self.debug = debug
        self._node = ""

    @property
    def blob_endpoint(self) -> str:
        """``http://127.0.0.1:PORT/devstoreaccount1``: the account's blob endpoint."""
        return f"{self.url}/{AZURITE_ACCOUNT_NAME}"

    @property
    def connection_string(self) -> str:
        """The connection string of the development account on this emulator."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT_NAME};"
            f"AccountKey={AZURITE_ACCOUNT_KEY};BlobEndpoint={self.blob_endpoint};"
        )

    def _locate(self) -> None:
        self._program = install_azurite()
        self._node = tool("node")

    def _argv(self, program: Path, work_dir: Path) -> list[str]:
        options = {
            "--blobHost": self.host,
            "--blobPort": str(self.port),
            "--location": str(work_dir / "data"),
        }
        # --skipApiVersionCheck: newer SDKs send an x-ms-version that Azurite does not know yet;
        # --disableProductStyleUrl: the account is the first path segment, whatever the host.
        flags = ["--silent", "--skipApiVersionCheck", "--disableProductStyleUrl"]
        argv = [self._node, str(program.resolve())]  # the package's script, not npm's symlink
        argv += [*(part for pair in options.items() for part in pair), *flags, "--disableTelemetry"]
        if self.debug:
            argv += ["--debug", str(self.log_dir / "azurite-debug.log")]
        return argv
