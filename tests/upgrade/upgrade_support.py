"""Helpers of the upgrade tests: a virtualenv of an earlier release, driver runs, target state.

The earlier release is built from its own commit (``git archive``) into a wheel with this
virtualenv's pip and installed with ``--no-deps`` into a new virtualenv of the same base Python.
Its dependencies (PySpark, pyarrow, psycopg2, ...) come from this virtualenv without a download:
a ``.pth`` file of the new virtualenv names this virtualenv's ``site-packages``. A path line of
a ``.pth`` file is appended to ``sys.path``, but the ``.pth`` files inside that directory are not
processed, so the editable install of the current twophase stays invisible there.

Both releases run the same plain script, ``upgrade_driver.py``, as a Spark driver process of
their own (``PYSPARK_PYTHON`` = the driver's interpreter, so the Python workers import the same
release as the driver).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.summaries import add_line

#: The repository root (``tests/upgrade/`` is two levels below it).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: The driver script both releases run.
DRIVER = Path(__file__).resolve().with_name("upgrade_driver.py")
#: Lines of the driver's output that carry facts for the test (a JSON object each).
REPORT_PREFIX = "TWOPHASE-UPGRADE "

#: Every row of the input: ``BATCHES`` files, one per micro-batch, ``ROWS`` rows each.
BATCHES = 3
ROWS = 20


def timed(label: str, seconds: float) -> None:
    """Record (and print) how long one step took; the run's summary lists every step."""
    add_line("upgrade tests: timings", f"{seconds:6.1f} s  {label}")
    print(f"[upgrade timing] {label}: {seconds:.1f} s", flush=True)


# ----------------------------------------------------------------------------- the old release


@dataclass(frozen=True)
class ReleaseVenv:
    """A virtualenv holding one earlier release of twophase."""

    commit: str
    root: Path
    python: Path
    site_packages: Path
    wheel: Path


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited with {result.returncode}:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def commit_exists(commit: str, repo: Path = REPO_ROOT) -> bool:
    """Whether ``commit`` is in the history of the repository (not so in a shallow clone)."""
    result = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def base_python() -> Path:
    """The interpreter this virtualenv was made from (``home`` of its ``pyvenv.cfg``)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base_executable = getattr(sys, "_base_executable", sys.executable)
    for candidate in (Path(sys.base_prefix) / "bin" / version, Path(base_executable)):
        if candidate.exists():
            return candidate
    raise RuntimeError(f"the base interpreter of {sys.executable} was not found")


def build_release_venv(commit: str, workdir: Path, repo: Path = REPO_ROOT) -> ReleaseVenv:
    """Build twophase at ``commit`` into a wheel and install it into a new virtualenv.

    Nothing is downloaded: the wheel is built without build isolation by this virtualenv's
    setuptools, and the dependencies are this virtualenv's (see the module docstring).
    """
    src, wheels, venv = workdir / "src", workdir / "wheels", workdir / "venv"
    src.mkdir(parents=True)
    started = time.monotonic()
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit],
        capture_output=True,
        check=True,
    ).stdout
    # The "data" filter exists from Python 3.10.12 / 3.11.4 on (and is the default from 3.14).
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, **safe)  # type: ignore[arg-type]
    _run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"),
            *("--no-index", "--quiet", "--wheel-dir", str(wheels), str(src)),
        ]
    )
    (wheel,) = wheels.glob("twophase-*.whl")
    _run([str(base_python()), "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run(
        [
            *(sys.executable, "-m", "pip", "--python", str(python), "install"),
            *("--no-deps", "--no-index", "--quiet", "--disable-pip-version-check", str(wheel)),
        ]
    )
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=workdir,
        ).stdout.strip()
    )
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_twophase_upgrade_deps.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    timed(
        f"build the {commit} virtualenv (archive, wheel, venv, install)", time.monotonic() - started
    )
    return ReleaseVenv(commit, venv, python, site, wheel)


def clean_environment(python: Path) -> dict[str, str]:
    """The environment of a process of ``python``: its Spark workers run the same interpreter.

    ``PYTHONPATH`` and the like are dropped: they could bring the current source tree into the
    old release's processes.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH"}
        and not k.startswith("PYSPARK_")
    }
    env["PYSPARK_PYTHON"] = str(python)
    env["PYSPARK_DRIVER_PYTHON"] = str(python)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def import_twophase(python: Path, cwd: Path) -> tuple[str, Path]:
    """``twophase.__version__`` and ``twophase.__file__`` as ``python`` imports it."""
    out = _run(
        [str(python), "-c", "import twophase; print(twophase.__version__, twophase.__file__)"],
        cwd=cwd,
        env=clean_environment(python),
    ).stdout.split()
    return out[0], Path(out[1])


