"""Compressed trace files and request bodies: gzip and HTTP ``deflate`` (zlib, standard
library) and zstd (``compression.zstd`` from Python 3.14, else the ``backports.zstd`` package
that the ``zstd`` extra installs: ``pip install "trajectory-causal-attribution[zstd]"``).

A file's compression is told by its magic bytes (:func:`kind`). :func:`decompress` inflates
bytes within a size limit (concatenated gzip members and zstd frames included, as ``cat``
makes and the Collector's file exporter writes); :func:`open_stream` reads a file as it
inflates; :func:`salvaging` reads it up to where it is damaged, which is how trace files are
read (what comes before a cut or a corrupt block is kept, the same whether a file is read whole
or in blocks). Failures are :class:`Undecodable` (corrupt or cut short) or its subclass
:class:`Inflated` (beyond the limit), with a message ready to show.
"""

from __future__ import annotations

import functools
import gzip
import importlib
import io
import zlib
from typing import IO, Any

__all__ = [
    "DEFLATE",
    "GZIP",
    "INSTALL_ZSTD",
    "MAX_INFLATED",
    "ZSTD",
    "Inflated",
    "Undecodable",
    "available",
    "decompress",
    "kind",
    "open_stream",
    "salvaging",
    "stream_errors",
    "zstd",
]

GZIP = "gzip"
ZSTD = "zstd"
DEFLATE = "deflate"
_MAGIC = {b"\x1f\x8b": GZIP, b"\x28\xb5\x2f\xfd": ZSTD}
#: the default limit of :func:`decompress` for a file
MAX_INFLATED = 4 << 30
#: how to get a zstd codec before Python 3.14 (said wherever zstd is refused for want of one)
INSTALL_ZSTD = 'install the zstd extra: pip install "trajectory-causal-attribution[zstd]"'


class Undecodable(ValueError):
    """Compressed data that cannot be inflated (corrupt, cut short, codec missing)."""


class Inflated(Undecodable):
    """Compressed data that inflates beyond the limit it was given."""


def kind(head: bytes) -> str | None:
    """``"gzip"``, ``"zstd"`` or ``None`` (not compressed) from a file's first bytes."""
    return _MAGIC.get(head[:4]) or _MAGIC.get(head[:2])


