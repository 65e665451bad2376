"""Record batches to multi-row ``INSERT`` statements, rendered with Arrow kernels.

Each column becomes SQL literals (:func:`~._render.render_literals`); the
literals of a row are joined into ``(a,b,c),`` by Arrow, so the text of every
row lies back to back in one buffer. Statements are cut from that buffer at
row boundaries, each at most ``max_bytes`` long (a row longer than that goes
alone): no Python runs per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from .._encode import ColumnPlan, rendered_columns
from ._render import join_rows, render_literals

__all__ = ["insert_statements", "rows_text"]


def rows_text(
    batch: pa.RecordBatch, plans: Sequence[ColumnPlan], extra: Sequence[pa.Array] = ()
) -> pa.LargeStringArray:
    """Render each row as ``(literal,literal,...),`` (``extra``: columns of literals appended)."""
    literals = rendered_columns(batch, plans, render_literals, extra)
    text: pa.LargeStringArray = join_rows(literals, pa.large_string(), ",", "(", "),")
    return text


def insert_statements(prefix: bytes, rows: pa.LargeStringArray, max_bytes: int) -> Iterator[bytes]:
    """Cut ``prefix`` + rows into statements of at most ``max_bytes`` (whole rows).

    Parameters
    ----------
    prefix
        ``INSERT INTO t (a, b) VALUES `` (with a trailing space).
    rows
        From :func:`rows_text`.
    max_bytes
        The longest statement wanted (a longer row makes its own statement).

    Yields
    ------
    bytes
        One statement.
    """
    n = len(rows)
    if n == 0:
        return
    if rows.offset:
        rows = pa.concat_arrays([rows])  # offsets from 0 for the buffer arithmetic
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64)[: n + 1]
    data = memoryview(rows.buffers()[2])
    budget = max(1, max_bytes - len(prefix))
    start = 0
    while start < n:
        limit = offsets[start] + budget
        end = int(np.searchsorted(offsets, limit, side="right")) - 1
        end = max(end, start + 1)
        body = data[int(offsets[start]) : int(offsets[end]) - 1]  # without the last comma
        yield b"".join((prefix, body))
        start = end
