"""Deterministic seed derivation and the ``ctx.rng`` stream switcher.

Every random stream an agent sees is keyed: a step's stream by ``(run seed, "step", position)``
when recording, by ``(rollout seed, "step", position)`` in a rollout; the agent body's stream by
segment (how many steps ran before the draw). Keys, not call order, decide the values, which is
what makes a held prefix reproduce the recording and what gives rollouts common random numbers.
"""

from __future__ import annotations

import hashlib
import random
import struct
from collections.abc import Callable

__all__ = ["ContextRandom", "derive_seed"]


def derive_seed(*keys: object) -> int:
    """A 64-bit seed determined only by ``keys`` (stable across processes and Python versions)."""
    text = "\x1f".join(repr(k) for k in keys).encode("utf-8", "surrogatepass")
    return struct.unpack("<Q", hashlib.blake2b(text, digest_size=8).digest())[0]


class ContextRandom(random.Random):
    """``ctx.rng``: a :class:`random.Random` whose draws come from the stream active *now*.

    Inside a step's ``produce`` / ``observe`` that is the step's stream; elsewhere, the body
    stream of the current segment. Holding a reference (``rng = ctx.rng``) is therefore safe.
    Every ``random.Random`` method works, since they all draw through :meth:`random` and
    :meth:`getrandbits`.
    """

    def __init__(self, current: Callable[[], random.Random]) -> None:
        self._current = current
        super().__init__(0)

    def random(self) -> float:
        return self._current().random()

    def getrandbits(self, k: int) -> int:
        return self._current().getrandbits(k)

    def gauss(self, mu: float = 0.0, sigma: float = 1.0) -> float:
        # Random.gauss caches its second value on the instance; keep that cache per stream
        return self._current().gauss(mu, sigma)

    def seed(self, *args: object, **kwargs: object) -> None:
        # random.Random.__init__ calls seed(); afterwards reseeding would break replay.
        if getattr(self, "_current", None) is not None and getattr(self, "_ready", False):
            raise TypeError("ctx.rng cannot be reseeded; its streams are keyed by the run")
        super().seed(*args, **kwargs)
        self._ready = True

    def getstate(self):  # pragma: no cover - defensive
        raise TypeError("ctx.rng has no single state; it switches streams by step")

    def setstate(self, state):  # pragma: no cover - defensive
        raise TypeError("ctx.rng has no single state; it switches streams by step")
