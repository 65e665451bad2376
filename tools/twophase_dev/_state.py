"""What ``twophase-dev up`` started, so that ``status``, ``env`` and ``down`` find it again.

The state lives in ``$TWOPHASE_DEV_HOME`` (default ``~/.cache/twophase/dev``): ``state.json`` holds
one record per running service (pid, ports, work and log directories), ``logs/`` the services' logs.
A record whose process is gone (machine restarted, process killed) is stale: it is reported and
removed, with its data, the next time the state is read under the lock.

Runs on: the developer's machine, from the ``twophase-dev`` command or the test session.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twophase_dev._errors import DevInfraError
from twophase_dev._host._files import cache_root, file_lock
from twophase_dev._host._workdirs import clean_stale_work_dirs, owner_service_pid, work_dir_in_use
from twophase_dev._kafka._broker import KafkaBroker
from twophase_dev._mariadb._server import MariaDBServer
from twophase_dev._postgres._server import PostgresServer
from twophase_dev._spark._cluster import SparkCluster

__all__ = [
    "ENV_KAFKA_BOOTSTRAP",
    "ENV_MARIADB_URL",
    "ENV_PG_DSN",
    "ENV_PG_NOPREP_DSN",
    "ENV_SPARK_MASTER",
    "SERVICES",
    "DevState",
    "state_home",
]

#: Services ``up`` knows, in start order. ``spark-cluster`` (a Spark standalone master and two
#: workers) is only started when named (``up --spark-cluster`` or ``cluster up``).
SERVICES = ("postgres", "postgres-no-prepared", "mariadb", "kafka", "spark-cluster")
#: Environment variables through which tests reuse running services instead of starting their own.
ENV_KAFKA_BOOTSTRAP = "TWOPHASE_KAFKA_BOOTSTRAP"
ENV_MARIADB_URL = "TWOPHASE_MARIADB_URL"
ENV_PG_DSN = "TWOPHASE_PG_DSN"
ENV_PG_NOPREP_DSN = "TWOPHASE_PG_NOPREP_DSN"
ENV_SPARK_MASTER = "TWOPHASE_SPARK_MASTER"

Service = KafkaBroker | MariaDBServer | PostgresServer | SparkCluster


def state_home() -> Path:
    """Return the directory of ``twophase-dev``'s state and logs.

    Returns
    -------
    pathlib.Path
        ``$TWOPHASE_DEV_HOME`` if set, else ``<cache>/dev`` (see
        :func:`twophase_dev._host._files.cache_root`).
    """
    explicit = os.environ.get("TWOPHASE_DEV_HOME")
    return Path(explicit).expanduser() if explicit else cache_root() / "dev"


@dataclass
class Report:
    """What an operation did, as lines for the user (``notes`` go to stderr)."""

    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _handle(record: Mapping[str, Any]) -> Service:
    if record.get("kind") == "kafka":
        return KafkaBroker.from_record(record)
    if record.get("kind") == "spark-cluster":
        return SparkCluster.from_record(record)
    if record.get("kind") == "mariadb":
        return MariaDBServer.from_record(record)
    return PostgresServer.from_record(record)


def _adopt_restarted(record: dict[str, Any]) -> dict[str, Any]:
    """Point ``record`` at the server's current pid if another handle restarted it meanwhile."""
    work_dir = record.get("work_dir")
    pid = record.get("pid")
    if not work_dir or not isinstance(pid, int):
        return record
    current = owner_service_pid(Path(work_dir))
    if current is not None and current != pid:
        return {**record, "pid": current}
    return record


