"""``python -m tests.chaos --trials N --seed S [--sinks ...]``: see :mod:`tests.chaos.harness`."""

import sys

from tests.chaos.harness import main

sys.exit(main())
