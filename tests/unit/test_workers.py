"""tests/workers.py: ``--dist loadgroup`` keeps a group on one worker, with the installed pytest.

A throwaway project of quick tests, two groups among them, runs under ``pytest -n 2 --dist
loadgroup`` with the plugin; each test writes the worker it ran on. pytest-xdist's own grouping
silently failed under pytest 9.2 (every test its own group), which this would have caught.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = textwrap.dedent(
    """
    import pytest

    pytest_plugins = ["tests.workers"]


    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(config, items):
        for item in items:
            group = item.callspec.params["group"]
            if group != "free":
                item.add_marker(pytest.mark.xdist_group(group))
    """
)

TESTS = textwrap.dedent(
    """
    import json
    import os
    import time
    import uuid
    from pathlib import Path

    import pytest


    @pytest.mark.parametrize("group", ["a"] * 4 + ["b"] * 4 + ["free"] * 8)
    def test_one(request, group):
        time.sleep(0.01)
        record = {"id": request.node.nodeid, "group": group,
                  "worker": os.environ["PYTEST_XDIST_WORKER"]}
        (Path(os.environ["RAN_ON"]) / uuid.uuid4().hex).write_text(json.dumps(record))
    """
)


def test_a_group_runs_on_one_worker_and_the_rest_on_both(tmp_path: Path) -> None:
    project, ran_on = tmp_path / "project", tmp_path / "ran_on"
    project.mkdir()
    ran_on.mkdir()
    (project / "conftest.py").write_text(CONFTEST)
    for name in ("first", "second", "third"):
        (project / f"test_{name}.py").write_text(TESTS)
    (project / "pytest.ini").write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    done = subprocess.run(
        [*command, "-n", "2", "--dist", "loadgroup"],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(ROOT), "RAN_ON": str(ran_on)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(p.read_text()) for p in ran_on.iterdir()]
    assert len(records) == 3 * 16, done.stdout
    assert all("@" not in r["id"] for r in records)  # node ids are left alone
    # Groups a and b have 4 tests in each of the three files; each group on one worker, and the
    # run used both workers.
    by_group = {g: {r["worker"] for r in records if r["group"] == g} for g in ("a", "b", "free")}
    assert len(by_group["a"]) == 1, by_group
    assert len(by_group["b"]) == 1, by_group
    assert {r["worker"] for r in records} == {"gw0", "gw1"}, by_group
