r"""Record batches to ``LOAD DATA LOCAL INFILE``: tab-separated fields rendered by Arrow kernels.

Each column becomes fields (:func:`~._render.render_fields`: ``\N`` for NULL,
backslash, tab and newline escaped, every other byte as it is); Arrow joins a
row's fields with tabs and ends it with a newline, so the whole file is one
buffer, written to a temporary file and sent by PyMySQL when the server
asks for it. ``LOAD DATA`` turns what strict mode would refuse into warnings
(a duplicate key skipped, a value clamped), so :func:`load` counts the rows
and the warnings and fails the transaction on any.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from twophase.errors import DataError

from .._encode import ColumnPlan, rendered_columns
from ._errors import guess_column
from ._render import join_rows, render_fields
from ._sql import columns, literal

__all__ = ["LOCAL_INFILE_REFUSED", "fields_text", "load"]

#: Error numbers of a server or client that does not allow ``LOAD DATA LOCAL``.
LOCAL_INFILE_REFUSED = frozenset({1148, 2068, 3948, 4166})


def fields_text(
    batch: pa.RecordBatch, plans: Sequence[ColumnPlan], extra: Sequence[pa.Array] = ()
) -> pa.LargeBinaryArray:
    r"""Render each row as its fields joined by tabs, ending in a newline (``extra``: fields)."""
    fields = rendered_columns(batch, plans, render_fields, extra)
    rows: pa.LargeBinaryArray = join_rows(fields, pa.large_binary(), "\t", "", "\n")
    return rows


def load(
    cur: Any,
    into: str,
    names: Sequence[str],
    rows: pa.LargeBinaryArray,
    types: Sequence[Any] = (),
    *,
    replace: bool = False,
) -> None:
    """Write the rows to a temporary file and ``LOAD DATA LOCAL INFILE`` it into ``into``.

    Parameters
    ----------
    cur
        The transaction's cursor.
    into
        The quoted table.
    names
        Its columns, in field order.
    rows
        From :func:`fields_text`.
    types
        ``(name, type)`` of the written columns, to name the column of a warning.
    replace
        A row replaces the row of the same unique key (a deduplicating staging
        table); the server then counts a replaced row twice.

    Raises
    ------
    DataError
        The server loaded fewer rows than sent, or warned (a value it changed,
        a duplicate key it skipped): the first warnings are in the message.
    """
    n = len(rows)
    if n == 0:
        return
    if rows.offset:
        rows = pa.concat_arrays([rows])
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64)[: n + 1]
    data = memoryview(rows.buffers()[2])[int(offsets[0]) : int(offsets[-1])]
    fd, path = tempfile.mkstemp(prefix="twophase-load-", suffix=".tsv")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        cur.execute(
            f"LOAD DATA LOCAL INFILE {literal(path)} {'REPLACE ' if replace else ''}"
            f"INTO TABLE {into} CHARACTER SET binary "
            "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' "
            f"({columns(names)})"
        )
        loaded = cur.rowcount
        cur.execute("SELECT @@warning_count")
        warnings = int(cur.fetchone()[0])
        if warnings or (loaded < n if replace else loaded != n):
            cur.execute("SHOW WARNINGS LIMIT 3")
            shown = "; ".join(f"{level} {code}: {text}" for level, code, text in cur.fetchall())
            raise DataError(
                f"LOAD DATA loaded {loaded} of {n} rows with {warnings} warning(s), which strict "
                f"mode would have refused: {shown or 'no warning text'}; nothing is written",
                column=guess_column(shown, types),
            )
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
