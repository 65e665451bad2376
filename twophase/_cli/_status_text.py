"""The text ``twophase status`` prints: a sink's state, as :mod:`twophase._cli` describes it."""

from __future__ import annotations

import datetime
from typing import Any

__all__ = ["print_status"]


def _when(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "?"
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _advice(sink: dict[str, Any], checkpoint: str) -> list[str]:
    lines = []
    for entry in sink["unfinished"]:
        batch = entry["batch"]
        if entry["protocol"] == "coordinated":
            lines.append(
                f"batch {batch} is decided: restarting the query commits its "
                f"{len(entry['decision'])} prepared transaction(s) first; nothing to do by hand"
            )
        elif entry["rewrite_ordered"]:
            lines.append(f"batch {batch}: a rewrite is ordered; restart the query to run it")
        else:
            where = f"{checkpoint} --sink {sink['sink']} --batch {batch}"
            lines += [
                f"batch {batch} started and did not finish: restart the query; its replay skips "
                "the partitions whose markers show them committed.",
                "  If the restart stops with NondeterministicBatchError, this batch can never "
                "be replayed as it ran. Finish it with one of (each prints its plan first):",
                f"    twophase resolve {where} --mark-committed   # risk: loss of the rest",
                f"    twophase resolve {where} --rewrite          # risk: duplicates",
            ]
    return lines


def print_status(
    checkpoint: str, progress: dict[str, int | None], sinks: list[dict[str, Any]]
) -> None:
    """Print the state of a checkpoint's sinks and what to do next.

    Parameters
    ----------
    checkpoint
        The checkpoint location, as given.
    progress
        Spark's last planned (``offsets``) and committed (``commits``) batch.
    sinks
        Each sink as ``twophase status --json`` describes it.
    """
    print(f"checkpoint {checkpoint}")
    print(
        f"  spark: offsets up to batch {_batch(progress['offsets'])}, "
        f"commits up to batch {_batch(progress['commits'])}"
    )
    for sink in sinks:
        run = sink["last_run"]
        print(f"\nsink {sink['sink']}  identity {sink['identity']}")
        print(f"  coordinator log   {sink['log']}")
        print(
            f"  last run          epoch {run['epoch']}, run {run['run_id']}, pid {run['pid']}, "
            f"started {_when(run['claimed_at'])}"
        )
        last = sink["last_committed"]
        when = f", at {_when(last['committed_at'])}" if last["committed_at"] else ""
        rows = f", {last['rows']} rows" if last["rows"] is not None else ""
        if last.get("dead_lettered") is not None:
            rows += f", {last['dead_lettered']} dead-lettered"
        print(f"  committed         through batch {_batch(sink['committed_through'])}{when}{rows}")
        print(f"  partition slots   {sink['partition_slots']}")
        if not sink["unfinished"]:
            print("  unfinished        none")
        for entry in sink["unfinished"]:
            if entry["protocol"] == "coordinated":
                print(
                    f"  unfinished        batch {entry['batch']} (coordinated): decision recorded "
                    f"with {len(entry['decision'])} transaction(s), not all committed"
                )
                continue
            print(
                f"  unfinished        batch {entry['batch']} (markers): started with "
                f"{entry['partitions']} partition(s)"
                + (", rewrite ordered" if entry["rewrite_ordered"] else "")
            )
            if "markers" in entry:
                rows = sum(m["rows"] for m in entry["markers"])
                parts = ", ".join(f"p{m['partition']}={m['rows']}" for m in entry["markers"])
                print(
                    f"  markers           {len(entry['markers'])} of {entry['partitions']} "
                    f"partition(s) committed, {rows} rows ({parts or 'none'})"
                )
        if "in_doubt" in sink:
            print(f"  in doubt          {len(sink['in_doubt'])} transaction(s) on the target")
            for transaction_id in sink["in_doubt"]:
                print(f"                    {transaction_id}")
        else:
            print("  target            not read (pass --target to list in-doubt transactions)")
        if "dead_letters" in sink:
            dead = sink["dead_letters"]
            groups = ", ".join(f"{g['count']} {g['error_class']}" for g in dead["errors"])
            groups = f" ({groups})" if groups else ""
            print(f"  dead letters      {dead['count']} set aside{groups}")
            if dead["count"]:
                name = sink["sink"]
                print(f"  next: twophase dead-letters list --sink {name} --target ... to see them")
        for line in _advice(sink, checkpoint):
            print(f"  next: {line}" if not line.startswith(" ") else f"        {line.strip()}")


def _batch(value: int | None) -> str:
    return "-" if value is None or value < 0 else str(value)
