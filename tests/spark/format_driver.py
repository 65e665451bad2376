"""A classic driver process for the format() crash tests: runs the query once.

Usage: python -m tests.spark.format_driver ROOT KIND OPTIONS_JSON
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.spark.format_support import DRIVER_PID, start_format_query
from twophase_dev import spark_session


def main(argv: list[str]) -> None:
    root, kind, options = Path(argv[0]), argv[1], json.loads(argv[2])
    os.environ[DRIVER_PID] = str(os.getpid())  # inherited by the JVM and its Python workers
    spark = spark_session("twophase-format-driver", master="local[2,2]", kafka=False)
    query = start_format_query(spark, root / "in", root / "chk", kind, options)
    try:
        finished = query.awaitTermination(180)
        error = query.exception()
    except Exception as exc:  # the query failed: its exception carries the sink's error
        finished, error = True, exc
    spark.stop()
    if not finished or error is not None:
        print(f"query failed: {error}", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main(sys.argv[1:])
