"""Retry decorator with exponential backoff and full jitter.

Used around flaky network calls (S3, the partner SFTP, Kafka admin API).
Deliberately dependency-free so it can be copied into small scripts.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger(__name__)


class RetryError(Exception):
    """Raised when all attempts are exhausted. Wraps the last exception."""

    def __init__(self, attempts: int, last_exc: BaseException) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last_exc!r}")
        self.attempts = attempts
        self.last_exc = last_exc


def backoff_delays(base: float, cap: float, attempts: int, jitter: bool = True) -> Iterable[float]:
    """Yield the sleep before each retry.

    Full jitter as in the AWS architecture blog post "Exponential Backoff And
    Jitter": ``sleep = random(0, min(cap, base * 2**n))``. Without jitter, many
    clients that failed together retry together (thundering herd).
    """
    for n in range(attempts - 1):
        ceiling = min(cap, base * (2**n))
        yield random.uniform(0, ceiling) if jitter else ceiling


def retry(
    *,
    attempts: int = 5,
    base: float = 0.5,
    cap: float = 30.0,
    retry_on: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError),
    giveup: Callable[[BaseException], bool] | None = None,
    jitter: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Retry the decorated function on selected exceptions.

    Args:
        attempts: total tries including the first one.
        base: initial backoff in seconds.
        cap: maximum backoff in seconds.
        retry_on: exception types that trigger a retry; anything else propagates at once.
        giveup: optional predicate; if it returns True for an exception, stop retrying.
            Useful for e.g. HTTP 4xx wrapped in a generic exception type.
        jitter: randomise delays (leave on in production).
        sleep: injectable for tests.

    Raises:
        RetryError: when every attempt failed with a retryable exception.

    Example:
        >>> @retry(attempts=3, base=0.1, retry_on=(TimeoutError,))
        ... def fetch():
        ...     ...
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")

    def decorator(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            delays = iter(backoff_delays(base, cap, attempts, jitter))
            for attempt in range(1, attempts + 1):
                try:
                    return fn(*args, **kwargs)
                except retry_on as exc:
                    if giveup is not None and giveup(exc):
                        raise
                    if attempt == attempts:
                        raise RetryError(attempts, exc) from exc
                    delay = next(delays)
                    log.warning(
                        "%s failed (attempt %d/%d): %r; retrying in %.2fs",
                        fn.__qualname__, attempt, attempts, exc, delay,
                    )
                    sleep(delay)
            raise AssertionError("unreachable")

        return wrapper

    return decorator
