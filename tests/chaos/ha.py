"""Replicated targets of the chaos harness and their faults: a failover, a broker restart.

The ``-ha`` sinks write to targets that survive the loss of a server, as managed services run
them (issue 40):

* ``pg-coordinated-ha`` and ``pg-markers-ha``: a PostgreSQL primary (``max_prepared_transactions``
  64) and a **synchronous** streaming standby (:class:`twophase_dev.PostgresStandby`,
  :func:`twophase_dev.make_synchronous`), the sink's DSN naming both with
  ``target_session_attrs=read-write`` (:class:`PostgresPair`);
* ``maria-coordinated-ha`` and ``maria-markers-ha``: a MariaDB primary and a **semi-synchronous**
  replica (:class:`twophase_dev.MariaDBReplica`, :func:`twophase_dev.make_semi_synchronous`,
  ``AFTER_SYNC``). PyMySQL connects to one host, so the sink's URL names the primary; after a
  failover the harness starts the next driver run with the promoted server's URL, as a DNS name
  or a proxy that moves does in production (:class:`MariaDBPair`);
* ``kafka-ha``: a :class:`twophase_dev.KafkaCluster` of three KRaft brokers (replication factor 3,
  ``min.insync.replicas`` 2, the transaction state log likewise).

Each trial of such a sink draws exactly one fault of its target's kind, bound to a point like
the others:

* ``failover``: the primary crashed (PostgreSQL's immediate shutdown, MariaDB's ``SIGKILL``), the
  standby promoted, then the process held at the point released (as for a restart: the others
  meet the outage). Fired when the standby
  was synchronous at the crash (``pg_stat_replication.sync_state``; MariaDB's semi-sync master
  status ``ON`` with a client), the old primary is gone and the promoted server accepts writes.
  The pair is made whole again before the next trial: a new standby of the promoted server.
* ``broker_restart``: one broker (the coordinator of the transactions of the task at the point,
  the leader of a partition of the output topic, or any) stopped (``SIGTERM``, a controlled
  shutdown) or killed, then started again; or a **rolling restart** of all three, one by one, each
  back and every replica in sync before the next goes. The process at the point goes on once the
  first broker is down; during a rolling restart the start of each of the next two batches is
  held until the next broker is down, so that each outage meets a batch. Fired when every broker
  meant was restarted (a new pid, running, the cluster in sync), and, for a coordinator or a
  leader, when the broker was that one just before it went.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.chaos.events import go, read_events

__all__ = [
    "BROKER_TARGETS",
    "HA_FAULT",
    "HA_SINKS",
    "MariaDBPair",
    "PostgresPair",
    "fail_over",
    "holds",
    "restart_brokers",
]

#: The replicated sinks and the fault kind each draws once per trial.
HA_FAULT = {
    "pg-coordinated-ha": "failover",
    "pg-markers-ha": "failover",
    "maria-coordinated-ha": "failover",
    "maria-markers-ha": "failover",
    "kafka-ha": "broker_restart",
}
HA_SINKS = tuple(HA_FAULT)
#: What a ``broker_restart`` takes away: one broker chosen so, or all of them one by one.
BROKER_TARGETS = ("coordinator", "leader", "any", "rolling")
#: Batches after the point whose start a rolling restart holds until the next broker is down.
ROLLING_HOLDS = 2

#: Runs an action on the harness's long-lived server thread (servers die with their thread).
Ops = Callable[[Callable[[], Any]], Any]


# ----------------------------------------------------------------------------- topologies


class _Pair:
    """A primary and its replica, made whole again after a failover (the shared life cycle)."""

    #: The database, for notes; how a server of it is stopped for good; what its replica is called.
    database = ""
    stop_mode = ""
    replica_word = ""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.primary: Any = None
        self.standby: Any = None
        self.generation = 0
        #: Crashed primaries, removed before the next trial.
        self.retired: list[Any] = []

    def _new_standby(self) -> None:
        raise NotImplementedError

    @property
    def servers(self) -> list[Any]:
        return [s for s in (self.primary, self.standby) if s is not None]

    def crash_primary(self) -> None:
        self.primary.kill()  # PostgreSQL: an immediate shutdown; MariaDB: SIGKILL

    def _promote(self) -> None:
        self.standby.promote()
        self.retired.append(self.primary)
        self.primary, self.standby = self.standby, None

    def ensure_ready(self) -> list[str]:
        """Remove crashed primaries, start a new standby if there is none; return notes."""
        notes = []
        for old in self.retired:
            with contextlib.suppress(Exception):
                old.stop(mode=self.stop_mode)  # and its data
        self.retired.clear()
        if not self.primary.is_running():
            self.primary.start()
            notes.append(f"the {self.database} primary was down before the trial: started again")
        if self.standby is None or not self.standby.is_running():
            if self.standby is not None:
                with contextlib.suppress(Exception):
                    self.standby.stop(mode=self.stop_mode)
            started = time.monotonic()
            self._new_standby()
            notes.append(
                f"{self.database} {self.replica_word} rebuilt in {time.monotonic() - started:.1f} s"
            )
        return notes

    def stop(self) -> None:
        for server in [*self.servers, *self.retired]:
            with contextlib.suppress(Exception):
                server.stop(mode=self.stop_mode)


class PostgresPair(_Pair):
    """A PostgreSQL primary and its synchronous standby, made whole again after a failover."""

    database, stop_mode, replica_word = "PostgreSQL", "immediate", "standby"

    def start(self) -> PostgresPair:
        """Start the primary and a synchronous standby."""
        from twophase_dev import PostgresServer

        self.primary = PostgresServer(max_prepared_transactions=64, log_dir=self.log_dir / "pg-0")
        self.primary.start()
        self._new_standby()
        return self

    def _new_standby(self) -> None:
        from twophase_dev import PostgresStandby, make_synchronous

        self.generation += 1
        standby = PostgresStandby(self.primary, log_dir=self.log_dir / f"pg-{self.generation}")
        standby.start()
        # After the copy: the standby must not inherit synchronous_standby_names, which would
        # make it wait, once promoted, for a standby it does not have.
        make_synchronous(self.primary, standby)
        self.standby = standby

    @property
    def dsn(self) -> str:
        """Both servers, ``target_session_attrs=read-write``: libpq lands on the primary."""
        parts = urlsplit(self.primary.dsn)
        hosts = ",".join(f"{s.host}:{s.port}" for s in (self.primary, self.standby) if s)
        return f"postgresql://{parts.username}@{hosts}{parts.path}?target_session_attrs=read-write"

    def sync_state(self) -> str | None:
        """``pg_stat_replication.sync_state`` of the standby, read on the primary."""
        conn = self.primary.connect(dbname="postgres")
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (self.standby.application_name,),
                )
                row = cur.fetchone()
        finally:
            conn.close()
        return None if row is None else str(row[0])

    def promote(self) -> bool:
        """Promote the standby; return whether it accepts writes."""
        self._promote()
        return not self.primary.in_recovery()


class MariaDBPair(_Pair):
    """A MariaDB primary and its semi-synchronous replica, made whole again after a failover."""

    database, stop_mode, replica_word = "MariaDB", "kill", "replica"

    def start(self) -> MariaDBPair:
        from twophase_dev import MariaDBServer

        self.primary = MariaDBServer(log_dir=self.log_dir / "maria-0").start()
        self._new_standby()
        return self

    def _new_standby(self) -> None:
        from twophase_dev import MariaDBReplica, make_semi_synchronous

        self.generation += 1
        # A server id of its own: a replica skips the events of its own id, and the promoted
        # server's binary log holds events of every earlier id.
        replica = MariaDBReplica(
            self.primary,
            log_dir=self.log_dir / f"maria-{self.generation}",
            settings={"server_id": str(self.generation + 1)},
        )
        replica.start()
        make_semi_synchronous(self.primary, replica)
        self.standby = replica

    @property
    def url(self) -> str:
        """The password user's URL of the primary (PyMySQL takes one host)."""
        return str(self.primary.password_url)

    def _query(self, sql: str) -> list[Any]:
        """Rows of one statement on the primary."""
        conn = self.primary.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        finally:
            conn.close()

    def semi_sync(self) -> dict[str, str]:
        """The primary's ``Rpl_semi_sync_master_*`` status (``status``, ``clients``, ``no_tx``)."""
        rows = self._query("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_%'")
        return {str(k).removeprefix("Rpl_semi_sync_master_"): str(v) for k, v in rows}

    def promote(self) -> bool:
        """Promote the replica; return whether it accepts writes."""
        self._promote()
        rows = self._query("SELECT @@read_only")
        return bool(rows) and int(rows[0][0]) == 0


