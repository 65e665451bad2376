"""Fixtures of the upgrade tests: the virtualenv of release 0.2.0, built once per session.

The PostgreSQL server is ``postgres_server`` of ``tests/conftest.py`` (prepared transactions on).
"""

from __future__ import annotations

import pytest

from tests.upgrade.upgrade_support import (
    ReleaseVenv,
    build_release_venv,
    commit_exists,
)

#: Release 0.2.0 (the commit whose code wrote tests/golden/v0_2_0/).
RELEASE_0_2_0 = "c8a9d03da52e6e6f725df866e5f320f75db4cf00"


@pytest.fixture(scope="session")
def release_0_2_0(tmp_path_factory: pytest.TempPathFactory) -> ReleaseVenv:
    """A virtualenv with twophase 0.2.0 built from its commit (a few seconds, once a session)."""
    if not commit_exists(RELEASE_0_2_0):
        pytest.fail(
            f"commit {RELEASE_0_2_0} (release 0.2.0) is not in this clone's history; "
            "the upgrade tests build that release from it (a shallow clone? "
            "'git fetch --unshallow')"
        )
    return build_release_venv(RELEASE_0_2_0, tmp_path_factory.mktemp("twophase-0.2.0"))
