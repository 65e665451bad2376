"""One idea, one place: one opener of a sink's coordinator log, one rule that picks a store."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import twophase

pytestmark = pytest.mark.unit

CORE = Path(twophase.__file__).parent


def _calls(name: str) -> set[str]:
    """The modules of the core (relative paths) that call ``name(...)``."""
    found = set()
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called == name:
                    found.add(path.relative_to(CORE).as_posix())
    return found


def test_one_function_opens_a_sinks_coordinator_log() -> None:
    assert _calls("CoordinatorLog") == {"_log/_sink_log.py"}
    assert {"_spark/_dataframe.py", "_spark/_datasource.py", "testing/_local.py"} <= _calls(
        "open_sink_log"
    )
    assert "_cli/_commands.py" in _calls("open_sink_log")


@pytest.mark.parametrize(
    "store", ["LocalFileStore", "PyArrowFileStore", "S3FileStore", "GCSFileStore"]
)
def test_one_rule_picks_a_locations_store(store: str) -> None:
    # The stores are built by the rule (open_store) alone; the classic path passes it Spark's.
    assert _calls(store) <= {"_stores/_store.py"}, store
    assert _calls("HadoopFileStore") == {"_spark/_classic.py"}


def test_a_handle_pickled_under_the_old_module_name_of_the_value_types_loads() -> None:
    # 0.2.0 (and a task result of another release) names twophase._types, now twophase._values.
    import pickle

    handle = twophase.parse_transaction_id("s.1:7:0:0")
    old = pickle.dumps(handle, protocol=2).replace(b"twophase._values", b"twophase._types")
    assert b"twophase._types" in old
    assert pickle.loads(old) == handle
