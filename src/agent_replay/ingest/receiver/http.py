"""OTLP/HTTP: ``POST /v1/traces`` and ``POST /v1/logs`` on the standard library's threading
HTTP server (HTTP/1.1, keep-alive).

Requests: ``Content-Type: application/x-protobuf`` or ``application/json`` (the response uses
the same), optional ``Content-Encoding`` ``gzip``, ``deflate`` (also named ``zlib``) or
``zstd`` (with a zstd codec, see :mod:`agent_replay.ingest.compression`), ``Content-Length``
or chunked bodies.
Responses, as the OTLP specification says: 200 with an ``Export*ServiceResponse`` (a partial
success names the rejected records); 400 for a body that is not OTLP, with a
``google.rpc.Status`` (protobuf, or its JSON form for JSON requests); 401 without the bearer
token when one is configured; 404 / 405 for other paths and methods; 413 beyond the body limit
(before reading the body when ``Content-Length`` says so, after inflating it otherwise); 415
for another content type or encoding; 429 / 503 with ``Retry-After`` under overload or while
draining. A failing request never stops the server: each connection has its own thread.
TLS is optional (``ssl_context``); the handshake runs on the connection's thread.
"""

from __future__ import annotations

import json
import logging
import math
import ssl
import threading
from http import HTTPStatus
from typing import Any

from google.rpc.status_pb2 import Status

from ...httpserver import EVICTED, LATE, GuardedHandler, GuardedHTTPServer
from .core import (
    LOGS,
    TRACES,
    BadRequest,
    Hold,
    NotImplementedCoding,
    Receiver,
    ReceiverError,
    TooLarge,
    UnsupportedMediaType,
)

__all__ = ["OTLPHTTPServer", "parse_address"]

_log = logging.getLogger(__name__)
_PATHS = {"/v1/traces": TRACES, "/v1/logs": LOGS}
_PROTOBUF = ("application/x-protobuf", "application/protobuf")
_GRPC_CODES = {
    "INVALID_ARGUMENT": 3,
    "RESOURCE_EXHAUSTED": 8,
    "UNAVAILABLE": 14,
    "UNAUTHENTICATED": 16,
    "INTERNAL": 13,
    "NOT_FOUND": 5,
    "UNIMPLEMENTED": 12,
}


def parse_address(address: str, default_port: int) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6; a bare host takes ``default_port``)."""
    text = address.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    try:
        return host or "127.0.0.1", int(port) if port else default_port
    except ValueError:
        raise ValueError(f"bad address {address!r}: expected HOST:PORT") from None


# what a connection the HTTP server shut mid-request is counted as in the summary's errors
_SHUT_KINDS = {EVICTED: "Evicted", LATE: "TooSlow"}
_H2_PREFACE = "PRI * HTTP/2.0"  # the request line an HTTP/2 client (gRPC) begins with
_H2_EXPLAIN = (
    "this is the OTLP/HTTP port (HTTP/1.1); an HTTP/2 client, such as an OTLP/gRPC exporter, "
    "goes to the receiver's gRPC port (4317 by default), or set its protocol to http/protobuf"
)


def _error_kind(status: int) -> str:
    """An HTTP status as a summary's error kind: 400 BadRequest, 505 HTTPVersionNotSupported."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP{status}"
    return "".join(phrase.replace("-", " ").split())


_READ_BYTES = 64 << 10  # a body is read and counted this much at a time
_CHUNK_LINE = 4096  # the longest chunk-size or trailer line taken (with its extensions)


