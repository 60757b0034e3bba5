"""The OTLP receiver behind ``agent-replay collect``: OTLP/HTTP and OTLP/gRPC into a store.

:class:`Collector` runs both transports over one :class:`Receiver`::

    with CheckpointStore("runs.sqlite") as store, Collector(store).start() as collector:
        collector.wait()          # until stop() or SIGTERM (see the collect command)

Every export is acknowledged only after its spans are committed to disk; trajectories are
assembled in the background when a trace's root span arrives or the trace goes idle. On
:meth:`Collector.stop` the listeners stop accepting, requests in progress finish, and every
waiting trace is assembled (drain). Bearer-token auth and TLS are off unless configured.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from ...store import CheckpointStore
from .core import Receiver, ReceiverConfig
from .http import OTLPHTTPServer, parse_address

__all__ = [
    "DEFAULT_GRPC",
    "DEFAULT_HTTP",
    "Collector",
    "Receiver",
    "ReceiverConfig",
    "TLSConfig",
    "is_loopback",
]

_log = logging.getLogger(__name__)
DEFAULT_HTTP = "127.0.0.1:4318"
DEFAULT_GRPC = "127.0.0.1:4317"


@dataclass(frozen=True)
class TLSConfig:
    """Server certificate chain and key (PEM files) for both transports."""

    cert_file: Path
    key_file: Path


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts local connections."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Collector:
    """Both OTLP transports over one receiver. Start it, then :meth:`wait` or :meth:`stop`.

    ``http`` / ``grpc`` are ``host:port`` (port 0 picks a free port; ``None`` disables the
    transport). Thread-safe: :meth:`stop` may be called from a signal handler's thread.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        http: str | None = DEFAULT_HTTP,
        grpc: str | None = DEFAULT_GRPC,
        config: ReceiverConfig | None = None,
        tls: TLSConfig | None = None,
    ) -> None:
        self.receiver = Receiver(store, config)
        self._http_address = http
        self._grpc_address = grpc
        self._tls = tls
        self.http_server: OTLPHTTPServer | None = None
        self.grpc_server = None
        self._stop_requested = threading.Event()
        self._stopped = False
        self._stop_lock = threading.Lock()

    @property
    def http_port(self) -> int | None:
        return None if self.http_server is None else self.http_server.port

    @property
    def grpc_port(self) -> int | None:
        return None if self.grpc_server is None else self.grpc_server.port

    def insecure_exposure(self) -> list[str]:
        """Listeners that accept non-local connections without a token (worth a warning)."""
        if self.receiver.config.token:
            return []
        return [
            address
            for address in (self._http_address, self._grpc_address)
            if address is not None and not is_loopback(parse_address(address, 0)[0])
        ]

    def start(self) -> Collector:
        """Bind both listeners and start serving; raises ``OSError`` if a port is taken."""
        self.receiver.start()
        try:
            if self._http_address is not None:
                context = None
                if self._tls is not None:
                    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                    context.load_cert_chain(self._tls.cert_file, self._tls.key_file)
                host, port = parse_address(self._http_address, 4318)
                self.http_server = OTLPHTTPServer((host, port), self.receiver, context).start()
            if self._grpc_address is not None:
                from .grpc import OTLPGrpcServer  # grpcio loads only when gRPC is wanted

                credentials = None
                if self._tls is not None:
                    import grpc

                    credentials = grpc.ssl_server_credentials(
                        [(self._tls.key_file.read_bytes(), self._tls.cert_file.read_bytes())]
                    )
                host, port = parse_address(self._grpc_address, 4317)
                target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                self.grpc_server = OTLPGrpcServer(target, self.receiver, credentials).start()
        except BaseException:
            self.stop(grace=0)
            raise
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Block until :meth:`request_stop` (or ``timeout``); returns whether it was asked."""
        return self._stop_requested.wait(timeout)

    def request_stop(self) -> None:
        """Ask :meth:`wait` to return (safe from a signal handler)."""
        self._stop_requested.set()

    def stop(self, grace: float = 10.0) -> None:
        """Drain: stop accepting, finish requests in progress, assemble what is waiting."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        self._stop_requested.set()
        if self.http_server is not None:
            self.http_server.stop()
        if self.grpc_server is not None:
            self.grpc_server.stop(grace)
        self.receiver.drain(timeout=max(grace, 1.0))

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
