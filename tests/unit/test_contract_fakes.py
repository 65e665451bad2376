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
