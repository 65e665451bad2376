"""Serialisation of what travels between processes: sinks, plans, task results (cloudpickle).

In transit only, between a driver and its executors of the same release
(``_engine/_participant.py``, ``check_same_release``): nothing durable is ever pickled, and
nothing read from durable storage is ever unpickled here (the coordinator log
is JSON, ``_log/_coordinator_log.py``; 0.2.0's pickled decisions go through ``_log/_legacy.py``).
The pickler is the version adapter's (:func:`twophase._pyspark.cloudpickle`).
"""

from __future__ import annotations

import pickle
from typing import Any, cast

from .._pyspark import cloudpickle

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
