"""twophase never imports pandas: not on import, not in the phase 1 work of a task.

pyarrow imports pandas (about 0.7 CPU-s) the first time ``pa.array``, ``pa.scalar``,
``to_numpy`` and the like run; every Spark Python worker running a twophase task would
pay it. A fresh interpreter imports the core and both connectors, runs batches through
the test kit (both protocols), fingerprints them and renders them the way each
connector's phase 1 does, then reports whether pandas was imported.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

SCRIPT = textwrap.dedent(
    """
    import sys

    import numpy as np
    import pyarrow as pa

    import twophase
    import twophase.connectors.jdbc
    import twophase.connectors.kafka

    assert "pandas" not in sys.modules, "pandas imported by `import twophase`"

    from twophase.testing import FakeMarkerSink, FakeSink, FakeTarget, LocalRunner

    n = 6
    valid = pa.py_buffer(np.packbits(np.arange(n) % 3 > 0, bitorder="little"))
    ids = pa.Array.from_buffers(pa.int64(), n, [valid, pa.py_buffer(np.arange(n, dtype=np.int64))])
    offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int32))
    text = pa.Array.from_buffers(pa.string(), n, [valid, offsets, pa.py_buffer(b"acdcdd")])
    raw = pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(b"abcdef")])
    batch = pa.RecordBatch.from_arrays([ids, text, raw], names=["id", "value", "key"])

    for sink in (FakeSink, FakeMarkerSink):
        target = FakeTarget.in_memory()
        runner = LocalRunner(sink("guard", target))
        assert runner.run_batch(0, [[batch.slice(0, 4)], [batch.slice(4)]]).outcome == "committed"
        assert len(target.committed_rows()) == n, target.committed_rows()
    assert twophase.fingerprint_batches([batch.slice(1)], 1).count == n - 1

    # phase 1 of the connectors, without their servers
    from twophase.connectors.jdbc._encode import ColumnPlan
    from twophase.connectors.jdbc._mariadb import _insert, _load, _type_map
    from twophase.connectors.jdbc._plan import checked_ops
    from twophase.connectors.jdbc._postgres._csv import encode_csv
    from twophase.connectors.kafka._columns import RecordPlan
    from twophase.connectors.kafka._records import produce_rows

    encode_csv(batch, [ColumnPlan(0, "id", "text"), ColumnPlan(2, "key", "bytea")], [ids])
    kind = _type_map.Kind
    plans = [ColumnPlan(0, "id", kind.NUMBER), ColumnPlan(1, "value", kind.TEXT)]
    _load.fields_text(batch, plans)
    _insert.rows_text(batch, plans)
    checked_ops(text.slice(2, 2).fill_null(text[1]), None, {})  # "c", "d"


    class Producer:
        def produce(self, *args):
            pass

        def poll(self, timeout):
            return 0


    plan = RecordPlan(value=1, key=2, topic=None, partition=0, headers=None, default_topic="t")
    where = {"sink": "s", "batch_id": 0, "partition_id": 0}
    produce_rows(Producer(), plan, batch, start=1, on_error=None, **where)
    print("pandas" in sys.modules)
    """
)


def test_twophase_and_its_connectors_run_a_batch_without_importing_pandas() -> None:
    """A fresh interpreter's imports, test-kit batches and connector rendering leave pandas out."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", "pandas was imported by a twophase code path"


#: Digests (versions 1, 2) of NESTED_NANOSECONDS's batch by the release that imported pandas
#: with twophase (main at fd7315f); durable, they are in markers.
EXPECTED_NESTED_DIGESTS = [9604516045721092667, 11928159628991976202]

NESTED_NANOSECONDS = textwrap.dedent(
    """
    import sys

    import numpy as np
    import pyarrow as pa

    from twophase import fingerprint_batches

    values = pa.py_buffer(np.array([1, 10**18 + 7, 5], np.int64))
    ts = pa.Array.from_buffers(pa.timestamp("ns", "UTC"), 3, [None, values])
    du = pa.Array.from_buffers(pa.duration("ns"), 3, [None, values])
    nested = pa.StructArray.from_arrays([ts, du], names=["t", "d"])
    batch = pa.RecordBatch.from_arrays([nested], names=["s"])
    assert "pandas" not in sys.modules
    print([fingerprint_batches([batch], version).digest for version in (1, 2)])
    """
)


def test_a_nested_nanosecond_value_hashes_as_when_pandas_was_imported_first() -> None:
    """pyarrow turns a nested ns value into pandas' Timestamp text: pandas is imported then.

    The digests are those of the release that imported pandas with twophase.
    """
    done = subprocess.run(
        [sys.executable, "-c", NESTED_NANOSECONDS],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(EXPECTED_NESTED_DIGESTS)
