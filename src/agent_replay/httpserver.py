"""The HTTP server under the OTLP receiver and the console: the standard library's
``ThreadingHTTPServer`` with the guards a local service needs against slow or hostile clients.

* **Open connections are capped** (``max_connections``), so a thousand idle sockets cannot
  use up the process's file descriptors (which the gRPC listener of the same process
  shares): a new connection past the cap shuts the one that has waited longest for a request
  head (idle or trickling), or is closed at once when every connection is busy.
* **A request's head must arrive within** ``head_seconds`` from the moment the connection
  waits for it (the socket timeout only bounds each read: a client sending a byte every ten
  seconds held a connection forever). Past it the connection is shut.
* **A request head must be whole**: one whose connection ended before its blank line is
  answered 400 (the standard library answered what had arrived as a complete request), or
  not at all when this server shut the connection (:meth:`GuardedHandler.connection_shut`).
  A malformed request line gets a real HTTP/1.x response (it got a bare body, HTTP/0.9's way).
* **A body read with** :meth:`GuardedHandler.read_paced` must keep coming: after
  ``head_seconds`` of grace from its head, at ``min_body_rate`` bytes a second on average
  (a body trickled a byte every ten seconds held a thread, a connection and its part of the
  receiver's memory budget for as long as the client liked; 256 such clients held them
  all). Past it the connection is shut, and while it waits it is one of the connections a
  new one can make room by shutting.
* **DNS rebinding is refused**: a server bound to a loopback address answers 421 to a request
  whose ``Host`` names another host (a web page that rebinds its own name to 127.0.0.1 would
  otherwise read the console, or write into the receiver). A server bound to any other
  address was opened to the network on purpose and takes any ``Host``.

Handlers derive from :class:`GuardedHandler`.
"""

from __future__ import annotations

import contextlib
import email.errors
import errno
import ipaddress
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

__all__ = ["EVICTED", "LATE", "GuardedHTTPServer", "GuardedHandler"]

_log = logging.getLogger(__name__)
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "127.0.0.1", "::1"})

#: why the server shut a connection (:meth:`GuardedHTTPServer.shut_why`): to make room for a
#: new one past the cap, or because its head or body did not arrive in time
EVICTED, LATE = "evicted", "late"


class GuardedHTTPServer(ThreadingHTTPServer):
    """See the module docstring. ``serve_forever`` as usual; ``server_close`` also stops the
    head-deadline watcher."""

    daemon_threads = True
    max_connections = 256
    head_seconds = 30.0
    min_body_rate = 16 << 10  # bytes a second a body must average once its grace is over

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._guard = threading.Lock()
        self._open = 0
        self._waiting: dict[socket.socket, float] = {}  # connection -> deadline of its head
        self._shut: dict[socket.socket, str] = {}  # connections this server shut, and why
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None
        self.loopback = _is_loopback(address[0])
        super().__init__(address, handler)  # (closes the server when it cannot bind)

    # -- connection cap --------------------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        evicted = None
        with self._guard:
            full = self._open >= self.max_connections
            if full and self._waiting and self._open < 2 * self.max_connections:
                # the connection that has waited longest for a request head makes room: idle
                # or trickling connections cannot keep a prompt client out
                evicted = min(self._waiting, key=self._waiting.__getitem__)
                del self._waiting[evicted]
                self._shut[evicted] = EVICTED
                full = False
            if not full:
                self._open += 1
        if evicted is not None:
            with contextlib.suppress(OSError):
                evicted.shutdown(socket.SHUT_RDWR)
        if full:
            self.shutdown_request(request)  # closed at once: the client may retry later
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def get_request(self) -> tuple[Any, Any]:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                # out of descriptors: the connection waits in the backlog while others
                # close; accepting again at once spun the accept loop at a whole core
                self._closed.wait(0.05)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._guard:
                self._shut.pop(request, None)
            self._release()

    def shut_why(self, connection: socket.socket) -> str | None:
        """Why this server shut ``connection`` (:data:`EVICTED`, :data:`LATE`), or ``None``
        if it did not: tells a connection ended by the server from one its client ended."""
        with self._guard:
            return self._shut.get(connection)

    def _release(self) -> None:
        with self._guard:
            self._open -= 1

    # -- head deadline ---------------------------------------------------------------------

    def await_head(self, connection: socket.socket) -> None:
        """``connection`` now waits for a request head: shut it if none arrives in time."""
        self.await_bytes(connection, self.head_seconds)

    def await_bytes(self, connection: socket.socket, seconds: float) -> None:
        """``connection`` now waits for data from its client: shut it if the wait is not
        over (:meth:`arrived`) within ``seconds``."""
        with self._guard:
            self._waiting[connection] = time.monotonic() + seconds
            if self._watcher is None:
                self._watcher = threading.Thread(
                    target=self._watch, name="agent-replay-http-heads", daemon=True
                )
                self._watcher.start()

    def arrived(self, connection: socket.socket) -> None:
        """What ``connection`` waited for arrived (or it stopped waiting)."""
        with self._guard:
            self._waiting.pop(connection, None)

    def _watch(self) -> None:
        while not self._closed.wait(min(1.0, self.head_seconds / 4)):
            now = time.monotonic()
            with self._guard:
                late = [c for c, deadline in self._waiting.items() if deadline <= now]
                for connection in late:
                    del self._waiting[connection]
                    self._shut[connection] = LATE
            for connection in late:
                with contextlib.suppress(OSError):  # its blocked read returns
                    connection.shutdown(socket.SHUT_RDWR)

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a connection the client dropped, or a failed TLS handshake, is the client's problem:
        # logged at debug level, not printed to stderr with a traceback (socketserver's way)
        _log.debug("agent-replay: connection from %s failed", client_address, exc_info=True)

    # -- Host check ------------------------------------------------------------------------

    def host_allowed(self, host: str | None) -> bool:
        """Whether a request naming ``host`` (its ``Host`` header) may be answered."""
        if not self.loopback or host is None:
            return True  # opened to the network on purpose; or HTTP/1.0 without a Host
        name = host.strip().lower()
        if name.startswith("["):
            name = name[1:].partition("]")[0]
        elif name.count(":") == 1:
            name = name.partition(":")[0]
        return name in _LOOPBACK_NAMES or _is_loopback(name)


