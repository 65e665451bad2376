"""Sections printed at the end of a test run, gathered from every pytest-xdist worker.

Under ``pytest -n N`` the tests run in worker processes and the summary is printed by the
controller, which runs none: a module-level counter filled by a test would print nothing. A test
adds to :data:`COUNTS` (a count per line of a section) or :data:`LINES` (lines in the order
added); each worker ships both to the controller when it ends, and the controller prints the
merged sections once. Without xdist the same plugin prints the process's own.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

#: section title -> line -> count (summed over workers); printed as "<line>: <count> <unit>".
COUNTS: defaultdict[str, Counter[str]] = defaultdict(Counter)
#: section title -> the suffix printed after each count.
UNITS: dict[str, str] = {}
#: section title -> lines (concatenated over workers, in the order they ended).
LINES: defaultdict[str, list[str]] = defaultdict(list)

_KEY = "twophase_summaries"


def count(section: str, line: str, n: int = 1, *, unit: str = "") -> None:
    """Add ``n`` to ``line`` of the counted ``section`` (``unit`` follows the count)."""
    COUNTS[section][line] += n
    UNITS[section] = unit


def add_line(section: str, line: str) -> None:
    """Append ``line`` to ``section``."""
    LINES[section].append(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand everything to the controller
        workeroutput[_KEY] = {
            "counts": {s: dict(c) for s, c in COUNTS.items()},
            "units": dict(UNITS),
            "lines": dict(LINES),
        }


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """Merge what a worker that ended gathered (xdist calls this on the controller)."""
    shipped = getattr(node, "workeroutput", {}).get(_KEY)
    if not shipped:
        return
    for section, counts in shipped["counts"].items():
        COUNTS[section].update(counts)
    UNITS.update(shipped["units"])
    for section, lines in shipped["lines"].items():
        LINES[section].extend(lines)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for section, counts in sorted(COUNTS.items()):
        terminalreporter.section(section)
        for line, n in sorted(counts.items()):
            terminalreporter.write_line(f"{line}: {n}{UNITS.get(section, '')}")
    for section, lines in sorted(LINES.items()):
        terminalreporter.section(section)
        for line in lines:
            terminalreporter.write_line(line)
