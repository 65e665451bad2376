"""The Go toolchain that builds fake-gcs-server: the machine's own, or one fetched once.

A fresh Debian has no Go, and Debian's ``golang-go`` is older than fake-gcs-server's ``go.mod``
asks for. Go publishes every release as a module of the Go module proxy
(``golang.org/toolchain@v0.0.1-go<version>.<os>-<arch>``; the ``go`` command itself fetches
toolchains that way when ``GOTOOLCHAIN`` asks for a newer one), so when no ``go`` is found the
pinned release is fetched from the proxy named by ``$GOPROXY``, checked against its pinned
SHA-256 and unpacked into twophase's cache. Nothing outside the cache is changed.

Runs on: the developer's or test session's machine (``scripts/setup.sh``), never on Spark executors.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from twophase_dev._errors import DevInfraError
from twophase_dev._host._files import cache_root, file_lock

__all__ = ["GO_VERSION", "find_go", "go_binary"]

#: The Go release fetched when the machine has no ``go`` (fake-gcs-server's go.mod needs 1.26).
GO_VERSION = "1.26.8"
#: SHA-256 of the proxy's zip of :data:`GO_VERSION`, per Linux architecture.
_TOOLCHAIN_SHA256 = {
    "amd64": "30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7",
    "arm64": "02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99",
}
#: The proxy used when ``$GOPROXY`` names none (the ``go`` command's own default).
_DEFAULT_PROXY = "https://proxy.golang.org"
_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
#: Seconds the download may take (the zip is about 70 MB).
_DOWNLOAD_TIMEOUT = 600.0


def _arch() -> str:
    arch = _ARCHES.get(platform.machine().lower())
    if arch is None or platform.system() != "Linux":
        raise DevInfraError(
            f"no Go toolchain is pinned for {platform.system()} {platform.machine()}: install Go "
            f"{GO_VERSION} or newer on PATH"
        )
    return arch


def _toolchain_dir(version: str) -> Path:
    return cache_root() / "go" / f"go{version}"


def _proxy() -> str:
    """Return the first HTTP proxy of ``$GOPROXY`` (split by ``,`` or ``|``), or Go's default."""
    for entry in os.environ.get("GOPROXY", "").replace("|", ",").split(","):
        entry = entry.strip()
        if entry.startswith(("https://", "http://")):
            return entry.rstrip("/")
    return _DEFAULT_PROXY


def find_go() -> str | None:
    """Return the ``go`` to build with, without fetching: PATH, ``/usr/local/go``, then the cache.

    Returns
    -------
    str or None
        The path of a ``go`` binary, or None when none is installed.
    """
    cached = _toolchain_dir(GO_VERSION) / "bin" / "go"
    for candidate in (shutil.which("go"), "/usr/local/go/bin/go", str(cached)):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _unpack(archive: Path, into: Path) -> None:
    """Unpack the toolchain zip's single top folder as ``into``, keeping the files' modes."""
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=into.parent))
    try:
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                target = Path(zipped.extract(info, staging))
                mode = (info.external_attr >> 16) & 0o777
                if mode and not info.is_dir():
                    target.chmod(mode)
        roots = list(staging.glob("golang.org/toolchain@*"))
        if len(roots) != 1 or not (roots[0] / "bin" / "go").exists():
            raise DevInfraError(f"{archive} is not a Go toolchain module (no bin/go inside)")
        shutil.rmtree(into, ignore_errors=True)
        roots[0].rename(into)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def fetch_go() -> Path:
    """Fetch the Go toolchain :data:`GO_VERSION` from the Go module proxy once; return its ``go``.

    Returns
    -------
    pathlib.Path
        ``<cache>/go/go<GO_VERSION>/bin/go``; a second call returns at once.

    Raises
    ------
    DevInfraError
        If the platform has no pinned toolchain, the proxy cannot be reached, or the zip's hash is
        not the pinned one (the message gives both hashes and the URL).
    """
    version = GO_VERSION
    arch = _arch()
    root = _toolchain_dir(version)
    binary = root / "bin" / "go"
    if binary.exists():
        return binary
    root.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(root.parent / f"{root.name}.lock"):
        if binary.exists():  # another process fetched it meanwhile
            return binary
        url = f"{_proxy()}/golang.org/toolchain/@v/v0.0.1-go{version}.linux-{arch}.zip"
        archive = root.parent / f"{root.name}.linux-{arch}.zip.part"
        digest = hashlib.sha256()
        try:
            with (
                urllib.request.urlopen(url, timeout=60.0) as response,
                archive.open("wb") as out,
            ):
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        except (OSError, urllib.error.URLError) as exc:
            archive.unlink(missing_ok=True)
            raise DevInfraError(
                f"could not fetch Go {version} from the Go module proxy ({url}): {exc}; install "
                f"Go {GO_VERSION} or newer on PATH, or set GOPROXY"
            ) from exc
        expected = _TOOLCHAIN_SHA256[arch]
        if digest.hexdigest() != expected:
            archive.unlink(missing_ok=True)
            raise DevInfraError(
                f"the Go toolchain fetched from {url} has SHA-256 {digest.hexdigest()}, not the "
                f"pinned {expected}: refused"
            )
        try:
            _unpack(archive, root)
        finally:
            archive.unlink(missing_ok=True)
    _check(binary)
    return binary


def _check(binary: Path) -> None:
    result = subprocess.run(
        [str(binary), "version"],
        env={**os.environ, "GOTOOLCHAIN": "local"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise DevInfraError(f"{binary} does not run: {result.stderr.strip() or result.stdout}")


def go_binary() -> str:
    """Return the ``go`` to build with, fetching the pinned toolchain if none is installed.

    Returns
    -------
    str
        The path of a ``go`` binary (see :func:`find_go` and :func:`fetch_go`).
    """
    return find_go() or str(fetch_go())
