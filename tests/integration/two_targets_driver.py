"""A driver process writing each batch to PostgreSQL and to Kafka (``write_stream`` with two sinks).

Usage: ``python -m tests.integration.two_targets_driver SPEC.json`` (cwd: the repository root).
The spec names the file source, the checkpoint, the PostgreSQL table and DSN, the Kafka topic and
bootstrap servers and, with ``kill_after``, the batch after whose PostgreSQL commit the driver
SIGKILLs itself: between the two targets of that batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.spark.helpers import run_query
from twophase.connectors.jdbc import postgres_sink
from twophase.connectors.kafka import KafkaSink
from twophase.testing import CrashAt, install_step_listener
from twophase_dev import spark_session


def as_records(batch: Any) -> Any:
    """Kafka's columns, from the shared batch."""
    return batch.selectExpr("CAST(id AS STRING) AS key", "payload AS value")


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    postgres = postgres_sink(
        f"{spec['name']}-pg",
        table=spec["table"],
        dsn=spec["dsn"],
        protocol="coordinated",
        create_table=True,
    )
    kafka = KafkaSink(
        f"{spec['name']}-kafka", bootstrap_servers=spec["bootstrap"], topic=spec["topic"]
    )
    if spec.get("kill_after") is not None:
        install_step_listener(
            postgres, CrashAt("recorded_committed", spec["kill_after"], hard=True)
        )
    spark = spark_session("twophase-two-targets", master="local[2,2]", kafka=False)
    run_query(
        spark, Path(spec["source"]), Path(spec["checkpoint"]), [postgres, (kafka, as_records)]
    )
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
