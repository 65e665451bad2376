"""A Spark driver on the test cluster: one streaming query from a Kafka topic into a probed sink.

Usage: ``python -m tests.cluster.driver SPEC.json`` (cwd: the repository root).

Each test runs its driver in a process of its own: one SparkContext per process, so the test
session's local ``spark`` fixture and the cluster applications never meet, and every test gets a
fresh application (fresh executors, none left over from an earlier test's kills).

The spec (JSON) names the cluster (``master_url``), the sink (``connector``:
``pg-coordinated``, ``pg-markers`` or ``kafka``, with ``dsn``/``table`` or
``target_topic``/``control_topic``), the input (``bootstrap``, ``source_topic``,
``rows_per_batch``: the Kafka source's ``maxOffsetsPerTrigger``), the ``checkpoint``, the
probes' ``control`` directory and where to write the ``result``. The query runs with an
``availableNow`` trigger: it processes what the topic holds, in batches of ``rows_per_batch``
rows, then stops. With ``hold`` set, the driver keeps its application (and
executors) until the test releases that name.

The result (JSON): the application id, whether the query finished, its exception, twophase's
metrics of every batch and Spark's executor summaries (active or removed, with the removal reason
and failed task counts). Exit status 0 when the query finished without an exception.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import twophase
from tests.cluster.probes import Control, probed
from twophase_dev import SparkCluster, cluster_session

ROOT = Path(__file__).resolve().parents[2]


#: With ``poison`` in the spec: every id ending in 7 is a row its target refuses (a NULL payload
#: into the table's NOT NULL column; a Kafka record over the topic's ``max.message.bytes``).
POISON_IDS = "id % 10 = 7"
#: The target topic's ``max.message.bytes`` in a scenario with poison rows, and the producer's
#: ``batch.size`` (at most the topic's limit, or the sink refuses the topic).
POISON_TOPIC_BYTES = 16384


def build_sink(spec: dict[str, Any], control: Control) -> Any:
    """The scenario's sink, probed (:mod:`tests.cluster.probes`)."""
    return probed(make_sink(spec), control)


def make_sink(spec: dict[str, Any]) -> Any:
    """The scenario's sink as the spec describes it (``poison``: with dead letters)."""
    connector = spec["connector"]
    letters: dict[str, Any] = {"bad_rows": "dead_letter"} if spec.get("poison") else {}
    if connector.startswith("pg-"):
        from twophase.connectors.jdbc import postgres_sink

        protocol = "coordinated" if connector == "pg-coordinated" else "markers"
        return postgres_sink(
            spec["sink_name"],
            table=spec["table"],
            dsn=spec["dsn"],
            protocol=protocol,
            create_table=True,
            lock_timeout=20,
            **letters,
        )
    elif connector.startswith("maria-"):
        from twophase.connectors.jdbc import mariadb_sink

        return mariadb_sink(
            spec["sink_name"],
            table=spec["table"],
            url=spec["url"],
            protocol="coordinated" if connector == "maria-coordinated" else "markers",
            create_table=True,
            lock_timeout=20,
            **letters,
        )
    else:
        from twophase.connectors.kafka import KafkaSink

        return KafkaSink(
            spec["sink_name"],
            bootstrap_servers=spec["bootstrap"],
            topic=spec["target_topic"],
            control_topic=spec["control_topic"],
            operation_timeout=20.0,
            producer_config={"batch.size": POISON_TOPIC_BYTES} if letters else None,
            **letters,
        )


def executor_summaries(spark: Any) -> list[dict[str, Any]]:
    """Spark's executor summaries (the status store keeps removed executors too)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    summaries = store.executorList(False)
    found = []
    for index in range(summaries.size()):
        summary = summaries.apply(index)
        if summary.id() == "driver":
            continue
        reason = summary.removeReason()
        found.append(
            {
                "id": summary.id(),
                "active": bool(summary.isActive()),
                "remove_reason": reason.get() if reason.isDefined() else None,
                "failed_tasks": int(summary.failedTasks()),
                "completed_tasks": int(summary.completedTasks()),
            }
        )
    return found


def failed_task_attempts(spark: Any) -> int:
    """Failed task attempts over every stage of every job the status tracker still knows."""
    tracker = spark.sparkContext.statusTracker()
    stages: set[int] = set()
    job, misses = 0, 0
    while misses < 20:  # job ids are dense; a gap of 20 is the end
        info = tracker.getJobInfo(job)
        job += 1
        if info is None:
            misses += 1
            continue
        misses = 0
        stages.update(info.stageIds)
    total = 0
    for stage_id in stages:
        stage = tracker.getStageInfo(stage_id)
        if stage is not None:
            total += int(stage.numFailedTasks)
    return total


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    control = Control(spec["control"])
    cluster = SparkCluster.external(spec["master_url"])
    spark = cluster_session(
        spec.get("app_name", "twophase-cluster"), cluster, python_path=[str(ROOT)]
    )
    app_id = spark.sparkContext.applicationId
    control.emit(event="driver-started", app_id=app_id, executors=cluster.executor_pids(app_id))
    result: dict[str, Any] = {"app_id": app_id, "finished": False, "exception": None}
    sink = build_sink(spec, control)
    try:
        source = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", spec["bootstrap"])
            .option("subscribe", spec["source_topic"])
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(spec["rows_per_batch"]))
            .load()
        )
        ids = source.selectExpr("CAST(CAST(value AS STRING) AS BIGINT) AS id")
        bad = POISON_IDS if spec.get("poison") else "false"
        if spec["connector"] != "kafka":
            payload = f"CASE WHEN {bad} THEN NULL ELSE CONCAT('row-', CAST(id AS STRING)) END"
            out = ids.selectExpr("id", f"{payload} AS payload")
        else:
            big = f"repeat('x', {POISON_TOPIC_BYTES + 4096})"
            value = f"CASE WHEN {bad} THEN {big} ELSE CAST(id AS STRING) END"
            out = ids.selectExpr("CAST(id AS STRING) AS key", f"{value} AS value")
        query = twophase.write_stream(
            out, sink, checkpoint_location=spec["checkpoint"], trigger={"availableNow": True}
        ).start()
        try:
            result["finished"] = bool(query.awaitTermination(float(spec.get("timeout", 120))))
        except Exception as exc:  # the query failed: StreamingQueryException
            result["exception"] = f"{type(exc).__name__}: {exc}"[:4000]
        finally:
            if query.isActive:
                query.stop()
        control.emit(event="query-ended", **result)
        hold = spec.get("hold")
        if hold:
            deadline = time.monotonic() + 180
            while not control.released(hold) and time.monotonic() < deadline:
                time.sleep(0.1)
    except Exception:
        result["exception"] = traceback.format_exc()[-4000:]
    finally:
        result["metrics"] = [m.as_dict() for m in twophase.batch_metrics(sink)]
        try:
            result["executors"] = executor_summaries(spark)
            result["failed_task_attempts"] = failed_task_attempts(spark)
        except Exception as exc:
            result.setdefault("executors", [])
            result["status_error"] = repr(exc)
        Path(spec["result"]).write_text(json.dumps(result, indent=2, default=str))
        spark.stop()
    ok = result["finished"] and result["exception"] is None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
