"""The JDBC family's registry: every database's package, public names and contracts come from it.

``connectors/jdbc/_registry.py`` is the one place a database is registered (its package and its
client library); the package's ``PUBLIC`` names its public names. These tests fail when a
database's package exists but is not registered (or the reverse), when the public face of
``twophase.connectors.jdbc`` (its type checkers' imports and ``__all__``) differs from the
packages' ``PUBLIC``, and when the client-library import contract of ``pyproject.toml`` differs
from the registry.
"""

from __future__ import annotations

import ast
import importlib
import shutil
import sys
from pathlib import Path

import pytest

from twophase.connectors import jdbc
from twophase.connectors.jdbc._registry import DATABASES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
FAMILY = ROOT / "connectors" / "jdbc"


def _packages(family: Path) -> set[str]:
    """Return the database packages of a family folder: its subfolders with an ``__init__.py``."""
    return {init.parent.name for init in family.glob("*/__init__.py")}


def _unregistered(family: Path) -> tuple[set[str], set[str]]:
    """Return (packages not registered, registered databases without a package)."""
    registered = {db.package for db in DATABASES}
    found = _packages(family)
    return found - registered, registered - found


def _contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def test_every_database_package_is_registered_and_every_registered_one_exists() -> None:
    assert _unregistered(FAMILY) == (set(), set())
    assert {db.package for db in DATABASES} == {"_mariadb", "_postgres"}


def test_a_package_left_out_of_the_registry_is_found(tmp_path: Path) -> None:
    family = tmp_path / "jdbc"
    shutil.copytree(FAMILY, family, ignore=shutil.ignore_patterns("__pycache__"))
    (family / "_oracle").mkdir()
    (family / "_oracle" / "__init__.py").write_text('"""Oracle."""\n')
    shutil.rmtree(family / "_mariadb")
    assert _unregistered(family) == ({"_oracle"}, {"_mariadb"})


def _public_names() -> dict[str, str]:
    """Return each public name of every registered database and its module (``PUBLIC``)."""
    return {
        name: f".{db.package}.{module}" if module else f".{db.package}"
        for db in DATABASES
        for module, names in importlib.import_module(
            f"twophase.connectors.jdbc.{db.package}"
        ).PUBLIC.items()
        for name in names
    }


def test_the_family_exports_every_registered_databases_public_names() -> None:
    assert _public_names() == jdbc._LAZY
    assert {"postgres_sink", "mariadb_sink"} <= set(jdbc._LAZY)


def test_each_public_name_is_defined_where_its_package_says() -> None:
    for name, module in _public_names().items():
        defined = importlib.import_module(module, "twophase.connectors.jdbc")
        assert getattr(defined, name).__module__.startswith(defined.__name__), name
        assert getattr(jdbc, name) is getattr(defined, name)


def test_the_public_face_is_the_registrys() -> None:
    # __all__ and the imports under TYPE_CHECKING are what type checkers read; they are
    # written out (a type checker cannot run the registry) and must say what PUBLIC says.
    assert set(jdbc.__all__) == {"close_connections", *_public_names()}
    tree = ast.parse((FAMILY / "__init__.py").read_text())
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "_TYPE_CHECKING"
    ]
    imported = {
        alias.name: f"{'.' * node.level}{node.module}"
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == _public_names()


def test_the_client_library_contract_is_the_registrys() -> None:
    contract = _contracts()["jdbc-client-libraries"]
    assert contract["source_modules"] == ["connectors"]
    assert sorted(contract["forbidden_modules"]) == sorted(  # type: ignore[call-overload]
        db.client_library for db in DATABASES
    )
    assert sorted(contract["ignore_imports"]) == sorted(  # type: ignore[call-overload]
        f"connectors.jdbc.{db.package}.** -> {db.client_library}" for db in DATABASES
    )


def test_the_family_contract_names_no_database() -> None:
    # The wildcards cover every database: one needs no line in this contract.
    contract = _contracts()["jdbc-family"]
    assert contract["source_modules"] == ["connectors.jdbc.*"]
    assert contract["forbidden_modules"] == ["connectors.jdbc.*.*"]
