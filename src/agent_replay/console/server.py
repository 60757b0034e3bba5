"""The HTTP side of the console: a :class:`~agent_replay.httpserver.GuardedHTTPServer` in
front of :class:`Console` (connections capped, idle ones closed after 30 s, request heads on
a deadline, and on loopback, requests naming another host refused: DNS rebinding).

Only ``GET`` and ``HEAD`` are served (the console is read-only); anything else is 405. Each
request runs on its own thread; store reads go through the console's small fixed pool.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..httpserver import GuardedHandler, GuardedHTTPServer
from .app import Console

__all__ = ["make_server", "serve"]

_log = logging.getLogger(__name__)


def make_server(console: Console, host: str = "127.0.0.1", port: int = 8765) -> GuardedHTTPServer:
    """A server bound to ``host:port`` (port 0 picks a free one); call ``serve_forever``."""

    class Handler(GuardedHandler):
        server_version = "agent-replay-console"
        sys_version = ""
        timeout = 30  # an idle connection is closed after this (it was held forever)

        def _respond(self, head_only: bool) -> None:
            response = console.handle(self.command, self.path)
            self.send_response(response.status)
            for name, value in response.headers():
                self.send_header(name, value)
            self.end_headers()
            if not head_only:
                self.wfile.write(response.body)

        def do_GET(self) -> None:
            self._respond(False)

        def do_HEAD(self) -> None:
            self._respond(True)

        def do_POST(self) -> None:
            self._respond(False)

        def __getattr__(self, name: str) -> Any:
            # every other method (PUT, OPTIONS, a made-up one) gets the console's own 405,
            # not the standard library's 501 page without the security headers
            if name.startswith("do_"):
                return self.do_POST
            raise AttributeError(name)

        def log_message(self, format: str, *args: object) -> None:
            _log.info("%s %s", self.address_string(), format % args)

    return GuardedHTTPServer((host, port), Handler)


def serve(
    db: str | Path, host: str = "127.0.0.1", port: int = 8765, reports_dir: str | Path | None = None
) -> None:
    """Serve the console until interrupted."""
    with Console(db, reports_dir=reports_dir) as console:
        server = make_server(console, host, port)
        try:
            server.serve_forever()
        finally:
            server.server_close()