class DevState:
    """The services recorded by ``twophase-dev up`` in one state directory.

    Parameters
    ----------
    home : pathlib.Path, optional
        The state directory; :func:`state_home` by default.
    """

    def __init__(self, home: Path | None = None):
        self.home = home if home is not None else state_home()
        self.path = self.home / "state.json"
        self.logs = self.home / "logs"

    # ---------------------------------------------------------------- storage

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Serialise ``up``/``down`` between processes for the ``with`` block.

        Yields
        ------
        None
            While the lock is held.
        """
        with file_lock(self.home / "state.lock"):
            yield

    def records(self) -> dict[str, dict[str, Any]]:
        """Return the recorded services, stale ones included.

        Returns
        -------
        dict
            Service name to record.
        """
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise DevInfraError(
                f"{self.path} is not valid JSON ({exc}); delete it after stopping any service "
                "it lists"
            ) from exc
        services = data.get("services", {}) if isinstance(data, dict) else {}
        # A chaos test that attached to a service and restarted it changed its pid, not this file.
        return {
            str(k): _adopt_restarted(dict(v)) for k, v in services.items() if isinstance(v, dict)
        }

    def _save(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"services": records}, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.path)

    def running(self) -> dict[str, Service]:
        """Return handles of the recorded services whose process is alive.

        Returns
        -------
        dict
            Service name to a handle that can ``stop()`` or ``restart()`` it.
        """
        handles = {name: _handle(rec) for name, rec in self.records().items()}
        return {name: h for name, h in handles.items() if h.is_running()}

    def prune(self) -> list[str]:
        """Remove records of services whose process is gone, with their data directories.

        Returns
        -------
        list of str
            A note per removed record.
        """
        notes = []
        records = self.records()
        for name, record in list(records.items()):
            handle = _handle(record)
            work_dir = record.get("work_dir")
            if handle.is_running():
                continue
            if record.get("own_work_dir", True) and work_dir and work_dir_in_use(Path(work_dir)):
                # Being restarted by the process that owns it now (a chaos test): not stale.
                notes.append(f"{name}: not running right now, its directory is in use; kept")
                continue
            if isinstance(handle, SparkCluster):
                # The master is gone; workers, executors or Python workers may not be.
                with contextlib.suppress(DevInfraError):
                    handle.stop()
            if record.get("own_work_dir", True) and work_dir:
                shutil.rmtree(work_dir, ignore_errors=True)
            del records[name]
            notes.append(
                f"{name}: removed stale record (pid {record.get('pid')} is gone; "
                f"last log: {record.get('log_file')})"
            )
        if notes:
            self._save(records)
        notes.extend(f"removed abandoned directory {d}" for d in clean_stale_work_dirs())
        return notes

    # ---------------------------------------------------------------- operations

    def up(self, services: Sequence[str], *, max_prepared_transactions: int = 64) -> Report:
        """Start the given services unless they already run (a running one is never restarted).

        Parameters
        ----------
        services : sequence of str
            Names from :data:`SERVICES`.
        max_prepared_transactions : int, optional
            Setting of the ``postgres`` service (``postgres-no-prepared`` always has 0).

        Returns
        -------
        Report
            One line per service.
        """
        unknown = sorted(set(services) - set(SERVICES))
        if unknown:
            raise ValueError(f"unknown services {unknown}; known: {', '.join(SERVICES)}")
        report = Report()
        with self.locked():
            report.notes.extend(self.prune())
            records = self.records()
            for name in [s for s in SERVICES if s in services]:
                if name in records:
                    handle = _handle(records[name])
                    line = f"{name}: already running ({_describe(records[name])})"
                    if (
                        name == "postgres"
                        and isinstance(handle, PostgresServer)
                        and handle.max_prepared_transactions != max_prepared_transactions
                    ):
                        report.notes.append(
                            f"postgres runs with max_prepared_transactions="
                            f"{handle.max_prepared_transactions}, not {max_prepared_transactions}: "
                            "run 'twophase-dev down --postgres' first to change it"
                        )
                    report.lines.append(line)
                    continue
                handle = self._new(name, max_prepared_transactions)
                handle.start()
                records[name] = {**handle.to_record(), "service": name}
                self._save(records)
                report.lines.append(
                    f"{name}: started in {handle.startup_seconds or 0:.1f} s "
                    f"({_describe(records[name])})"
                )
        return report

    def _new(self, name: str, max_prepared_transactions: int) -> Service:
        log_dir = self.logs / name
        if name == "kafka":
            return KafkaBroker(log_dir=log_dir, detach=True)
        if name == "spark-cluster":
            return SparkCluster(log_dir=log_dir, detach=True)
        if name == "mariadb":
            return MariaDBServer(log_dir=log_dir, detach=True)
        mpt = 0 if name == "postgres-no-prepared" else max_prepared_transactions
        return PostgresServer(max_prepared_transactions=mpt, log_dir=log_dir, detach=True)

    def down(self, services: Sequence[str]) -> Report:
        """Stop the given services if this state started them, and delete their data.

        Parameters
        ----------
        services : sequence of str
            Names from :data:`SERVICES`.

        Returns
        -------
        Report
            One line per service.
        """
        report = Report()
        with self.locked():
            report.notes.extend(self.prune())
            records = self.records()
            for name in [s for s in SERVICES if s in services]:
                record = records.pop(name, None)
                if record is None:
                    report.lines.append(f"{name}: not running")
                    continue
                _handle(record).stop()
                self._save(records)
                report.lines.append(f"{name}: stopped (logs kept in {record.get('log_dir')})")
            if not records:
                self.path.unlink(missing_ok=True)
        return report

    def status(self) -> dict[str, dict[str, Any]]:
        """Return every recorded service with a ``running`` flag (stale ones are not removed).

        Returns
        -------
        dict
            Service name to record plus ``running``.
        """
        result = {}
        for name, record in self.records().items():
            result[name] = {**record, "running": _handle(record).is_running()}
        return result

    def env(self) -> dict[str, str]:
        """Return the environment variables that point tests at the running services.

        Returns
        -------
        dict of str to str
            ``TWOPHASE_KAFKA_BOOTSTRAP``, ``TWOPHASE_PG_DSN``, ``TWOPHASE_PG_NOPREP_DSN``,
            ``TWOPHASE_MARIADB_URL``, ``TWOPHASE_SPARK_MASTER`` for the services that run.
        """
        env = {}
        for name, handle in self.running().items():
            if isinstance(handle, KafkaBroker):
                env[ENV_KAFKA_BOOTSTRAP] = handle.bootstrap_servers
            elif isinstance(handle, SparkCluster):
                env[ENV_SPARK_MASTER] = handle.master_url
            elif isinstance(handle, MariaDBServer):
                env[ENV_MARIADB_URL] = handle.url
            elif name == "postgres":
                env[ENV_PG_DSN] = handle.dsn
            else:
                env[ENV_PG_NOPREP_DSN] = handle.dsn
        return env

    def find(self, kind: str, port: int) -> Service | None:
        """Return the running recorded service of ``kind`` listening on ``port``, if any.

        Parameters
        ----------
        kind : {"kafka", "postgres", "mariadb", "spark-cluster"}
            Service kind.
        port : int
            Its client port (the master's port for a Spark cluster).

        Returns
        -------
        KafkaBroker or MariaDBServer or PostgresServer or SparkCluster or None
            A handle that can restart or stop it.
        """
        for record in self.records().values():
            if record.get("kind") == kind and record.get("port") == port:
                handle = _handle(record)
                if handle.is_running():
                    return handle
        return None


def _describe(record: Mapping[str, Any]) -> str:
    if record.get("kind") == "kafka":
        where = f"bootstrap {record.get('bootstrap_servers')}"
    elif record.get("kind") == "spark-cluster":
        workers = record.get("workers", [])
        pids = ", ".join(str(w["pid"]) for w in workers)
        where = (
            f"master {record.get('master_url')}, {len(workers)} workers of "
            f"{record.get('worker_cores')} core(s) (pids {pids})"
        )
    elif record.get("kind") == "mariadb":
        where = f"{record.get('url')}, binlog {'on' if record.get('binlog') else 'off'}"
    else:
        where = (
            f"{record.get('dsn')}, max_prepared_transactions="
            f"{record.get('max_prepared_transactions')}"
        )
    return f"{where}, pid {record.get('pid')}, log {record.get('log_file')}"
