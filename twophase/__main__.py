"""``python -m twophase``: the ``twophase`` command (see :mod:`twophase._cli`)."""

import sys

from ._cli import main

sys.exit(main())
