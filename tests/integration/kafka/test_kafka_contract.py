"""The core's exactly-once contract suite, run against the real broker.

Every test drives :class:`KafkaSink` through the production coordinator
(``LocalRunner``): batches, replays, a driver crash at each protocol step
followed by a restart, task failures with retries, a replay in another
partition layout. A ``read_committed`` consumer must see every input record
exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa
import pytest

from twophase.connectors.kafka import KafkaSink
from twophase.testing import MarkerSinkContract

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


class TestKafkaSinkContract(MarkerSinkContract):
    def make_batch(self, ids: Sequence[int]) -> pa.RecordBatch:
        return pa.record_batch(
            {
                "key": pa.array([str(i) for i in ids], pa.string()),
                "value": pa.array([f"{i}" for i in ids], pa.string()),
            }
        )

    @pytest.fixture
    def topic(self, make_topic: Callable[..., str]) -> str:
        return make_topic(3, prefix="contract")

    @pytest.fixture
    def make_sink(
        self, kafka_sink: Callable[..., KafkaSink], topic: str
    ) -> Callable[[str], KafkaSink]:
        return lambda name: kafka_sink(name, topic=topic)

    @pytest.fixture
    def read_ids(self, read_topic: Callable[..., list], topic: str) -> Callable[[], list[int]]:
        def read() -> list[int]:
            return [int(r.value) for r in read_topic(topic)]

        return read
