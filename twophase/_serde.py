"""Serialisation of handles, results and sinks (cloudpickle, typed).

The pickler is the version adapter's (:func:`twophase._pyspark.cloudpickle`).
"""

from __future__ import annotations

import pickle
from typing import Any, cast

from ._pyspark import cloudpickle

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
    return cast(bytes, cloudpickle().dumps(obj))


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
