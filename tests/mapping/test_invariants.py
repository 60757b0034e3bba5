"""Hypothesis invariants of the mapping layer: bad spans become ``span`` steps, never a crash.

Attribute values cover what an SDK span or an OTLP payload can carry (scalars, bytes, arrays,
key-value lists, JSON held in strings, NaN, huge and negative numbers), under keys that the
dialects look for and keys they do not. Span trees have duplicate ids, missing parents,
parent cycles, out-of-range kinds and status codes, and times in any order.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agent_replay.mapping import NormalizedSpan, Role, SpanEvent, map_span
from agent_replay.mapping.assemble import assemble
from agent_replay.model import StepKind

CHAT = {"gen_ai.operation.name": "chat"}
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"}

# lone surrogates are excluded here: they cannot be stored as UTF-8 (see test_known_bugs.py)
TEXT = st.text(st.characters(codec="utf-8"), max_size=10)

KNOWN_KEYS = [
    "gen_ai.operation.name",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.agent.name",
    "gen_ai.conversation.id",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.retrieval.query.text",
    "gen_ai.retrieval.documents",
    "gen_ai.workflow.name",
    "error.type",
    "openinference.span.kind",
    "input.value",
    "input.mime_type",
    "output.value",
    "output.mime_type",
    "llm.input_messages",
    "llm.output_messages",
    "llm.input_messages.0.message.role",
    "llm.input_messages.0.message.content",
    "llm.input_messages.1.message.tool_calls.0.tool_call.id",
    "llm.input_messages.x.message.role",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
    "llm.output_messages.0.message.contents.0.message_content.type",
    "llm.output_messages.0.message.contents.0.message_content.image",
    "llm.output_messages.0.message",
    "llm.tools.0.tool.json_schema",
    "llm.invocation_parameters",
    "llm.token_count.prompt",
    "llm.finish_reason",
    "llm.prompts.0.prompt.text",
    "retrieval.documents.0.document.content",
    "embedding.embeddings.0.embedding.vector",
    "tool.name",
    "tool.id",
    "session.id",
    "agent.name",
    "agent_replay.step.kind",
    "agent_replay.step.name",
    "agent_replay.step.inputs",
    "agent_replay.step.output",
    "agent_replay.step.side_effects",
    # Langfuse, LangSmith, Google ADK, OpenLLMetry / Traceloop, Pydantic AI
    "langfuse.observation.type",
    "langfuse.observation.input",
    "langfuse.observation.output",
    "langfuse.observation.model.name",
    "langfuse.observation.level",
    "langfuse.observation.usage_details",
    "langfuse.observation.metadata.tool_call_id",
    "langfuse.session.id",
    "langsmith.span.kind",
    "langsmith.trace.name",
    "langsmith.metadata.thread_id",
    "langsmith.metadata.ls_model_name",
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.prompt.0.role",
    "gen_ai.prompt.0.content",
    "gen_ai.prompt.1.tool_calls.0.name",
    "gen_ai.completion.0.content",
    "gen_ai.completion.0.tool_calls.0.arguments",
    "llm.request.type",
    "llm.request.functions.0.name",
    "llm.request.functions.0.parameters",
    "traceloop.span.kind",
    "traceloop.entity.name",
    "traceloop.entity.input",
    "traceloop.entity.output",
    "traceloop.association.properties.ls_model_name",
    "gcp.vertex.agent.llm_request",
    "gcp.vertex.agent.llm_response",
    "gcp.vertex.agent.tool_call_args",
    "gcp.vertex.agent.tool_response",
    "gcp.vertex.agent.session_id",
    "pydantic_ai.all_messages",
    "tool_arguments",
    "tool_response",
    "final_result",
    "logfire.msg",
    "metadata",
]
# tracer scopes some dialects recognise spans by (ADK, OpenInference Anthropic, Traceloop, ...)
SCOPES = st.sampled_from(
    [
        "",
        "gcp.vertex.agent",
        "openinference.instrumentation.anthropic",
        "openinference.instrumentation.langchain",
        "opentelemetry.instrumentation.openai.v1",
        "opentelemetry.instrumentation.anthropic",
        "opentelemetry.instrumentation.langchain",
        "pydantic-ai",
        "agent_replay",
    ]
)
KIND_WORDS = st.sampled_from(
    [
        *("chat", "execute_tool", "invoke_agent", "invoke_workflow", "embeddings", "retrieval"),
        *("search_memory", "plan", "LLM", "TOOL", "AGENT", "CHAIN", "RETRIEVER", "EMBEDDING"),
        *("llm", "tool", "memory", "span", "", "application/json", "text/plain"),
        *("generation", "agent", "chain", "retriever", "prompt", "parser", "workflow", "task"),
        *("ERROR", "__REDACTED__", "{}", "tool_call", "tool_call_response", "function"),
    ]
)

json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT | KIND_WORDS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(TEXT | KIND_WORDS, inner, max_size=3)
    ),
    max_leaves=8,
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64),
    st.floats(),
    TEXT,
    KIND_WORDS,
    st.binary(max_size=6),
    json_data.map(json.dumps),  # JSON held in strings, as most dialects write it
    st.just("{not json"),
)
attribute_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(TEXT | st.sampled_from(KNOWN_KEYS), inner, max_size=3)
    ),
    max_leaves=10,
)
attribute_dicts = st.dictionaries(st.sampled_from(KNOWN_KEYS) | TEXT, attribute_values, max_size=8)

events = st.builds(SpanEvent, TEXT, st.integers(0, 10), attribute_dicts)
IDS = st.sampled_from(["a" * 16, "b" * 16, "c" * 16, "d" * 16, "e" * 16, "f" * 16])


@st.composite
def spans(draw: Any, attributes: Any = attribute_dicts) -> NormalizedSpan:
    span_id = draw(IDS)
    return NormalizedSpan(
        trace_id=draw(st.sampled_from(["1" * 32, "2" * 32])),
        span_id=span_id,
        name=draw(TEXT),
        parent_span_id=draw(st.none() | IDS | st.just(span_id) | st.just("0" * 16)),
        parent_is_remote=draw(st.booleans()),
        kind=draw(st.integers(-1, 7)),
        start_ns=draw(st.integers(0, 2**64)),
        end_ns=draw(st.integers(0, 2**64)),
        status_code=draw(st.integers(-1, 3)),
        status_message=draw(TEXT),
        attributes=draw(attributes),
        events=tuple(draw(st.lists(events, max_size=1))),
        resource=draw(st.dictionaries(st.just("service.name"), scalars, max_size=1)),
        scope_name=draw(SCOPES),
        dropped_attributes=draw(st.integers(0, 3)),
    )


@settings(max_examples=300, deadline=None)
@given(spans())
def test_map_span_never_raises(span):
    mapped = map_span(span)
    assert mapped.role in (Role.STEP, Role.AGENT, Role.WORKFLOW, Role.OTHER)
    assert isinstance(mapped.kind, StepKind)
    assert isinstance(mapped.name, str)
    if not mapped.dialects:
        assert (mapped.role, mapped.kind) == (Role.OTHER, StepKind.SPAN)
    assert all(isinstance(i, str) for i in mapped.tool_call_ids + mapped.requested_tool_calls)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(spans(), max_size=7))
def test_assemble_never_raises_and_yields_sound_chains(batch):
    trajectories = assemble(batch)
    seen_steps = set()
    for traj in trajectories:
        traj.verify()  # every chain is consistent
        assert [s.index for s in traj.steps] == list(range(len(traj.steps)))
        assert traj.steps, "a trajectory without steps is not written"
        report = traj.metadata["capture"]
        assert report["steps"] == len(traj.steps)
        for step in traj.steps:
            key = (step.trace_id, step.span_id)
            assert key not in seen_steps, "a span became two steps"
            seen_steps.add(key)
    by_key = {}
    for s in batch:  # duplicates: the first copy wins
        by_key.setdefault((s.trace_id, s.span_id), s)
    for traj in trajectories:
        for step in traj.steps:
            mapped = map_span(by_key[(step.trace_id, step.span_id)])
            if not mapped.dialects:
                assert step.kind is StepKind.SPAN and not step.resamplable


def _claimed(attrs: dict[str, Any]) -> bool:
    return bool(map_span(NormalizedSpan("1" * 32, "9" * 16, "probe", attributes=attrs)).dialects)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(attribute_dicts.filter(lambda a: not _claimed(a)), min_size=1, max_size=4),
    st.permutations(range(5)),
)
def test_unrecognised_leaf_spans_become_span_steps(opaque_attributes, order):
    """Unrecognised spans beside GenAI steps in an agent run are kept as opaque steps."""
    trace_id, root_id = "3" * 32, "0" * 15 + "1"
    root = NormalizedSpan(
        trace_id, root_id, "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}
    )
    chat = NormalizedSpan(
        trace_id,
        "0" * 15 + "2",
        "chat",
        parent_span_id=root_id,
        start_ns=order[0],
        attributes={"gen_ai.operation.name": "chat"},
    )
    leaves = [
        NormalizedSpan(
            trace_id,
            f"{i + 3:016x}",
            f"opaque {i}",
            parent_span_id=root_id,
            start_ns=order[i + 1],
            attributes=attrs,
        )
        for i, attrs in enumerate(opaque_attributes)
    ]
    (traj,) = assemble([root, chat, *leaves])
    kinds = {s.span_id: s.kind for s in traj.steps}
    assert kinds.pop(chat.span_id) is StepKind.LLM
    assert kinds == {leaf.span_id: StepKind.SPAN for leaf in leaves}
    assert [s.started_ns for s in traj.steps] == sorted(s.started_ns for s in traj.steps)
    assert traj.metadata["capture"]["opaque_steps"] == [
        s.name for s in traj.steps if s.kind is StepKind.SPAN
    ]


@settings(max_examples=100, deadline=None)
@given(st.lists(spans(st.just({"gen_ai.operation.name": "chat"})), min_size=1, max_size=6))
def test_parents_come_before_their_children(batch):
    batch = [dataclasses.replace(s, trace_id="1" * 32) for s in batch]
    assume(len({s.span_id for s in batch}) == len(batch))  # duplicates: last copy wins
    for traj in assemble(batch):
        position = {s.span_id: s.index for s in traj.steps}
        for step in traj.steps:
            if step.parent_span_id in position and step.parent_span_id != step.span_id:
                parent = position[step.parent_span_id]
                child = step.index
                # a cycle has no top; everything else lists the parent first
                assert parent < child or _in_cycle(batch, step.span_id)


def _in_cycle(batch: list[NormalizedSpan], span_id: str) -> bool:
    parents = {s.span_id: s.parent_span_id for s in batch}
    seen, current = set(), span_id
    while current in parents and current not in seen:
        seen.add(current)
        current = parents[current]
    return current in seen


# -- regressions found by the invariants --------------------------------------------------------


def test_spans_in_a_parent_cycle_are_kept():
    trace_id = "1" * 32
    a = NormalizedSpan(
        trace_id, "a" * 16, "chat a", parent_span_id="b" * 16, attributes=CHAT, start_ns=1
    )
    # a tool span: an llm span inside an llm step would be the same model call (one step)
    b = NormalizedSpan(
        trace_id, "b" * 16, "tool b", parent_span_id="a" * 16, attributes=TOOL, start_ns=2
    )
    (traj,) = assemble([a, b])
    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL]


def test_lone_surrogate_attribute_does_not_break_assembly():
    chat = NormalizedSpan(
        "1" * 32, "a" * 16, "chat", attributes={**CHAT, "gen_ai.request.model": "gpt\udc80"}
    )
    (traj,) = assemble([chat])
    assert traj.steps[0].kind is StepKind.LLM
