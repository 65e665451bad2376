"""The cluster infrastructure itself: ``twophase-dev cluster up|status|down`` and a stop that leaves
no process behind (executors, PySpark daemons and Python workers included)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.cluster.support import ROOT, eventually
from twophase_dev import CLUSTER_ENV_MARKER, DevState, attach_spark_cluster
from twophase_dev._host._proc import process_alive

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.slow]

#: An application whose two tasks sit in Python for two minutes.
BUSY_DRIVER = textwrap.dedent(
    """
    import sys, time
    from twophase_dev import SparkCluster, cluster_session

    spark = cluster_session("infra-test", SparkCluster.external(sys.argv[1]), kafka=False)
    spark.sparkContext.parallelize(range(2), 2).foreach(lambda _: time.sleep(120))
    """
)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "twophase_dev", *args],
        env={**os.environ, "TWOPHASE_DEV_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _marked(work_dir: str) -> list[int]:
    """Pids of live processes carrying the cluster's environment marker."""
    entry = f"{CLUSTER_ENV_MARKER}={work_dir}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry in environ and process_alive(int(name)):
            found.append(int(name))
    return found


def test_cluster_up_status_down_stops_every_process(tmp_path: Path) -> None:
    home = tmp_path / "dev-home"
    driver = None
    try:
        up = _cli(home, "cluster", "up")
        assert up.returncode == 0, up.stderr
        assert "spark-cluster: started" in up.stdout
        again = _cli(home, "cluster", "up")
        assert "spark-cluster: already running" in again.stdout, again.stdout
        record = DevState(home).records()["spark-cluster"]
        master_url = record["master_url"]
        assert f"TWOPHASE_SPARK_MASTER={master_url}" in _cli(home, "env").stdout

        cluster = attach_spark_cluster(master_url, home=home)
        assert cluster.managed  # the recorded handle, not an external one
        assert [w.alive() for w in cluster.workers] == [True, True]
        with (tmp_path / "driver.log").open("wb") as log:
            driver = subprocess.Popen(
                [sys.executable, "-c", BUSY_DRIVER, master_url],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        assert eventually(lambda: len(cluster.python_worker_pids()) == 2, timeout=120), (
            cluster.processes()
        )
        processes = cluster.processes()
        roles = Counter(p.role for p in processes)
        assert roles["master"] == 1
        assert roles["worker"] == 2
        assert roles["executor"] == 2
        assert roles["python-daemon"] == 2
        assert roles["python-worker"] == 2
        assert {p.worker for p in processes if p.role == "executor"} == {0, 1}
        status = json.loads(_cli(home, "cluster", "status", "--json").stdout)
        assert sorted(p["pid"] for p in status["processes"]) == sorted(p.pid for p in processes)

        down = _cli(home, "cluster", "down")
        assert down.returncode == 0, down.stderr
        assert "spark-cluster: stopped" in down.stdout
        assert [p for p in processes if process_alive(p.pid)] == []
        assert _marked(record["work_dir"]) == []
        assert not Path(record["work_dir"]).exists()
        assert list((Path(record["log_dir"]) / "executors").glob("app-*/*/stderr"))
        assert "not running" in _cli(home, "cluster", "status").stdout
    finally:
        if driver is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        DevState(home).down(["spark-cluster"])