class _Handler(GuardedHandler):
    protocol_version = "HTTP/1.1"
    server_version = "agent-replay"
    timeout = 30  # an idle keep-alive connection is closed after this (seconds)
    server: OTLPHTTPServer
    # what the standard library answers itself (a malformed request line, 431 for oversize
    # headers, 501 for an unknown method) is a JSON Status like every other error, not an
    # HTML page (send_error HTML-escapes both fields, so no quote can break the JSON)
    error_content_type = "application/json"
    error_message_format = '{"code": 3, "message": "%(code)d %(message)s: %(explain)s"}'

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(self.timeout)
            # a connection in its handshake waits for its client like one waiting for a
            # request head: a new connection past the cap can shut it (connections that
            # never finished a handshake kept every prompt HTTPS client out)
            self.server.await_head(self.request)
            try:
                self.request.do_handshake()
            except (OSError, ssl.SSLError):
                self.close_connection = True
                raise
            finally:
                self.server.arrived(self.request)
        super().setup()

    def handle_expect_100(self) -> bool:
        """``Expect: 100-continue``: the final status at once, instead of 100, for a request
        that will be refused whatever its body (another path, no token, another content
        type, a declared length over the cap): a client told to go on uploads into a
        connection that is being closed, and may see a reset instead of the answer."""
        if self.command != "POST":
            return super().handle_expect_100()
        receiver = self.server.receiver
        content_type, as_json = self._content_type()
        self.close_connection = True  # (until 100 is sent: the body stays unread)
        try:
            if self._signal(content_type, as_json) is None:
                return False
            length = (self.headers.get("Content-Length") or "").strip()
            cap = receiver.config.max_body_bytes
            if length.isascii() and length.isdigit() and int(length) > cap:
                raise TooLarge(f"body of {length} bytes exceeds the {cap}-byte limit")
        except ReceiverError as error:
            receiver.count_error(error)
            self._error(error, as_json)
            return False
        self.close_connection = False
        return super().handle_expect_100()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What the standard library and :class:`GuardedHandler` answer themselves (a
        malformed request line or head, 431, 505): counted in the summary like the receiver's
        own errors (they were not)."""
        receiver = self.server.receiver
        receiver.count(_error_kind(code))
        if code == HTTPStatus.HTTP_VERSION_NOT_SUPPORTED and self.requestline == _H2_PREFACE:
            explain = _H2_EXPLAIN
            if not self.server.warned_h2:
                self.server.warned_h2 = True
                _log.warning(
                    "agent-replay: an HTTP/2 client (a gRPC exporter?) connected to the OTLP/HTTP "
                    "port %d from %s: answered 505; point it at the gRPC port or have it send "
                    "http/protobuf",
                    self.server.port,
                    self.client_address[0],
                )
        super().send_error(code, message, explain)

    def connection_shut(self, why: str) -> None:
        self.server.receiver.count(_SHUT_KINDS.get(why, why))

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s %s", self.address_string(), format % args)

    # -- plumbing ---------------------------------------------------------------------------

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, error: ReceiverError, as_json: bool) -> None:
        code = _GRPC_CODES.get(error.grpc_code, 2)
        headers = {}
        if error.retry_after is not None:
            headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
        if error.http_status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="agent-replay"'
        if as_json:
            body = json.dumps({"code": code, "message": error.message}).encode()
            self._send(error.http_status, body, "application/json", headers)
        else:
            body = Status(code=code, message=error.message).SerializeToString()
            self._send(error.http_status, body, "application/x-protobuf", headers)

    def _read_body(self, limit: int, hold: Hold) -> bytes:
        lengths = {value.strip() for value in self.headers.get_all("Content-Length") or ()}
        codings = [
            coding.strip().lower()
            for value in self.headers.get_all("Transfer-Encoding") or ()
            for coding in value.split(",")
            if coding.strip()
        ]
        if codings and codings != ["chunked"]:
            # chunked, alone: anything else (gzip under it, chunked not last) would be read
            # as something it is not (RFC 9112 6.1); the body is unread, the connection gone
            self.close_connection = True
            raise NotImplementedCoding(
                f"unsupported Transfer-Encoding {', '.join(codings)!r} (only chunked; "
                "compress with Content-Encoding)"
            )
        chunked = bool(codings)
        if len(lengths) > 1 or (chunked and lengths):
            # where the body ends is ambiguous (RFC 9112 6.3; a request-smuggling pattern
            # behind a proxy that reads it the other way): refused, connection closed
            self.close_connection = True
            raise BadRequest("conflicting Content-Length / Transfer-Encoding headers")
        if chunked:
            return self._read_chunked(limit, hold)
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            self.close_connection = True
            raise BadRequest("Content-Length (or chunked encoding) is required")
        length_text = length_header.strip()
        if not (length_text.isascii() and length_text.isdigit()):  # 1*DIGIT (RFC 9110 8.6)
            self.close_connection = True
            raise BadRequest(f"bad Content-Length {length_header!r}")
        length = int(length_text)
        if length > limit:
            self.close_connection = True  # the body stays unread: the connection cannot be reused
            raise TooLarge(f"body of {length} bytes exceeds the {limit}-byte limit")
        # counted as it arrives (429 once the requests together would hold too much): what
        # a client declares is not held until it is sent, so a client trickling a large body
        # holds only what it sent, not the whole budget
        body = bytearray()
        while len(body) < length:
            chunk = self.read_paced(min(_READ_BYTES, length - len(body)), len(body))
            if not chunk:
                break
            body += chunk
            hold.grow(len(body))
        if len(body) != length:
            self.close_connection = True
            raise BadRequest("body shorter than Content-Length")
        return bytes(body)

    def _read_chunked(self, limit: int, hold: Hold) -> bytes:
        body = bytearray()  # one buffer: a list of many tiny chunks cost 70 times their size
        while True:
            size = self._chunk_size(self._chunk_line(len(body)))
            if size == 0:
                while self._chunk_line(len(body)) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(body)
            if len(body) + size > limit:
                self.close_connection = True
                raise TooLarge(f"chunked body exceeds the {limit}-byte limit")
            end = len(body) + size
            while len(body) < end:
                piece = self.read_paced(min(_READ_BYTES, end - len(body)), len(body))
                if not piece:
                    self.close_connection = True
                    raise BadRequest("chunked body cut short")
                body += piece
                hold.grow(len(body))
            if self._chunk_line(len(body)) not in (b"\r\n", b"\n"):  # chunk data ends there
                self.close_connection = True
                raise BadRequest("malformed chunked body (no line end after a chunk)")

    def _chunk_line(self, received: int) -> bytes:
        """One line of a chunked body's framing: a line longer than that is refused, never
        read in part (1,100 leading zeros were read as the last chunk, and the rest of the
        body as trailers: answered 200 for half a body)."""
        line = self.read_paced(_CHUNK_LINE + 1, received, line=True)
        if len(line) > _CHUNK_LINE and not line.endswith(b"\n"):
            self.close_connection = True
            raise BadRequest(f"chunked body: a line longer than {_CHUNK_LINE} bytes")
        return line

    def _chunk_size(self, line: bytes) -> int:
        """A chunk-size line's size: 1*HEXDIG, before any extension (RFC 9112 7.1)."""
        digits = line.split(b";", 1)[0].strip()
        if not digits or digits.strip(b"0123456789abcdefABCDEF"):
            self.close_connection = True
            raise BadRequest("malformed chunked body (bad chunk size)")
        return int(digits, 16)

    # -- methods ----------------------------------------------------------------------------

    def do_POST(self) -> None:
        with self.server.receiver.receiving() as began:
            self._post(began)

    def _content_type(self) -> tuple[str, bool]:
        """The request's media type, and whether it is OTLP/JSON."""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        return content_type, content_type == "application/json"

    def _signal(self, content_type: str, as_json: bool) -> str | None:
        """The signal the request posts, after what its head alone decides: another path is
        answered 404 here (``None``); a missing token or another content type raises."""
        signal = _PATHS.get(self.path.split("?", 1)[0])
        if signal is None:
            self.close_connection = True
            self._send(404, b"not found: use /v1/traces or /v1/logs\n", "text/plain")
            return None
        self.server.receiver.check_token(self.headers.get("Authorization"))
        if not as_json and content_type not in _PROTOBUF:
            self.close_connection = True
            raise UnsupportedMediaType(
                f"unsupported Content-Type {content_type!r}: use application/x-protobuf "
                "or application/json"
            )
        return signal

    def _post(self, began: bool) -> None:
        receiver = self.server.receiver
        content_type, as_json = self._content_type()
        body_read = False
        try:
            signal = self._signal(content_type, as_json)
            if signal is None:
                return
            with receiver.holding() as hold:
                body = self._read_body(receiver.config.max_body_bytes, hold)
                body_read = True
                body = receiver.decompress(body, self.headers.get("Content-Encoding"), hold)
                with receiver.admit(in_progress=began):
                    if as_json:
                        response = receiver.export_json(signal, body)
                    else:
                        response = receiver.export_proto(signal, body)
            self._send(200, response, "application/json" if as_json else "application/x-protobuf")
        except ReceiverError as error:
            why = self.server.shut_why(self.connection)
            if why is not None:  # the server shut it (too slow, or to make room for another):
                self.close_connection = True  # a body cut short is no bad request, and
                self.connection_shut(why)  # nobody is left to answer
                return
            if not body_read:  # refused before its body was read (401): the rest of it would
                self.close_connection = True  # be taken for the next request on the connection
            receiver.count_error(error)
            self._error(error, as_json)
        except (TimeoutError, ConnectionError, ssl.SSLError):  # the client went (over TLS,
            self.close_connection = True  # an SSLEOFError): nobody to answer, nothing wrong
        except Exception as exc:  # a bug must cost one request, not the server
            _log.exception("agent-replay: request failed")
            self.close_connection = True
            self._error(ReceiverError(f"internal error: {type(exc).__name__}"), as_json)

    def _not_allowed(self) -> None:
        self.close_connection = True
        self._send(
            405,
            b"method not allowed: POST /v1/traces or /v1/logs\n",
            "text/plain",
            {"Allow": "POST"},
        )

    # every other method, HEAD and OPTIONS (a CORS preflight) included: 405, not the 501
    # "Unsupported method" the standard library answers for a method with no handler
    do_GET = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = (
        _not_allowed
    )


class OTLPHTTPServer(GuardedHTTPServer):
    """The OTLP/HTTP listener (connections capped, request heads on a deadline, other hosts'
    names refused on loopback: :mod:`agent_replay.httpserver`). ``serve_forever`` in a
    thread; ``shutdown`` stops accepting."""

    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        receiver: Receiver,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        self.receiver = receiver
        self.warned_h2 = False  # an HTTP/2 client was told, in the log, where to go
        if ssl_context is not None:
            # handshake on the connection's thread, not in the accept loop
            self.socket = ssl_context.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server_address[1]

    def start(self) -> OTLPHTTPServer:
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="agent-replay-http",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting connections (requests already being handled finish)."""
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(5)
