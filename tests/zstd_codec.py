"""The zstd codec the tests compress with: the standard library's from Python 3.14, else the
``backports.zstd`` package (the dev extras install it before 3.14)."""

try:
    from compression import zstd
except ImportError:
    from backports import zstd  # type: ignore[no-redef]

__all__ = ["zstd"]
