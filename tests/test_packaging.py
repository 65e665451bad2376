"""Packaging: the wheel and an editable install expose the connectors as ``twophase.connectors.*``.

``connectors/`` sits at the top of the repository but is mapped onto ``twophase.connectors`` by
``[tool.setuptools] package-dir`` in pyproject.toml. The development infrastructure is a separate
distribution (``tools/pyproject.toml``, package ``twophase_dev``, command ``twophase-dev``) and must
never end up in the ``twophase`` wheel. These tests build from a copy of the source tree (so the
working tree gets no ``build/`` or ``*.egg-info``) and need no server, no network.
"""

from __future__ import annotations

import configparser
import re
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import twophase
from tests.wheel_support import build_wheel, copy_sources, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]
DIST_INFO = f"twophase-{twophase.__version__}.dist-info"


def _console_scripts(wheel: zipfile.ZipFile) -> dict[str, str]:
    """Return the wheel's console scripts (name -> entry point); empty without entry_points.txt."""
    entry_points = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    if not entry_points:
        return {}
    (name,) = entry_points
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.read_string(wheel.read(name).decode())
    if not parser.has_section("console_scripts"):
        return {}
    return dict(parser.items("console_scripts"))


def test_wheel_contains_the_library_and_no_dev_infrastructure(tmp_path: Path) -> None:
    src = copy_sources(tmp_path / "src")
    wheel_path = build_wheel(src, tmp_path / "dist", "twophase-*.whl")
    with zipfile.ZipFile(wheel_path) as wheel:
        names = set(wheel.namelist())
        scripts = _console_scripts(wheel)
        metadata = wheel.read(f"{DIST_INFO}/METADATA").decode()

    # PySpark only through an extra: a platform's own Spark is never replaced by pip.
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    spark = [line for line in requires if "pyspark" in line]
    assert spark, requires
    assert all("extra ==" in line for line in spark), spark
    assert "Requires-Python: >=3.10" in metadata
    # One version: the package's is twophase.__version__.
    assert f"Version: {twophase.__version__}\n" in metadata
    # The description is the README, whose links work on a package index: absolute, and each
    # names a file of this repository at the home [project.urls] gives.
    urls = dict(
        line.removeprefix("Project-URL: ").split(", ", 1)
        for line in metadata.splitlines()
        if line.startswith("Project-URL: ")
    )
    assert {"Homepage", "Documentation", "Source", "Changelog", "Issues"} <= set(urls), urls
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)]+)\)", readme)
    assert targets
    blob = urls["Source"] + "/blob/main/"
    for target in targets:
        assert target.startswith(("https://", "http://")), f"relative link in README: {target}"
        if target.startswith(blob):
            assert (ROOT / target.removeprefix(blob)).exists(), target

    assert "twophase/__init__.py" in names
    assert "twophase/testing/__init__.py" in names
    assert "twophase/connectors/__init__.py" in names
    assert "twophase/connectors/kafka/__init__.py" in names
    assert "twophase/connectors/jdbc/__init__.py" in names
    assert "twophase/py.typed" in names
    assert "twophase/connectors/py.typed" in names
    # Every module of the core, the test kit and the connectors made it into the wheel.
    for tree, prefix in (
        (ROOT / "twophase", "twophase"),
        (ROOT / "connectors", "twophase/connectors"),
    ):
        for module in tree.rglob("*.py"):
            relative = module.relative_to(tree).as_posix()
            if "__pycache__" not in relative:
                assert f"{prefix}/{relative}" in names

    # Nothing else: no development infrastructure, no repository folders at the top level.
    top_level = {n.split("/", 1)[0] for n in names}
    assert top_level == {"twophase", DIST_INFO}, top_level
    for forbidden in ("twophase/dev/", "twophase_dev/", "tools/", "tests/", "examples/"):
        assert not [n for n in names if n.startswith(forbidden)], f"{forbidden} is in the wheel"
    assert not [n for n in names if n.startswith(("benchmarks/", "connectors/"))]
    assert not [n for n in names if "twophase_dev" in n]
    # The operators' command is the only console script; no dev launcher.
    assert scripts == {"twophase": "twophase._cli:main"}


def test_tools_wheel_contains_twophase_dev_and_its_command(tmp_path: Path) -> None:
    src = copy_sources(tmp_path / "src")
    wheel_path = build_wheel(src / "tools", tmp_path / "dist", "twophase_dev-*.whl")
    with zipfile.ZipFile(wheel_path) as wheel:
        names = set(wheel.namelist())
        scripts = _console_scripts(wheel)

    assert "twophase_dev/__init__.py" in names
    assert "twophase_dev/__main__.py" in names
    assert "twophase_dev/py.typed" in names
    tools = ROOT / "tools"
    for module in (tools / "twophase_dev").rglob("*.py"):
        assert module.relative_to(tools).as_posix() in names
    top_level = {n.split("/", 1)[0] for n in names}
    assert top_level == {"twophase_dev", "twophase_dev-0.1.0.dist-info"}, top_level
    assert scripts == {"twophase-dev": "twophase_dev.__main__:main"}


def test_editable_install_maps_connectors_to_twophase_connectors(tmp_path: Path) -> None:
    src = copy_sources(tmp_path / "src")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    # Let the fresh environment import this one's packages (pyspark, setuptools, ...) without
    # activating this environment's own editable install of twophase: a path in a .pth file is
    # added to sys.path, but .pth files inside that path are not processed.
    target_site = Path(
        run(
            python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=tmp_path
        ).stdout.strip()
    )
    (target_site / "parent_env.pth").write_text(sysconfig.get_path("purelib") + "\n")

    run(
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
    probe = run(
        python,
        "-c",
        "import importlib.util\n"
        "import twophase.connectors.kafka as k, twophase.connectors.jdbc as j\n"
        "print(k.__file__); print(j.__file__)\n"
        "print(importlib.util.find_spec('twophase.dev'), importlib.util.find_spec('twophase_dev'))",
        cwd=tmp_path,
    )
    kafka_file, jdbc_file, dev_specs = probe.stdout.splitlines()
    assert Path(kafka_file) == src / "connectors" / "kafka" / "__init__.py"
    assert Path(jdbc_file) == src / "connectors" / "jdbc" / "__init__.py"
    # The library's editable install brings no development infrastructure with it.
    assert dev_specs == "None None"
