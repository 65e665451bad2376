"""Run an example as ``python EXAMPLE ARGS...`` runs it, but with ``twophase_dev`` unimportable.

Usage: ``python tests/examples/without_dev_tools.py EXAMPLE [ARGS...]``. What a user has after
``pip install 'twophase[all]'``: the checkout's development tools are missing, so an example that
imports them fails as it would outside the checkout.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    example = Path(sys.argv[1]).resolve()
    sys.modules["twophase_dev"] = None  # type: ignore[assignment]  # import twophase_dev fails
    sys.argv = sys.argv[1:]  # the example's argv[0] is its own path
    sys.path[0] = str(example.parent)  # a script's folder comes first: 'import _spark' works
    runpy.run_path(str(example), run_name="__main__")
