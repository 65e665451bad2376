"""The wheel's packages, found: ``twophase/``, and ``connectors/`` as ``twophase.connectors``.

Everything else is in ``pyproject.toml``. setuptools' own discovery cannot put a folder's
packages under another name, so they are listed here from the tree: a new package (a database of
the JDBC family, a subpackage of the core) needs no line in any list.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["twophase", "twophase.*"]),
        *(f"twophase.{name}" for name in find_packages(include=["connectors", "connectors.*"])),
    ]
)
