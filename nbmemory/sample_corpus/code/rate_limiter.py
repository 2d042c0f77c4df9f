"""Token-bucket rate limiters (sync and asyncio).

Used to keep the catalog enrichment job under the vendor API's 20 req/s limit
and for per-client limits in the search API handlers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict


class TokenBucket:
    """Classic token bucket.

    ``rate`` tokens are added per second up to ``capacity``. Each call to
    :meth:`acquire` takes ``n`` tokens, blocking until they are available.
    Thread-safe.

    Args:
        rate: refill rate in tokens per second.
        capacity: bucket size, i.e. the largest burst allowed.
        clock: injectable monotonic clock for tests.
    """

    def __init__(self, rate: float, capacity: float, clock=time.monotonic) -> None:
        if rate <= 0 or capacity <= 0:
            raise ValueError("rate and capacity must be positive")
        self.rate = rate
        self.capacity = capacity
        self._tokens = capacity
        self._clock = clock
        self._last = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._last
        self._last = now
        self._tokens = min(self.capacity, self._tokens + elapsed * self.rate)

    def try_acquire(self, n: float = 1.0) -> bool:
        """Take ``n`` tokens if available right now; never blocks."""
        with self._lock:
            self._refill()
            if self._tokens >= n:
                self._tokens -= n
                return True
            return False

    def wait_time(self, n: float = 1.0) -> float:
        """Seconds until ``n`` tokens would be available (0 if now)."""
        with self._lock:
            self._refill()
            missing = n - self._tokens
            return max(0.0, missing / self.rate)

    def acquire(self, n: float = 1.0, timeout: float | None = None) -> bool:
        """Block until ``n`` tokens are taken. Returns False on timeout."""
        if n > self.capacity:
            raise ValueError(f"cannot acquire {n} tokens from a bucket of {self.capacity}")
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            if self.try_acquire(n):
                return True
            delay = self.wait_time(n)
            if deadline is not None and self._clock() + delay > deadline:
                return False
            time.sleep(delay)


class AsyncTokenBucket:
    """asyncio flavour of :class:`TokenBucket` (single event loop only)."""

    def __init__(self, rate: float, capacity: float) -> None:
        self._bucket = TokenBucket(rate, capacity)
        self._lock = asyncio.Lock()

    async def acquire(self, n: float = 1.0) -> None:
        async with self._lock:
            while not self._bucket.try_acquire(n):
                await asyncio.sleep(self._bucket.wait_time(n))

    async def __aenter__(self) -> AsyncTokenBucket:
        await self.acquire()
        return self

    async def __aexit__(self, *exc) -> None:
        return None


class KeyedRateLimiter:
    """One bucket per key (client id, API key hash, IP) with LRU eviction.

    Keeps at most ``max_keys`` buckets so a flood of distinct keys can't grow
    memory without bound (lesson from the orders-sink region cache leak).
    """

    def __init__(self, rate: float, capacity: float, max_keys: int = 10_000) -> None:
        self.rate = rate
        self.capacity = capacity
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, key: str, n: float = 1.0) -> bool:
        """Non-blocking check for ``key``; returns True if the request may proceed."""
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = TokenBucket(self.rate, self.capacity)
                self._buckets[key] = bucket
                if len(self._buckets) > self.max_keys:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(key)
        return bucket.try_acquire(n)

    def retry_after(self, key: str) -> float:
        """Suggested ``Retry-After`` seconds for a rejected key."""
        bucket = self._buckets.get(key)
        return 0.0 if bucket is None else bucket.wait_time()
