"""The exceptions twophase raises, in one hierarchy.

::

    TwoPhaseError                      base of everything raised here
     ├── ConfigurationError            a setting or input is wrong; fix it and restart
     │    └── UnsafeConfigurationError speculation on, sink identity shared, ...
     ├── TransactionError              a hook failed while talking to the target
     │    ├── RetriableError           transient; the same call may succeed later
     │    ├── AbortRequiredError       this transaction is lost; abort it, retry the task
     │    └── FatalError               retrying cannot help (fenced, unauthorised, ...)
     ├── DataError                     a row cannot be written (NOT NULL, too long, ...)
     ├── NondeterministicBatchError    a replayed batch differs from what was committed
     ├── ConcurrentQueryError          another run holds this sink identity
     ├── CoordinatorLogError           the coordinator log is unreadable or inconsistent
     └── CommitFailedError             phase 2 gave up; the decision stands, restart finishes it

Connectors map their client's errors onto this tree with ``raise ... from exc``
so that callers can decide by class (retry, abort, stop) without knowing the
client library. Every exception keeps its constructor arguments so that it
pickles: executor-side errors travel back to the driver inside Spark's task
failure.

The context keywords (``sink``, ``batch_id``, ``column``, ``setting``) are kept
as attributes and written at the head of the message, so that every error names
the sink, the batch and the column or setting at fault.

A streaming query that fails raises PySpark's ``StreamingQueryException``,
which carries the error raised in ``foreachBatch`` or in a task as text only.
:func:`find_error` takes the twophase error back out of it, with its class and
context; ``twophase.await_termination(query)`` raises it. Each class says
whether restarting the query can cure it (:attr:`TwoPhaseError.restartable`).
"""

from __future__ import annotations

import ast
import re
from typing import Any, ClassVar

__all__ = [
    "AbortRequiredError",
    "CommitFailedError",
    "ConcurrentQueryError",
    "ConfigurationError",
    "CoordinatorLogError",
    "DataError",
    "FatalError",
    "NondeterministicBatchError",
    "RetriableError",
    "TransactionError",
    "TwoPhaseError",
    "UnsafeConfigurationError",
    "find_error",
]


class TwoPhaseError(Exception):
    """Base class of every exception raised by twophase.

    Parameters
    ----------
    message
        What went wrong and, where known, how to fix it.
    sink
        Name of the sink the error belongs to.
    batch_id
        Micro-batch id the error belongs to.
    partition_id
        Partition (Spark task) the error belongs to.
    column
        Column at fault, for data and schema errors.
    setting
        Configuration key at fault, for configuration errors.

    Attributes
    ----------
    restartable : bool
        Whether restarting the query from its checkpoint can cure the error
        by itself (a transient failure, a commit left to finish). False: a
        person must act first (fix a setting, the data, the pipeline, or stop
        the other run); restarting unchanged fails the same way.
    """

    restartable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        sink: str | None = None,
        batch_id: int | None = None,
        partition_id: int | None = None,
        column: str | None = None,
        setting: str | None = None,
    ) -> None:
        self.message = message
        self.sink = sink
        self.batch_id = batch_id
        self.partition_id = partition_id
        self.column = column
        self.setting = setting
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.sink is not None:
            where.append(f"sink={self.sink!r}")
        if self.batch_id is not None:
            where.append(f"batch={self.batch_id}")
        if self.partition_id is not None:
            where.append(f"partition={self.partition_id}")
        if self.column is not None:
            where.append(f"column={self.column!r}")
        if self.setting is not None:
            where.append(f"setting={self.setting!r}")
        return f"[{', '.join(where)}] {self.message}" if where else self.message

    def with_context(self, **context: Any) -> TwoPhaseError:
        """Fill in context fields that are still unknown, in place.

        Parameters
        ----------
        **context
            Any of ``sink``, ``batch_id``, ``partition_id``, ``column``, ``setting``.

        Returns
        -------
        TwoPhaseError
            ``self``, so that ``raise exc.with_context(...)`` reads naturally.
        """
        for key, value in context.items():
            if value is not None and getattr(self, key, None) is None:
                setattr(self, key, value)
        self.args = (self._render(),)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        kwargs = {
            "sink": self.sink,
            "batch_id": self.batch_id,
            "partition_id": self.partition_id,
            "column": self.column,
            "setting": self.setting,
        }
        return (_rebuild, (type(self), self.message, kwargs, self.__dict__.copy()))

    def __str__(self) -> str:
        return self._render()


def _rebuild(
    cls: type[TwoPhaseError], message: str, kwargs: dict[str, Any], state: dict[str, Any]
) -> TwoPhaseError:
    exc = cls.__new__(cls)
    TwoPhaseError.__init__(exc, message, **kwargs)
    exc.__dict__.update(state)
    return exc


class ConfigurationError(TwoPhaseError, ValueError):
    """A setting, an option or the input schema is wrong.

    Nothing was written. Fix the named setting or column and restart the query.
    """


class UnsafeConfigurationError(ConfigurationError):
    """A configuration that would break exactly-once was refused.

    Examples: ``spark.speculation=true``, or a sink identity already used by
    another running query.
    """


