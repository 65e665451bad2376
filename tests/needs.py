"""Markers that say what a test needs, derived from the fixtures it reaches (a pytest plugin).

A test that reaches ``gcs_endpoint`` needs the GCS emulator, so it is marked ``gcs``; one that
reaches ``kafka_broker`` is marked ``kafka``, and so on for every server, Spark, the cluster, root
and the git history (:data:`NEEDS`). The markers are added at collection from the fixtures a test
names (directly or through other fixtures), so ``pytest -m "not mariadb"`` leaves out exactly the
tests that would start MariaDB. A fixture fetched at run time (``request.getfixturevalue``) cannot
be seen at collection: such a test declares its markers itself, and a test that reached a fixture
of :data:`NEEDS` without its marker fails at teardown, naming the marker to add. A test marked
``unit`` that needs anything is refused at collection: ``-m unit`` must start nothing.

Every server marker also adds ``integration`` (the test talks to a real server).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the dev extra installs tomli there
    import tomli as tomllib

#: Fixture name -> the markers a test that reaches it must carry.
NEEDS: dict[str, tuple[str, ...]] = {
    "kafka_broker": ("kafka",),
    "secured_broker": ("kafka",),
    "kafka_partition": ("kafka", "root"),
    "kafka_cluster": ("kafka", "kafka_cluster"),
    "postgres_server": ("postgres",),
    "postgres_server_no_prepared": ("postgres",),
    "postgres_pair": ("postgres",),  # a primary and a standby of the test's own
    "pg": ("postgres",),  # tests/integration/jdbc: either server, fetched by protocol
    "pg_partition": ("postgres", "root"),
    "pg_partition_no_prepared": ("postgres", "root"),
    "mariadb_server": ("mariadb",),
    "mariadb_without_binlog": ("mariadb",),
    "mariadb_pair": ("mariadb",),  # a primary and a replica of the test's own
    "maria_partition": ("mariadb", "root"),
    "s3_endpoint": ("s3",),
    "gcs_endpoint": ("gcs",),
    "azure_endpoint": ("azure",),
    "spark": ("spark", "gcs"),
    "spark_cluster": ("cluster",),
    "_connect_server": ("connect", "gcs"),
    "netns_allowed": ("root",),
    "release_0_2_0": ("git",),
}

#: The server fixture of each sink a chaos or cluster test names in its ``sink`` or ``connector``
#: parameter (the fixture is fetched by that name at run time: tests/chaos/conftest.py,
#: tests/cluster/conftest.py).
SINK_FIXTURES = {
    "pg-coordinated": "postgres_server",
    "pg-markers": "postgres_server_no_prepared",
    "maria-coordinated": "mariadb_server",
    "maria-markers": "mariadb_server",
    "kafka": "kafka_broker",
}
SINK_PARAMS = ("sink", "connector")

#: Markers that mean a real server process (each implies ``integration``).
SERVERS = frozenset(
    {"kafka", "kafka_cluster", "postgres", "mariadb", "s3", "gcs", "azure", "cluster", "connect"}
)


def needed(fixturenames: Iterator[str] | list[str]) -> set[str]:
    """Return the markers implied by reaching ``fixturenames`` (``integration`` included)."""
    marks = {mark for name in fixturenames for mark in NEEDS.get(name, ())}
    if marks & SERVERS:
        marks.add("integration")
    return marks


def _kinds(config: pytest.Config) -> set[str]:
    """The project's own markers: ``[tool.pytest.ini_options] markers`` of pyproject.toml.

    Not ``config.getini("markers")``, which also lists pytest's and its plugins' (parametrize,
    timeout, ...), none of which says what a test needs.
    """
    assert config.inipath is not None
    assert config.inipath.name == "pyproject.toml"
    with config.inipath.open("rb") as file:
        lines = tomllib.load(file)["tool"]["pytest"]["ini_options"]["markers"]
    return {line.split(":", 1)[0].strip() for line in lines}


#: Needs whose tests share one pytest-xdist worker (``--dist loadgroup``), first match wins:
#: network namespaces and firewall rules of root tests must not interleave, and the standalone
#: cluster, the Connect server and the 3-broker Kafka cluster are started once per worker that
#: needs them (a Kafka cluster test also restarts brokers the others would see go).
WORKER_GROUPS = ("root", "cluster", "connect", "kafka_cluster")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Add the markers each test's fixtures imply; refuse a test without any or a unit that needs.

    The fixtures are those the test names, directly or through other fixtures, and the server of
    the sink its ``sink`` or ``connector`` parameter names (:data:`SINK_FIXTURES`).

    A test that carries none of the project's markers (not even ``unit``) would escape every
    ``-m`` selection that names what it needs, so it is refused at collection.
    """
    kinds = _kinds(config)
    unmarked, units = [], []
    for item in items:
        if not any(mark.name in kinds for mark in item.iter_markers()):
            unmarked.append(item.nodeid)
        reached = list(getattr(item, "fixturenames", []))
        callspec = getattr(item, "callspec", None)
        for param in SINK_PARAMS if callspec is not None else ():
            sink = callspec.params.get(param)
            if isinstance(sink, str) and sink in SINK_FIXTURES:
                reached.append(SINK_FIXTURES[sink])
        marks = needed(reached)
        if marks and item.get_closest_marker("unit") is not None:
            units.append(f"{item.nodeid} (needs {', '.join(sorted(marks))})")
        for mark in sorted(marks):
            if item.get_closest_marker(mark) is None:
                item.add_marker(mark)
        group = next((g for g in WORKER_GROUPS if item.get_closest_marker(g) is not None), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        # A server marker the test or its parameter carries itself also means integration.
        has_server = any(item.get_closest_marker(m) is not None for m in SERVERS)
        if has_server and item.get_closest_marker("integration") is None:
            item.add_marker("integration")
    if unmarked:
        raise pytest.UsageError(
            "tests carrying none of the project's markers (mark the file or test with what it "
            "is and needs: pytestmark = pytest.mark.unit, ...):\n  " + "\n  ".join(unmarked)
        )
    if units:
        raise pytest.UsageError(
            "tests marked unit that reach fixtures of servers (a unit test starts nothing):\n  "
            + "\n  ".join(units)
        )


@pytest.fixture(autouse=True)
def _needs_declared(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that reached, at run time, a fixture whose marker it does not carry."""
    yield
    missing = sorted(
        mark
        for mark in needed(request.fixturenames) - {"integration"}  # added with any server's
        if request.node.get_closest_marker(mark) is None
    )
    if missing:
        pytest.fail(
            f"{request.node.nodeid} reached fixtures that need the markers {missing} it does "
            f"not carry (a fixture fetched with request.getfixturevalue): mark the test or "
            f"its parameter with them (tests/needs.py)"
        )
