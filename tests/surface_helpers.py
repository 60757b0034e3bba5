"""Helpers shared by the report, console, CLI and gate tests (tests/ is on sys.path)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# -- reports: every report a test produces is validated against the shipped schema ------------
import jsonschema  # dev extra; imported here so a missing install fails loudly
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from agent_replay.report.schema import load_schema

XSS_SCRIPT = "<script>window.__pwned = 'script'; alert(1)</script>"
XSS_IMG = "<img src=x onerror=\"window.__pwned = 'img'; alert(2)\">"
XSS_SVG = "</title></text><svg onload=\"window.__pwned='svg'\"></svg>"


def assert_valid_report(data: dict) -> dict:
    """Validate against the shipped JSON Schema with jsonschema (never the fallback)."""
    jsonschema.Draft202012Validator(load_schema()).validate(data)
    return data


def evil_agent(ctx, question):
    """An agent whose names, agents and content are all script-injection payloads; it fails
    when step 0 draws the payload (verifier ``evil_verifier``)."""
    with ctx.agent(XSS_IMG):
        choice = ctx.llm(
            XSS_SCRIPT,
            produce=lambda: ctx.rng.choice(["good", "good", XSS_IMG]),
            prompt=XSS_SCRIPT + question,
        )
        ctx.tool(
            "lookup</script><script>window.__pwned='tool'</script>",
            produce=lambda: {"html": XSS_SVG, "echo": choice},
            q=choice,
        )
    return {"answer": choice}


def evil_verifier(result) -> float:
    return 1.0 if result.get("answer") == "good" else 0.0


class Receiver:
    """A tiny OTLP/HTTP trace receiver: decodes every request with the OTLP protobuf types."""

    def __init__(self):
        self.requests: list[ExportTraceServiceRequest] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                assert self.path == "/v1/traces"
                assert self.headers["Content-Type"] == "application/x-protobuf"
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def spans(self):
        return [
            span
            for request in self.requests
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]
