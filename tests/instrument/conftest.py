"""A scripted LLM API behind the real SDK clients' HTTP transport (httpx2.MockTransport).

Only the transport is fake: the real ``openai`` and ``anthropic`` clients build, send, parse
and stream. Every request is counted at the transport, so a test can say "zero HTTP calls" or
"exactly one".
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm must not fetch at import


class FakeLLMAPI:
    """Answers OpenAI (chat completions, responses, embeddings) and Anthropic (messages)
    requests.

    ``reply(body, n)`` returns the assistant text (or a dict with ``tool_call`` / ``text``)
    for the n-th request (1-based); the API wraps it in the right JSON or SSE shape. Requests
    are kept as ``(path, body)`` in ``requests``.
    """

    def __init__(self, reply: Callable[[dict[str, Any], int], Any] | None = None) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.reply = reply or (lambda body, n: f"answer {n}")

    # -- clients --------------------------------------------------------------------------

    def transport(self) -> Any:
        import httpx2

        return httpx2.MockTransport(self.handle)

    def openai(self) -> Any:
        import httpx2
        import openai

        return openai.OpenAI(
            api_key="sk-test",
            base_url="http://127.0.0.1:9/v1",
            http_client=httpx2.Client(transport=self.transport()),
            max_retries=0,
        )

    def async_openai(self) -> Any:
        import httpx2
        import openai

        return openai.AsyncOpenAI(
            api_key="sk-test",
            base_url="http://127.0.0.1:9/v1",
            http_client=httpx2.AsyncClient(transport=self.transport()),
            max_retries=0,
        )

    def anthropic(self) -> Any:
        import anthropic
        import httpx2

        return anthropic.Anthropic(
            api_key="sk-ant-test",
            base_url="http://127.0.0.1:9",
            http_client=httpx2.Client(transport=self.transport()),
            max_retries=0,
        )

    def async_anthropic(self) -> Any:
        import anthropic
        import httpx2

        return anthropic.AsyncAnthropic(
            api_key="sk-ant-test",
            base_url="http://127.0.0.1:9",
            http_client=httpx2.AsyncClient(transport=self.transport()),
            max_retries=0,
        )

    @property
    def count(self) -> int:
        return len(self.requests)

    # -- serving --------------------------------------------------------------------------

    def handle(self, request: Any) -> Any:
        import httpx2

        body = json.loads(request.content)
        path = request.url.path
        self.requests.append((path, body))
        answer = self.reply(body, len(self.requests))
        if isinstance(answer, str):
            answer = {"text": answer}
        n = len(self.requests)
        model = body.get("model", "model")
        ids = {"x-request-id": f"req_{n}", "request-id": f"req_{n}"}  # OpenAI's, Anthropic's
        if path.endswith("/embeddings"):
            return httpx2.Response(200, json=_embeddings(answer, model, n, body), headers=ids)
        if path.endswith("/chat/completions"):
            if body.get("stream"):
                return _sse(httpx2, None, _chat_chunks(answer, model, n))
            return httpx2.Response(200, json=_chat_completion(answer, model, n), headers=ids)
        if path.endswith("/responses"):
            response = _response(answer, model, n)
            if body.get("stream"):
                return _sse(httpx2, "type", _response_events(response, answer))
            return httpx2.Response(200, json=response, headers=ids)
        if path.endswith("/messages"):
            if body.get("stream"):
                return _sse(httpx2, "type", _anthropic_events(answer, model, n))
            return httpx2.Response(200, json=_anthropic_message(answer, model, n), headers=ids)
        return httpx2.Response(404, json={"error": {"message": f"no route {path}"}})


def _sse(httpx2: Any, event_key: str | None, events: list[dict[str, Any]]) -> Any:
    lines = []
    for event in events:
        if event_key is not None:
            lines.append(f"event: {event[event_key]}\n")
        lines.append(f"data: {json.dumps(event)}\n\n")
    if event_key is None:
        lines.append("data: [DONE]\n\n")
    return httpx2.Response(
        200, content="".join(lines).encode(), headers={"content-type": "text/event-stream"}
    )


def _embeddings(answer: dict[str, Any], model: str, n: int, body: dict[str, Any]) -> Any:
    # one vector per input text, [n / 10, i]: a new request gives new vectors; the reply's text
    # is not used (``encoding_format`` is ignored: floats, which the SDK takes as they are)
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    return {
        "object": "list",
        "model": model,
        "data": [
            {"object": "embedding", "index": i, "embedding": [n / 10, float(i)]}
            for i in range(len(texts))
        ],
        "usage": {"prompt_tokens": 3 * len(texts), "total_tokens": 3 * len(texts)},
    }


def _chat_completion(answer: dict[str, Any], model: str, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.get("text")}
    finish = "stop"
    if "tool_call" in answer:
        name, arguments = answer["tool_call"]
        message["tool_calls"] = [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1700000000 + n,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _chat_chunks(answer: dict[str, Any], model: str, n: int) -> list[dict[str, Any]]:
    text = answer.get("text") or ""
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)] or [""]
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 1, "model": model}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        for piece in pieces
    ]
    finish = "stop"
    if "tool_call" in answer:  # as the API streams one: id, type and name first, then arguments
        name, arguments = answer["tool_call"]
        text_args = json.dumps(arguments)
        half = len(text_args) // 2
        calls = [
            {"index": 0, "id": f"call_{n}", "type": "function", "function": {"name": name}},
            *(
                {"index": 0, "function": {"arguments": p}}
                for p in (text_args[:half], text_args[half:])
            ),
        ]
        chunks += [
            {**base, "choices": [{"index": 0, "delta": {"tool_calls": [c]}, "finish_reason": None}]}
            for c in calls
        ]
        finish = "tool_calls"
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return chunks


def _response(answer: dict[str, Any], model: str, n: int) -> dict[str, Any]:
    text = answer.get("text") or ""
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 1700000000 + n,
        "model": model,
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": f"msg_{n}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 11,
            "output_tokens": 6,
            "total_tokens": 17,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _response_events(response: dict[str, Any], answer: dict[str, Any]) -> list[dict[str, Any]]:
    text = answer.get("text") or ""
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": started}]
    for piece in [text[i : i + 4] for i in range(0, len(text), 4)]:
        events.append(
            {
                "type": "response.output_text.delta",
                "item_id": response["output"][0]["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
                "logprobs": [],
            }
        )
    events.append({"type": "response.completed", "response": response})
    for i, event in enumerate(events):
        event["sequence_number"] = i
    return events


def _anthropic_message(answer: dict[str, Any], model: str, n: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if answer.get("text"):
        content.append({"type": "text", "text": answer["text"]})
    stop = "end_turn"
    if "tool_call" in answer:
        name, arguments = answer["tool_call"]
        content.append({"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": arguments})
        stop = "tool_use"
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 7},
    }


def _anthropic_events(answer: dict[str, Any], model: str, n: int) -> list[dict[str, Any]]:
    text = answer.get("text") or ""
    message = _anthropic_message({"text": ""}, model, n)
    message["content"] = []
    message["stop_reason"] = None
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    for piece in [text[i : i + 3] for i in range(0, len(text), 3)]:
        events.append(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": piece},
            }
        )
    events += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 7},
        },
        {"type": "message_stop"},
    ]
    return events


@pytest.fixture
def api() -> FakeLLMAPI:
    return FakeLLMAPI()


@pytest.fixture
def served() -> Any:
    """``serve(api) -> base_url``: the same fake API on a real HTTP server on 127.0.0.1, for
    clients whose transport cannot be handed in (litellm)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import httpx2

    servers = []

    def serve(fake: FakeLLMAPI) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                request = httpx2.Request("POST", f"http://127.0.0.1{self.path}", content=body)
                response = fake.handle(request)
                payload = response.read()
                self.send_response(response.status_code)
                self.send_header("content-type", response.headers["content-type"])
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/v1"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def make_api() -> Callable[..., FakeLLMAPI]:
    return FakeLLMAPI
