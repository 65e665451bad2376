"""Generate the golden files of twophase 0.2.0's durable records (tests/golden/v0_2_0/).

Run ONCE against release 0.2.0, commit c8a9d03, with the 0.2.0 code itself (not the
checkout under development): every record under ``v0_2_0/`` was written by a 0.2.0
function, and ``v0_2_0/MANIFEST.json`` says which one and what a reader must get back.
This module is not a test (no ``test_`` prefix, no test functions): pytest does not
collect it, and nothing imports it.

How it was run (and how to rerun it)::

    git worktree add /work/v020 c8a9d03          # a frozen copy of release 0.2.0
    .venv/bin/pip wheel --no-deps --no-build-isolation -w /tmp/v020wheel /work/v020
    .venv/bin/pip install --no-deps --target /tmp/v020site /tmp/v020wheel/twophase-0.2.0-*.whl
    cd /tmp && PYTHONPATH=/tmp/v020site:/work/v020/tools \\
        /work/main/.venv/bin/python /work/main/tests/golden/generate_v0_2_0.py

The wheel puts ``connectors/`` at ``twophase/connectors`` (pyproject's package-dir), which a
bare PYTHONPATH on the checkout would not. The script refuses to run unless ``twophase``
is version 0.2.0 and both ``twophase`` and ``twophase.connectors`` are imported from
outside /work/main.

It starts its own throwaway servers with the 0.2.0 dev tools (``twophase_dev``:
``PostgresServer``, ``MariaDBServer``, ``KafkaBroker``, each on free 127.0.0.1 ports, data
in the temporary directory) and stops them at the end; inside them it uses scratch
schemas / databases / topics with unique names, dropped before the servers stop. Nothing
of a shared server is touched. Needs: the project's .venv (psycopg2, PyMySQL,
confluent-kafka, pyarrow, pandas, pyspark for its cloudpickle), PostgreSQL and MariaDB
server binaries, Java 17 and the cached Kafka classpath (``scripts/setup.sh``).

What is deterministic: the coordinator-log scenarios under ``log_api/`` are written with a
fixed clock, pid and run ids (the 0.2.0 modules' ``time``/``os``/``uuid``/``getpass``
references are replaced while they run), so a rerun gives the same bytes. The real-server
runs (``log_runs/``, ``postgres/``, ``mariadb/``, ``kafka/``) carry wall-clock times, pids,
random run ids, server xids and Kafka nonces: MANIFEST.json lists those fields under
``variable_fields`` and gives their expected type instead of a value.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import decimal
import hashlib
import json
import pickletools
import platform
import shutil
import sys
import tempfile
import time
import types
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

OUT = Path(__file__).resolve().parent / "v0_2_0"
COMMIT = "c8a9d03"
MANIFEST: dict[str, Any] = {}
FILES: list[dict[str, Any]] = []

# Fixed, realistic values (the shapes 0.2.0 produces: _identity.SinkIdentity.token,
# connectors/jdbc/_gid.format_gid).
QUERY_ID = "5f0c3a8e-9b1d-4e27-8c6a-3d2f71b4e905"
FIXED_TIME = 1767225600.25  # 2026-01-01T00:00:00.25Z
FIXED_PID = 31337


# ---------------------------------------------------------------------- helpers
def check_runtime() -> dict[str, Any]:
    import twophase
    import twophase.connectors
    import twophase.connectors.jdbc
    import twophase.connectors.kafka

    where = {
        "twophase": twophase.__file__,
        "twophase.connectors": twophase.connectors.__file__,
        "twophase.connectors.jdbc": twophase.connectors.jdbc.__file__,
        "twophase.connectors.kafka": twophase.connectors.kafka.__file__,
    }
    print("twophase", twophase.__version__, where)
    if twophase.__version__ != "0.2.0":
        raise SystemExit(f"twophase is {twophase.__version__}, not 0.2.0")
    for name, path in where.items():
        if path.startswith("/work/main/"):
            raise SystemExit(f"{name} comes from the development checkout: {path}")
    from twophase._pyspark import cloudpickle

    pickler = cloudpickle()
    try:
        import pyspark

        pyspark_version = pyspark.__version__
    except ImportError:
        pyspark_version = None
    return {
        "twophase_version": twophase.__version__,
        "commit": COMMIT,
        "python": platform.python_version(),
        "cloudpickle": f"{pickler.__name__} {getattr(pickler, '__version__', '?')}",
        "pyspark": pyspark_version,
        "imported_from": where,
    }


def rel(path: Path) -> str:
    return str(path.relative_to(OUT))


def add_file(path: Path, **entry: Any) -> None:
    FILES.append({"path": rel(path), "bytes": path.stat().st_size, **entry})


def jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    return value


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def pickle_globals(data: bytes) -> list[str]:
    """The module.qualname of every class a pickle refers to (what must stay importable)."""
    names: list[str] = []
    strings: list[str] = []
    for op, arg, _pos in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            names.append(f"{strings[-2]}.{strings[-1]}")
        elif op.name == "GLOBAL":
            names.append(arg.replace(" ", "."))
    return sorted(set(names))


def handle_description(handle: Any) -> dict[str, Any]:
    cls = type(handle)
    return {
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "fields": {f.name: getattr(handle, f.name) for f in dataclasses.fields(handle)},
    }


def describe_log_file(path: Path, scenario_dir: Path, variable: dict[str, str]) -> dict[str, Any]:
    """Manifest entry of one coordinator-log file: its JSON and, for a decision, the handles."""
    from twophase._serde import loads

    name = path.name
    relname = str(path.relative_to(scenario_dir))
    raw = path.read_bytes()
    record = json.loads(raw)
    if relname == "state.json":
        kind, writer = "state", "twophase._log.CoordinatorLog.compact"
    elif relname.startswith("epochs/"):
        kind, writer = "epoch", "twophase._log.CoordinatorLog.claim"
    else:
        kind = name.split(".")[1]
        writer = f"twophase._log.CoordinatorLog.record_{kind}"
    expect = {k: v for k, v in record.items() if k not in variable}
    entry: dict[str, Any] = {
        "what": f"coordinator log: {kind} record ({relname})",
        "written_by": writer,
        "encoding": "UTF-8 JSON, json.dumps(sort_keys=True) + '\\n', no version field",
        "fields": sorted(record),
        "expect": expect,
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    present = {k: t for k, t in variable.items() if k in record}
    if present:
        entry["variable_fields"] = present
    if kind == "decision":
        blob = base64.b64decode(record["handles"])
        handles = loads(blob)
        entry["handles_payload"] = (
            "base64 of cloudpickle.dumps(list(handles)) (twophase._serde.dumps), pickle protocol "
            f"{blob[1]}; unpickling imports the classes below by module path"
        )
        entry["pickle_refers_to"] = pickle_globals(blob)
        entry["handles_decoded"] = [handle_description(h) for h in handles]
        if "handles" in variable:
            entry["expect"].pop("handles", None)
    return entry


def copy_log(src: Path, dest: Path, scenario: str, what: str, variable: dict[str, str]) -> None:
    """Copy a coordinator log's files byte for byte, keeping the layout; describe each."""
    if dest.exists():
        shutil.rmtree(dest)
    for path in sorted(src.rglob("*")):
        if path.is_dir() or path.name.startswith(".tmp-"):
            continue
        target = dest / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        entry = describe_log_file(target, dest, variable)
        entry["scenario"] = scenario
        entry["scenario_notes"] = what
        add_file(target, **entry)