# ----------------------------------------------------------------------------- driver runs


@dataclass
class DriverRun:
    """One finished driver process: exit code, output, facts it reported, wall time."""

    label: str
    code: int
    output: str
    seconds: float
    reports: list[dict[str, Any]] = field(default_factory=list)

    def report(self, kind: str) -> dict[str, Any]:
        found = [r for r in self.reports if r.get("kind") == kind]
        assert found, f"{self.label}: the driver reported no {kind!r}\n{self.tail()}"
        return found[-1]

    def __repr__(self) -> str:
        return f"DriverRun({self.label!r}, exit {self.code}, {self.seconds:.1f} s)"

    def tail(self, chars: int = 6000) -> str:
        return f"--- output of {self.label} (exit {self.code}) ---\n{self.output[-chars:]}"


def run_driver(
    python: Path, spec: dict[str, Any], workdir: Path, label: str, timeout: float = 300
) -> DriverRun:
    """Run ``upgrade_driver.py`` with ``python`` on ``spec`` and wait for it.

    The driver runs in a new session with ``workdir`` as its working directory (the Python
    workers are started with ``python -m``, which puts the working directory first on their
    ``sys.path``: it must not be the repository). Once it is gone, its process group is killed
    (the JVM and the Python workers are separate processes), as ``tests/spark/helpers.py`` does.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    index = len(list(workdir.glob("driver-*.log")))
    spec_path = workdir / f"driver-{index}.json"
    log_path = workdir / f"driver-{index}.log"
    spec_path.write_text(json.dumps(spec, indent=2))
    started = time.monotonic()
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(python), str(DRIVER), str(spec_path)],
            cwd=workdir,
            env=clean_environment(python),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = -999
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    seconds = time.monotonic() - started
    timed(f"driver run: {label} (exit {code})", seconds)
    output = log_path.read_text(errors="replace")
    reports = [
        json.loads(line[len(REPORT_PREFIX) :])
        for line in output.splitlines()
        if line.startswith(REPORT_PREFIX)
    ]
    return DriverRun(label, code, output, seconds, reports)


KILLED = -signal.SIGKILL


# ----------------------------------------------------------------------------- input and state


def ids_of(batch: int) -> list[int]:
    """The ids of the input file of one micro-batch."""
    return [batch * 1000 + i for i in range(ROWS)]


def write_input(source: Path) -> None:
    """One JSON-lines file per micro-batch, oldest first (the file source orders by mtime)."""
    source.mkdir(parents=True)
    for batch in range(BATCHES):
        path = source / f"batch-{batch:02d}.json"
        path.write_text(
            "".join(json.dumps({"id": i, "payload": f"p{i}"}) + "\n" for i in ids_of(batch))
        )
        os.utime(path, (1_700_000_000 + batch, 1_700_000_000 + batch))


def expected(batches: Iterable[int]) -> Counter[int]:
    """Each id of these batches, once."""
    return Counter(i for b in batches for i in ids_of(b))


@dataclass
class Scenario:
    """One query: its sink, its schema (table, marker table, fences), input and checkpoint.

    Each scenario has a schema of its own: the sinks keep their fence table in the schema of the
    marker table, and a prepared transaction of one scenario locks it (``FOR SHARE`` on its
    row), so a shared one would tie the scenarios, and the other tests of the session, together.
    """

    name: str
    protocol: str
    schema: str
    source: Path
    checkpoint: Path

    @property
    def table(self) -> str:
        return f"{self.schema}.rows"

    @property
    def marker_table(self) -> str:
        return f"{self.schema}.markers"

    def query_spec(self, crash: tuple[str, int] | None = None) -> dict[str, Any]:
        return {
            "name": self.name,
            "protocol": self.protocol,
            "table": self.table,
            "marker_table": self.marker_table,
            "source": str(self.source),
            "checkpoint": str(self.checkpoint),
            "crash": list(crash) if crash else None,
        }

    def log_records(self, batch: int, kind: str) -> list[dict[str, Any]]:
        """The records of ``batch`` in the coordinator log (``intent``, ``decision``, ...)."""
        pattern = f"*/batches/{batch:020d}.{kind}.json"
        return [
            json.loads(p.read_text())
            for p in (self.checkpoint / "twophase" / self.name).glob(pattern)
        ]

    def spark_commits(self) -> list[int]:
        """The batches with Spark's ``commits/<batch>`` in the checkpoint."""
        commits = self.checkpoint / "commits"
        return sorted(int(p.name) for p in commits.glob("*") if p.name.isdigit())

    def log_batches(self, kind: str) -> list[int]:
        """The batches with a record of ``kind`` in the coordinator log."""
        found = (self.checkpoint / "twophase" / self.name).glob(f"*/batches/*.{kind}.json")
        return sorted(int(p.name.split(".")[0]) for p in found)