def ensure_cluster(cluster: Any) -> list[str]:
    """Start any broker that is down and wait until every replica is in sync."""
    down = [n for n in cluster.brokers if not cluster.broker(n).is_running()]
    if down:
        cluster.start()
    cluster.wait_in_sync(timeout=90)
    return [f"Kafka brokers {down} were down before the trial: started again"] if down else []


# ----------------------------------------------------------------------------- the faults


def holds(faults: list[Any]) -> list[dict[str, Any]]:
    """Pause points of rolling restarts: the start of the next batches, ``f<n>h<k>``."""
    pauses = []
    for n, fault in enumerate(faults):
        batch = fault.point.get("batch")
        if fault.kind != "broker_restart" or fault.params.get("target") != "rolling":
            continue
        if batch is None:
            continue
        for k in range(1, ROLLING_HOLDS + 1):
            pauses.append({"src": "driver", "name": "start", "batch": batch + k, "id": f"f{n}h{k}"})
    return pauses


def fail_over(trial: Any, number: int, fault: Any, ops: Ops) -> tuple[bool, str]:
    """Crash the primary, release the point, promote the standby; prove it (see the module)."""
    pair = trial.infra.ha_pair(trial.plan.sink)
    if pair.standby is None:
        return False, "no standby: the pair already failed over in this trial"
    database = "PostgreSQL" if isinstance(pair, PostgresPair) else "MariaDB"
    evidence: dict[str, Any] = {"database": database, "primary_pid": pair.primary.pid}
    if isinstance(pair, PostgresPair):
        evidence["sync_state"] = pair.sync_state()
        synchronous = evidence["sync_state"] == "sync"
    else:
        evidence["semi_sync"] = pair.semi_sync()
        status = evidence["semi_sync"]
        synchronous = status.get("status") == "ON" and int(status.get("clients", "0")) >= 1
    old = pair.primary
    with trial.server_lock:
        evidence["down_at"] = time.time()
        ops(pair.crash_primary)
        trial.note(name="primary_crashed", fault=number)
        writable = ops(pair.promote)
        evidence["promoted_at"] = time.time()
        # What the promoted server holds of the trial, read before the process at the point goes
        # on to finish it (a hot standby does not list them: PostgreSQL's pg_prepared_xacts is
        # empty until the promotion). The crash is what fired, not this read.
        try:
            prepared = [x for x in trial.prepared() if x.startswith(f"tp:{trial.sink_name}.")]
        except Exception as exc:
            prepared, evidence["prepared_error"] = [], repr(exc)
        go(trial.control, f"f{number}")  # as for a restart: once the fault is done
    evidence["prepared_on_promoted"] = len(prepared)
    fault.evidence = evidence
    fired = synchronous and not old.is_running() and writable
    seconds = evidence["promoted_at"] - evidence["down_at"]
    sync_text = (
        f"sync_state={evidence['sync_state']}"
        if "sync_state" in evidence
        else "semi-sync "
        + ", ".join(f"{k}={evidence['semi_sync'].get(k)}" for k in ("status", "clients", "no_tx"))
    )
    detail = (
        f"{database} primary (pid {evidence['primary_pid']}) crashed, standby promoted in "
        f"{seconds:.1f} s ({sync_text}); {len(prepared)} prepared transaction(s) of the trial "
        "on the standby at the crash"
    )
    if not synchronous:
        detail += "; the standby was NOT synchronous at the crash"
    if not writable:
        detail += "; the promoted server does not accept writes"
    return fired, detail


