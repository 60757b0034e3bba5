"""Each dialect on spans shaped like its emitters' (keys from FORMATS.md and the emitters)."""

import dataclasses
import json

import pytest

from agent_replay.mapping import DIALECTS, PRECEDENCE, Role, map_span, register_dialect
from agent_replay.mapping.assemble import assemble
from agent_replay.mapping.spans import LogEvent, NormalizedSpan, SpanEvent
from agent_replay.model import StepKind

TRACE = "0af7651916cd43dd8448eb211c80319c"
USER = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}]
CALL = [
    {
        "role": "assistant",
        "parts": [
            {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}
        ],
    }
]


def span(span_id="00f067aa0ba902b7", name="s", parent=None, start=1, **attributes):
    events = attributes.pop("_events", ())
    logs = attributes.pop("_logs", ())
    scope = attributes.pop("_scope", "")
    return NormalizedSpan(
        trace_id=TRACE,
        span_id=span_id,
        name=name,
        parent_span_id=parent,
        start_ns=start,
        end_ns=start + 1,
        attributes=attributes,
        events=tuple(events),
        logs=tuple(logs),
        scope_name=scope,
    )


def test_precedence_is_fixed_by_name_not_import_order():
    names = [name for name, _ in DIALECTS]
    known = [n for n in PRECEDENCE if n in names]
    assert names[: len(known)] == known
    # a late registration lands at its place in PRECEDENCE, an unknown name last
    saved = list(DIALECTS)
    try:
        DIALECTS[:] = [d for d in DIALECTS if d[0] != "openinference"]
        register_dialect("openinference", lambda s, m: False)
        register_dialect("zz_test_dialect", lambda s, m: False)
        names = [name for name, _ in DIALECTS]
        assert names.index("openinference") == names.index("openllmetry") - 1
        assert names[-1] == "zz_test_dialect"
    finally:
        DIALECTS[:] = saved


def test_genai_v137_attributes_json_strings_and_structured_values():
    for encode in (json.dumps, lambda v: v):
        m = map_span(
            span(
                **{
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.input.messages": encode(USER),
                    "gen_ai.output.messages": encode(CALL),
                    "gen_ai.system_instructions": encode(
                        [{"type": "text", "content": "Be brief."}]
                    ),
                }
            )
        )
        assert m.role == Role.STEP and m.kind is StepKind.LLM
        assert m.inputs == {
            "messages": USER,
            "system": [{"type": "text", "content": "Be brief."}],
            "model": "gpt-4o",
        }
        assert m.action == CALL
        assert m.requested_tool_calls == ["c1"]


def test_genai_event_only_details_log_record():
    details = LogEvent(
        "gen_ai.client.inference.operation.details",
        5,
        {
            "gen_ai.input.messages": USER,
            "gen_ai.output.messages": CALL,
            "gen_ai.operation.name": "chat",
        },
    )
    m = map_span(span(**{"gen_ai.operation.name": "chat", "_logs": [details]}))
    assert m.inputs == {"messages": USER} and m.action == CALL


def test_genai_v128_log_events_and_v127_span_events_give_the_same_inputs():
    v128 = [
        LogEvent("gen_ai.system.message", 1, {}, {"content": "Be brief."}),
        LogEvent("gen_ai.user.message", 2, {}, {"content": "Weather in Paris?"}),
        LogEvent(
            "gen_ai.choice",
            3,
            {},
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
            },
        ),
    ]
    prompt = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    completion = [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
            "finish_reason": "tool_calls",
        }
    ]
    v127 = [
        SpanEvent("gen_ai.content.prompt", 1, {"gen_ai.prompt": json.dumps(prompt)}),
        SpanEvent("gen_ai.content.completion", 2, {"gen_ai.completion": json.dumps(completion)}),
    ]
    # the 1.28 form as log records, the same names as span events, and the 1.27 form;
    # the 1.27 span has no operation name (older SDKs), only a model
    a = map_span(
        span(**{"gen_ai.operation.name": "chat", "gen_ai.system": "openai", "_logs": v128})
    )
    b = map_span(
        span(
            **{
                "gen_ai.operation.name": "chat",
                "_events": [
                    SpanEvent(e.name, e.time_ns, {"gen_ai.event.content": json.dumps(e.body)})
                    for e in v128
                ],
            }
        )
    )
    c = map_span(
        span(**{"gen_ai.request.model": "gpt-4", "gen_ai.system": "openai", "_events": v127})
    )
    system = {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]}
    for m in (a, b, c):
        assert m.kind is StepKind.LLM
        assert m.inputs["messages"] == [system, *USER]
        assert m.action == CALL
        assert m.attributes["finish_reasons"] == ["tool_calls"]


