"""Write docs/compatibility.md from the cells scripts/compat.sh ran (build/compat/*.json).

Usage: python scripts/compat_report.py RESULTS_DIR REPORT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

INTRO = """# Compatibility

twophase supports **PySpark 3.5 to 4.x** on **Python 3.10 to 3.13**. `foreachBatch(sink)`
(`twophase.write_stream`) runs on every supported version, classic and Spark Connect;
`format(...)` needs PySpark 4.1 or later (its Python data source writer,
`DataSourceStreamArrowWriter`) and is refused by name before; so is real-time mode
(`trigger={"realTime": ...}`, [Real-time mode](realtime.md)), which needs PySpark 4.1, classic
PySpark and Spark's Kafka source. Importing twophase next to a PySpark
outside the range fails at once, naming it; PySpark is not a dependency of the package
(`pip install 'twophase[spark]'` installs one, platforms bring their own).

This table is written by `bash scripts/compat.sh`, which runs every cell for real on this
machine: each PySpark in a virtualenv of its own, on the Python named, against the real
PostgreSQL and Kafka servers. `scripts/test.sh` runs the whole suite on the default version
(PySpark 4.2.0, the project's `.venv`). Every cell runs:

* **unit** -- the framework without Spark, the test kit, the connectors' units, the PySpark
  adapter (`twophase/_pyspark.py`);
* **spark fake sinks** -- both protocols through real Spark micro-batches;
* **postgres** -- `postgres_sink` end to end in both protocols, upsert and CDC whatever the
  partitioning, and a real driver killed between prepare and commit, then restarted;
* **driver kill** -- the chaos harness kills a real driver (its whole process group) at a
  protocol step and restarts it, for PostgreSQL with each protocol and for Kafka (file sources);
* **kafka source** -- Spark's Kafka source into the Kafka sink, across a restart, where Maven
  Central serves Spark's Kafka connector of that version;
* **deployment** -- the built wheel installed without PySpark into a fresh virtualenv on the
  cell's Python, packed with `venv-pack`, shipped with `spark-submit --archives` to a standalone
  cluster of that Spark, Kafka into Kafka and into PostgreSQL, the driver killed mid-run and
  submitted again ([Deploying a job](deployment.md)), where Spark's Kafka source is served;
* **connect** -- the Spark Connect tests: `foreachBatch` sinks in a local Connect server killed
  mid-protocol and restarted, errors by class, task retries, CDC routing; `format(...)` from 4.1.
  The server is the PySpark wheel's from 4.0; the 3.5 wheel has none, and the test infrastructure
  resolves `spark-connect_2.12` of the same version from Maven Central;
* **real-time mode** (from 4.1, where Spark's Kafka source is served) -- a real driver in
  real-time mode into PostgreSQL, its Python workers SIGKILLed between two commits and the driver
  SIGKILLed mid-epoch, exactly once; and every refusal of real-time mode by name.

"""

#: What each connector needs of its server (written by hand: the matrix does not measure it).
TARGETS = (Path(__file__).with_name("compat_targets.md")).read_text()

NOTES = """
## Why some cells lack a step

* **Kafka source on PySpark 4.3.0**: Maven Central serves no `spark-sql-kafka-0-10_2.13` 4.3.0
  (nor 4.2.1) on the day of the run; Spark's Kafka connector must match the PySpark version. The
  Kafka *sink* is still run there, from file sources (the driver-kill step).
* **Spark Connect on PySpark 3.5**: the wheel does not carry the Connect server; the test
  infrastructure starts `spark-connect_2.12` of the same version from Maven Central (served for
  3.5.0, 3.5.1, 3.5.4, 3.5.5 and 3.5.7). The `format(...)` test is skipped there (4.1 and later).
  PySpark 3.5's `foreachBatch` worker sends no error back to the server (a TODO in its code,
  SPARK-44463; the 4.0 worker sends it): the query fails with `EOFException` and no text. The
  version adapter (`connect_record_failure` in `twophase/_pyspark.py`) has the sink leave its
  error in the query's session, where `twophase.await_termination` finds it and raises it by
  class; a failure that is not a twophase error stays PySpark's, without text.
* **Spark Connect on PySpark 4.3.0** runs each `foreachBatch` batch in a clone of the query's
  session, whose query manager lists no running query (earlier versions use the query's own
  session). The version adapter (`connect_active_queries` in `twophase/_pyspark.py`) then asks the
  session that started the query, which `twophase.write_stream` records on the sink; a sink passed
  to `foreachBatch` directly is refused there with that reason.
* **Real-time mode before 4.1 and on 4.3.0**: Spark's real-time mode is in 4.1 and later
  (twophase refuses `trigger={"realTime": ...}` by name before, a unit test of every cell), and it
  reads Kafka only, whose connector is not served for 4.3.0.
* **Deployment without a Kafka source**: the deployment job reads Kafka, so it runs where the
  Kafka connector is served (not on 4.3.0).
* **`--packages` on 4.0.4 and 4.1.3**: Maven Central serves `spark-sql-kafka-0-10` of these
  versions but not `spark-token-provider-kafka-0-10` of the same version, which it depends on, so
  `spark-submit --packages` cannot resolve it (found by this matrix). The deployment test passes
  the connector with `--jars` there, resolved with a served token provider (4.0.0), as a user
  would; on 3.5.7 and 4.2.0 it uses `--packages` ([Deploying a job](deployment.md)).
* **The newest 3.5 patch**: 3.5.9 is on PyPI, but Maven Central serves the Kafka connector of
  3.5.0, 3.5.1, 3.5.3 and 3.5.7 only, and the Connect server of 3.5.0, 3.5.1, 3.5.4, 3.5.5 and
  3.5.7 only; 3.5.7 is the cell.
"""


def _mark(step: dict[str, object]) -> str:
    summary = str(step.get("summary", "")).strip()
    verdict = "pass" if step.get("status") == 0 else "**FAIL**"
    return f"{verdict} ({summary}, {step.get('seconds')} s)" if summary else verdict


def main(results_dir: str, report: str) -> int:
    """Write the report; return 1 when a cell has a failed step.

    Parameters
    ----------
    results_dir
        Where ``scripts/compat.sh`` wrote one JSON file per cell.
    report
        The Markdown file to write.

    Returns
    -------
    int
        The exit status.
    """
    cells = [json.loads(p.read_text()) for p in sorted(Path(results_dir).glob("*.json"))]
    cells.sort(key=lambda c: tuple(int(x) for x in str(c["pyspark"]).split(".")))
    columns: list[str] = []
    for cell in cells:
        for step in cell["steps"]:
            if step["step"] not in columns:
                columns.append(step["step"])
    lines = [INTRO]
    lines.append("| PySpark | Python | run on | " + " | ".join(columns) + " |")
    lines.append("|---" * (3 + len(columns)) + "|")
    for cell in cells:
        by_step = {s["step"]: s for s in cell["steps"]}
        row = [
            str(cell["pyspark"]),
            str(cell["python"]),
            f"{cell['date']}, `{cell['commit']}`",
            *[_mark(by_step[c]) if c in by_step else "not run (below)" for c in columns],
        ]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append(TARGETS)
    lines.append(NOTES)
    Path(report).write_text("\n".join(lines))
    failed = [c["cell"] for c in cells if any(s["status"] != 0 for s in c["steps"])]
    print(f"{report}: {len(cells)} cells, failed: {', '.join(failed) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
