"""The ``twophase`` command: see a sink's state, finish a stuck batch, clean up a lost checkpoint.

``twophase status CHECKPOINT`` reads the coordinator log of every sink of a query
(and, given ``--target``, the target's in-doubt transactions and markers).
``twophase resolve`` finishes a batch of the markers protocol that can never be replayed as it
ran; ``twophase abort-in-doubt`` rolls back what a sink identity left on its
target after its checkpoint was lost. Every change names what it risks, prints
its plan, and does nothing without ``--yes``. See ``docs/operations.md``.
"""

from __future__ import annotations

import argparse
import functools
import getpass
import json
import re
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._log._coordinator_log import CoordinatorLog, LogState
from .._log._identity import SinkIdentity, read_query_id
from .._log._sink_log import open_sink_log
from .._stores._store import CheckpointStore, open_store
from .._values import Marker, RecoveryContext
from ..errors import ConfigurationError, TwoPhaseError
from ._dead_letters import add_dead_letter_commands, summarize
from ._status_text import print_status
from ._target import add_target_args, make_target

__all__ = ["main"]

_NUMBERED = re.compile(r"^\d+$")
# Exit codes: 0 done, 1 error, 2 a change was planned but not confirmed with --yes.
_NOT_CONFIRMED = 2


@dataclass
class _Sink:
    """One sink identity found in a checkpoint."""

    name: str
    query_id: str
    identity: str
    log: CoordinatorLog

    @property
    def state(self) -> LogState:
        return self.log.state


# ------------------------------------------------------------------ reading
def _browse(uri: str) -> CheckpointStore:
    """Return a reader of a checkpoint: the log's own store, else a read-only pyarrow view."""
    return open_store(uri, read_only_elsewhere=True)


def _find_sinks(
    checkpoint: str, sink: str | None, query_id: str | None, *, writable: bool = False
) -> list[_Sink]:
    root = _browse(checkpoint)
    names = root.list_directories("twophase")
    if sink is not None:
        if sink not in names:
            raise ConfigurationError(
                f"no coordinator log of a sink named {sink!r} under {checkpoint}/twophase "
                f"(found: {', '.join(names) or 'none'})",
                sink=sink,
                setting="--sink",
            )
        names = [sink]
    wanted = query_id or read_query_id(root)
    found = []
    for name in names:
        runs = root.list_directories(f"twophase/{name}")
        if wanted in runs:
            chosen = wanted
        elif len(runs) == 1 and query_id is None:
            chosen = runs[0]
        else:
            raise ConfigurationError(
                f"sink {name!r} has coordinator logs of several queries ({', '.join(runs)}) "
                "and the checkpoint's metadata names none of them: pass --query-id",
                sink=name,
                setting="--query-id",
            )
        identity = SinkIdentity(name, chosen)
        # One that only reads unless writable: there, no proven create-if-absent is refused.
        store = functools.partial(open_store, read_only_elsewhere=not writable)
        log = open_sink_log(checkpoint, identity, store=store)
        log.load()
        found.append(_Sink(name, chosen, identity.token, log))
    return found


def _spark_progress(checkpoint: str) -> dict[str, int | None]:
    root = _browse(checkpoint)
    progress: dict[str, int | None] = {}
    for log in ("offsets", "commits"):
        batches = [int(n) for n in root.list(log) if _NUMBERED.match(n)]
        progress[log] = max(batches) if batches else None
    return progress


