"""The cache of :func:`sk_deq.match_explicit`: results by arguments, shared by every caller."""

from __future__ import annotations

import threading
from collections import namedtuple


CacheInfo = namedtuple("CacheInfo", ["hits", "misses", "maxsize", "currsize"])


CacheInfo.__doc__ = (
    "Statistics of the cache of :func:`match_explicit` (as :func:`functools.lru_cache` reports its own)."
)


class _MatchCache:
    """Results of a match by its arguments; the first stored goes first when full.

    Results are immutable, so every caller may share them.  A call without a
    seed is random and is never cached; nor is one whose arguments cannot be
    hashed (an activation class that defines ``__eq__`` without ``__hash__``).
    The bookkeeping is locked (fits may run in threads); the solve is not, so
    two threads asking for the same new result may both solve it.
    """

    def __init__(self, maxsize: int = 256):
        self.maxsize = maxsize
        self._results: dict = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def key(act, sigma_a2, tau0, kernel, family, n_layers, sigma_b2, tol, n_starts, random_state):
        """The key of a call, or None where it is not cached."""
        if random_state is None:
            return None
        family = family if isinstance(family, str) else tuple(family)
        key = (act, float(sigma_a2), float(tau0), kernel, family, n_layers, sigma_b2, tol, n_starts, random_state)
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def get_or_solve(self, solve, *args):
        """The stored result of ``solve(*args)``, or a new one (stored when the call is cacheable)."""
        key = self.key(*args)
        if key is None:
            return solve(*args)
        with self._lock:
            hit = self._results.get(key)
            if hit is not None:
                self.hits += 1
                return hit
            self.misses += 1
        result = solve(*args)
        with self._lock:
            if key not in self._results and len(self._results) >= self.maxsize:
                self._results.pop(next(iter(self._results)))
            return self._results.setdefault(key, result)

    def info(self) -> CacheInfo:
        """Hits, misses, the maximum size and the current size."""
        with self._lock:
            return CacheInfo(self.hits, self.misses, self.maxsize, len(self._results))

    def clear(self) -> None:
        """Forget every result and reset the counters."""
        with self._lock:
            self._results.clear()
            self.hits = self.misses = 0