class PgState:
    """What a reader of the PostgreSQL server sees of a scenario."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        conn = self.server.connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(statement, params)
                return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    def create(self, scenario: Scenario) -> None:
        """The scenario's schema and table (no key: a duplicate must show as a duplicate)."""
        self.sql(f'CREATE SCHEMA "{scenario.schema}"')
        self.sql(f'CREATE TABLE "{scenario.schema}".rows (id bigint NOT NULL, payload text)')

    def ids(self, scenario: Scenario) -> Counter[int]:
        return Counter(r[0] for r in self.sql(f'SELECT id FROM "{scenario.schema}".rows'))

    def prepared(self, sink: str) -> list[str]:
        """The gids of the sink's prepared transactions (``tp:<sink>.<query id>:...``)."""
        prefix = f"tp:{sink}."
        return [g for g, _db in self.server.prepared_transactions() if g.startswith(prefix)]

    def markers(self, scenario: Scenario) -> list[tuple[int, int]]:
        """``(batch, partition)`` of each marker row of the sink (identity ``<sink>.<id>``)."""
        if not self.sql("SELECT to_regclass(%s)", (f'"{scenario.schema}".markers',))[0][0]:
            return []
        rows = self.sql(f'SELECT identity, batch_id, partition_id FROM "{scenario.schema}".markers')
        return sorted((b, p) for ident, b, p in rows if ident.startswith(f"{scenario.name}."))

    def prepared_locks(self, scenario: Scenario) -> list[str]:
        """The tables of the scenario's schema that its prepared transactions hold locks on."""
        rows = self.sql(
            # A prepared transaction's locks have no pid; its xid lock names its gid.
            "SELECT DISTINCT c.relname, l.mode FROM pg_prepared_xacts x "
            "JOIN pg_locks t ON t.locktype = 'transactionid' AND t.transactionid = x.transaction "
            "JOIN pg_locks l ON l.virtualtransaction = t.virtualtransaction AND l.pid IS NULL "
            "JOIN pg_class c ON c.oid = l.relation "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND x.gid LIKE %s ORDER BY 1, 2",
            (scenario.schema, f"tp:{scenario.name}.%"),
        )
        return [f"{table} {mode}" for table, mode in rows]

    def snapshot(self, scenario: Scenario) -> dict[str, Any]:
        """What the server shows of the scenario, and what its checkpoint holds."""
        return {
            "ids": self.ids(scenario),
            "prepared": self.prepared(scenario.name),
            "markers": self.markers(scenario),
            "spark_commits": scenario.spark_commits(),
            "intents": scenario.log_batches("intent"),
            "decisions": scenario.log_batches("decision"),
            "committed": scenario.log_batches("committed"),
        }

    def drop(self, scenario: Scenario) -> None:
        """Roll back what the scenario left prepared, then drop its schema."""
        self.server.rollback_prepared(re.escape(f"tp:{scenario.name}."))
        self.sql(f'DROP SCHEMA IF EXISTS "{scenario.schema}" CASCADE')


def batches_of(gids: Iterable[str]) -> Counter[int]:
    """How many prepared transactions each batch has (gid ``tp:<identity>:<b>:<p>:<a>``)."""
    return Counter(int(g.rsplit(":", 3)[1]) for g in gids)


def partitions_of(gids: Iterable[str], batch: int) -> set[int]:
    """The partitions of ``batch`` among the gids."""
    parts = [g.rsplit(":", 3) for g in gids]
    return {int(p[2]) for p in parts if int(p[1]) == batch}
