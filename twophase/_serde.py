"""Serialisation of handles, results and sinks (cloudpickle, typed)."""

from __future__ import annotations

import pickle
from typing import Any, cast

from pyspark import cloudpickle

__all__ = ["dumps", "loads"]


def dumps(obj: object) -> bytes:
    """Pickle ``obj`` by value where needed (classes defined in ``__main__``).

    Parameters
    ----------
    obj
        Anything picklable by cloudpickle.

    Returns
    -------
    bytes
        The pickle.
    """
    return cast(bytes, cloudpickle.dumps(obj))  # type: ignore[no-untyped-call]


def loads(data: bytes) -> Any:
    """Unpickle what :func:`dumps` produced.

    Parameters
    ----------
    data
        The pickle.

    Returns
    -------
    object
        The object.
    """
    return pickle.loads(data)
