"""Keep the receiver's resident memory from ratcheting up under glibc's malloc.

glibc serves a block of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB to begin with) with its
own ``mmap``, returned to the system when it is freed; but each time such a block is freed it
raises the threshold to that block's size (up to 32 MiB) and the trim threshold to twice that
(mallopt(3)). From then on blocks below the raised threshold come from the malloc arenas (up
to eight per core; the receiver's HTTP connection threads and gRPC workers spread over them),
which keep freed memory resident. Request bodies of a few MiB (a large export, a gzip bomb
inflated towards the body cap) raise it, and the receiver's RSS crept up while its live
Python objects and malloc's bytes in use stayed flat. With the threshold fixed (which also
stops glibc adjusting it, and leaves the trim threshold at 128 KiB) every large block is
unmapped when it is freed (tests/ingest/test_receiver_memory.py; docs/receiver.md).
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["MMAP_THRESHOLD", "pin_mmap_threshold"]

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (<malloc.h>)
MMAP_THRESHOLD = 128 << 10  # glibc's own starting value


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """On glibc, fix malloc's mmap threshold at ``threshold`` bytes for this whole process
    (see the module docstring); returns whether it was set. Nothing is changed elsewhere
    (musl, macOS, Windows), nor when the environment already sets the threshold
    (``MALLOC_MMAP_THRESHOLD_`` or ``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=...``): that
    choice is the operator's. Call it once, early, in a process of your own (the ``collect``
    command does): it is not for a library to change its host application's allocator."""
    if not sys.platform.startswith("linux"):
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "glibc.malloc.mmap_threshold" in os.environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl's mallopt does nothing)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, threshold) == 1