class Frozen:
    """Replace the clock, pid, uuids and user name seen by the 0.2.0 log, CLI and test kit."""

    def __init__(self) -> None:
        self.counter = 0

    def _uuid4(self) -> uuid.UUID:
        self.counter += 1
        return uuid.UUID(int=(0x6F1DE000 << 96) + self.counter, version=4)

    def __enter__(self) -> Frozen:
        import twophase._cli as cli
        import twophase._coordinator as coordinator
        import twophase._log as log
        import twophase.testing._local as local

        fake_time = types.SimpleNamespace(
            time=lambda: FIXED_TIME, perf_counter=time.perf_counter, sleep=time.sleep
        )
        fake_os = types.SimpleNamespace(getpid=lambda: FIXED_PID)
        fake_uuid = types.SimpleNamespace(uuid4=self._uuid4, UUID=uuid.UUID)
        self.patches = [
            mock.patch.object(log, "time", fake_time),
            mock.patch.object(log, "os", fake_os),
            mock.patch.object(coordinator, "time", fake_time),
            mock.patch.object(cli, "time", fake_time),
            mock.patch.object(cli, "uuid", fake_uuid),
            mock.patch.object(cli, "getpass", types.SimpleNamespace(getuser=lambda: "operator")),
            mock.patch.object(local, "uuid", fake_uuid),
        ]
        for p in self.patches:
            p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.patches):
            p.stop()