# what the head's parser reports for a header line without its colon (other defects, of a
# multipart body's declared shape say, are no concern of the head)
_BROKEN_HEAD = (
    email.errors.MissingHeaderBodySeparatorDefect,
    email.errors.FirstHeaderLineIsContinuationDefect,
)


class _HeadCutOff(Exception):
    """The request head ended before its blank line: the client closed its side mid-way, or
    the server shut the connection."""


class _HeadReader:
    """The handler's ``rfile`` while the standard library reads a request's header lines:
    a line that ends without its line end (the connection's end of input) raises
    :class:`_HeadCutOff`. The standard library takes the end of input for the blank line that
    ends a head, and answered what was left of a head cut off as a complete request."""

    def __init__(self, rfile: Any) -> None:
        self.rfile = rfile

    def readline(self, size: int = -1) -> bytes:
        line = self.rfile.readline(size)
        if not line.endswith(b"\n") and (size < 0 or len(line) < size):
            raise _HeadCutOff  # (a line as long as asked for is the parser's to refuse)
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rfile, name)


class GuardedHandler(BaseHTTPRequestHandler):
    """A request handler of a :class:`GuardedHTTPServer` (see there)."""

    server: GuardedHTTPServer
    raw_requestline: bytes  # (set by the standard library's handle_one_request)

    _head_at = 0.0  # when the request head being served arrived (monotonic)
    # the standard library's default, HTTP/0.9, stays the request's version until its request
    # line is parsed; an error answered before (a malformed request line, an HTTP version
    # past 1.x such as an HTTP/2 client's preface) was written in HTTP/0.9's way: a bare body,
    # without a status line or headers
    default_request_version = "HTTP/1.0"

    def handle_one_request(self) -> None:
        self.server.await_head(self.connection)
        try:
            super().handle_one_request()
        finally:
            self.server.arrived(self.connection)

    def parse_request(self) -> bool:
        parsed: bool | None = None  # None: the head was cut off before its end
        if self.raw_requestline.endswith(b"\n"):
            reader, self.rfile = self.rfile, cast(Any, _HeadReader(self.rfile))
            try:
                parsed = super().parse_request()
            except _HeadCutOff:
                pass
            finally:
                self.rfile = reader
        else:  # the request line itself was cut off (its state, as parse_request sets it)
            self.command, self.request_version = "", self.default_request_version
            self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        self.server.arrived(self.connection)
        self._head_at = time.monotonic()
        if parsed is None:
            self.close_connection = True
            why = self.server.shut_why(self.connection)
            if why is not None:
                self.connection_shut(why)  # the server shut it: nobody to answer
            else:
                self.send_error(400, "Bad Request", "the request head was cut off before its end")
            return False
        if parsed and len(self.headers.get_all("Host") or ()) > 1:  # RFC 9112 3.2
            self.close_connection = True
            self.send_error(400, "Bad Request", "more than one Host header")
            return False
        if parsed and not self.server.host_allowed(self.headers.get("Host")):
            self.close_connection = True
            self.send_error(421, "Misdirected Request", "this server answers its own address only")
            return False
        if parsed and any(isinstance(d, _BROKEN_HEAD) for d in self.headers.defects):
            # a header line without its colon: a malformed head (it was read as a request
            # without those headers)
            self.close_connection = True
            self.send_error(400, "Bad Request", "the request head is incomplete or malformed")
            return False
        return parsed

    def connection_shut(self, why: str) -> None:
        """The server shut this connection in the middle of a request (``why``:
        :data:`EVICTED` or :data:`LATE`): it is not answered. For subclasses to count."""

    def read_paced(self, size: int, received: int, *, line: bool = False) -> bytes:
        """What has arrived of the request body, up to ``size`` bytes (a whole line of at
        most ``size`` with ``line=True``: chunk sizes), of which ``received`` bytes came
        before, at the server's pace (see the module docstring). Empty when the client
        closed, or was too slow and its connection was shut."""
        server = self.server
        allowance = (received + (size if line else 1)) / server.min_body_rate
        due = self._head_at + server.head_seconds + allowance
        server.await_bytes(self.connection, due - time.monotonic())
        try:
            return self.rfile.readline(size) if line else self.rfile.read1(size)
        finally:
            server.arrived(self.connection)


def _is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
