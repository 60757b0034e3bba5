"""Compressed trace files and request bodies: gzip and HTTP ``deflate`` (zlib, standard
library) and zstd (``compression.zstd`` from Python 3.14, else the ``backports.zstd`` package
that the ``zstd`` extra installs: ``pip install "trajectory-causal-attribution[zstd]"``).

A file's compression is told by its magic bytes (:func:`kind`). :func:`decompress` inflates
bytes within a size limit (concatenated gzip members and zstd frames included, as ``cat``
makes and the Collector's file exporter writes); :func:`open_stream` reads a file as it
inflates. Failures are :class:`Undecodable` (corrupt or cut short) or its subclass
:class:`Inflated` (beyond the limit), with a message ready to show.
"""

from __future__ import annotations

import functools
import gzip
import importlib
import zlib
from typing import IO, Any

__all__ = [
    "DEFLATE",
    "GZIP",
    "MAX_INFLATED",
    "ZSTD",
    "Inflated",
    "Undecodable",
    "available",
    "decompress",
    "kind",
    "open_stream",
    "stream_errors",
    "zstd",
]

GZIP = "gzip"
ZSTD = "zstd"
DEFLATE = "deflate"
_MAGIC = {b"\x1f\x8b": GZIP, b"\x28\xb5\x2f\xfd": ZSTD}
#: the default limit of :func:`decompress` for a file
MAX_INFLATED = 4 << 30
_INSTALL = 'install the zstd extra: pip install "trajectory-causal-attribution[zstd]"'


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
        raise Undecodable(f"zstd-compressed, and no zstd codec is installed ({_INSTALL})")
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


def decompress(data: bytes, codec: str, limit: int = MAX_INFLATED) -> bytes:
    """``data`` inflated by ``codec`` (``gzip``, ``deflate`` or ``zstd``); every gzip member
    or zstd frame, in order. Raises :class:`Inflated` past ``limit`` bytes (checked as it
    inflates, so a small bomb costs no memory) and :class:`Undecodable` when ``data`` is
    corrupt or cut short."""
    errors = stream_errors()
    parts: list[bytes] = []
    size = 0
    while data:  # nothing at all inflates to nothing, as a stream reads it
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


def _bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"