# --------------------------------------------------- 1. coordinator log via the API
def log_api() -> None:
    from twophase import TransactionHandle
    from twophase._identity import SinkIdentity
    from twophase._log import CoordinatorLog
    from twophase._store import LocalFileStore
    from twophase.connectors.jdbc._gid import format_gid
    from twophase.connectors.jdbc._mariadb._xa import MariaDBHandle
    from twophase.connectors.jdbc._mariadb._xid import xid_of
    from twophase.connectors.jdbc._prepared import PostgresHandle

    root = Path(tempfile.mkdtemp(prefix="golden-v020-log-"))

    def new_log(name: str, *, retain: int = 100) -> tuple[CoordinatorLog, Path]:
        identity = SinkIdentity(name, QUERY_ID)
        location = Path(identity.log_location(str(root / name)))
        log = CoordinatorLog(
            LocalFileStore(location, fsync=False),
            sink=name,
            identity=identity.token,
            retain=retain,
        )
        return log, location

    run_id = "0f4b2c6d8e1a4b3c9d7e5f6a1b2c3d4e"
    notes: dict[str, str] = {}
    with Frozen():
        # (a) TransactionHandle, what the test kit's FakeSink returns (twophase.testing._fake)
        log, loc_fake = new_log("orders")
        token = log.identity
        log.claim(run_id, QUERY_ID)
        handles = [TransactionHandle(f"{token}:7:{p}:{a}", 7, p, a) for p, a in ((0, 0), (1, 1))]
        log.record_decision(7, handles, {"rows": 6})
        log.record_committed(7, {"rows": 6, "committed_at": time_fixed()})
        notes["fake_handle"] = (
            "CoordinatorLog over LocalFileStore, sink 'orders': claim (epoch 1), decision of "
            "batch 7 with two twophase.TransactionHandle (FakeSink's transaction id "
            "'<identity>:<batch>:<partition>:<attempt>', twophase._types.transaction_id), "
            "committed record with the coordinator's extras {rows, committed_at}"
        )
        # (b) PostgresHandle: one with xid and rows, one with xid None (rebuilt from
        # pg_prepared_xacts by list_in_doubt)
        log, loc_pg = new_log("orders_pg")
        token = log.identity
        log.claim(run_id, QUERY_ID)
        pg_handles = [
            PostgresHandle(format_gid(token, 12, 0, 0), 12, 0, 0, xid=748213, rows=3),
            PostgresHandle(format_gid(token, 12, 1, 2), 12, 1, 2, xid=None, rows=0),
        ]
        log.record_decision(12, pg_handles, {"rows": 3})
        log.record_committed(12, {"rows": 3, "committed_at": time_fixed()})
        notes["postgres_handle"] = (
            "sink 'orders_pg': decision of batch 12 with two "
            "twophase.connectors.jdbc._prepared.PostgresHandle (gid from _gid.format_gid), "
            "one with xid=748213 rows=3, one with xid=None rows=0"
        )
        # (c) MariaDBHandle
        log, loc_maria = new_log("orders_maria")
        token = log.identity
        log.claim(run_id, QUERY_ID)
        maria_handles = [MariaDBHandle(xid_of(token, 3, p, 0).gid, 3, p, 0, rows=3) for p in (0, 1)]
        log.record_decision(3, maria_handles, {"rows": 6})
        log.record_committed(3, {"rows": 6, "committed_at": time_fixed()})
        notes["mariadb_handle"] = (
            "sink 'orders_maria': decision of batch 3 with two "
            "twophase.connectors.jdbc._mariadb._xa.MariaDBHandle (transaction id = "
            "_xid.xid_of(...).gid: gtrid 'tp:<identity>' + ':' + bqual "
            "'<batch>:<partition>:<attempt>'), rows=3 each"
        )
        # (d) compaction: markers-protocol style intents, retain=3, compact after each commit
        log, loc_compact = new_log("clicks", retain=3)
        log.claim(run_id, QUERY_ID)
        for batch in range(5):
            log.record_intent(batch, 2)
            log.record_committed(batch, {"rows": 4, "committed_at": time_fixed()})
            log.compact(batch)
        notes["compaction"] = (
            "sink 'clicks' (retain=3): intent (2 partitions) + committed for batches 0..4, "
            "compact(batch) after each as the coordinator does; compaction at batch 3 and 4 "
            "left state.json {committed_through: 1, partition_slots: 2} and batches 2..4"
        )
    # (e) rewrite: a real 0.2.0 `twophase resolve --rewrite --yes` (twophase._cli) on a
    # markers-protocol log whose batch 1 is unfinished (FakeMarkerSink crashed at phase1_done)
    from twophase._cli import main as cli_main
    from twophase.testing import CrashAt, FakeMarkerSink, FakeTarget, LocalRunner, SimulatedCrash

    checkpoint = root / "resolve"
    with Frozen():
        runner = LocalRunner(
            FakeMarkerSink("events", FakeTarget.in_memory()), checkpoint, query_id=QUERY_ID
        )
        runner.run_batch(0, [[{"id": 1}, {"id": 2}], [{"id": 3}]])
        install = CrashAt("phase1_done", 1)
        from twophase.testing import install_step_listener

        install_step_listener(runner.sink, install)
        with contextlib.suppress(SimulatedCrash):
            runner.run_batch(1, [[{"id": 4}], [{"id": 5}, {"id": 6}]])
        assert install.fired
        code = cli_main(
            [
                "resolve",
                str(checkpoint),
                "--sink",
                "events",
                "--batch",
                "1",
                "--query-id",
                QUERY_ID,
                "--rewrite",
                "--reason",
                "golden file",
                "--yes",
            ]
        )
        assert code == 0, code
    loc_resolve = Path(runner.identity.log_location(str(checkpoint)))
    notes["rewrite"] = (
        "FakeMarkerSink 'events' run by LocalRunner (markers protocol): batch 0 committed, "
        "batch 1 crashed at phase1_done (intent, no committed), then the 0.2.0 CLI "
        "'twophase resolve --rewrite --yes --reason \"golden file\"' claimed epoch 2 "
        "(run_id 'twophase-cli:<hex>') and wrote batches/...1.rewrite.json"
    )
    api = OUT / "log_api"
    for scenario, loc in (
        ("fake_handle", loc_fake),
        ("postgres_handle", loc_pg),
        ("mariadb_handle", loc_maria),
        ("compaction", loc_compact),
        ("rewrite", loc_resolve),
    ):
        copy_log(loc, api / scenario, f"log_api/{scenario}", notes[scenario], {})
    shutil.rmtree(root, ignore_errors=True)


def time_fixed() -> float:
    return FIXED_TIME


# ------------------------------------------------------------- database helpers
def pg_table_ddl(cur: Any, schema: str, table: str) -> dict[str, Any]:
    cur.execute(
        "SELECT column_name, data_type, udt_name, character_maximum_length, column_default, "
        "is_nullable, ordinal_position FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (schema, table),
    )
    columns = [
        {
            "name": r[0],
            "data_type": r[1],
            "udt_name": r[2],
            "max_length": r[3],
            "default": r[4],
            "nullable": r[5] == "YES",
            "ordinal": r[6],
        }
        for r in cur.fetchall()
    ]
    cur.execute(
        "SELECT con.conname, con.contype, pg_get_constraintdef(con.oid) FROM pg_constraint con "
        "JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s ORDER BY con.conname",
        (schema, table),
    )
    constraints = [{"name": r[0], "type": r[1], "definition": r[2]} for r in cur.fetchall()]
    cur.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum "
        "WHERE i.indisprimary AND n.nspname = %s AND c.relname = %s ORDER BY k.ord",
        (schema, table),
    )
    primary_key = [r[0] for r in cur.fetchall()]
    cur.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s "
        "ORDER BY indexname",
        (schema, table),
    )
    indexes = [{"name": r[0], "definition": r[1]} for r in cur.fetchall()]
    cur.execute(
        "SELECT c.relpersistence FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s",
        (schema, table),
    )
    return {
        "table": f"{schema}.{table}",
        "columns": columns,
        "primary_key": primary_key,
        "constraints": constraints,
        "indexes": indexes,
        "persistence": cur.fetchone()[0],
    }


