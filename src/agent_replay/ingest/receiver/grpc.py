"""OTLP/gRPC: ``TraceService/Export`` and ``LogsService/Export`` on grpcio.

grpcio decodes the request (and gzip or deflate, when the client compresses; grpcio has no zstd),
enforces the message size limit (RESOURCE_EXHAUSTED beyond it). Errors map to status codes as
OTLP specifies: INVALID_ARGUMENT for a request that cannot be used (not retried), UNAUTHENTICATED
without the bearer token, RESOURCE_EXHAUSTED / UNAVAILABLE with a ``google.rpc.RetryInfo`` in
the status's details when the client should retry (see :func:`_abort`). Calls beyond
``max_inflight`` reach a worker and are refused that way; grpcio's own cap on concurrent calls
(whose RESOURCE_EXHAUSTED has no RetryInfo, so that a Collector drops the data) is set well
above it, to bound memory only. Partial success is reported in the response.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import grpc
from google.protobuf.any_pb2 import Any
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status

from .core import LOGS, TRACES, Receiver, ReceiverError

__all__ = ["OTLPGrpcServer"]

#: gRPC workers beyond ``max_inflight``, that answer the calls over it
SPARE_WORKERS = 16
#: open gRPC connections at most (the HTTP listener's cap too), and how long one may idle
MAX_CONNECTIONS = 256
IDLE_SECONDS = 60


class _Status(NamedTuple):
    """What ``ServicerContext.abort_with_status`` takes (grpcio-status makes the same)."""

    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, bytes], ...]


def _abort(context: grpc.ServicerContext, error: ReceiverError) -> None:
    """End the call with ``error``'s status. One the client should retry carries a
    ``google.rpc.RetryInfo`` in the status's details (``grpc-status-details-bin``), where the
    Collector's exporter looks (it drops data refused RESOURCE_EXHAUSTED without it), and in
    ``google.rpc.retryinfo-bin``, where the Python exporter looks."""
    code = getattr(grpc.StatusCode, error.grpc_code)
    if error.retry_after is None:
        context.abort(code, error.message)
    seconds = max(0.0, error.retry_after)
    retry = RetryInfo(retry_delay=Duration(seconds=int(seconds), nanos=int(seconds % 1 * 1e9)))
    details = Any()
    details.Pack(retry)
    status = Status(code=code.value[0], message=error.message, details=[details])
    trailing = (
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", retry.SerializeToString()),
    )
    context.abort_with_status(_Status(code, error.message, trailing))


def _export(receiver: Receiver, signal: str, body: bytes, context: grpc.ServicerContext) -> bytes:
    """One ``Export`` call on its raw bytes: the token is checked first, and a request that is
    not the service's message is INVALID_ARGUMENT (grpcio's own deserializer would answer
    INTERNAL before the token is looked at)."""
    try:
        metadata = dict(context.invocation_metadata() or ())
        receiver.check_token(metadata.get("authorization"))
        with receiver.holding() as hold, receiver.admit():
            hold.grow(len(body))  # grpcio has read and inflated it already
            return receiver.export_proto(signal, body)
    except ReceiverError as error:
        receiver.count_error(error)
        _abort(context, error)
        raise  # not reached: abort raises


_SERVICES = {
    TRACES: "opentelemetry.proto.collector.trace.v1.TraceService",
    LOGS: "opentelemetry.proto.collector.logs.v1.LogsService",
}


def _service(receiver: Receiver, signal: str) -> grpc.GenericRpcHandler:
    def export(body: bytes, context: grpc.ServicerContext) -> bytes:
        return _export(receiver, signal, body, context)

    # no (de)serializers: the bytes go to the receiver as they came, and back
    handler = grpc.unary_unary_rpc_method_handler(export)
    return grpc.method_handlers_generic_handler(_SERVICES[signal], {"Export": handler})


class OTLPGrpcServer:
    """The OTLP/gRPC listener on ``address`` (``host:port``; port 0 picks a free one)."""

    def __init__(
        self,
        address: str,
        receiver: Receiver,
        credentials: grpc.ServerCredentials | None = None,
    ) -> None:
        limit = receiver.config.max_body_bytes
        # workers beyond the requests let in at once: a call past them is refused by the
        # receiver, with a RetryInfo, at once, rather than waiting in grpcio's queue
        workers = receiver.config.max_inflight + SPARE_WORKERS
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agent-replay-grpc"),
            maximum_concurrent_rpcs=2 * workers,
            options=[
                # as many connections as the HTTP listener takes, and idle ones closed: a
                # thousand idle HTTP/2 connections used up the process's file descriptors,
                # and neither transport could accept a prompt exporter's
                ("grpc.max_allowed_incoming_connections", MAX_CONNECTIONS),
                ("grpc.max_connection_idle_ms", IDLE_SECONDS * 1000),
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", 4 << 20),
                ("grpc.so_reuseport", 0),  # two receivers must not share a port silently
            ],
        )
        self._server.add_generic_rpc_handlers(
            (_service(receiver, TRACES), _service(receiver, LOGS))
        )
        try:
            if credentials is None:
                self.port = self._server.add_insecure_port(address)
            else:
                self.port = self._server.add_secure_port(address, credentials)
        except RuntimeError:  # newer grpcio raises where older ones returned 0
            self.port = 0
        if not self.port:
            raise OSError(
                f"cannot listen for gRPC on {address} (in use, or not an address of this host)"
            )

    def start(self) -> OTLPGrpcServer:
        self._server.start()
        return self

    def stop(self, grace: float = 10.0) -> None:
        """Stop accepting calls; calls in progress get ``grace`` seconds to finish."""
        self._server.stop(grace).wait(math.ceil(grace) + 1)