def test_genai_newer_operations():
    plan = map_span(span(**{"gen_ai.operation.name": "plan", "gen_ai.agent.name": "a"}))
    assert plan.role == Role.PLAN
    memory = map_span(
        span(
            **{
                "gen_ai.operation.name": "search_memory",
                "gen_ai.memory.query.text": "q",
                "gen_ai.memory.records": '[{"id": 1}]',
            }
        )
    )
    assert memory.kind is StepKind.MEMORY and memory.inputs == {"query": "q"}
    assert memory.action == [{"id": 1}] and memory.attributes["operation"] == "search_memory"
    agent = map_span(span(name="invoke_agent planner", **{"gen_ai.operation.name": "invoke_agent"}))
    assert agent.role == Role.AGENT and agent.name == "planner"
    tool = map_span(span(**{"gen_ai.tool.name": "f", "gen_ai.tool.call.id": ["run", "c9"]}))
    assert tool.kind is StepKind.TOOL and tool.tool_call_ids == ["run", "c9"]


def test_plan_span_contains_the_llm_call_and_is_a_step_only_when_empty():
    root = span(
        "1000000000000001",
        "invoke_agent a",
        **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
    )
    plan = span(
        "1000000000000002", "plan a", "1000000000000001", 2, **{"gen_ai.operation.name": "plan"}
    )
    chat = span(
        "1000000000000003",
        "chat",
        "1000000000000002",
        3,
        **{"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(CALL)},
    )
    (traj,) = assemble([root, plan, chat])
    assert [s.label for s in traj.steps] == ["llm:chat"]
    assert traj.steps[0].attributes["plan"] == "plan a"
    (traj,) = assemble([root, plan])
    assert [s.label for s in traj.steps] == ["llm:plan a"]


def test_openllmetry_legacy_flattened_and_gaps_are_reported():
    m = map_span(
        span(
            name="openai.chat",
            **{
                "llm.request.type": "chat",
                "gen_ai.system": "openai",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": "Weather in Paris?",
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.finish_reason": "tool_calls",
                "gen_ai.completion.0.tool_calls.0.id": "c1",
                "gen_ai.completion.0.tool_calls.0.name": "get_weather",
                "gen_ai.completion.0.tool_calls.0.arguments": '{"city": "Paris"}',
                "llm.request.functions.0.name": "get_weather",
                "gen_ai.usage.prompt_tokens": 5,
            },
        )
    )
    assert "openllmetry" in m.dialects
    assert m.inputs == {
        "messages": USER,
        "tools": [{"type": "function", "name": "get_weather"}],
        "model": "gpt-4o",
    }
    assert m.action == CALL and m.attributes["input_tokens"] == 5
    assert not m.notes
    gappy = map_span(span(**{"gen_ai.prompt.0.content": "a", "gen_ai.prompt.2.content": "c"}))
    assert any("gaps" in note for note in gappy.notes)


def test_traceloop_entity_spans():
    agent = map_span(span(**{"traceloop.span.kind": "agent", "traceloop.entity.name": "planner"}))
    assert agent.role == Role.AGENT and agent.agent == "planner"
    tool = map_span(
        span(
            **{
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": "search",
                "traceloop.entity.input": '{"args": [], "kwargs": {"q": "x"}}',
                "traceloop.entity.output": '"found"',
            }
        )
    )
    assert tool.kind is StepKind.TOOL and tool.inputs == {"arguments": {"q": "x"}}
    assert tool.action == "found"
    workflow = map_span(span(**{"traceloop.span.kind": "workflow", "traceloop.workflow.name": "w"}))
    assert workflow.role == Role.WORKFLOW and workflow.name == "w"


def test_langfuse_sdk_observation_attributes():
    m = map_span(
        span(
            _scope="langfuse-sdk",
            **{
                "langfuse.observation.type": "generation",
                "langfuse.observation.input": json.dumps(
                    [{"role": "user", "content": "Weather in Paris?"}]
                ),
                "langfuse.observation.output": json.dumps(
                    {"role": "assistant", "content": "rainy"}
                ),
                "langfuse.observation.model.name": "gpt-4o",
                "langfuse.observation.level": "ERROR",
                "langfuse.observation.status_message": "boom",
                "langfuse.session.id": "sess",
            },
        )
    )
    assert m.dialects[0] == "langfuse" and m.kind is StepKind.LLM
    assert m.inputs == {"messages": USER, "model": "gpt-4o"}
    assert m.action == [{"role": "assistant", "parts": [{"type": "text", "content": "rainy"}]}]
    assert m.error == {"type": "error", "message": "boom"} and m.conversation_id == "sess"


def test_langsmith_otel_whole_inputs_in_gen_ai_prompt():
    m = map_span(
        span(
            **{
                "langsmith.span.kind": "llm",
                "langsmith.metadata.thread_id": "t1",
                "gen_ai.operation.name": "chat",
                "gen_ai.prompt": json.dumps(
                    {"messages": [[{"type": "human", "content": "Weather in Paris?"}]]}
                ),
                "gen_ai.completion": json.dumps(
                    {"generations": [[{"message": {"type": "ai", "content": "rainy"}}]]}
                ),
            }
        )
    )
    assert m.dialects[0] == "langsmith"
    assert m.inputs == {"messages": USER}
    assert m.action == [{"role": "assistant", "parts": [{"type": "text", "content": "rainy"}]}]
    assert m.conversation_id == "t1"
    tool = map_span(
        span(
            **{
                "langsmith.span.kind": "tool",
                "gen_ai.prompt": '{"input": "Paris"}',
                "gen_ai.completion": '{"output": "rainy"}',
            }
        )
    )
    assert tool.inputs == {"arguments": "Paris"} and tool.action == "rainy"


@pytest.mark.timeout(20)
def test_google_adk_agent_span_names_are_read_without_backtracking():
    """A hostile span name of 120,000 characters held the receiver for two minutes (a
    regular expression backtracked on it); the same names are read as before."""
    for name, agent in (
        ("agent_run [weather_agent]", "weather_agent"),
        ("invoke_agent weather_agent", "weather_agent"),
        ("agent_run[x y]", "x y"),
        ("invoke_agent", None),
        ("agent_run [a]b]", None),
        ("invoke_agent " + " " * 200_000 + "]]", None),
        ("invoke_agent [" + "a" * 200_000 + "]]", None),
    ):
        mapped = map_span(span(name=name, _scope="gcp.vertex.agent"))
        assert mapped.agent == agent, name[:40]
        assert (mapped.kind is StepKind.AGENT) == (agent is not None)


def test_google_adk_request_response_and_tool():
    # the shapes of google-adk 1.10 and of 2.13's schema 1 (see test_google_adk_recorded.py)
    request = {
        "model": "gemini-2.0-flash",
        "config": {
            "system_instruction": "Be brief.",
            "tools": [{"function_declarations": [{"name": "get_weather", "description": "d"}]}],
        },
        "contents": [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}],
    }
    response = {
        "content": {
            "role": "model",
            "parts": [
                {"function_call": {"id": "c1", "name": "get_weather", "args": {"city": "Paris"}}}
            ],
        },
        "finish_reason": "STOP",
    }
    m = map_span(
        span(
            name="call_llm",
            **{
                "gcp.vertex.agent.llm_request": json.dumps(request),
                "gcp.vertex.agent.llm_response": json.dumps(response),
                "gcp.vertex.agent.tool_call_args": "{}",
                "gcp.vertex.agent.session_id": "s1",
                "gen_ai.system": "gcp.vertex.agent",
            },
        )
    )
    assert m.dialects[0] == "google_adk"
    assert m.inputs == {
        "messages": USER,
        "system": [{"type": "text", "content": "Be brief."}],
        "tools": [{"type": "function", "name": "get_weather", "description": "d"}],
        "model": "gemini-2.0-flash",
    }
    assert m.action == CALL and m.conversation_id == "s1"
    tool = map_span(
        span(
            name="execute_tool get_weather",
            **{
                "gcp.vertex.agent.tool_call_args": '{"city": "Paris"}',
                "gcp.vertex.agent.tool_response": '{"result": "rainy"}',
                "gcp.vertex.agent.llm_request": "{}",
                "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": "c1",
            },
        )
    )
    assert tool.kind is StepKind.TOOL and tool.inputs == {"arguments": {"city": "Paris"}}
    assert tool.action == {"result": "rainy"} and tool.tool_call_ids == ["c1"]
    # a tool called without arguments: "{}" is its arguments when the response is there
    now = map_span(
        span(
            name="execute_tool now",
            **{
                "gcp.vertex.agent.tool_call_args": "{}",
                "gcp.vertex.agent.tool_response": '{"result": "noon"}',
            },
        )
    )
    assert now.inputs == {"arguments": {}} and now.action == {"result": "noon"}
    # ADK 1.x writes no attribute on agent_run spans: only its tracer scope says it is ADK's
    agent = map_span(span(name="agent_run [weather]", _scope="gcp.vertex.agent"))
    assert agent.role == Role.AGENT and agent.agent == "weather"


