"""The Go toolchain of the dev tools: found on the machine, or fetched from the Go module proxy.

The fetch is tested against a local HTTP server that plays the proxy (``$GOPROXY`` points at it),
serving a zip shaped like the proxy's toolchain modules: the pinned hash decides, and the unpacked
``go`` keeps its executable bit.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from twophase_dev import DevInfraError, _go

pytestmark = pytest.mark.unit


def _toolchain_zip(version: str, arch: str) -> bytes:
    """A zip laid out as the proxy's ``golang.org/toolchain`` module, whose ``bin/go`` runs."""
    top = f"golang.org/toolchain@v0.0.1-go{version}.linux-{arch}"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zipped:
        script = zipfile.ZipInfo(f"{top}/bin/go")
        script.external_attr = 0o755 << 16
        zipped.writestr(script, f'#!/bin/sh\necho "go version go{version} linux/{arch}"\n')
        zipped.writestr(f"{top}/VERSION", f"go{version}\n")
    return out.getvalue()


@contextlib.contextmanager
def _proxy_serving(body: bytes) -> Iterator[tuple[str, list[str]]]:
    """Serve ``body`` for every GET on a free port; yield the base URL and the paths asked for."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def arch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """An empty cache and the machine's architecture as the proxy's name for it."""
    monkeypatch.setenv("TWOPHASE_CACHE_DIR", str(tmp_path / "cache"))
    return _go._arch()


@pytest.mark.parametrize(
    ("goproxy", "expected"),
    [
        ("", "https://proxy.golang.org"),
        ("off", "https://proxy.golang.org"),
        ("https://mirror.example/go/,direct", "https://mirror.example/go"),
        ("direct|http://127.0.0.1:9/x", "http://127.0.0.1:9/x"),
    ],
)
def test_the_proxy_is_the_first_http_entry_of_goproxy(
    monkeypatch: pytest.MonkeyPatch, goproxy: str, expected: str
) -> None:
    monkeypatch.setenv("GOPROXY", goproxy)
    assert _go._proxy() == expected


def test_a_fetched_toolchain_whose_hash_is_the_pinned_one_is_unpacked_and_runs(
    monkeypatch: pytest.MonkeyPatch, arch: str
) -> None:
    body = _toolchain_zip(_go.GO_VERSION, arch)
    monkeypatch.setitem(_go._TOOLCHAIN_SHA256, arch, hashlib.sha256(body).hexdigest())
    with _proxy_serving(body) as (url, asked):
        monkeypatch.setenv("GOPROXY", f"{url},direct")
        binary = _go.fetch_go()
        assert asked == [f"/golang.org/toolchain/@v/v0.0.1-go{_go.GO_VERSION}.linux-{arch}.zip"]
        assert binary == _go._toolchain_dir(_go.GO_VERSION) / "bin" / "go"
        assert binary.stat().st_mode & 0o111, "the executable bit is kept"
        assert _go.fetch_go() == binary
        assert len(asked) == 1, "a second call uses the cache"
    assert not list(binary.parents[2].glob("*.part")), "no download is left behind"


def test_a_fetched_toolchain_with_another_hash_is_refused_and_nothing_is_kept(
    monkeypatch: pytest.MonkeyPatch, arch: str
) -> None:
    body = _toolchain_zip(_go.GO_VERSION, arch)
    with _proxy_serving(body) as (url, _):
        monkeypatch.setenv("GOPROXY", url)
        with pytest.raises(DevInfraError, match="not the pinned") as refused:
            _go.fetch_go()
    assert hashlib.sha256(body).hexdigest() in str(refused.value)
    root = _go._toolchain_dir(_go.GO_VERSION)
    assert not root.exists()
    assert not list(root.parent.glob("*.part"))


def test_an_unreachable_proxy_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, arch: str
) -> None:
    monkeypatch.setenv("GOPROXY", "http://127.0.0.1:9")  # the discard port: nothing listens
    with pytest.raises(DevInfraError, match=r"could not fetch Go .* install Go"):
        _go.fetch_go()
