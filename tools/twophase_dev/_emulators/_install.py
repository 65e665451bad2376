"""Installing the cloud-storage emulators once into twophase's cache, each pinned to one version.

fake-gcs-server is built by ``go install`` from the Go module proxy (with the machine's Go, or else
the toolchain :mod:`twophase_dev._go` fetches); Azurite is installed by ``npm install --prefix``
into a directory of its own. Each install directory gets a stamp naming its version once done.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from twophase_dev._errors import DevInfraError
from twophase_dev._go import go_binary
from twophase_dev._host._files import cache_root, file_lock, tail

__all__ = [
    "AZURITE_ACCOUNT_KEY",
    "AZURITE_ACCOUNT_NAME",
    "AZURITE_VERSION",
    "FAKE_GCS_VERSION",
    "install_azurite",
    "install_emulators",
    "install_fake_gcs",
    "tool",
]

#: fake-gcs-server's version (a Go module version of ``github.com/fsouza/fake-gcs-server``).
FAKE_GCS_VERSION = "v1.56.1"
#: Azurite's version (the npm package ``azurite``).
AZURITE_VERSION = "3.37.0"
#: Azurite's well-known development account.
AZURITE_ACCOUNT_NAME = "devstoreaccount1"
#: The published key of :data:`AZURITE_ACCOUNT_NAME` (not a secret: the same on every Azurite).
AZURITE_ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

_FAKE_GCS_MODULE = "github.com/fsouza/fake-gcs-server"
#: File written into an install directory once the install finished; it names the version.
_STAMP = ".twophase-installed"
#: Seconds an install may take (a cold Go build downloads and compiles ~200 modules).
_INSTALL_TIMEOUT = 1800.0


def _emulator_dir(name: str, version: str) -> Path:
    return cache_root() / "emulators" / f"{name}-{version}"


def _installed(directory: Path, version: str, product: Path) -> bool:
    with contextlib.suppress(OSError):
        return product.exists() and (directory / _STAMP).read_text().strip() == version
    return False


def tool(name: str) -> str:
    """Return the path of program ``name`` (``npm``, ``node``); raise if it is not on ``PATH``."""
    found = shutil.which(name)
    if found is None:
        raise DevInfraError(
            f"'{name}' was not found on PATH; Azurite, the Azure Blob emulator, needs Node.js "
            "with npm: run 'bash scripts/setup.sh', which installs Debian's nodejs and npm"
        )
    return found


def _install(
    directory: Path, version: str, product: Path, argv: list[str], env: dict[str, str], what: str
) -> Path:
    """Run ``argv`` under a lock unless ``product`` of ``version`` is already installed."""
    if _installed(directory, version, product):
        return product
    directory.mkdir(parents=True, exist_ok=True)
    with file_lock(directory.parent / f"{directory.name}.lock"):
        if _installed(directory, version, product):  # another process installed it meanwhile
            return product
        (directory / _STAMP).unlink(missing_ok=True)
        log_file = directory / "install.log"
        try:
            with log_file.open("wb") as out:
                result = subprocess.run(
                    argv,
                    cwd=directory,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=_INSTALL_TIMEOUT,
                    check=False,
                )
        except subprocess.TimeoutExpired as exc:
            raise DevInfraError(
                f"{what} did not finish within {_INSTALL_TIMEOUT:.0f} s; see {log_file}"
            ) from exc
        if result.returncode != 0 or not product.exists():
            raise DevInfraError(
                f"{what} failed (exit {result.returncode}): {' '.join(argv)}\n"
                f"{tail(log_file, 20)}\nFull log: {log_file}"
            )
        (directory / _STAMP).write_text(version + "\n")
    return product


def install_fake_gcs(version: str = FAKE_GCS_VERSION) -> Path:
    """Build fake-gcs-server once with ``go install`` and return its binary.

    Parameters
    ----------
    version : str, optional
        The Go module version, :data:`FAKE_GCS_VERSION` by default.

    Returns
    -------
    pathlib.Path
        ``<cache>/emulators/fake-gcs-server-<version>/fake-gcs-server``; a second call returns at
        once (the directory holds a stamp naming the installed version).

    Raises
    ------
    DevInfraError
        If Go can be neither found nor fetched, or the build fails; the message ends with the
        build's output.
    """
    directory = _emulator_dir("fake-gcs-server", version)
    binary = directory / "fake-gcs-server"
    if _installed(directory, version, binary):  # no Go needed, none fetched
        return binary
    env = {**os.environ, "GOBIN": str(directory), "CGO_ENABLED": "0"}
    env["GOFLAGS"] = f"{env.get('GOFLAGS', '')} -buildvcs=false".strip()
    argv = [go_binary(), "install", f"{_FAKE_GCS_MODULE}@{version}"]
    return _install(directory, version, binary, argv, env, f"building fake-gcs-server {version}")


def install_azurite(version: str = AZURITE_VERSION) -> Path:
    """Install Azurite once with ``npm install --prefix`` and return its blob server's entry point.

    Parameters
    ----------
    version : str, optional
        The npm version, :data:`AZURITE_VERSION` by default.

    Returns
    -------
    pathlib.Path
        ``<cache>/emulators/azurite-<version>/node_modules/.bin/azurite-blob``; a second call
        returns at once. Nothing is installed globally.

    Raises
    ------
    DevInfraError
        If npm is missing or the install fails; the message ends with npm's output.
    """
    directory = _emulator_dir("azurite", version)
    entry = directory / "node_modules" / ".bin" / "azurite-blob"
    npm = tool("npm")
    # --ignore-scripts: none is needed, and the result is the same whatever npm allows by default.
    argv = [npm, "install", "--prefix", str(directory), "--no-audit", "--no-fund"]
    argv += ["--ignore-scripts", "--loglevel=error", f"azurite@{version}"]
    what = f"npm install azurite@{version}"
    return _install(directory, version, entry, argv, dict(os.environ), what)


def install_emulators() -> dict[str, tuple[Path, float]]:
    """Install both emulators (if needed) and say where and how long each took.

    Returns
    -------
    dict
        ``{"fake-gcs-server v1.x.y": (binary, seconds), "azurite 3.x.y": (entry point, seconds)}``.
    """
    done: dict[str, tuple[Path, float]] = {}
    for label, install in (
        (f"fake-gcs-server {FAKE_GCS_VERSION}", install_fake_gcs),
        (f"azurite {AZURITE_VERSION}", install_azurite),
    ):
        started = time.monotonic()
        path = install()
        done[label] = (path, time.monotonic() - started)
    return done
