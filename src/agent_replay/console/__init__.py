"""``agent-replay serve``: a read-only web console over a store (standard library only)."""

from .app import Console, Response
from .server import make_server, serve

__all__ = ["Console", "Response", "make_server", "serve"]