def test_pydantic_ai_agent_run_tools_and_v1_events_attribute():
    run = map_span(
        span(
            name="weather run",
            _scope="pydantic-ai",
            **{
                "agent_name": "weather",
                "final_result": "rainy",
                "pydantic_ai.all_messages": json.dumps([*USER, {"role": "assistant", "parts": []}]),
            },
        )
    )
    assert run.role == Role.AGENT and run.agent == "weather" and run.action == "rainy"
    assert run.inputs == {"messages": USER}
    tool = map_span(
        span(
            name="running tool",
            _scope="pydantic-ai",
            **{
                "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": "c1",
                "tool_arguments": '{"city": "Paris"}',
                "tool_response": "rainy",
            },
        )
    )
    assert tool.kind is StepKind.TOOL and tool.inputs == {"arguments": {"city": "Paris"}}
    assert tool.action == "rainy"
    events = [
        {"event.name": "gen_ai.user.message", "content": "Weather in Paris?", "role": "user"},
        {
            "event.name": "gen_ai.choice",
            "index": 0,
            "message": {"role": "assistant", "content": "rainy"},
        },
    ]
    chat = map_span(
        span(
            name="chat gpt-4o",
            _scope="pydantic-ai",
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.system": "openai",
                "events": json.dumps(events),
            },
        )
    )
    assert chat.inputs == {"messages": USER}
    assert chat.action == [{"role": "assistant", "parts": [{"type": "text", "content": "rainy"}]}]


