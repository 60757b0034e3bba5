"""Spans of a conversation whose every turn is its own trace, tied by
``gen_ai.conversation.id`` on the agent span (tests of storing such conversations)."""

import json

from agent_replay.mapping.assemble import assemble
from agent_replay.mapping.spans import NormalizedSpan

CONV = "conv-1"


def turn(n: int, *, content: bool = True, call: str | None = None, answers: str | None = None):
    """Spans of turn ``n`` (its own trace): an agent span, a chat span and, when ``answers``
    names a tool call an earlier turn requested, the tool span answering it."""
    trace = f"{n + 1:032x}"
    base = n * 100

    def span(k, parent, name, **attributes):
        return NormalizedSpan(
            trace_id=trace,
            span_id=f"{base + k:016x}",
            name=name,
            parent_span_id=None if parent is None else f"{base + parent:016x}",
            start_ns=base + k,
            end_ns=base + 50 - k,
            attributes=attributes,
        )

    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
    if content:
        question = [{"role": "user", "parts": [{"type": "text", "content": f"question {n}"}]}]
        parts = [{"type": "text", "content": f"answer {n}"}]
        if call:
            parts.append({"type": "tool_call", "id": call, "name": "lookup", "arguments": {}})
        chat["gen_ai.input.messages"] = json.dumps(question)
        chat["gen_ai.output.messages"] = json.dumps([{"role": "assistant", "parts": parts}])
    spans = [
        span(
            1,
            None,
            "invoke_agent a",
            **{
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "a",
                "gen_ai.conversation.id": CONV,
            },
        ),
        span(2, 1, "chat m", **chat),
    ]
    if answers:
        spans.append(
            span(
                3,
                1,
                "execute_tool lookup",
                **{
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "lookup",
                    "gen_ai.tool.call.id": answers,
                    "gen_ai.tool.call.result": "found",
                },
            )
        )
    return spans


TURNS = [
    turn(0),
    turn(1, content=False),  # a content-less step: a note and an index in the report
    turn(2, call="c1"),  # requests a call that ...
    turn(3, answers="c1"),  # ... the next trace answers
    turn(4, call="c2"),  # never answered
    turn(5),
    turn(6, call="c3", answers="c3"),  # asked and answered in one trace
]


def whole():
    """The session assembled from every span at once."""
    (trajectory,) = assemble([s for spans in TURNS for s in spans])
    return trajectory


def facts(step):
    """What a stored step says, its links to other steps included."""
    return (
        step.index,
        step.name,
        step.span_id,
        step.inputs,
        step.output_payload(),
        step.attributes,
    )


def otlp_document(spans) -> dict:
    """An OTLP/JSON request holding ``spans`` (string attributes only)."""
    out = []
    for s in spans:
        span = {
            "traceId": s.trace_id,
            "spanId": s.span_id,
            "name": s.name,
            "startTimeUnixNano": str(s.start_ns),
            "endTimeUnixNano": str(s.end_ns),
            "attributes": [
                {"key": k, "value": {"stringValue": v}} for k, v in s.attributes.items()
            ],
        }
        if s.parent_span_id:
            span["parentSpanId"] = s.parent_span_id
        out.append(span)
    return {"resourceSpans": [{"scopeSpans": [{"spans": out}]}]}
