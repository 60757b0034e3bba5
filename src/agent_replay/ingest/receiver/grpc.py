"""OTLP/gRPC: ``TraceService/Export`` and ``LogsService/Export`` on grpcio.

grpcio decodes the request (and gzip or deflate, when the client compresses; grpcio has no zstd),
enforces the message size limit (RESOURCE_EXHAUSTED beyond it) and caps concurrent calls
(``maximum_concurrent_rpcs``, also RESOURCE_EXHAUSTED). Errors map to status codes as OTLP
specifies: INVALID_ARGUMENT for a request that cannot be used (not retried), UNAUTHENTICATED without
the bearer token, RESOURCE_EXHAUSTED / UNAVAILABLE with a ``google.rpc.RetryInfo`` in the trailing
metadata (``google.rpc.retryinfo-bin``, which the OpenTelemetry exporters honour) when the client
should retry. Partial success is reported in the response.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo

from .core import LOGS, TRACES, Receiver, ReceiverError

__all__ = ["OTLPGrpcServer"]


def _abort(context: grpc.ServicerContext, error: ReceiverError) -> None:
    if error.retry_after is not None:
        seconds = max(0.0, error.retry_after)
        delay = Duration(seconds=int(seconds), nanos=int((seconds % 1) * 1e9))
        context.set_trailing_metadata(
            (("google.rpc.retryinfo-bin", RetryInfo(retry_delay=delay).SerializeToString()),)
        )
    context.abort(getattr(grpc.StatusCode, error.grpc_code), error.message)


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
        self._server = grpc.server(
            ThreadPoolExecutor(
                max_workers=min(32, receiver.config.max_inflight),
                thread_name_prefix="agent-replay-grpc",
            ),
            maximum_concurrent_rpcs=receiver.config.max_inflight,
            options=[
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
