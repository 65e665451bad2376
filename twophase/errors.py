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
as attributes and appended to the message, so that every error names the sink,
the batch and the column or setting at fault.
"""

from __future__ import annotations

from typing import Any

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
    """

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
    """A hook failed while talking to the transactional target."""


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
    """


class DataError(TwoPhaseError, ValueError):
    """A row of the batch cannot be written (constraint, type or length).

    The batch's transaction is aborted, so nothing of the batch becomes visible.
    """


class NondeterministicBatchError(TwoPhaseError):
    """A replayed batch does not match what was already committed for it.

    Raised by the marker protocol (B) before anything is written. Make the
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
    """


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
