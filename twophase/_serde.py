"""Serialisation of handles, results and sinks (cloudpickle, typed).

PySpark's own copy of cloudpickle where PySpark is installed (what Spark ships
functions to executors with), else the ``cloudpickle`` package: the test kit
runs sinks without Spark.
"""

from __future__ import annotations

import pickle
from typing import Any, cast

try:
    from pyspark import cloudpickle
except ImportError:  # no PySpark: the test kit alone
    import cloudpickle  # type: ignore[no-redef,unused-ignore]

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
