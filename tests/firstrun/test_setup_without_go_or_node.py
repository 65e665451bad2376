"""The set-up on a machine without Go or Node.js, as a fresh Debian 12 is.

This machine has both, so each test runs its command in a mount namespace of its own where they
are hidden (``unshare --mount``: every PATH folder that holds ``go``, ``node``, ``npm`` or ``npx``
under an overlay that deletes them, ``/usr/local/go`` under an empty tmpfs), and first asserts
that they are absent there. Nothing outside the namespace changes, and the namespace ends with the
command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from twophase_dev._go import GO_VERSION

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("go", "node", "npm", "npx")

#: Hides the tools, proves it, then runs "$@" (bash -c SCRIPT hide SCRATCH ARGS...): each PATH
#: folder holding one of them is covered by an overlay whose upper layer (on a tmpfs in SCRATCH)
#: deletes it, so that the tool is absent there as on a machine without it.
_HIDE = r"""
set -euo pipefail
mount --make-rprivate /
scratch="$1"
shift
mount -t tmpfs tmpfs "$scratch"
n=0
for tool in go node npm npx; do
    IFS=: read -ra dirs <<<"$PATH"
    for dir in "${dirs[@]}"; do
        [[ -e "$dir/$tool" || -L "$dir/$tool" ]] || continue
        if ! grep -q " $dir overlay " /proc/mounts; then
            n=$((n + 1))
            mkdir -p "$scratch/$n/upper" "$scratch/$n/work"
            mount -t overlay overlay \
                -o "lowerdir=$dir,upperdir=$scratch/$n/upper,workdir=$scratch/$n/work" "$dir"
        fi
        rm -f "$dir/$tool"
    done
done
if [[ -d /usr/local/go ]]; then mount -t tmpfs tmpfs /usr/local/go; fi
hash -r
for tool in go node npm npx; do
    if command -v "$tool" >/dev/null; then echo "still found: $tool"; exit 97; fi
done
echo "hidden: go node npm npx"
exec "$@"
"""


def _hidden(argv: list[str], *, env: dict[str, str], scratch: Path, timeout: float) -> str:
    """Run ``argv`` in a mount namespace without Go and Node.js; return its output (exit 0)."""
    scratch.mkdir()
    done = subprocess.run(
        ["unshare", "--mount", "bash", "-c", _HIDE, "hide", str(scratch), *argv],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    out = done.stdout + done.stderr
    assert "hidden: go node npm npx" in out, out[-3000:]
    assert done.returncode == 0, out[-3000:]
    return out


@pytest.fixture(scope="module")
def can_hide() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("hiding a toolchain needs root and unshare (util-linux)")


def test_the_demo_setup_needs_neither_go_nor_node(can_hide: None, tmp_path: Path) -> None:
    argv = ["bash", "scripts/setup.sh", "--for", "demo"]
    out = _hidden(argv, env=dict(os.environ), scratch=tmp_path / "scratch", timeout=300)
    assert "[setup] done for the demo" in out, out[-3000:]
    assert "emulators" not in out, "the demo installs no storage emulator"
    assert "Hadoop GCS connector" not in out, "nor the GCS connector"
    assert "apt-get install" not in out, out[-3000:]


def test_without_go_the_gcs_emulator_is_built_with_the_toolchain_from_the_go_module_proxy(
    can_hide: None, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "TWOPHASE_CACHE_DIR": str(cache)}
    program = (
        "from twophase_dev._emulators._install import install_fake_gcs; print(install_fake_gcs())"
    )
    argv = [str(ROOT / ".venv" / "bin" / "python"), "-c", program]
    out = _hidden(argv, env=env, scratch=tmp_path / "scratch", timeout=540)
    go = cache / "go" / f"go{GO_VERSION}" / "bin" / "go"
    assert go.exists(), "the toolchain was fetched into the cache"
    built = Path(out.strip().splitlines()[-1])
    assert built.parent.parent == cache / "emulators", out[-3000:]
    assert built.exists(), out[-3000:]
    version = subprocess.run([str(built), "-help"], capture_output=True, text=True, check=False)
    assert "-scheme" in version.stdout + version.stderr, "fake-gcs-server runs"
