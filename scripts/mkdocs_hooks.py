"""MkDocs hooks: tables rendered from the code, and numpydoc's Sphinx roles rendered as code.

A page's ``<!-- table: NAME -->`` line becomes the table :mod:`docs_tables` renders from the
code (the extras of ``pyproject.toml``, the error classes), before the page is converted.

The docstrings follow numpydoc, whose cross-references are Sphinx roles
(``:class:`~twophase.errors.DataError```); mkdocstrings renders them literally.
This hook turns each into the code span it names (``DataError`` for a ``~`` path),
and the reStructuredText ``::`` that opens a literal block into ``:``.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location(
    "docs_tables", Path(__file__).with_name("docs_tables.py")
)
assert _spec is not None
assert _spec.loader is not None
docs_tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_tables)

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj):\s*<code>(~?)([^<]*)</code>")
_LITERAL = re.compile(r"::(</p>)")


def _role(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    """Rewrite the roles of one rendered page."""
    return _LITERAL.sub(r":\1", _ROLE.sub(_role, html))


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace the page's ``<!-- table: NAME -->`` lines with the tables rendered from the code."""
    return str(docs_tables.render(markdown, page.file.src_path))