def _busy(events: Path, start: float, end: float) -> int:
    """How many driver and task events fell between ``start`` and ``end``."""
    seen, _ = read_events(events, 0)
    return sum(
        1 for e in seen if e.get("src") in ("driver", "task") and start <= float(e["t"]) <= end
    )


def restart_brokers(trial: Any, number: int, fault: Any, ops: Ops) -> tuple[bool, str]:
    """Restart the broker(s) of a ``broker_restart`` fault; prove it (see the module)."""
    cluster = trial.infra.kafka_ha
    params = fault.params
    target = params["target"]
    meant: str = ""
    if target == "rolling":
        nodes = list(params["order"])
    elif target == "any":
        nodes = [int(params["node"])]
    elif target == "leader":
        topic = f"chaos-{trial.sink_name}"
        nodes = [cluster.leader_of(topic, int(params["partition"]))]
        meant = f"leader of {topic}[{params['partition']}]"
    else:
        tid = trial.at[number].get("tid")
        if not tid:
            return False, "no transaction at the point"
        nodes = [cluster.coordinator_of(tid)]
        meant = f"coordinator of {tid}"
    kill = params.get("mode") == "kill"
    records = []
    with trial.server_lock:
        try:
            for k, node in enumerate(nodes):
                broker = cluster.broker(node)
                pid = broker.pid
                down_at = time.time()
                ops(broker.kill if kill else broker.stop)
                trial.note(name="broker_down", fault=number, node=node)
                go(trial.control, f"f{number}" if k == 0 else f"f{number}h{k}")
                ops(broker.start)
                cluster.wait_in_sync(timeout=90)
                back_at = time.time()
                records.append(
                    {
                        "node": node,
                        "pid": [pid, broker.pid],
                        "restarted": broker.pid != pid and broker.is_running(),
                        "down_at": down_at,
                        "in_sync_at": back_at,
                        "events_meanwhile": _busy(trial.events, down_at, back_at),
                    }
                )
        finally:
            for k in range(1, ROLLING_HOLDS + 1):
                go(trial.control, f"f{number}h{k}")
    fault.evidence = {"target": target, "mode": "kill" if kill else "term", "brokers": records}
    if meant:
        fault.evidence["meant"] = meant
    fired = bool(records) and all(r["restarted"] for r in records)
    steps = ", ".join(
        f"broker {r['node']} pid {r['pid'][0]}->{r['pid'][1]} back in sync after "
        f"{r['in_sync_at'] - r['down_at']:.1f} s, {r['events_meanwhile']} query events meanwhile"
        for r in records
    )
    what = "rolling restart" if target == "rolling" else f"{'kill' if kill else 'SIGTERM'}"
    return fired, f"{what}{' of the ' + meant if meant else ''}: {steps}"
