"""A client that sends a request a byte at a time (for the HTTP servers' pace guards)."""

from __future__ import annotations

import socket
import time


def trickle(port: int, head: bytes, body: bytes, every: float = 0.1) -> float | None:
    """Send ``head`` at once, then ``body`` a byte at a time, waiting up to ``every`` seconds
    between bytes for the server to close; the seconds until the server shut the connection
    (``None``: it never did)."""
    slow = socket.create_connection(("127.0.0.1", port))
    slow.settimeout(every)
    started = time.monotonic()
    try:
        slow.sendall(head)
        for byte in body:
            try:
                slow.sendall(bytes([byte]))
                if slow.recv(1) == b"":
                    return time.monotonic() - started
            except TimeoutError:
                continue
            except OSError:
                return time.monotonic() - started
        return None
    finally:
        slow.close()