# ------------------------------------------------------------------- status
def _describe(sink: _Sink, target: Any) -> dict[str, Any]:
    state = sink.state
    committed = sorted(state.committed)
    epoch = sink.log.last_epoch() or {}
    unfinished = []
    for batch in state.unfinished():
        entry: dict[str, Any] = {"batch": batch}
        if batch in state.decided:
            entry["protocol"] = "coordinated"
            entry["decision"] = (sink.log.read_record(batch, "decision") or {}).get(
                "transaction_ids", []
            )
        else:
            entry["protocol"] = "markers"
            entry["partitions"] = state.intents.get(batch, 0)
            entry["rewrite_ordered"] = batch in state.rewrite
        unfinished.append(entry)
    last = max([state.committed_through, *committed])
    record = sink.log.read_record(last, "committed") if last >= 0 else None
    described: dict[str, Any] = {
        "sink": sink.name,
        "identity": sink.identity,
        "query_id": sink.query_id,
        "log": sink.log.store.location,
        "last_run": {k: epoch.get(k) for k in ("epoch", "run_id", "pid", "claimed_at")},
        "committed_through": last,
        # The newest committed batch's record (written by this version on): when and how much.
        "last_committed": {
            "batch": last,
            "committed_at": (record or {}).get("committed_at"),
            "rows": (record or {}).get("rows"),
            # Only a sink with bad_rows="dead_letter" records it (0.3.0 on).
            "dead_lettered": (record or {}).get("dead_lettered"),
        },
        "unfinished": unfinished,
        "partition_slots": state.partition_slots,
    }
    if target is not None:
        context = RecoveryContext(sink.identity, state.partition_slots, tuple(state.unfinished()))
        described["in_doubt"] = [h.transaction_id for h in target.list_in_doubt(context)]
        for entry in unfinished:
            if entry["protocol"] == "markers" and hasattr(target, "read_markers"):
                markers: list[Marker] = list(target.read_markers(sink.identity, entry["batch"]))
                entry["markers"] = [
                    {"partition": m.partition_id, "attempt": m.attempt, "rows": m.fingerprint.count}
                    for m in sorted(markers, key=lambda m: m.partition_id)
                ]
        if getattr(target, "bad_rows", "fail") == "dead_letter":
            described["dead_letters"] = summarize(list(target.read_dead_letters()))
    return described


def _status(args: argparse.Namespace) -> int:
    sinks = _find_sinks(args.checkpoint, args.sink, args.query_id)
    if not sinks:
        root = _browse(args.checkpoint)
        found = root.list("") or root.list_directories("")
        what = "no twophase sink has a coordinator log under" if found else "nothing at"
        print(f"{what} {args.checkpoint}", file=sys.stderr)
        return 1
    described = [
        _describe(s, make_target(args.target, args.option, s.name) if args.target else None)
        for s in sinks
    ]
    progress = _spark_progress(args.checkpoint)
    if args.json:
        print(json.dumps({"checkpoint": args.checkpoint, "spark": progress, "sinks": described}))
    else:
        print_status(args.checkpoint, progress, described)
    return 0


# ------------------------------------------------------------------ changes
def _claim(log: CoordinatorLog, query_id: str) -> int:
    """Claim the identity for this command: a still running query is fenced by it."""
    return log.claim(f"twophase-cli:{uuid.uuid4().hex}", query_id)


def _audit(reason: str | None) -> dict[str, Any]:
    return {"by": getpass.getuser(), "at": time.time(), "reason": reason or ""}


def _resolve(args: argparse.Namespace) -> int:
    (sink,) = _find_sinks(args.checkpoint, args.sink, args.query_id, writable=True)
    state = sink.state
    batch = args.batch
    if state.is_committed(batch) or batch not in state.intents or batch in state.decided:
        raise ConfigurationError(
            f"batch {batch} is not an unfinished batch of the markers protocol of sink "
            f"{sink.name!r} (unfinished: {state.unfinished() or 'none'}); a batch of the "
            "coordinated protocol is finished by "
            "restarting the query",
            sink=sink.name,
            batch_id=batch,
            setting="--batch",
        )
    partitions = state.intents[batch]
    committed = "some"
    if args.target:
        target = make_target(args.target, args.option, sink.name)
        markers = list(target.read_markers(sink.identity, batch))
        rows = sum(m.fingerprint.count for m in markers)
        committed = f"{len(markers)} of {partitions} partition(s), {rows} rows,"
    if args.mark_committed:
        plan = f"record batch {batch} of sink {sink.name!r} as committed, as it stands"
        risk = (
            f"RISK: LOSS. {committed.capitalize()} of batch {batch} are committed and stay; the "
            "rows of its other partitions are never written. Spark moves on to the next batch."
        )
    else:
        plan = (
            f"order batch {batch} of sink {sink.name!r} rewritten whole at the next run, "
            "without matching its replay against the markers"
        )
        risk = (
            f"RISK: DUPLICATES. {committed.capitalize()} of batch {batch} are committed; the next "
            "run writes the replayed batch whole, so readers see those rows again (as the "
            "replay computes them)."
        )
    print(f"plan: {plan}")
    print(risk)
    if not args.yes:
        print("nothing changed: stop the query, then run the same command with --yes")
        return _NOT_CONFIRMED
    epoch = _claim(sink.log, sink.query_id)
    record = {"resolved": "mark-committed" if args.mark_committed else "rewrite"}
    record.update(_audit(args.reason))
    if args.mark_committed:
        sink.log.record_committed(batch, record)
    else:
        sink.log.record_rewrite(batch, record)
    print(
        f"done (epoch {epoch}: a query still running on this checkpoint is fenced and stops "
        "at its next batch). Restart the query."
    )
    return 0