def test_native_spans_keep_exact_content_over_genai():
    m = map_span(
        span(
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(USER),
                "agent_replay.step.kind": "llm",
                "agent_replay.step.name": "plan",
                "agent_replay.step.inputs": '{"q": 1}',
                "agent_replay.step.output": '"done"',
                "agent_replay.session.id": "session-7",
            }
        )
    )
    assert m.dialects[0] == "agent_replay"
    assert (m.name, m.inputs, m.action, m.conversation_id) == (
        "plan",
        {"q": 1},
        "done",
        "session-7",
    )


def test_a_failing_dialect_is_noted_not_raised():
    def broken(s, m):
        raise RuntimeError("boom")

    register_dialect("zz_broken", broken)
    try:
        m = map_span(span(**{"gen_ai.operation.name": "chat"}))
        assert m.kind is StepKind.LLM
        assert any("zz_broken" in note for note in m.notes)
    finally:
        DIALECTS[:] = [d for d in DIALECTS if d[0] != "zz_broken"]


def test_a_failed_span_takes_its_error_from_the_exception_event():
    """``span.record_exception`` writes the error as an ``exception`` event; many
    instrumentations leave the status description empty or write it as ``"Type: message"`` or
    with a traceback, so that event, the last one, is the error; without it ``error.type`` and
    the status description are."""
    failed = NormalizedSpan(
        trace_id=TRACE,
        span_id="00f067aa0ba902b7",
        name="execute_tool get_weather",
        parent_span_id=None,
        start_ns=1,
        end_ns=2,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"},
        events=(
            SpanEvent(
                "exception",
                2,
                {"exception.type": "TimeoutError", "exception.message": "timed out"},
            ),
        ),
        status_code=2,
    )
    assert map_span(failed).error == {"type": "TimeoutError", "message": "timed out"}
    # regression: the event wins over a status description and a short error.type
    described = dataclasses.replace(
        failed,
        status_message="TimeoutError: timed out",
        attributes={**failed.attributes, "error.type": "Timeout"},
    )
    assert map_span(described).error == {"type": "TimeoutError", "message": "timed out"}
    retried = SpanEvent("exception", 1, {"exception.type": "ConnectionError"})
    twice = dataclasses.replace(failed, events=(retried, *failed.events))
    assert map_span(twice).error == {"type": "TimeoutError", "message": "timed out"}
    # without the event: error.type and the status description
    bare = dataclasses.replace(described, events=())
    assert map_span(bare).error == {"type": "Timeout", "message": "TimeoutError: timed out"}
    assert map_span(dataclasses.replace(bare, attributes=failed.attributes)).error == {
        "type": "error",
        "message": "TimeoutError: timed out",
    }