class TransactionError(TwoPhaseError):
    """A hook failed while talking to the transactional target.

    Restartable: the batch's transactions are aborted or recovered, and a
    restart runs the batch again.
    """

    restartable: ClassVar[bool] = True


class RetriableError(TransactionError):
    """A transient failure: the same call may succeed if repeated.

    The coordinator retries driver-side commits that raise this with
    exponential backoff; on executors Spark's task retry plays that role.
    """


class AbortRequiredError(TransactionError):
    """The transaction cannot continue and must be aborted.

    The participant aborts it and fails the task, so that Spark retries the
    task with a new transaction.
    """


class FatalError(TransactionError):
    """A failure that retrying cannot fix (fenced producer, not authorised, ...).

    The batch fails and the query stops; the message names the likely cause.
    Not restartable: fix the cause (credentials, ACLs, another producer with
    the same ``transactional.id``) first.
    """

    restartable: ClassVar[bool] = False


class DataError(TwoPhaseError, ValueError):
    """A row of the batch cannot be written (constraint, type or length).

    The batch's transaction is aborted, so nothing of the batch becomes visible.
    """


class NondeterministicBatchError(TwoPhaseError):
    """A replayed batch does not match what was already committed for it.

    Raised by the markers protocol before anything is written. Make the
    pipeline deterministic (sort or key the data before the sink, avoid
    non-deterministic functions), or enable staging so that replays read the
    staged copy.
    """


class ConcurrentQueryError(TwoPhaseError):
    """Another run of the query holds this sink identity.

    Two running queries must never share a sink identity (a checkpoint): the
    newer run fences the older one, which fails with this error.
    """


class CoordinatorLogError(TwoPhaseError):
    """The coordinator log stored with the checkpoint is unreadable or inconsistent."""


class CommitFailedError(TwoPhaseError):
    """Phase 2 could not finish, even after retries.

    The commit decision is durable: restarting the query commits the remaining
    handles before anything else (``recover_and_commit``). No data is lost.
    Restartable, once the target is reachable again.
    """

    restartable: ClassVar[bool] = True


def add_note(error: BaseException, note: str) -> None:
    """Attach ``note`` to ``error``, shown under its traceback.

    ``BaseException.add_note`` from Python 3.11; before it, the same
    ``__notes__`` list (kept, not printed by the interpreter).

    Parameters
    ----------
    error
        The exception.
    note
        The text.
    """
    adder = getattr(error, "add_note", None)
    if adder is not None:
        adder(note)
        return
    notes = list(getattr(error, "__notes__", []))
    notes.append(note)
    error.__notes__ = notes  # type: ignore[attr-defined]


#: A twophase error as a Python traceback prints it: the class, then the message.
_RAISED = re.compile(r"twophase\.errors\.([A-Za-z]+Error): ([^\n]*)")
#: One context item at the head of a message (``[sink='s', batch=3] ...``).
_ITEM = re.compile(
    r"(sink|batch|partition|column|setting)="
    r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+)(, |\] )"
)
_KEYS = {"batch": "batch_id", "partition": "partition_id"}


def _parse(text: str) -> tuple[str, dict[str, Any]]:
    """Split a rendered message into its text and its context (see ``_render``)."""
    if not text.startswith("["):
        return text, {}
    context: dict[str, Any] = {}
    position = 1
    while True:
        item = _ITEM.match(text, position)
        if item is None:
            return text, {}
        key, raw, end = item.groups()
        context[_KEYS.get(key, key)] = int(raw) if raw[0] not in "'\"" else ast.literal_eval(raw)
        position = item.end()
        if end == "] ":
            return text[position:], context


def find_error(error: BaseException | None) -> TwoPhaseError | None:
    """Return the twophase error behind ``error``, with its class and context, if there is one.

    ``error`` may be the twophase error itself, an exception that chains it
    (``raise ... from``), or PySpark's ``StreamingQueryException`` (classic or
    Spark Connect), which carries the error raised in ``foreachBatch`` or in
    a task as text: the error is then rebuilt from that text, as an instance
    of its class with its ``sink``, ``batch_id``, ``partition_id``, ``column``
    and ``setting``. Where the text holds several (a chain), the outermost --
    the one that failed the query -- is returned.

    Parameters
    ----------
    error
        An exception, e.g. ``query.exception()``; None gives None.

    Returns
    -------
    TwoPhaseError or None
        The error; None when no twophase error is behind ``error``.

    Examples
    --------
    >>> try:  # doctest: +SKIP
    ...     query.awaitTermination()
    ... except Exception as exc:
    ...     found = twophase.errors.find_error(exc)
    ...     if found is not None and not found.restartable:
    ...         alert(found.sink, found.batch_id, found.setting, found.message)
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, TwoPhaseError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    if error is None:
        return None
    raised = _RAISED.findall(str(error))
    if not raised:
        return None
    name, text = raised[-1]
    cls = globals().get(name)
    if not (isinstance(cls, type) and issubclass(cls, TwoPhaseError)):
        return None
    message, context = _parse(text)
    return cls(message, **context)
