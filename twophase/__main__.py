"""``python -m twophase``: the ``twophase`` command (see :mod:`twophase._cli._commands`)."""

import sys

from ._cli._commands import main

if __name__ == "__main__":  # not when a documentation tool imports the module to inspect it
    sys.exit(main())
