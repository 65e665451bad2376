"""Tests of one ``xdist_group`` on one pytest-xdist worker, under pytest 9.2 too (a pytest plugin).

``pytest -n 2 --dist loadgroup`` (what ``scripts/test.sh`` runs) must send the tests of a group
(:data:`tests.needs.WORKER_GROUPS`: the root tests' network namespaces, the standalone cluster,
the Connect server) to one worker. pytest-xdist 3.8 does that by appending ``@group`` to each node
id on the workers, which pytest 9.2 ignores (a node id is no longer a plain attribute there), so
every test became a group of its own and two workers cut network namespaces at the same time.

This plugin does the grouping without touching node ids. The controller names a file before the
workers start (:data:`ENV_GROUPS`, inherited by them); each worker writes there which of the ids
it collected belong to which group; the controller's scheduler (:class:`GroupScheduling`) reads it
and puts a group in one work unit. Tests outside any group are units of their class or module, as
under ``--dist loadscope``, and the largest units go first.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

#: Environment variable naming the file of node id -> group, set by the controller.
ENV_GROUPS = "TWOPHASE_TEST_GROUPS"


def _is_controller(config: pytest.Config) -> bool:
    return (
        not hasattr(config, "workerinput")
        and config.pluginmanager.hasplugin("xdist")
        and config.getoption("dist", "no") == "loadgroup"
    )


def pytest_configure(config: pytest.Config) -> None:
    if _is_controller(config):
        handle, name = tempfile.mkstemp(prefix="twophase-test-groups-", suffix=".json")
        os.close(handle)
        os.environ[ENV_GROUPS] = name
        config._twophase_groups = Path(name)  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    path = getattr(config, "_twophase_groups", None)
    if path is not None:
        os.environ.pop(ENV_GROUPS, None)
        for written in [path, *path.parent.glob(f"{path.name}.*")]:
            written.unlink(missing_ok=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker, write the group of each collected test that has one."""
    workerinput = getattr(config, "workerinput", None)
    target = os.environ.get(ENV_GROUPS)
    if workerinput is None or not target:
        return
    groups = {}
    for item in items:
        names = sorted({_group_name(mark) for mark in item.iter_markers("xdist_group")})
        if names:
            groups[item.nodeid] = "_".join(names)
    mine = Path(f"{target}.{workerinput['workerid']}")
    partial = mine.with_name(mine.name + ".partial")
    partial.write_text(json.dumps(groups))
    partial.replace(mine)


def _group_name(mark: pytest.Mark) -> str:
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Schedule ``--dist loadgroup`` with :class:`GroupScheduling`."""
    if not _is_controller(config):
        return None
    return _scheduler_class()(config, log)


def _scheduler_class() -> type:
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """``loadscope`` whose scope of a grouped test is its group (read from the workers)."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                path = Path(os.environ[ENV_GROUPS])
                self._groups = {}
                for written in sorted(path.parent.glob(f"{path.name}.*")):
                    if not written.name.endswith(".partial"):
                        self._groups.update(json.loads(written.read_text()))
            group = self._groups.get(nodeid)
            return f"group:{group}" if group else str(super()._split_scope(nodeid))

    return GroupScheduling
