"""Keyed random streams and the ``ctx.rng`` stream switcher.

Every random stream an agent sees is keyed: a step's stream by ``(run seed, "step", position)``
when recording, by ``(rollout seed, "step", position)`` in a rollout; the agent body's stream by
segment (how many steps ran before the draw). Keys, not call order, decide the values, which is
what makes a held prefix reproduce the recording and what gives rollouts common random numbers.

Streams are SplitMix64 generators (a :class:`random.Random` subclass, so every method works):
creating one costs nothing, where seeding a Mersenne Twister costs microseconds, and a rollout
creates one per step. Their values are stable across processes, platforms and Python versions.
"""

from __future__ import annotations

import hashlib
import random
import struct
import sys
from collections.abc import Callable
from functools import lru_cache

__all__ = ["ContextRandom", "KeyedRandom", "derive_seed", "stream_seed"]

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


@lru_cache(maxsize=4096)
def _key_code(key: object) -> int:
    text = repr(key).encode("utf-8", "surrogatepass")
    return struct.unpack("<Q", hashlib.blake2b(text, digest_size=8).digest())[0]


@lru_cache(maxsize=8192, typed=True)  # typed: True and 1 are different keys
def derive_seed(*keys: object) -> int:
    """A 64-bit seed determined only by ``keys`` (ints and short strings), stably."""
    h = 0x5851F42D4C957F2D
    for key in keys:
        code = key & _M64 if type(key) is int and key >= 0 else _key_code(key)
        h = _mix((h + code + _GOLDEN) & _M64)
    return h


def stream_seed(base: int, index: int) -> int:
    """``derive_seed``-quality seed of stream ``index`` under ``base = derive_seed(...)``: one
    mixing round, for the per-step hot path."""
    return _mix((base + (index + 1) * _GOLDEN) & _M64)


class KeyedRandom(random.Random):
    """A SplitMix64 stream with the whole :class:`random.Random` interface."""

    def __init__(self, seed: int = 0) -> None:  # no super().__init__: no MT state to seed
        self._state = seed & _M64
        self.gauss_next = None

    if sys.version_info < (3, 11):
        # Before 3.11 the C base's __new__ takes at most one argument (a subclass with more,
        # the running step, could not be made) and seeds its Mersenne Twister with it, about
        # 3 us a stream; seeding it with 0 costs the same and is never drawn from
        def __new__(cls, *args: object, **kwargs: object) -> KeyedRandom:
            return super().__new__(cls, 0)

    def seed(self, a: object = None, version: int = 2) -> None:
        self._state = (a if type(a) is int else _key_code(a)) & _M64
        self.gauss_next = None

    def random(self) -> float:
        state = self._state = (self._state + _GOLDEN) & _M64
        return (_mix(state) >> 11) * 1.1102230246251565e-16  # 2**-53

    def getrandbits(self, k: int) -> int:
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        out, filled = 0, 0
        while filled < k:
            state = (self._state + _GOLDEN) & _M64
            self._state = state
            out |= _mix(state) << filled
            filled += 64
        return out >> (filled - k) if filled > k else out

    def getstate(self) -> tuple:
        return (self._state, self.gauss_next)

    def setstate(self, state: tuple) -> None:
        self._state, self.gauss_next = state


class ContextRandom(random.Random):
    """``ctx.rng``: a :class:`random.Random` whose draws come from the stream active *now*.

    Inside a step's ``produce`` / ``observe`` that is the step's stream; elsewhere, the body
    stream of the current segment. Holding a reference (``rng = ctx.rng``) is therefore safe.
    Every ``random.Random`` method works, since they all draw through :meth:`random` and
    :meth:`getrandbits`.
    """

    def __init__(self, current: Callable[[], random.Random]) -> None:
        self._current = current  # no super().__init__: this object has no state of its own

    def random(self) -> float:
        return self._current().random()

    def getrandbits(self, k: int) -> int:
        return self._current().getrandbits(k)

    def gauss(self, mu: float = 0.0, sigma: float = 1.0) -> float:
        # Random.gauss caches its second value on the instance; keep that cache per stream
        return self._current().gauss(mu, sigma)

    def seed(self, *args: object, **kwargs: object) -> None:
        raise TypeError("ctx.rng cannot be reseeded; its streams are keyed by the run")

    def getstate(self):
        raise TypeError("ctx.rng has no single state; it switches streams by step")

    def setstate(self, state):
        raise TypeError("ctx.rng has no single state; it switches streams by step")