@functools.cache
def _zstd_module() -> Any | None:
    for name in ("compression.zstd", "backports.zstd"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def zstd() -> Any:
    """The zstd module (PEP 784's API); raises :class:`Undecodable` when neither the standard
    library nor the extra provides it."""
    module = _zstd_module()
    if module is None:
        raise Undecodable(f"zstd-compressed, and no zstd codec is installed ({INSTALL_ZSTD})")
    return module


def available() -> tuple[str, ...]:
    """The codecs :func:`decompress` can use here."""
    return (GZIP, DEFLATE, ZSTD) if _zstd_module() is not None else (GZIP, DEFLATE)


def stream_errors() -> tuple[type[BaseException], ...]:
    """What reading a stream from :func:`open_stream` raises on corrupt or cut data."""
    errors: tuple[type[BaseException], ...] = (EOFError, zlib.error, gzip.BadGzipFile)
    module = _zstd_module()
    return errors if module is None else (*errors, module.ZstdError)


def _decompressor(codec: str) -> Any:
    if codec == GZIP:
        return zlib.decompressobj(wbits=31)
    if codec == DEFLATE:
        return zlib.decompressobj(wbits=15)
    if codec == ZSTD:
        return zstd().ZstdDecompressor()
    raise Undecodable(f"unsupported compression {codec!r}")


#: gzip members or zstd frames taken in one body or record (an exporter writes one; 8 MiB
#: of empty members took 34 s to refuse without this bound)
MAX_MEMBERS = 1024


def decompress(data: bytes, codec: str, limit: int = MAX_INFLATED) -> bytes:
    """``data`` inflated by ``codec`` (``gzip``, ``deflate`` or ``zstd``); every gzip member
    or zstd frame, in order. Raises :class:`Inflated` past ``limit`` bytes (checked as it
    inflates, so a small bomb costs no memory) and :class:`Undecodable` when ``data`` is
    corrupt or cut short."""
    errors = stream_errors()
    parts: list[bytes] = []
    size = 0
    while data:  # nothing at all inflates to nothing, as a stream reads it
        if len(parts) == MAX_MEMBERS:  # each member copies the rest: quadratic past a few
            raise Undecodable(
                f"{codec} data of more than {MAX_MEMBERS} members or frames (an exporter sends one)"
            )
        inflater = _decompressor(codec)
        try:
            part = inflater.decompress(data, limit - size + 1)
        except errors as exc:
            raise Undecodable(f"corrupt {codec} data ({exc})") from None
        parts.append(part)
        size += len(part)
        if size > limit:
            raise Inflated(f"{codec} data inflates beyond {_bytes(limit)}")
        if not inflater.eof:
            raise Undecodable(f"{codec} data is cut short")
        data = inflater.unused_data
        if codec == GZIP:
            data = data.lstrip(b"\0")  # zero padding after a member, as gzip.open allows
        if codec == DEFLATE:
            break
    return b"".join(parts)


def open_stream(raw: IO[bytes], codec: str) -> IO[bytes]:
    """A binary file object that inflates ``raw`` (gzip or zstd) as it is read; reading it
    raises one of :func:`stream_errors` on corrupt or cut data."""
    if codec == GZIP:
        return gzip.GzipFile(fileobj=raw, mode="rb")
    return zstd().ZstdFile(raw, mode="rb")


#: a damaged stream is read at most this much at a time, as it inflates (``read1``): what it
#: yields is the same however the caller then reads it (whole, or in blocks of any size), and
#: a cut stream yields everything before the cut (a read of a whole piece would lose the part
#: of it inflated before the end)
PIECE = 1 << 20


class _Salvaging(io.RawIOBase):
    """The inflated bytes of a compressed stream, as they inflate (at most :data:`PIECE` at a
    time), ending (as if at the end of the file) where it cannot be inflated further;
    ``error`` says why."""

    def __init__(self, stream: IO[bytes], codec: str, limit: int) -> None:
        super().__init__()
        self._stream = stream  # opened by the caller: a codec that is missing raises there,
        # not halfway through making this object (whose finalizer would then fail to close it)
        self._codec, self._limit = codec, limit
        self._pending = b""
        self.inflated = 0
        self.error: Undecodable | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._pending:
            if self.error is not None:
                return 0
            try:
                self._pending = self._stream.read1(PIECE)
            except EOFError:  # the end of the file came before the end of the stream
                self.error = Undecodable(
                    f"{self._codec} data cut short after {self.inflated:,} bytes"
                )
                return 0
            except stream_errors() as exc:
                self.error = Undecodable(
                    f"corrupt {self._codec} data after {self.inflated:,} bytes ({exc})"
                )
                return 0
            self.inflated += len(self._pending)
            if self.inflated > self._limit:
                self._pending = b""
                self.error = Inflated(f"{self._codec} data inflates beyond {_bytes(self._limit)}")
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def close(self) -> None:
        self._stream.close()
        super().close()


def salvaging(raw: IO[bytes], codec: str, limit: int = MAX_INFLATED) -> io.BufferedReader:
    """A binary file object of ``raw`` inflated by ``codec`` (gzip or zstd) that ends where
    the data is damaged (or inflates beyond ``limit``): what comes before is read, and
    ``.raw.error`` is the :class:`Undecodable` that stopped it (``None`` at a clean end). A
    cut file thus loses only what follows the cut (a corrupt one, at most the :data:`PIECE`
    being inflated where the damage is), identically however it is read."""
    return io.BufferedReader(_Salvaging(open_stream(raw, codec), codec, limit), buffer_size=PIECE)


def _bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"
