"""Retry with exponential backoff, for driver-side commits that fail transiently."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from .errors import RetriableError

__all__ = ["RetryPolicy"]

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How the coordinator retries a commit that raised :class:`RetriableError`.

    Parameters
    ----------
    max_attempts
        Attempts in all, the first included (>= 1).
    initial_backoff
        Seconds to wait after the first failure.
    max_backoff
        Upper bound of one wait, in seconds.
    multiplier
        Growth of the wait after each failure.
    deadline
        Give up once this many seconds have passed since the first attempt.
    jitter
        Fraction of each wait that is randomised (0 disables), so that many
        drivers do not retry in lockstep.
    """

    max_attempts: int = 10
    initial_backoff: float = 0.2
    max_backoff: float = 10.0
    multiplier: float = 2.0
    deadline: float = 300.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0:
            raise ValueError("backoff values must be >= 0")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter}")

    def backoff(self, failures: int) -> float:
        """Seconds to wait after ``failures`` consecutive failures.

        Parameters
        ----------
        failures
            Number of failures so far (>= 1).

        Returns
        -------
        float
            The wait, jitter applied.
        """
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (failures - 1))
        if self.jitter:
            base *= 1 - self.jitter * random.random()
        return base

    def call(
        self,
        fn: Callable[[], T],
        *,
        on_retry: Callable[[int, BaseException], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> T:
        """Call ``fn`` until it returns, retrying :class:`RetriableError` only.

        Parameters
        ----------
        fn
            The call to make.
        on_retry
            Called with (failures so far, error) before each wait.
        sleep, clock
            Injectable for tests (a settable clock).

        Returns
        -------
        T
            What ``fn`` returned.

        Raises
        ------
        RetriableError
            The last error once attempts or the deadline are exhausted.
        """
        start = clock()
        failures = 0
        while True:
            try:
                return fn()
            except RetriableError as exc:
                failures += 1
                if failures >= self.max_attempts or clock() - start >= self.deadline:
                    raise
                if on_retry is not None:
                    on_retry(failures, exc)
                sleep(self.backoff(failures))
