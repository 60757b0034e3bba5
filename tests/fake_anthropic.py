"""What a fake Anthropic Messages API answers in the offline tests of the real ``anthropic``
client: a message body, or the server-sent events that stream the same message; or an error, as
the API refuses a request or breaks off a stream."""

from __future__ import annotations

import json
from typing import Any

import httpx2


def message(
    number: int,
    model: str,
    content: list[dict[str, Any]],
    stop_reason: str,
    usage: tuple[int, int],
) -> dict[str, Any]:
    """A Messages API response body: ``content`` blocks (``text``, ``tool_use``), ``usage`` =
    (input, output) tokens."""
    return {
        "id": f"msg_{number:02d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def stream_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events that stream ``body`` (a :func:`message`): text in chunks of 8 characters, a
    tool call's input as JSON in two halves, usage split between ``message_start`` and
    ``message_delta`` as the API does."""
    started = {**body, "content": [], "stop_reason": None}
    started["usage"] = {"input_tokens": body["usage"]["input_tokens"], "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": started}]
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                }
            )
            text = block["text"]
            deltas = [
                {"type": "text_delta", "text": text[i : i + 8]} for i in range(0, len(text), 8)
            ]
        else:  # tool_use
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {**block, "input": {}},
                }
            )
            arguments = json.dumps(block["input"])
            half = len(arguments) // 2
            deltas = [
                {"type": "input_json_delta", "partial_json": piece}
                for piece in (arguments[:half], arguments[half:])
            ]
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": body["usage"]["output_tokens"]},
        },
        {"type": "message_stop"},
    ]
    return events


def sse(events: list[dict[str, Any]]) -> bytes:
    """``events`` as a ``text/event-stream`` body."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def answer(sent: dict[str, Any], body: dict[str, Any]) -> httpx2.Response:
    """The response to the request ``sent`` (its JSON): ``body`` (a :func:`message`) as JSON,
    or its events when the request streams."""
    if not sent.get("stream"):
        return httpx2.Response(200, json=body)
    events = sse(stream_events(body))
    return httpx2.Response(200, content=events, headers={"content-type": "text/event-stream"})


#: the errors the Messages API answers a failed request with, by HTTP status
API_ERRORS = {
    500: {"type": "api_error", "message": "Internal server error"},
    529: {"type": "overloaded_error", "message": "Overloaded"},
}


def error_body(status: int) -> dict[str, Any]:
    """The body of the API's answer ``status`` (``API_ERRORS``)."""
    return {"type": "error", "error": API_ERRORS[status], "request_id": "req_01"}


def refusing(status: int) -> httpx2.MockTransport:
    """A Messages API that answers every request with ``status`` and its error body."""
    return httpx2.MockTransport(
        lambda request: httpx2.Response(
            status, json=error_body(status), headers={"request-id": "req_01"}
        )
    )


def failing_mid_stream(body: dict[str, Any], *, keep: int, status: int) -> httpx2.MockTransport:
    """A Messages API that streams ``body`` (a :func:`message`) with HTTP 200 but breaks off
    after its first ``keep`` events with an ``error`` event of ``status`` 's error, as the API
    reports an overload that comes once the stream has started."""
    events = [*stream_events(body)[:keep], {"type": "error", "error": API_ERRORS[status]}]
    return httpx2.MockTransport(
        lambda request: httpx2.Response(
            200, content=sse(events), headers={"content-type": "text/event-stream"}
        )
    )
