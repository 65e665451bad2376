"""Build the project's wheels the way a release does, from a copy of the source tree.

The copy keeps the working tree free of ``build/`` and ``*.egg-info``; the rest of the repository
is copied too, so that a packaging test proves the build leaves it out.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SOURCES = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "LICENSE",
    "twophase",
    "connectors",
    "tools",
    "tests",
    "examples",
    "benchmarks",
)
_IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")


def copy_sources(dest: Path) -> Path:
    """Copy the repository's sources to ``dest`` (created); return it."""
    dest.mkdir()
    for name in _SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=_IGNORE)
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def run(*args: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a command; fail with its output unless it exits 0."""
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result


def build_wheel(src: Path, dist: Path, pattern: str) -> Path:
    """Build the wheel of the project at ``src`` into ``dist``; return the one ``pattern`` finds."""
    # --no-isolation: build with the setuptools of this environment, no download.
    run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, src, cwd=src)
    (wheel,) = dist.glob(pattern)
    return wheel