def pg_dump_schema(server: Any, schema: str, skip: set[str]) -> dict[str, Any]:
    conn = server.connect()
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "ORDER BY table_name",
                (schema,),
            )
            tables = [r[0] for r in cur.fetchall()]
            out: dict[str, Any] = {}
            for table in tables:
                if table in skip:
                    continue
                ddl = pg_table_ddl(cur, schema, table)
                order = ", ".join(f'"{c}"' for c in (ddl["primary_key"])) or "1"
                cur.execute(f'SELECT * FROM "{schema}"."{table}" ORDER BY {order}')
                names = [d[0] for d in cur.description]
                rows = [
                    {n: jsonable(v) for n, v in zip(names, r, strict=True)} for r in cur.fetchall()
                ]
                out[table] = {"ddl": ddl, "rows": rows}
            return {"tables_in_schema": tables, "tables": out}
    finally:
        conn.close()


def maria_sql(server: Any, statement: str, params: Any = None, database: str | None = None) -> Any:
    conn = server.connect(autocommit=True, database=database)
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return list(cur.fetchall()), [d[0] for d in (cur.description or ())]
    finally:
        conn.close()


def maria_dump_db(server: Any, db: str, skip: set[str]) -> dict[str, Any]:
    tables = [r[0] for r in maria_sql(server, f"SHOW TABLES FROM `{db}`")[0]]
    out: dict[str, Any] = {}
    for table in sorted(tables):
        if table in skip:
            continue
        create = maria_sql(server, f"SHOW CREATE TABLE `{db}`.`{table}`")[0][0][1]
        cols, _ = maria_sql(
            server,
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, COLUMN_KEY "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        pk = [c[0] for c in cols if c[4] == "PRI"]
        order = ", ".join(f"`{c}`" for c in pk) or "1"
        rows, names = maria_sql(server, f"SELECT * FROM `{db}`.`{table}` ORDER BY {order}")
        out[table] = {
            "ddl": {
                "show_create_table": create,
                "columns": [
                    {
                        "name": c[0],
                        "type": c[1],
                        "nullable": c[2] == "YES",
                        "default": c[3],
                        "key": c[4],
                    }
                    for c in cols
                ],
                "primary_key": pk,
            },
            "rows": [{n: jsonable(v) for n, v in zip(names, r, strict=True)} for r in rows],
        }
    return {"tables_in_database": sorted(tables), "tables": out}


def id_part(batch: int, p: int) -> list[Any]:
    """Partition ``p`` of batch ``batch``: three rows (id bigint, payload text)."""
    import pyarrow as pa

    ids = [batch * 100 + p * 10 + i for i in range(3)]
    return [
        pa.record_batch(
            {"id": pa.array(ids, pa.int64()), "payload": pa.array([f"row-{i}" for i in ids])}
        )
    ]


TS_VARIABLE = "ISO-8601 timestamp string, the server's clock at the write"


def describe_rows(
    dump: dict[str, Any],
    path: Path,
    *,
    db: str,
    protocol: str,
    writers: dict[str, str],
    variable: dict[str, dict[str, str]],
    notes: str,
) -> None:
    for table, content in dump["tables"].items():
        expect_rows = [
            {k: v for k, v in row.items() if k not in variable.get(table, {})}
            for row in content["rows"]
        ]
        entry = {
            "what": f"{db} table {table} ({protocol} protocol): DDL as the server reports it "
            "and every row as JSON",
            "written_by": writers.get(table, "?"),
            "table": table,
            "columns": [c["name"] for c in content["ddl"]["columns"]],
            "primary_key": content["ddl"]["primary_key"],
            "expect_rows": expect_rows,
            "scenario_notes": notes,
        }
        if variable.get(table):
            entry["variable_fields"] = variable[table]
        FILES.append({"path": f"{rel(path)}#tables.{table}", **entry})


# ------------------------------------------------------------------ 2. PostgreSQL
def postgres(server: Any) -> None:
    from twophase.connectors.jdbc import postgres_sink
    from twophase.testing import CrashAt, LocalRunner, SimulatedCrash, install_step_listener

    tag = uuid.uuid4().hex[:8]
    work = Path(tempfile.mkdtemp(prefix="golden-v020-pg-"))
    for protocol in ("coordinated", "markers"):
        schema = f"golden_v020_{protocol[:5]}_{tag}"
        conn = server.connect()
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE SCHEMA "{schema}"')
        conn.close()
        name = "orders_pg" if protocol == "coordinated" else "orders_pgm"
        sink = postgres_sink(
            name,
            table=(schema, "events"),
            dsn=server.dsn,
            protocol=protocol,
            create_table=True,
            marker_table=(schema, "twophase_markers"),
            lock_timeout=5.0,
        )
        checkpoint = work / protocol
        runner = LocalRunner(sink, checkpoint, query_id=QUERY_ID)
        mid: dict[str, Any] = {}
        runner.run_batch(0, [id_part(0, 0), id_part(0, 1)])
        if protocol == "coordinated":
            # batch 1: the driver "crashes" right after the decision; the restarted run
            # commits the decided handles in recovery ({"recovered": true, ...})
            crash = CrashAt("decided", 1)

            def snapshot_then_crash(
                step: str,
                batch_id: int,
                index: int | None,
                mid: dict[str, Any] = mid,
                schema: str = schema,
                crash: CrashAt = crash,
            ) -> None:
                if step == "decided" and batch_id == 1:
                    mid.update(pg_dump_schema(server, schema, skip={"events"}))
                crash(step, batch_id, index)

            install_step_listener(runner.sink, snapshot_then_crash)
            with contextlib.suppress(SimulatedCrash):
                runner.run_batch(1, [id_part(1, 0), id_part(1, 1)])
            assert crash.fired
            runner.restart()
            outcome = runner.run_batch(1, [id_part(1, 0), id_part(1, 1)]).outcome
            print("pg coordinated batch 1 after restart:", outcome)
        else:
            runner.run_batch(1, [id_part(1, 0), id_part(1, 1)])
        dump = pg_dump_schema(server, schema, skip=set())
        with server.connect() as c, c.cursor() as cur:
            cur.execute("SHOW server_version")
            version = cur.fetchone()[0]
        c.close()
        dump["server_version"] = version
        dump["scratch_schema"] = schema
        dump["identity"] = runner.identity.token
        dump["data_table_rows"] = len(dump["tables"].get("events", {}).get("rows", []))
        dump["tables"].pop("events", None)  # the user's data, not a twophase record
        if mid:
            mid.pop("tables_in_schema", None)
            dump["at_decided_of_batch_1"] = mid
        path = OUT / "postgres" / f"{protocol}_tables.json"
        write_json(path, dump)
        add_file(
            path,
            what=f"PostgreSQL {version}: the twophase tables of the {protocol} protocol after 2 "
            "batches x 2 partitions (postgres_sink through twophase.testing.LocalRunner)"
            + (
                "; 'at_decided_of_batch_1' is the same tables seen from a step listener at "
                "step 'decided' of batch 1, before the simulated crash"
                if protocol == "coordinated"
                else ""
            ),
            written_by="twophase.connectors.jdbc._fencing (twophase_fences: create_fence_table, "
            "fence_attempts)"
            if protocol == "coordinated"
            else "twophase.connectors.jdbc._markers.PostgresMarkerTable "
            "(create, commit_with_marker)",
        )
        writers = {
            "twophase_fences": "twophase.connectors.jdbc._fencing.create_fence_table (row "
            "(identity, -1, -1) when the sink opens) then fence_attempts (upsert of the rank "
            "(epoch, batch) after recovery and after each finished batch)",
            "twophase_markers": "twophase.connectors.jdbc._markers.MarkerTable.commit_with_marker"
            " (INSERT in the partition's transaction; create: PostgresMarkerTable.create)",
        }
        variable = {
            "twophase_fences": {"fenced_at": TS_VARIABLE},
            "twophase_markers": {"committed_at": TS_VARIABLE},
        }
        notes = (
            "2 batches x 2 partitions, 3 rows each (ids batch*100+p*10+i, payload 'row-<id>'); "
            + (
                "batch 1 crashed after 'decided' and was committed by the restarted run's "
                "recovery (epoch 2)"
                if protocol == "coordinated"
                else "no failures"
            )
        )
        describe_rows(
            dump,
            path,
            db="PostgreSQL",
            protocol=protocol,
            writers=writers,
            variable=variable,
            notes=notes,
        )
        for table, content in mid.get("tables", {}).items():
            FILES.append(
                {
                    "path": f"{rel(path)}#at_decided_of_batch_1.tables.{table}",
                    "what": f"PostgreSQL table {table} at step 'decided' of batch 1 (epoch 1), "
                    "before the simulated crash: the fence rank after batch 0",
                    "written_by": writers.get(table, "?"),
                    "expect_rows": [
                        {k: v for k, v in r.items() if k not in variable.get(table, {})}
                        for r in content["rows"]
                    ],
                    **({"variable_fields": variable[table]} if variable.get(table) else {}),
                }
            )
        copy_log(
            Path(runner.identity.log_location(str(checkpoint))),
            OUT / "log_runs" / f"postgres_{protocol}",
            f"log_runs/postgres_{protocol}",
            f"the coordinator log of the PostgreSQL {protocol} run above ({notes})",
            LOG_RUN_VARIABLE,
        )
        runner.close()
        conn = server.connect()
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA "{schema}" CASCADE')
        conn.close()
    shutil.rmtree(work, ignore_errors=True)


LOG_RUN_VARIABLE = {
    "claimed_at": "float, time.time() at the claim",
    "pid": "int, the driver's pid",
    "run_id": "str, 32 hex digits (uuid4().hex of the run)",
    "committed_at": "float, time.time() after phase 2",
    "handles": "str, base64 pickle: PostgresHandle.xid is the server's transaction id (varies)",
}


# --------------------------------------------------------------------- MariaDB
def mariadb(server: Any) -> None:
    from twophase.connectors.jdbc import mariadb_sink
    from twophase.testing import LocalRunner, install_step_listener

    tag = uuid.uuid4().hex[:8]
    work = Path(tempfile.mkdtemp(prefix="golden-v020-maria-"))
    version = maria_sql(server, "SELECT VERSION()")[0][0][0]
    for protocol in ("coordinated", "markers"):
        db = f"golden_v020_{protocol[:5]}_{tag}"
        maria_sql(server, f"CREATE DATABASE `{db}`")
        url = server.url.rsplit("/", 1)[0] + f"/{db}"
        name = "orders_maria" if protocol == "coordinated" else "orders_mariam"
        sink = mariadb_sink(
            name,
            table="events",
            url=url,
            protocol=protocol,
            create_table=True,
            lock_timeout=5.0,
        )
        checkpoint = work / protocol
        runner = LocalRunner(sink, checkpoint, query_id=QUERY_ID)
        mid: dict[str, Any] = {}

        def snapshot(
            step: str,
            batch_id: int,
            _index: int | None,
            mid: dict[str, Any] = mid,
            db: str = db,
        ) -> None:
            if step == "phase2_done" and batch_id == 1:
                mid.update(maria_dump_db(server, db, skip={"events"}))

        install_step_listener(runner.sink, snapshot)
        runner.run_batch(0, [id_part(0, 0), id_part(0, 1)])
        runner.run_batch(1, [id_part(1, 0), id_part(1, 1)])
        dump = maria_dump_db(server, db, skip=set())
        dump["server_version"] = version
        dump["scratch_database"] = db
        dump["identity"] = runner.identity.token
        dump["data_table_rows"] = len(dump["tables"].get("events", {}).get("rows", []))
        dump["tables"].pop("events", None)
        if mid:
            dump["at_phase2_done_of_batch_1"] = mid
        path = OUT / "mariadb" / f"{protocol}_tables.json"
        write_json(path, dump)
        add_file(
            path,
            what=f"MariaDB {version}: the twophase tables of the {protocol} protocol after 2 "
            "batches x 2 partitions (mariadb_sink through twophase.testing.LocalRunner)"
            + (
                "; 'at_phase2_done_of_batch_1' is the same tables seen from a step listener "
                "after batch 1's XA COMMITs, before the driver's fence deleted batch 1's "
                "twophase_prepared rows"
                if mid
                else ""
            ),
            written_by="twophase.connectors.jdbc._mariadb._fencing"
            if protocol == "coordinated"
            else "twophase.connectors.jdbc._mariadb._markers.MariaDBMarkerTable / _fencing",
        )
        writers = {
            "twophase_fences": "twophase.connectors.jdbc._mariadb._fencing.create_fence_tables "
            "(INSERT IGNORE (identity, -1, -1)) then fence_attempts (UPDATE to (epoch, batch))",
            "twophase_prepared": "twophase.connectors.jdbc._mariadb._fencing.refuse_if_fenced "
            "(INSERT in each XA transaction before XA END); fence_attempts deletes the rows at "
            "or below the fence rank",
            "twophase_slots": "twophase.connectors.jdbc._mariadb._fencing.take_slot (INSERT "
            "IGNORE (identity, partition_id, epoch, attempt) on an autocommit session)",
            "twophase_markers": "twophase.connectors.jdbc._markers.MarkerTable.commit_with_marker"
            " (create: MariaDBMarkerTable.create)",
        }
        variable = {
            "twophase_fences": {"fenced_at": TS_VARIABLE + " (DATETIME(6), no time zone)"},
            "twophase_markers": {"committed_at": TS_VARIABLE + " (DATETIME(6), no time zone)"},
            "twophase_prepared": {"prepared_at": TS_VARIABLE + " (DATETIME(6), no time zone)"},
        }
        notes = "2 batches x 2 partitions, 3 rows each (ids batch*100+p*10+i); no failures"
        describe_rows(
            dump,
            path,
            db="MariaDB",
            protocol=protocol,
            writers=writers,
            variable=variable,
            notes=notes,
        )
        if mid:
            for table, content in mid["tables"].items():
                FILES.append(
                    {
                        "path": f"{rel(path)}#at_phase2_done_of_batch_1.tables.{table}",
                        "what": f"MariaDB table {table} at step phase2_done of batch 1",
                        "written_by": writers.get(table, "?"),
                        "expect_rows": [
                            {k: v for k, v in r.items() if k not in variable.get(table, {})}
                            for r in content["rows"]
                        ],
                        **({"variable_fields": variable[table]} if variable.get(table) else {}),
                    }
                )
        copy_log(
            Path(runner.identity.log_location(str(checkpoint))),
            OUT / "log_runs" / f"mariadb_{protocol}",
            f"log_runs/mariadb_{protocol}",
            f"the coordinator log of the MariaDB {protocol} run above ({notes})",
            LOG_RUN_VARIABLE,
        )
        runner.close()
        server.rollback_prepared("tp:")
        maria_sql(server, f"DROP DATABASE `{db}`")
    shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------------- 3. Kafka
def kafka(broker: Any) -> None:
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    from twophase.connectors.kafka import KafkaSink, close_clients
    from twophase.testing import (
        CrashAt,
        FakeTarget,
        LocalRunner,
        SimulatedCrash,
        install_step_listener,
        with_faults,
    )

    tag = uuid.uuid4().hex[:8]
    topic = f"golden-v020-data-{tag}"
    control = f"golden-v020-ctl-{tag}"
    broker.create_topic(topic, partitions=2)
    work = Path(tempfile.mkdtemp(prefix="golden-v020-kafka-"))

    def part(batch: int, p: int) -> list[Any]:
        keys = [f"k{batch}-{p}-{i}" for i in range(3)]
        return [pa.record_batch({"key": keys, "value": [f"v-{k}" for k in keys]})]

    rules = FakeTarget.in_memory()
    rules.fail("write", batch_id=1, partition_id=1, attempt=0)
    sink = with_faults(
        KafkaSink(
            "orders_kafka",
            bootstrap_servers=broker.bootstrap_servers,
            topic=topic,
            control_topic=control,
            operation_timeout=15.0,
        ),
        rules,
    )
    runner = LocalRunner(sink, work, query_id=QUERY_ID, max_task_failures=2)
    runner.run_batch(0, [part(0, 0), part(0, 1)])
    crash = CrashAt("phase1_done", 1)
    install_step_listener(runner.sink, crash)
    with contextlib.suppress(SimulatedCrash):
        runner.run_batch(1, [part(1, 0), part(1, 1)])
    assert crash.fired
    runner.restart()
    outcome = runner.run_batch(1, [part(1, 0), part(1, 1)])
    print("kafka batch 1 after restart:", outcome.outcome, outcome)

    records = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": f"golden-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": isolation,
            }
        )
        consumer.assign([TopicPartition(control, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        done = False
        while not done and time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        done = True
                        break
                    raise RuntimeError(msg.error())
                got.append(msg)
        consumer.close()
        assert done
        records.append(got)
    committed, uncommitted = records
    from twophase.connectors.kafka._attempt_fence import is_fence_key

    prefix = f"{runner.identity.token}/".encode()
    out = []
    for msg in committed:
        key, value = msg.key(), msg.value()
        kind = "tombstone" if value is None else "fence" if is_fence_key(key, prefix) else "marker"
        out.append(
            {
                "partition": msg.partition(),
                "offset": msg.offset(),
                "kind": kind,
                "key_base64": base64.b64encode(key).decode() if key is not None else None,
                "value_base64": base64.b64encode(value).decode() if value is not None else None,
                "headers": [
                    [k, base64.b64encode(v).decode() if v is not None else None]
                    for k, v in (msg.headers() or [])
                ],
                "timestamp_type": msg.timestamp()[0],
                "key_text": key.decode() if key is not None else None,
                "value_json": json.loads(value) if value is not None else None,
            }
        )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource("topic", control)
    configs = admin.describe_configs([res])[res].result(timeout=15)
    keep = ("cleanup.policy", "min.insync.replicas", "retention.ms", "min.compaction.lag.ms")
    topic_config = {k: v.value for k, v in configs.items() if k in keep}
    meta = admin.list_topics(control, timeout=10).topics[control]
    dump = {
        "control_topic": control,
        "control_topic_partitions": len(meta.partitions),
        "control_topic_config": topic_config,
        "identity": runner.identity.token,
        "read_committed_records": out,
        "read_uncommitted_record_count": len(uncommitted),
        "kafka_broker_version": broker.version,
        "scenario": "KafkaSink 'orders_kafka' (producer_lanes=4, the default) through "
        "LocalRunner(max_task_failures=2): batch 0 on 2 partitions; batch 1 with an injected "
        "write fault on partition 1 attempt 0 (twophase.testing.with_faults), so attempt 1 "
        "records a retry fence, then a driver crash at phase1_done; the restarted run (epoch 2) "
        "records a recovery fence and replays batch 1 (both partitions skipped: markers match)",
    }
    path = OUT / "kafka" / "control_topic_records.json"
    write_json(path, dump)
    add_file(
        path,
        what="Kafka control-topic records read back with a read_committed consumer (key/value "
        "base64, headers, and a decoded copy: key_text, value_json)",
        written_by="twophase.connectors.kafka._markers.encode_marker/marker_key (produced in the "
        "partition's transaction by KafkaSink.commit_with_marker) and "
        "twophase.connectors.kafka._attempt_fence.encode_fence/fence_key (written by "
        "_fencing.record_fence from KafkaSink.list_in_doubt)",
    )
    for i, rec in enumerate(out):
        variable = {}
        if rec["kind"] == "marker":
            variable = {
                "key nonce": "last '/'-separated part of the key: 12 hex digits, random "
                "(_markers.new_nonce)",
                "transactional_id": "'twophase-<identity>-<slot>' (lane 0) or "
                "'...-<slot>.<lane>': the lane depends on the process's lane claim",
            }
        elif rec["kind"] == "fence":
            variable = {"key nonce": "12 hex digits, random (_markers.new_nonce)"}
        FILES.append(
            {
                "path": f"{rel(path)}#read_committed_records[{i}]",
                "what": f"control record: {rec['kind']}",
                "written_by": {
                    "marker": "twophase.connectors.kafka._markers.encode_marker + marker_key",
                    "fence": "twophase.connectors.kafka._attempt_fence.encode_fence + fence_key",
                }.get(rec["kind"], "tombstone (marker garbage collection)"),
                "expect": {
                    "key_pattern": "<identity>/<batch>/<partition>/<attempt>/<nonce>"
                    if rec["kind"] in ("marker", "tombstone")
                    else "<identity>/fence/<nonce>",
                    "key_without_nonce": rec["key_text"].rsplit("/", 1)[0]
                    if rec["key_text"]
                    else None,
                    "value_json": {
                        k: v
                        for k, v in (rec["value_json"] or {}).items()
                        if k != "transactional_id"
                    },
                    "headers": rec["headers"],
                    "value_encoding": "compact JSON (separators ',' ':'), sort_keys=True, UTF-8",
                },
                "variable_fields": variable,
            }
        )
    copy_log(
        Path(runner.identity.log_location(str(work))),
        OUT / "log_runs" / "kafka_markers",
        "log_runs/kafka_markers",
        "the coordinator log of the Kafka run above (markers protocol; epoch 1 crashed at "
        "phase1_done of batch 1, epoch 2 replayed it)",
        LOG_RUN_VARIABLE,
    )
    runner.close()
    close_clients()
    admin.delete_topics([topic, control], operation_timeout=15)
    shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------------- main
def main() -> None:
    runtime = check_runtime()
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    log_api()

    from twophase_dev import KafkaBroker, MariaDBServer, PostgresServer

    logs = Path(tempfile.mkdtemp(prefix="golden-v020-serverlogs-"))
    servers: dict[str, str] = {}
    pg = PostgresServer(max_prepared_transactions=64, log_dir=logs / "pg")
    pg.start()
    try:
        postgres(pg)
        servers["postgres"] = "twophase_dev.PostgresServer(max_prepared_transactions=64)"
    finally:
        pg.stop()
    maria = MariaDBServer(log_dir=logs / "maria")
    maria.start()
    try:
        mariadb(maria)
        servers["mariadb"] = "twophase_dev.MariaDBServer(binlog=True)"
    finally:
        maria.stop()
    broker = KafkaBroker(log_dir=logs / "kafka")
    broker.start()
    try:
        kafka(broker)
        servers["kafka"] = f"twophase_dev.KafkaBroker(version={broker.version})"
    finally:
        try:
            from twophase.connectors.kafka import close_clients

            close_clients()
        finally:
            broker.stop()
    shutil.rmtree(logs, ignore_errors=True)

    MANIFEST.update(
        {
            "about": "Golden files: every durable record twophase 0.2.0 writes, written by the "
            "0.2.0 code itself (tests/golden/generate_v0_2_0.py, run once). Paths are relative "
            "to this directory; 'path#x.y' names a part of a JSON file.",
            "generated_with": {
                **runtime,
                "servers": servers,
                "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(),
            },
            "fixed_values": {
                "query_id": QUERY_ID,
                "log_api clock (time.time) / pid": [FIXED_TIME, FIXED_PID],
                "log_api run_id": "0f4b2c6d8e1a4b3c9d7e5f6a1b2c3d4e (CoordinatorLog.claim); "
                "LocalRunner/CLI run ids from a counter uuid4",
            },
            "formats": FORMATS,
            "files": FILES,
        }
    )
    write_json(OUT / "MANIFEST.json", MANIFEST)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {len([p for p in OUT.rglob('*') if p.is_file()])} files, {total} bytes")


FORMATS = {
    "coordinator log (twophase/_log.py)": {
        "layout": "<checkpoint>/twophase/<sink name>/<query id>/ {epochs/<epoch:020d>.json, "
        "batches/<batch:020d>.<intent|decision|committed|rewrite>.json, state.json}",
        "encoding": "json.dumps(record, sort_keys=True) + '\\n', UTF-8; written atomically "
        "(temp file + rename / link). No format or version field in any record.",
        "epoch": "{claimed_at: float, epoch: int, identity: '<name>.<16 hex of query id>', "
        "pid: int, query_id: str, run_id: str}",
        "intent": "{batch, epoch, partitions} -- written by the markers protocol only; the "
        "coordinated protocol writes no intent in 0.2.0",
        "decision": "{batch, epoch, handles: base64(cloudpickle(list of handles)), "
        "transaction_ids: [str|null], rows: int}",
        "committed": "coordinator: {batch, epoch, rows, committed_at: float}; recovery: {batch, "
        "epoch, recovered: true, handles: int}; CLI --mark-committed: {batch, epoch, resolved: "
        "'mark-committed', by, at, reason}",
        "rewrite": "CLI --rewrite: {batch, epoch, resolved: 'rewrite', by, at: float, reason}",
        "state.json": "{committed_through: int, partition_slots: int}",
    },
    "handles": {
        "twophase.TransactionHandle (module twophase._types)": "transaction_id: str, batch_id, "
        "partition_id, attempt: int",
        "twophase.connectors.jdbc._prepared.PostgresHandle": "TransactionHandle fields + xid: "
        "int|None = None, rows: int = 0; transaction_id = 'tp:<identity>:<batch>:<partition>:"
        "<attempt>' (_gid.format_gid)",
        "twophase.connectors.jdbc._mariadb._xa.MariaDBHandle": "TransactionHandle fields + "
        "rows: int = 0; transaction_id = same text as the PostgreSQL gid; XA xid = (gtrid "
        "'tp:<identity>', bqual '<batch>:<partition>:<attempt>', formatID 0x7470)",
    },
    "kafka control topic": {
        "marker": "key '<identity>/<batch>/<partition>/<attempt>/<nonce>'; value compact JSON "
        "{attempt, batch, fingerprint: 'v2:<count>:<16 hex>', identity, partition, records, "
        "transactional_id, v: 1}; partition 0; produced inside the partition's transaction",
        "fence": "key '<identity>/fence/<nonce>'; value compact JSON {attempt, batch, epoch, "
        "fence: true, partition, v: 1} (-1 = any); plain non-transactional producer",
    },
    "jdbc marker fingerprint": "text 'v<version>:<count>:<16 hex digest>' (version 1 has no "
    "'v1:' prefix), twophase.Fingerprint.__str__",
}


if __name__ == "__main__":
    sys.exit(main())
