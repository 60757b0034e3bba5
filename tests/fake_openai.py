"""What a fake OpenAI server answers in the offline tests of the real ``openai`` client (a JSON
body, or the server-sent events that stream it), and a local HTTP server to play one on
loopback (for clients that must really connect)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2

from weather_run import ANSWER, CALL

#: the error bodies the OpenAI API answers a failed request with, by HTTP status
API_ERRORS = {
    500: {"message": "The server had an error", "type": "server_error", "code": None},
    429: {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"},
}
#: the event a stream that fails on the server's side ends in: a chunk with an ``error`` key
STREAM_ERROR = {"error": {**API_ERRORS[500], "param": None}}


def chat_completion(
    number: int, model: str, message: dict[str, Any], finish: str, usage: tuple[int, int]
) -> dict[str, Any]:
    """A Chat Completions response body: one choice, ``usage`` = (prompt, completion) tokens."""
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }


def chat_chunks(body: dict[str, Any], *, usage: bool) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` s that stream ``body`` (a :func:`chat_completion`) as the API
    does: the role first (with the first tool call's id and name when the message only calls
    tools), the text in pieces of 8 characters, each tool call's arguments in two halves under
    its ``index`` (a later call's id and name in a chunk of its own), the finish reason in a
    chunk with an empty delta; with ``usage`` (``stream_options={"include_usage": True}``)
    every chunk has ``"usage": null`` and a last chunk without choices carries the usage."""
    (choice,) = body["choices"]
    message, text = choice["message"], choice["message"].get("content") or ""
    calls = message.get("tool_calls") or []
    deltas: list[dict[str, Any]] = [
        {"role": "assistant", "content": "" if text or not calls else None, "refusal": None}
    ]
    deltas += [{"content": text[i : i + 8]} for i in range(0, len(text), 8)]
    for index, call in enumerate(calls):
        function, arguments = call["function"], call["function"]["arguments"]
        opened = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": function["name"], "arguments": ""},
        }
        if index == 0 and not text:
            deltas[0]["tool_calls"] = [opened]
        else:
            deltas.append({"tool_calls": [opened]})
        half = len(arguments) // 2
        deltas += [
            {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
            for piece in (arguments[:half], arguments[half:])
        ]
    head = {key: body[key] for key in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    if usage:
        head["usage"] = None
    finish = choice["finish_reason"]
    chunks = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
        for delta, reason in [*((d, None) for d in deltas), ({}, finish)]
    ]
    if usage:
        chunks.append({**head, "choices": [], "usage": body["usage"]})
    return chunks


def sse_events(chunks: list[dict[str, Any]]) -> list[bytes]:
    """``chunks`` as the events of a ``text/event-stream`` body: ``data: {chunk}`` each, then
    ``data: [DONE]``."""
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


def answer(sent: dict[str, Any], body: dict[str, Any]) -> httpx2.Response:
    """The response to the request ``sent`` (its JSON): ``body`` as JSON, or streamed as
    server-sent events when the request asked for a stream (usage included when it asked
    for that with ``stream_options``)."""
    if not sent.get("stream"):
        return httpx2.Response(200, json=body)
    usage = bool((sent.get("stream_options") or {}).get("include_usage"))
    return httpx2.Response(
        200,
        content=b"".join(sse_events(chat_chunks(body, usage=usage))),
        headers={"content-type": "text/event-stream"},
    )


def send_json(handler: BaseHTTPRequestHandler, payload: Any, status: int = 200) -> None:
    """Answer the request ``handler`` is serving with ``payload`` as JSON."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def breaking_stream(
    body: dict[str, Any], *, keep: int | None = None, error: dict[str, Any] | None = None
) -> type[BaseHTTPRequestHandler]:
    """A server that answers every request with ``body`` (a :func:`chat_completion`) streamed
    with usage; with ``keep``, only its first ``keep`` events, then ``error`` as one more event,
    or, without one, it closes the connection before the end of the body it announced the
    length of (the client's ``httpx2`` raises ``RemoteProtocolError``, which ``openai`` raises
    as ``APIConnectionError``)."""
    events = sse_events(chat_chunks(body, usage=True))
    sent = b"".join(events[:keep])
    if error is not None:
        sent += f"data: {json.dumps(error)}\n\n".encode()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            whole = len(sent) if error is not None else len(b"".join(events))
            self.send_header("Content-Length", str(whole))
            self.end_headers()
            self.wfile.write(sent)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port; yields the OpenAI-style base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # a short poll interval: shutdown() waits for the next poll
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def weather_api(model: str) -> httpx2.MockTransport:
    """The OpenAI API of the weather run (``weather_run``), answering as ``model``: a
    ``get_weather`` call (12 + 5 tokens) until the last message sent is the tool's, then the
    answer (20 + 6); as JSON, or as server-sent events when the request streams (:func:`answer`).
    Sync and async clients alike can use it."""

    def handle(request: httpx2.Request) -> httpx2.Response:
        sent = json.loads(request.content)
        if sent["messages"][-1]["role"] == "tool":
            message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
            body = chat_completion(2, model, message, "stop", (20, 6))
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [CALL]}
            body = chat_completion(1, model, message, "tool_calls", (12, 5))
        return answer(sent, body)

    return httpx2.MockTransport(handle)


def refusing(
    status: int, api: httpx2.MockTransport, *, times: int | None = None
) -> tuple[httpx2.MockTransport, list[httpx2.Request]]:
    """``api`` behind a server that refuses the first ``times`` requests (all when ``None``)
    with ``status`` and its error body (``API_ERRORS``), asking a client that retries to retry
    after a millisecond; and the list of every request it was sent."""
    requests: list[httpx2.Request] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        requests.append(request)
        if times is None or len(requests) <= times:
            body = {"error": {**API_ERRORS[status], "param": None}}
            return httpx2.Response(status, json=body, headers={"retry-after-ms": "1"})
        return api.handler(request)

    return httpx2.MockTransport(handle), requests
