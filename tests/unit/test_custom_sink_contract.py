"""The ~30-line custom sink of docs/custom-sink.md passes the contract suite."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from examples.custom_sink import JsonFilesSink
from twophase.testing import SinkContract

pytestmark = pytest.mark.unit


class TestJsonFilesSinkContract(SinkContract):
    @pytest.fixture
    def make_sink(self, tmp_path: Path) -> Callable[[str], Any]:
        return lambda name: JsonFilesSink(name, str(tmp_path / "out"))

    @pytest.fixture
    def read_ids(self, tmp_path: Path) -> Callable[[], list[int]]:
        def read() -> list[int]:
            committed = tmp_path / "out" / "committed"
            if not committed.exists():
                return []
            return [
                json.loads(line)["id"]
                for name in os.listdir(committed)
                for line in (committed / name).read_text().splitlines()
            ]

        return read
