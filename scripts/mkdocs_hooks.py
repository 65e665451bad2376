"""MkDocs hook: render the Sphinx roles of numpydoc docstrings as code.

The docstrings follow numpydoc, whose cross-references are Sphinx roles
(``:class:`~twophase.errors.DataError```); mkdocstrings renders them literally.
This hook turns each into the code span it names (``DataError`` for a ``~`` path),
and the reStructuredText ``::`` that opens a literal block into ``:``.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj):\s*<code>(~?)([^<]*)</code>")
_LITERAL = re.compile(r"::(</p>)")


def _role(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    """Rewrite the roles of one rendered page."""
    return _LITERAL.sub(r":\1", _ROLE.sub(_role, html))
