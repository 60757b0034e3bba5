"""Streams served from a recording: they iterate rebuilt chunks the way the SDK's stream does.

A streamed call is recorded whole (every chunk, as data) inside its step, so the agent reads
its chunks from one of these objects in every mode: over the chunks just received when the
call ran live, over rebuilt chunks when it is held. When the SDK's own stream class is known
(``openai.Stream``, ``anthropic.AsyncStream``, ...) the object is also an instance of it, so
``isinstance`` checks and helpers that wrap a raw stream (``client.chat.completions.stream``,
``MessageStreamManager``) keep working; its methods are ours (iteration, context manager,
``close()``), none of the SDK's networking code runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

__all__ = ["AsyncReplayStream", "ReplayStream", "ReplayedResponse", "make_stream"]


class ReplayedResponse:
    """Stands in for the HTTP response behind a replayed stream (there was none)."""

    status_code = 200
    is_closed = False

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}

    def close(self) -> None:
        self.is_closed = True

    async def aclose(self) -> None:
        self.is_closed = True


class _Chunks:
    """Recorded chunks served in order, then the error the stream broke off with (if any)."""

    def __init__(self, items: list[Any], error: BaseException | None = None) -> None:
        self._iterator = iter(items)
        self._error = error
        self.response: Any = ReplayedResponse()

    def _next(self) -> Any:
        try:
            return next(self._iterator)
        except StopIteration:
            error, self._error = self._error, None
            if error is not None:  # the stream broke off here when it was recorded
                raise error from None
            raise

    def _stop(self) -> None:
        self._iterator = iter(())
        self._error = None


class ReplayStream(_Chunks):
    """A synchronous stream over recorded chunks: iteration, ``with``, ``close()``.

    Not thread-safe (neither is the SDK's stream).
    """

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return self._next()

    def __enter__(self) -> ReplayStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop()
        self.response.close()


class AsyncReplayStream(_Chunks):
    """An asynchronous stream over recorded chunks: ``async for``, ``async with``, ``close()``."""

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            return self._next()
        except StopIteration:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AsyncReplayStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._stop()
        await self.response.aclose()

    aclose = close


_CLASSES: dict[tuple[type, type], type] = {}


def make_stream(
    items: list[Any],
    *,
    is_async: bool,
    sdk_class: type | None,
    error: BaseException | None = None,
) -> Any:
    """A replay stream over ``items``, an instance of ``sdk_class`` too when it is given; it
    raises ``error`` after the last item (a stream that broke off while it was read)."""
    base: type = AsyncReplayStream if is_async else ReplayStream
    if sdk_class is None:
        return base(items, error)
    cls = _CLASSES.get((base, sdk_class))
    if cls is None:
        # our methods first in the MRO; the SDK class only lends its identity
        cls = type(f"Replay{sdk_class.__name__}", (base, sdk_class), {"__module__": __name__})
        _CLASSES[(base, sdk_class)] = cls
    stream = cls.__new__(cls)
    base.__init__(stream, items, error)
    return stream
