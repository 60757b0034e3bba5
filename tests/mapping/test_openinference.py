"""The OpenInference dialect on hand-made spans and on the generated OpenInference fixture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_replay.ingest.otlp import read_otlp_json
from agent_replay.mapping import DIALECTS, NormalizedSpan, Role, map_span
from agent_replay.mapping.assemble import assemble
from agent_replay.model import StepKind

TRACE = "0" * 31 + "1"


def span(attributes: dict[str, Any], *, name: str = "span", span_id: str = "a" * 16, **kw):
    return NormalizedSpan(trace_id=TRACE, span_id=span_id, name=name, attributes=attributes, **kw)


LLM_ATTRIBUTES = {
    "openinference.span.kind": "LLM",
    "llm.system": "openai",
    "llm.model_name": "gpt-4o-mini-2024-07-18",
    "llm.invocation_parameters": '{"model": "gpt-4o-mini", "temperature": 0.2, "stream": false}',
    "llm.tools.0.tool.json_schema": json.dumps(
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "Get weather", "parameters": {}},
        }
    ),
    "llm.input_messages.0.message.role": "system",
    "llm.input_messages.0.message.content": "Be brief.",
    "llm.input_messages.1.message.role": "user",
    "llm.input_messages.1.message.content": "Weather?",
    "llm.input_messages.2.message.role": "assistant",
    "llm.input_messages.2.message.tool_calls.0.tool_call.id": "c0",
    "llm.input_messages.2.message.tool_calls.0.tool_call.function.name": "get_weather",
    "llm.input_messages.2.message.tool_calls.0.tool_call.function.arguments": '{"city": "Oslo"}',
    "llm.input_messages.3.message.role": "tool",
    "llm.input_messages.3.message.tool_call_id": "c0",
    "llm.input_messages.3.message.content": "snow",
    "llm.output_messages.0.message.role": "assistant",
    "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"city": "Paris"}',
    "llm.output_messages.0.message.tool_calls.1.tool_call.id": "c2",
    "llm.output_messages.0.message.tool_calls.1.tool_call.function.name": "get_weather",
    "llm.output_messages.0.message.tool_calls.1.tool_call.function.arguments": '{"city": "Rome"}',
    "llm.token_count.prompt": 57,
    "llm.token_count.completion": 15,
    "llm.token_count.total": 72,
    "llm.finish_reason": "tool_calls",
    "input.value": '{"this": "is only the fallback"}',
    "input.mime_type": "application/json",
}


def test_dialect_precedence_is_native_then_openinference_then_gen_ai():
    names = [name for name, _ in DIALECTS]
    assert names.index("openinference") < names.index("gen_ai")


def test_llm_span_becomes_an_llm_step_in_the_genai_parts_shape():
    mapped = map_span(span(LLM_ATTRIBUTES, name="ChatCompletion"))
    assert (mapped.role, mapped.kind, mapped.name) == (Role.STEP, StepKind.LLM, "ChatCompletion")
    assert mapped.dialects == ["openinference"]
    messages = mapped.inputs["messages"]
    assert messages[0] == {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]}
    assert messages[2]["parts"] == [
        {"type": "tool_call", "id": "c0", "name": "get_weather", "arguments": {"city": "Oslo"}}
    ]
    assert messages[3] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "c0", "response": "snow"}],
    }
    assert mapped.inputs["tools"] == [
        {"name": "get_weather", "description": "Get weather", "parameters": {}, "type": "function"}
    ]
    assert mapped.inputs["model"] == "gpt-4o-mini"
    assert "parameters" not in mapped.inputs  # kept beside the inputs, as every dialect does
    assert mapped.attributes["parameters"] == {"temperature": 0.2}  # "stream" is no knob
    (output,) = mapped.action
    assert "finish_reason" not in output  # kept in attributes, as every dialect does
    assert [p["arguments"]["city"] for p in output["parts"]] == ["Paris", "Rome"]
    assert mapped.requested_tool_calls == ["c1", "c2"]
    assert mapped.attributes == {
        "model": "gpt-4o-mini-2024-07-18",
        "provider": "openai",
        "input_tokens": 57,
        "output_tokens": 15,
        "total_tokens": 72,
        "finish_reasons": ["tool_calls"],
        "parameters": {"temperature": 0.2},
    }


def test_message_indices_are_numeric_and_gaps_are_tolerated():
    attrs = {"openinference.span.kind": "LLM"}
    for i in (10, 2, 0):  # 10 sorts before 2 as text; a gap where the SDK dropped attributes
        attrs[f"llm.input_messages.{i}.message.role"] = "user"
        attrs[f"llm.input_messages.{i}.message.content"] = f"m{i}"
    mapped = map_span(span(attrs))
    assert [m["parts"][0]["content"] for m in mapped.inputs["messages"]] == ["m0", "m2", "m10"]


def test_multimodal_contents_and_message_name():
    attrs = {
        "openinference.span.kind": "llm",  # lowercase appears in hand-written code
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.name": "alice",
        "llm.input_messages.0.message.contents.0.message_content.type": "text",
        "llm.input_messages.0.message.contents.0.message_content.text": "What is this?",
        "llm.input_messages.0.message.contents.1.message_content.type": "image",
        "llm.input_messages.0.message.contents.1.message_content.image.image.url": "http://x/y.png",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.contents.0.message_content.type": "reasoning",
        "llm.output_messages.0.message.contents.0.message_content.text": "hmm",
        "llm.output_messages.0.message.content": "A cat.",
    }
    mapped = map_span(span(attrs))
    (message,) = mapped.inputs["messages"]
    assert message["name"] == "alice"
    assert message["parts"] == [
        {"type": "text", "content": "What is this?"},
        {"type": "uri", "modality": "image", "uri": "http://x/y.png"},
    ]
    assert mapped.action[0]["parts"] == [
        {"type": "text", "content": "A cat."},
        {"type": "reasoning", "content": "hmm"},
    ]


def test_nested_message_form_reads_like_the_flattened_one():
    flat = map_span(span(LLM_ATTRIBUTES))
    nested_attrs = {
        k: v for k, v in LLM_ATTRIBUTES.items() if not k.startswith("llm.input_messages.")
    }
    nested_attrs["llm.input_messages"] = [
        {"message.role": "system", "message.content": "Be brief."},
        {"message": {"role": "user", "content": "Weather?"}},
        {
            "message.role": "assistant",
            "message.tool_calls": [
                {
                    "tool_call.id": "c0",
                    "tool_call.function.name": "get_weather",
                    "tool_call.function.arguments": '{"city": "Oslo"}',
                }
            ],
        },
        {"message.role": "tool", "message.tool_call_id": "c0", "message.content": "snow"},
    ]
    assert map_span(span(nested_attrs)).inputs == flat.inputs


def test_completions_api_prompts_and_choices():
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.prompts.0.prompt.text": "Say hi",
        "llm.choices.0.completion.text": "hi",
    }
    mapped = map_span(span(attrs))
    assert mapped.inputs == {
        "messages": [{"role": "user", "parts": [{"type": "text", "content": "Say hi"}]}]
    }
    assert mapped.action == [{"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}]


def test_llm_without_messages_falls_back_to_input_and_output_value():
    attrs = {
        "openinference.span.kind": "LLM",
        "input.value": '{"messages": [{"role": "user", "content": "hi"}]}',
        "input.mime_type": "application/json",
        "output.value": '{"not": "decoded"}',
        "output.mime_type": "text/plain",
    }
    mapped = map_span(span(attrs))
    assert mapped.inputs == {"messages": [{"role": "user", "content": "hi"}]}
    assert mapped.action == '{"not": "decoded"}'  # text/plain stays text


@pytest.mark.parametrize(
    "attrs,expected",
    [
        ({"tool.id": "call_1"}, ["call_1"]),
        ({"output.value": '{"tool_call_id": "call_2", "content": "ok"}'}, ["call_2"]),
        (
            {"output.value": '{"type": "tool", "data": {"content": "ok", "tool_call_id": "c3"}}'},
            ["c3"],
        ),
        ({"output.value": '"just text"'}, []),
        ({}, []),
    ],
    ids=["tool.id", "in-output", "langchain-toolmessage", "no-id", "nothing"],
)
def test_tool_call_id_from_tool_id_or_output_json(attrs, expected):
    base = {
        "openinference.span.kind": "TOOL",
        "tool.name": "lookup",
        "input.value": '{"q": 1}',
        "input.mime_type": "application/json",
        "output.mime_type": "application/json",
    }
    mapped = map_span(span({**base, **attrs}, name="ignored"))
    assert (mapped.role, mapped.kind, mapped.name) == (Role.STEP, StepKind.TOOL, "lookup")
    assert mapped.inputs == {"arguments": {"q": 1}}
    assert mapped.tool_call_ids == expected


def test_agent_and_chain_spans_are_containers():
    agent = map_span(
        span({"openinference.span.kind": "AGENT", "input.value": "task"}, name="planner")
    )
    assert (agent.role, agent.name, agent.inputs) == (Role.AGENT, "planner", "task")
    named = map_span(span({"openinference.span.kind": "AGENT", "agent.name": "bob"}, name="x"))
    assert (named.role, named.name, named.agent) == (Role.AGENT, "bob", "bob")
    chain = map_span(span({"openinference.span.kind": "CHAIN"}, name="RunnableSequence"))
    assert (chain.role, chain.name) == (Role.WORKFLOW, "RunnableSequence")
    # a prompt template formats the next llm call's messages: no step (regression)
    prompt = map_span(span({"openinference.span.kind": "PROMPT"}, name="ChatPromptTemplate"))
    assert (prompt.role, prompt.name) == (Role.WORKFLOW, "ChatPromptTemplate")


def test_only_langgraph_react_model_node_agent_names_no_agent():
    """openinference-langchain calls every run with "agent" in its name AGENT; the model node
    ``agent`` of ``create_react_agent`` is a node inside the agent, other agents stay agents."""

    def mapped(name: str, node: str | None) -> Any:
        metadata = json.dumps({"langgraph_node": node, "langgraph_step": 1} if node else {})
        attrs = {"openinference.span.kind": "AGENT", "metadata": metadata}
        return map_span(span(attrs, name=name))

    assert mapped("agent", "agent").role == Role.WORKFLOW
    assert mapped("agent", None).role == Role.AGENT  # not a LangGraph node
    assert mapped("research_agent", "research_agent").role == Role.AGENT  # a user's node


@pytest.mark.parametrize(
    "output",
    [
        {"type": "tool", "data": {"content": "rainy", "tool_call_id": "c1", "status": "success"}},
        {
            "lc": 1,
            "type": "constructor",
            "id": ["langchain", "schema", "messages", "ToolMessage"],
            "kwargs": {"content": "rainy", "tool_call_id": "c1"},
        },
    ],
    ids=["openinference-langchain", "lc-constructor"],
)
def test_a_serialised_tool_message_gives_its_content_and_call_id(output):
    attrs = {
        "openinference.span.kind": "TOOL",
        "tool.name": "get_weather",
        "input.value": "Paris",
        "output.value": json.dumps(output),
        "output.mime_type": "application/json",
    }
    mapped = map_span(span(attrs))
    assert (mapped.inputs, mapped.action) == ({"arguments": "Paris"}, "rainy")
    assert mapped.tool_call_ids == ["c1"]


def test_redacted_content_is_not_content():
    """``__REDACTED__`` (OPENINFERENCE_HIDE_INPUT_TEXT / ..._OUTPUT_TEXT): the messages keep
    their roles and tool calls without text; the side is not captured, the call ids remain."""
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "__REDACTED__",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "__REDACTED__",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather",
        "input.value": "__REDACTED__",
        "output.value": '{"visible": true}',
        "output.mime_type": "application/json",
        "llm.token_count.prompt": 7,
    }
    mapped = map_span(span(attrs))
    assert (mapped.role, mapped.kind) == (Role.STEP, StepKind.LLM)
    assert mapped.inputs is None and mapped.action is None
    assert mapped.attributes["tool_calls"] == ["c1"] and mapped.attributes["input_tokens"] == 7
    (note,) = mapped.notes
    assert "inputs and output" in note and "OPENINFERENCE_HIDE_INPUT_TEXT" in note
    # only the hidden side is forgotten
    only_in = {k: v for k, v in attrs.items() if not k.startswith("llm.output_messages")}
    visible = map_span(span(only_in))
    assert visible.inputs is None and visible.action == {"visible": True}
    # a redacted container input is no task
    agent = map_span(span({"openinference.span.kind": "AGENT", "input.value": "__REDACTED__"}))
    assert agent.inputs is None and agent.role == Role.AGENT


def test_a_langgraph_state_input_gets_its_messages_in_parts():
    state = {
        "messages": [{"type": "human", "data": {"content": "hi", "id": "4f2c"}}],
        "remaining_steps": 9,
    }
    attrs = {
        "openinference.span.kind": "CHAIN",
        "input.value": json.dumps(state),
        "input.mime_type": "application/json",
    }
    assert map_span(span(attrs)).inputs == {
        "messages": [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}],
        "remaining_steps": 9,
    }
    # a list that is not all messages is kept as recorded
    odd = {**state, "messages": [{"type": "human", "data": {"content": "hi"}}, 3]}
    odd_attrs = {**attrs, "input.value": json.dumps(odd)}
    assert map_span(span(odd_attrs)).inputs == odd


def test_retriever_and_embedding_spans():
    retriever = map_span(
        span(
            {
                "openinference.span.kind": "RETRIEVER",
                "input.value": "cats",
                "retrieval.documents.0.document.id": "d1",
                "retrieval.documents.0.document.content": "Cats purr.",
                "retrieval.documents.0.document.score": 0.9,
                "retrieval.documents.1.document.id": "d2",
                "retrieval.documents.1.document.metadata": '{"src": "wiki"}',
            }
        )
    )
    assert (retriever.role, retriever.kind) == (Role.STEP, StepKind.RETRIEVAL)
    assert retriever.inputs == {"query": "cats"}
    assert retriever.action == [
        {"id": "d1", "content": "Cats purr.", "score": 0.9},
        {"id": "d2", "metadata": {"src": "wiki"}},
    ]
    embedding = map_span(
        span(
            {
                "openinference.span.kind": "EMBEDDING",
                "embedding.model_name": "text-embedding-3-small",
                "embedding.embeddings.0.embedding.text": "hello",
                "embedding.embeddings.0.embedding.vector": (0.1, 0.2),
            }
        )
    )
    assert (embedding.kind, embedding.inputs) == (StepKind.EMBEDDING, {"input": ["hello"]})
    assert embedding.action == [(0.1, 0.2)]
    assert embedding.attributes["model"] == "text-embedding-3-small"


@pytest.mark.parametrize("kind", ["RERANKER", "GUARDRAIL", "EVALUATOR", "UNKNOWN", "x"])
def test_other_kinds_stay_unrecognised(kind):
    mapped = map_span(span({"openinference.span.kind": kind, "output.value": "v"}, name="n"))
    assert (mapped.role, mapped.kind) == (Role.OTHER, StepKind.SPAN)
    assert mapped.dialects == ["openinference"] and mapped.action == "v"
    # inside an agent run, an unrecognised leaf is kept as an opaque step
    root = span({"openinference.span.kind": "AGENT"}, name="agent", span_id="1" * 16)
    leaf = span(
        {"openinference.span.kind": kind},
        name="n",
        span_id="2" * 16,
        parent_span_id="1" * 16,
        start_ns=1,
    )
    llm = span(LLM_ATTRIBUTES, name="chat", span_id="3" * 16, parent_span_id="1" * 16, start_ns=2)
    (traj,) = assemble([root, leaf, llm])
    assert [s.kind for s in traj.steps] == [StepKind.SPAN, StepKind.LLM]


def test_spans_without_the_kind_attribute_are_not_openinference():
    assert map_span(span({"input.value": "x", "tool.name": "t"})).dialects == []


def test_session_id_groups_traces_into_one_conversation():
    spans = [
        NormalizedSpan(
            trace_id=str(t) * 32,
            span_id=str(t) * 16,
            name="ChatCompletion",
            start_ns=t,
            attributes={**LLM_ATTRIBUTES, "session.id": "thread-7"},
        )
        for t in (1, 2)
    ]
    (traj,) = assemble(spans)
    assert traj.session_id == "thread-7"
    assert len(traj.steps) == 2


def test_a_span_carrying_openinference_and_gen_ai_keeps_both():
    attrs = {
        **LLM_ATTRIBUTES,
        "gen_ai.operation.name": "chat",
        "gen_ai.usage.input_tokens": 999,
        "gen_ai.conversation.id": "conv",
    }
    mapped = map_span(span(attrs))
    assert mapped.dialects == ["openinference", "gen_ai"]
    assert mapped.attributes["input_tokens"] == 57  # the first dialect wins
    assert mapped.conversation_id == "conv"


# -- the generated fixture (real openinference-instrumentation-openai output) ------------------


def otlp_json_spans(path: Path) -> list[NormalizedSpan]:
    """The spans of a generated OTLP/JSON fixture, read by the importer's decoder."""
    return read_otlp_json(path.read_bytes(), str(path)).spans


def test_generated_openinference_fixture(fixtures_dir):
    (traj,) = assemble(otlp_json_spans(fixtures_dir / "generated" / "openinference.jsonl"))
    assert [s.label for s in traj.steps] == [
        "llm:ChatCompletion",
        "tool:get_weather",
        "llm:ChatCompletion",
    ]
    first, tool, final = traj.steps
    assert first.attributes["dialect"] == "openinference"
    assert first.action[0]["parts"][0]["id"] == "call_abc123"
    assert tool.attributes["requested_by"] == 0
    assert final.inputs["messages"][3]["parts"][0]["response"] == "rainy, 57F"
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    assert traj.session_id == "conv_1"


def test_generated_fixtures_agree_across_dialects(fixtures_dir):
    (oi,) = assemble(otlp_json_spans(fixtures_dir / "generated" / "openinference.jsonl"))
    (otel,) = assemble(otlp_json_spans(fixtures_dir / "generated" / "otel_span_only.jsonl"))

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    assert strip(oi.steps[2].inputs) == strip(otel.steps[2].inputs)
    assert strip(oi.steps[0].action) == strip(otel.steps[0].action)
