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
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

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


def _export(receiver: Receiver, signal: str, request: Any, context: grpc.ServicerContext) -> Any:
    try:
        metadata = dict(context.invocation_metadata() or ())
        receiver.check_token(metadata.get("authorization"))
        with receiver.admit():
            return receiver.export_message(signal, request)
    except ReceiverError as error:
        receiver.count_error(error)
        _abort(context, error)


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _export(self.receiver, TRACES, request, context)


class _Logs(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _export(self.receiver, LOGS, request, context)


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
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(receiver), self._server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_Logs(receiver), self._server)
        if credentials is None:
            self.port = self._server.add_insecure_port(address)
        else:
            self.port = self._server.add_secure_port(address, credentials)
        if not self.port:
            raise OSError(f"cannot listen for gRPC on {address}")

    def start(self) -> OTLPGrpcServer:
        self._server.start()
        return self

    def stop(self, grace: float = 10.0) -> None:
        """Stop accepting calls; calls in progress get ``grace`` seconds to finish."""
        self._server.stop(grace).wait(math.ceil(grace) + 1)
