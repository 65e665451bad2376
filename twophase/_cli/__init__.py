"""The command line, ``twophase status`` and its text: a sink's state read from its coordinator log.

``main`` is re-exported: it is the console script's entry point (``twophase._cli:main``).
"""

from ._commands import main

__all__ = ["main"]
