"""Packaging: the wheel and an editable install expose the connectors as ``twophase.connectors.*``.

``connectors/`` sits at the top of the repository but is mapped onto ``twophase.connectors`` by
``[tool.setuptools] package-dir`` in pyproject.toml. These tests build from a copy of the source
tree (so the working tree gets no ``build/`` or ``*.egg-info``) and need no server, no network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]
_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "twophase", "connectors")


def _copy_sources(dest: Path) -> Path:
    dest.mkdir()
    for name in _SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result


def test_wheel_contains_connectors_under_twophase(tmp_path: Path) -> None:
    src = _copy_sources(tmp_path / "src")
    dist = tmp_path / "dist"
    # --no-isolation: build with the setuptools of this environment, no download.
    _run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, src, cwd=src)
    (wheel,) = dist.glob("twophase-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())

    assert "twophase/connectors/__init__.py" in names
    assert "twophase/connectors/kafka/__init__.py" in names
    assert "twophase/connectors/jdbc/__init__.py" in names
    assert "twophase/py.typed" in names
    assert "twophase/connectors/py.typed" in names
    assert "twophase/dev/__main__.py" in names
    assert not [n for n in names if n.startswith("connectors/")], "connectors/ leaked to top level"
    # Every module of the source tree made it into the wheel.
    for module in (ROOT / "connectors").rglob("*.py"):
        relative = module.relative_to(ROOT / "connectors").as_posix()
        if "__pycache__" not in relative:
            assert f"twophase/connectors/{relative}" in names


def test_editable_install_maps_connectors_to_twophase_connectors(tmp_path: Path) -> None:
    src = _copy_sources(tmp_path / "src")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    # Let the fresh environment import this one's packages (pyspark, setuptools, ...) without
    # activating this environment's own editable install of twophase: a path in a .pth file is
    # added to sys.path, but .pth files inside that path are not processed.
    target_site = Path(
        _run(
            python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=tmp_path
        ).stdout.strip()
    )
    (target_site / "parent_env.pth").write_text(sysconfig.get_path("purelib") + "\n")

    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "--editable",
        src,
        cwd=tmp_path,
    )
    probe = _run(
        python,
        "-c",
        "import twophase.connectors.kafka as k, twophase.connectors.jdbc as j, twophase.dev as d\n"
        "print(k.__file__); print(j.__file__); print(d.__file__)",
        cwd=tmp_path,
    )
    kafka_file, jdbc_file, dev_file = (Path(p) for p in probe.stdout.split())
    assert kafka_file == src / "connectors" / "kafka" / "__init__.py"
    assert jdbc_file == src / "connectors" / "jdbc" / "__init__.py"
    assert dev_file == src / "twophase" / "dev" / "__init__.py"