def test_ctx_step_content_on_spans_is_strict_json_and_maps_back_exactly():
    """QA: with content capture on, ``agent_replay.step.output`` held a bare NaN token (strict
    JSON parsers in a backend refuse it) and bytes or sets as their repr, so what a receiver
    stored was not what the recording stored."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agent_replay import record

    value = {"p": float("nan"), "b": b"\x00", "s": {1}, "t": (1, "x"), "n": 42}
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traj = record(
        lambda ctx: ctx.tool("probe", produce=lambda: value, arg=b"\x01"),
        tracer_provider=provider,
        capture_content=True,
    )
    (finished,) = exporter.get_finished_spans()

    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    for key, text in finished.attributes.items():
        if key.startswith(("agent_replay.step.inputs", "agent_replay.step.output", "gen_ai.")):
            if key.startswith("gen_ai.") and not key.endswith(("arguments", "result")):
                continue
            json.loads(text, parse_constant=refuse)
    assert json.loads(finished.attributes["gen_ai.tool.call.result"])["p"] == "NaN"
    m = map_span(span(_scope="agent_replay", **dict(finished.attributes)))
    assert m.inputs == traj.steps[0].inputs == {"arg": b"\x01"}
    assert m.action["b"] == b"\x00" and m.action["s"] == {1} and m.action["t"] == (1, "x")
    assert m.action["n"] == 42 and m.action["p"] != m.action["p"]  # NaN
