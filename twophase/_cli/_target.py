"""How a ``twophase`` command builds a sink's target: ``--target MODULE:CALLABLE -o KEY=VALUE``."""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigurationError

__all__ = ["add_target_args", "make_target"]


def add_target_args(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """Add ``--target`` and ``-o/--option`` to a command's parser."""
    parser.add_argument(
        "--target",
        metavar="MODULE:CALLABLE",
        required=required,
        help="builds the sink as CALLABLE(sink_name, **options), e.g. "
        "twophase.connectors.jdbc:postgres_sink",
    )
    parser.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an argument of the target factory (JSON values allowed); repeat",
    )


def _parse_option(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ConfigurationError(f"option {text!r} is not KEY=VALUE", setting="--option")
    try:
        value: Any = json.loads(raw)  # numbers, true/false, lists
    except ValueError:
        value = raw
    return key.strip(), value


def make_target(spec: str, options: Sequence[str], name: str) -> Any:
    """Build the sink ``name`` with the factory ``spec`` names and the ``-o`` options."""
    module_name, sep, attr = spec.partition(":")
    if not sep:
        raise ConfigurationError(
            f"--target {spec!r} must be MODULE:CALLABLE, e.g. "
            "twophase.connectors.jdbc:postgres_sink",
            setting="--target",
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"--target {spec!r}: cannot import {module_name!r} in this Python ({exc}). The "
            "module must be importable where the twophase command runs: install its package, "
            "or put its directory on PYTHONPATH",
            setting="--target",
        ) from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigurationError(
            f"--target {spec!r}: module {module_name!r} has no callable {attr!r}",
            setting="--target",
        )
    return factory(name, **dict(_parse_option(o) for o in options))
