"""Fault injection for any sink: wrap its hooks so that fault rules fire first."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from .._sinks._marker_commit_sink import MarkerCommitSink
from .._sinks._two_phase_commit_sink import TwoPhaseCommitSink
from .._values import TaskContext
from ._target import FakeTarget

__all__ = ["with_faults"]

S = TypeVar("S", bound=TwoPhaseCommitSink[Any, Any] | MarkerCommitSink[Any])

_TXN_HOOKS = ("write", "write_dead_letters", "pre_commit", "abort", "commit_with_marker")
_HANDLE_HOOKS = ("commit", "recover_and_commit", "recover_and_abort", "transaction_status")
_OTHER_HOOKS = ("list_in_doubt", "read_markers")


def _wrap_begin(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def begin_transaction(self: Any, context: TaskContext) -> Any:
        self._faults.check_fault(
            "begin_transaction", context.batch_id, context.partition_id, context.attempt
        )
        txn = original(self, context)
        self._fault_contexts[id(txn)] = context
        return txn

    return begin_transaction


def _wrap_txn(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def hook(self: Any, txn: Any, *args: Any) -> Any:
        c = self._fault_contexts.get(id(txn))
        if c is not None:
            self._faults.check_fault(name, c.batch_id, c.partition_id, c.attempt)
        else:
            self._faults.check_fault(name)
        return original(self, txn, *args)

    return hook


def _wrap_handle(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def hook(self: Any, handle: Any) -> Any:
        self._faults.check_fault(name, handle.batch_id, handle.partition_id, handle.attempt)
        return original(self, handle)

    return hook


def _wrap_other(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def hook(self: Any, *args: Any) -> Any:
        batch_id = args[1] if name == "read_markers" and len(args) > 1 else None
        self._faults.check_fault(name, batch_id)
        return original(self, *args)

    return hook


def _rebuild(base: type[Any], state: Any) -> Any:
    """Unpickle a :func:`with_faults` sink in any process: make its class again, then its state."""
    cls: Any = _faulty_class(base)  # type: ignore[arg-type]  # classes hash by identity
    clone: Any = object.__new__(cls)
    if getattr(cls, "__setstate__", None) is not getattr(object, "__setstate__", None):
        clone.__setstate__(state)  # the sink controls its own pickling
    else:
        clone.__dict__.update(state)
    return clone


def _reduce(self: Any) -> tuple[Any, ...]:
    # The class is made at run time: pickle its base and rebuild it on arrival, so
    # that Spark's executor processes (which never ran with_faults) can unpickle it.
    getstate = getattr(self, "__getstate__", None)  # object.__getstate__ is Python 3.11
    state = getstate() if getstate is not None else self.__dict__.copy()
    return (_rebuild, (type(self).__mro__[1], state))


@functools.cache
def _faulty_class(base: type[Any]) -> type[Any]:
    namespace: dict[str, Any] = {"__module__": __name__, "__reduce__": _reduce}
    namespace["begin_transaction"] = _wrap_begin(base.begin_transaction)
    for name in _TXN_HOOKS:
        if hasattr(base, name):
            namespace[name] = _wrap_txn(name, getattr(base, name))
    for name in _HANDLE_HOOKS:
        if hasattr(base, name):
            namespace[name] = _wrap_handle(name, getattr(base, name))
    for name in _OTHER_HOOKS:
        if hasattr(base, name):
            namespace[name] = _wrap_other(name, getattr(base, name))
    cls = type(f"Faulty{base.__name__}", (base,), namespace)
    cls.__qualname__ = cls.__name__
    globals()[cls.__name__] = cls  # importable by name within this process
    return cls


def with_faults(sink: S, faults: FakeTarget) -> S:
    """Return a copy of ``sink`` whose hooks first consult ``faults``' rules.

    Works for any sink (a connector's, a user's): add rules with
    :meth:`FakeTarget.fail` on ``faults`` (an in-memory target is enough; it
    holds only the rules) and the matching hook call raises before the real
    hook runs.

    Parameters
    ----------
    sink
        The sink to wrap (left unchanged).
    faults
        The target holding the fault rules.

    Returns
    -------
    sink
        A wrapped copy of the same class family.

    Examples
    --------
    >>> from twophase.testing import FakeSink, FakeTarget, LocalRunner, with_faults
    >>> rules = FakeTarget.in_memory()
    >>> sink = with_faults(FakeSink("s", FakeTarget.in_memory()), rules)
    >>> _ = rules.fail("write", partition_id=0, attempt=0)
    >>> LocalRunner(sink, max_task_failures=2).run_batch(0, [[{"id": 1}]]).outcome
    'committed'
    """
    base: Any = type(sink)
    cls: Any = _faulty_class(base)
    clone: Any = object.__new__(cls)
    clone.__dict__.update(sink.__dict__)
    clone._faults = faults
    clone._fault_contexts = {}
    return cast(S, clone)
