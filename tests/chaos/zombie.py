"""A zombie attempt for the chaos harness: an attempt Spark gave up on, waking after the run.

Usage: python -m tests.chaos.zombie SPEC

SPEC (JSON) holds the trial's driver spec (``driver``: the sink is built with the driver's
settings by :func:`tests.chaos.driver.connector_sink` -- PostgreSQL or MariaDB, the coordinated
protocol -- without the probes, so that its calls are no points of the trial's faults) and the task
the zombie stands for (``identity``, ``epoch``, ``batch``, ``partition``, ``attempt``). The
zombie opens its own transaction under that task's identity, epoch, batch and partition (with
another attempt number, so that its gid is its own), writes one row no batch writes, then waits
for ``go`` beside SPEC -- the harness creates it once the trial's last driver has exited -- and
calls ``pre_commit`` (``PREPARE TRANSACTION``, or ``XA END`` and ``XA PREPARE``). The outcome goes
to ``outcome.json`` beside SPEC: ``prepared`` (a prepared transaction outlived its run: the trial's
leftover check fails) or ``refused`` with the error.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pyarrow as pa

from tests.chaos.driver import connector_sink
from twophase import TaskContext

#: The key of the zombie's row: no trial writes negative keys.
ZOMBIE_KEY = -1


def main(argv: list[str]) -> None:
    spec_path = Path(argv[0])
    spec = json.loads(spec_path.read_text())
    driver_spec = json.loads(Path(spec["driver"]).read_text())
    sink = connector_sink(driver_spec)
    context = TaskContext(
        driver_spec["sink_name"],
        spec["identity"],
        spec["batch"],
        spec["partition"],
        spec["attempt"],
        spec["epoch"],
    )
    outcome: dict[str, object] = {"t_woke": None}
    txn = sink.begin_transaction(context)
    try:
        sink.write(txn, pa.RecordBatch.from_pylist([{"k": ZOMBIE_KEY, "v": "zombie"}]))
        go = spec_path.with_name("go")
        deadline = time.monotonic() + float(spec.get("timeout", 600))
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        outcome["t_woke"] = time.time()
        handle = sink.pre_commit(txn)
        outcome.update(outcome="prepared", transaction=handle.transaction_id)
    except Exception as exc:
        outcome.update(outcome="refused", error=str(exc))
        sink.abort(txn)
    spec_path.with_name("outcome.json").write_text(json.dumps(outcome))


if __name__ == "__main__":
    main(sys.argv[1:])
