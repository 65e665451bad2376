"""The contract suite run against the kit's own fake sinks (both protocols)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from twophase.testing import (
    FakeMarkerSink,
    FakeSink,
    FakeTarget,
    MarkerSinkContract,
    TwoPhaseSinkContract,
)

pytestmark = pytest.mark.unit


class _FakeTargetFixtures:
    @pytest.fixture
    def target(self) -> FakeTarget:
        return FakeTarget.in_memory()

    @pytest.fixture
    def read_ids(self, target: FakeTarget) -> Callable[[], list[int]]:
        return lambda: [row["id"] for row in target.committed_rows()]


class TestFakeSinkContract(_FakeTargetFixtures, TwoPhaseSinkContract):
    @pytest.fixture
    def make_sink(self, target: FakeTarget) -> Callable[[str], Any]:
        return lambda name: FakeSink(name, target)


class TestFakeMarkerSinkContract(_FakeTargetFixtures, MarkerSinkContract):
    @pytest.fixture
    def make_sink(self, target: FakeTarget) -> Callable[[str], Any]:
        return lambda name: FakeMarkerSink(name, target)


class TestFakeSinkOnDirectoryContract(TestFakeSinkContract):
    """The directory-backed target (the one Spark tests use) keeps the same contract."""

    @pytest.fixture
    def target(self, tmp_path: Any) -> FakeTarget:
        return FakeTarget(tmp_path / "target")


def test_a_with_faults_sink_unpickles_in_a_process_that_never_wrapped_it(tmp_path: Any) -> None:
    # Spark's executors unpickle the sink without having run with_faults themselves.
    import pickle
    import subprocess
    import sys

    from twophase.testing import with_faults

    rules = FakeTarget(tmp_path / "rules")
    sink = with_faults(FakeSink("s", FakeTarget(tmp_path / "target")), rules)
    rules.fail("write", partition_id=0)
    code = (
        "import pickle, sys\n"
        "sink = pickle.loads(sys.stdin.buffer.read())\n"
        "ctx = __import__('twophase').TaskContext('s', 's.1', 0, 0, 0)\n"
        "txn = sink.begin_transaction(ctx)\n"
        "try:\n"
        "    sink.write(txn, __import__('pyarrow').record_batch({'id': [1]}))\n"
        "except Exception as exc:\n"
        "    print(type(sink).__name__, type(exc).__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(sink), capture_output=True, check=False
    )
    assert result.stdout.decode().split() == ["FaultyFakeSink", "AbortRequiredError"], result.stderr
