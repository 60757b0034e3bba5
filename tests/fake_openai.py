"""What a fake OpenAI server answers in the offline tests of the real ``openai`` client."""

from __future__ import annotations

from typing import Any


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