def _abort_in_doubt(args: argparse.Namespace) -> int:
    name = args.identity.rsplit(".", 1)[0]
    target = make_target(args.target, args.option, name)
    if args.checkpoint:
        for sink in _find_sinks(args.checkpoint, name, args.query_id):
            if sink.identity == args.identity and sink.state.pending_decisions():
                raise ConfigurationError(
                    f"the checkpoint {args.checkpoint} still holds the log of {args.identity} "
                    f"with decided batches {sink.state.pending_decisions()}: restart the query "
                    "instead, its recovery commits them",
                    sink=name,
                    setting="--identity",
                )
    handles = list(target.list_in_doubt(RecoveryContext(args.identity, args.slots)))
    print(f"plan: roll back {len(handles)} in-doubt transaction(s) of {args.identity}")
    for handle in handles:
        print(f"  {handle.transaction_id}")
    print(
        "RISK: LOSS, if a checkpoint of this identity still exists and a recorded decision names "
        "one of these transactions: that batch would never be committed. Use it only when the "
        "checkpoint is gone for good."
    )
    if not args.yes:
        print("nothing changed: run the same command with --yes")
        return _NOT_CONFIRMED
    for handle in handles:
        target.recover_and_abort(handle)
    print(f"done: {len(handles)} rolled back")
    return 0


# ---------------------------------------------------------------------- CLI
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="twophase",
        description="Inspect twophase sinks and finish what a crash left behind.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    status = commands.add_parser("status", help="show the state of a query's sinks")
    status.add_argument("checkpoint", help="the query's checkpoint location")
    status.add_argument("--sink", help="only this sink")
    status.add_argument("--query-id", help="when the checkpoint holds logs of several queries")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    add_target_args(status)
    status.set_defaults(run=_status)

    resolve = commands.add_parser(
        "resolve", help="finish a markers-protocol batch that cannot replay"
    )
    resolve.add_argument("checkpoint", help="the query's checkpoint location")
    resolve.add_argument("--sink", required=True, help="the sink whose batch to finish")
    resolve.add_argument("--batch", type=int, required=True, help="the batch to finish")
    resolve.add_argument("--query-id", help="when the checkpoint holds logs of several queries")
    choice = resolve.add_mutually_exclusive_group(required=True)
    choice.add_argument("--mark-committed", action="store_true", help="risk: loss")
    choice.add_argument("--rewrite", action="store_true", help="risk: duplicates")
    resolve.add_argument("--reason", help="kept in the coordinator log")
    resolve.add_argument("--yes", action="store_true", help="carry out the plan")
    add_target_args(resolve)
    resolve.set_defaults(run=_resolve)

    abort = commands.add_parser(
        "abort-in-doubt", help="roll back what a sink identity left on its target"
    )
    abort.add_argument("--identity", required=True, help="e.g. orders.1a2b3c4d5e6f7a8b")
    abort.add_argument("--slots", type=int, default=0, help="partition slots to fence (Kafka)")
    abort.add_argument("--checkpoint", help="refuse if this checkpoint still needs them")
    abort.add_argument("--query-id", help="the query of --checkpoint, when it holds several")
    abort.add_argument("--yes", action="store_true", help="carry out the plan")
    add_target_args(abort)
    abort.set_defaults(run=_abort_in_doubt)
    add_dead_letter_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``twophase`` command.

    Parameters
    ----------
    argv
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 when done, 1 on an error, 2 when a change was planned but not confirmed.
    """
    args = _parser().parse_args(argv)
    if args.command == "abort-in-doubt" and not args.target:
        print("twophase: error: abort-in-doubt needs --target", file=sys.stderr)
        return 1
    try:
        return int(args.run(args))
    except TwoPhaseError as exc:
        print(f"twophase: error: {exc}", file=sys.stderr)
        return 1
