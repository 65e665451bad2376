"""``twophase dead-letters list|redrive``: what a sink set aside, and moving it back.

Both build the sink with ``--target`` (as ``status`` does) and use its dead-letter hooks:
``list`` groups what :meth:`~twophase.TwoPhaseCommitSink.read_dead_letters` yields by
error; ``redrive`` hands the oldest letters to ``redrive_dead_letters``, which writes
their rows into the target and removes them from the dead letters in one transaction,
and does nothing without ``--yes``. See ``docs/bad-rows.md``.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from .._values import DeadLetter, RowError
from ..errors import ConfigurationError
from ._target import add_target_args, make_target

__all__ = ["add_dead_letter_commands", "summarize"]

# Exit codes: 0 done, 1 error (or rows still refused), 2 planned but not confirmed with --yes.
_NOT_CONFIRMED = 2


def _place(letter: DeadLetter) -> str:
    return f"batch {letter.batch_id} partition {letter.partition_id} row {letter.position}"


def _error(error_class: str, code: str | None, column: str | None) -> str:
    return error_class + (f" {code}" if code else "") + (f" in column {column!r}" if column else "")


def summarize(letters: Sequence[DeadLetter], show: int = 0) -> dict[str, Any]:
    """Describe dead letters: their count, their errors grouped, the oldest, the first ``show``.

    Parameters
    ----------
    letters
        Dead letters, oldest first.
    show
        How many letters to include whole (with their rows).

    Returns
    -------
    dict
        What ``twophase dead-letters list --json`` prints for one sink.
    """
    groups: Counter[tuple[str, str | None, str | None]] = Counter(
        (x.error_class, x.code, x.column) for x in letters
    )
    first: dict[tuple[str, str | None, str | None], DeadLetter] = {}
    for x in letters:
        first.setdefault((x.error_class, x.code, x.column), x)
    return {
        "count": len(letters),
        "batches": [letters[0].batch_id, letters[-1].batch_id] if letters else None,
        "errors": [
            {
                "error_class": key[0],
                "code": key[1],
                "column": key[2],
                "count": count,
                "first": {"place": _place(first[key]), "message": first[key].message},
            }
            for key, count in groups.most_common()
        ],
        "letters": [asdict(x) | {"row": x.values()} for x in letters[:show]],
    }


def _print_summary(sink: str, summary: dict[str, Any]) -> None:
    count = summary["count"]
    if not count:
        print(f"sink {sink}: no dead letters")
        return
    low, high = summary["batches"]
    print(f"sink {sink}: {count} dead letter(s), from batch {low} to batch {high}")
    for group in summary["errors"]:
        error = _error(group["error_class"], group["code"], group["column"])
        print(f"  {group['count']:>8}  {error}")
        print(f"            first: {group['first']['place']}: {group['first']['message']}")
    for letter in summary["letters"]:
        place = f"batch {letter['batch_id']} partition {letter['partition_id']}"
        print(f"  {place} row {letter['position']}: {json.dumps(letter['row'])}")


def _letters(args: argparse.Namespace) -> tuple[Any, list[DeadLetter]]:
    target = make_target(args.target, args.option, args.sink)
    limit = getattr(args, "limit", None)
    if limit is not None and limit < 1:
        raise ConfigurationError(f"--limit {limit} must be at least 1", setting="--limit")
    try:
        return target, list(itertools.islice(target.read_dead_letters(), limit))
    except NotImplementedError as exc:
        raise ConfigurationError(f"sink {args.sink}: {exc}", setting="--target") from exc


def _list(args: argparse.Namespace) -> int:
    _, letters = _letters(args)
    summary = summarize(letters, args.show)
    if args.json:
        print(json.dumps({"sink": args.sink, **summary}))
    else:
        _print_summary(args.sink, summary)
    return 0


def _redrive(args: argparse.Namespace) -> int:
    target, letters = _letters(args)
    if not letters:
        print(f"sink {args.sink}: no dead letters to redrive")
        return 0
    _print_summary(args.sink, summarize(letters))
    print(
        f"plan: write the rows of these {len(letters)} dead letter(s) into sink {args.sink}'s "
        "target and remove them from its dead letters, in one transaction; a row the target "
        "still refuses stays where it is"
    )
    if not args.yes:
        print("nothing changed: fix what the errors name, then run the same command with --yes")
        return _NOT_CONFIRMED
    refused: Sequence[RowError] = target.redrive_dead_letters(letters)
    print(f"redriven: {len(letters) - len(refused)} row(s) written to the target")
    if not refused:
        return 0
    print(f"still refused, left in the dead letters: {len(refused)} row(s)")
    for error in refused[:5]:
        where = _place(letters[error.row])
        print(f"  {where}: {_error(error.error_class, error.code, error.column)}: {error.message}")
    return 1


def add_dead_letter_commands(commands: Any) -> None:
    """Add ``dead-letters list`` and ``dead-letters redrive`` to the command's subparsers."""
    dead = commands.add_parser(
        "dead-letters", help="list a sink's dead letters, or move them back into its target"
    )
    actions = dead.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="count a sink's dead letters by error")
    redrive = actions.add_parser(
        "redrive", help="write dead letters' rows into the target, removing them, exactly once"
    )
    for parser in (listing, redrive):
        parser.add_argument("--sink", required=True, help="the sink's name")
        add_target_args(parser, required=True)
    listing.add_argument("--show", type=int, default=0, metavar="N", help="print N rows whole")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(run=_list)
    redrive.add_argument("--limit", type=int, metavar="N", help="only the N oldest")
    redrive.add_argument("--yes", action="store_true", help="carry out the plan")
    redrive.set_defaults(run=_redrive)
