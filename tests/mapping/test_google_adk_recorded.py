"""The Google ADK dialect on spans recorded from the real ``google-adk`` 2.13.0 and 1.10.0.

google-adk cannot be installed beside the dev extra (it caps ``opentelemetry-sdk`` at 1.44,
``websockets`` below 16 and, through google-genai, ``tenacity`` below 9.2), so its spans were
recorded once in a scratch environment by ``data/google_adk/record.py``: a real ``LlmAgent``
(``weather``, one Python function tool) under the real ``InMemoryRunner`` on a ``BaseLlm``
subclass (a function call, then the answer), ADK's own tracer writing through the OTel SDK,
the spans written with the OTLP encoder. They are read the two offline ways: imported into a
SQLite store (``agent-replay import``) and ``from_otel_spans`` on the OTLP/JSON request.

What google-adk 2.13 emits (scope ``gcp.vertex.agent``):

* schema 2 (the default): ``invoke_workflow weather`` > ``invoke_agent weather`` > per model
  call ``generate_content fake-gemini`` (``gen_ai.*``: operation, provider ``gcp.gemini``,
  model, usage, finish reasons, ``gen_ai.tool.definitions``, ``gen_ai.conversation.id`` = the
  ADK session, ``gen_ai.agent.name``; ``gcp.vertex.agent.event_id`` / ``invocation_id``) and
  ``execute_tool get_weather`` (``gen_ai.tool.name`` / ``call.id`` / ``type``). Content only
  with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY``: then
  ``gen_ai.input.messages`` / ``output.messages`` / ``system_instructions`` and
  ``gen_ai.tool.call.arguments`` / ``result``. No ``gcp.vertex.agent.llm_request`` at all.
* schema 1 (``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``): ``invocation`` > ``invoke_agent
  weather`` > ``call_llm`` (``gcp.vertex.agent.llm_request`` / ``llm_response`` as Gemini JSON,
  ``session_id``, ``invocation_id``, ``event_id``, usage) **around** a ``generate_content
  fake-gemini`` span of the same call (``gen_ai.*``, no content), and ``execute_tool
  get_weather`` with ``gcp.vertex.agent.tool_call_args`` / ``tool_response`` beside
  ``gen_ai.tool.*`` (and ``llm_request`` / ``llm_response`` = ``"{}"``). Content is on by
  default; ``ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false`` writes ``"{}"`` for all four keys.

google-adk 1.10.0 (``adk_1_10``): ``invocation`` > ``agent_run [weather]`` > ``call_llm`` /
``execute_tool get_weather`` with the schema-1 keys, no inner ``generate_content`` span, no
finish reason, Gemini's own parameter schema (``OBJECT`` / ``STRING``); ``invocation`` and
``agent_run`` carry no attribute at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_replay import StepKind, Trajectory
from agent_replay.mapping.assemble import CONTENT_HINT
from agent_replay.mapping.dialects.google_adk import NO_CONTENT
from stored import recorded
from weather_run import ANSWER, QUESTION, text

RECORDED = Path(__file__).parent / "data" / "google_adk"
SESSION = "weather-session"
USER = text("user", QUESTION)
SYSTEM = [
    {
        "type": "text",
        "content": 'Answer in one sentence.\n\nYou are an agent. Your internal name is "weather".',
    }
]
TOOL_DEFINITION = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city.",
    "parameters": {
        "properties": {"city": {"title": "City", "type": "string"}},
        "required": ["city"],
        "title": "get_weatherParams",
        "type": "object",
    },
}
CALL = {"type": "tool_call", "id": "call-1", "name": "get_weather", "arguments": {"city": "Paris"}}
RESULT = {"result": "rainy in Paris"}  # ADK wraps a function's return value
RESPONSE = {"type": "tool_call_response", "id": "call-1", "response": RESULT}
GEMINI_SCHEMA = {"properties": {"city": {"type": "STRING"}}, "required": ["city"], "type": "OBJECT"}
LLM_NAME = {"v2": "generate_content fake-gemini", "v1": "call_llm", "adk_1_10": "call_llm"}
ROOT = {"v2": "invoke_workflow weather", "v1": "invocation", "adk_1_10": "invocation"}
SPANS = {"v2": 5, "v1": 7, "adk_1_10": 5}


def read(mode: str, how: str, db_path: Path) -> Trajectory:
    """The recording ``mode`` read ``how``: ``import`` (into a SQLite store) or ``spans``."""
    return recorded(RECORDED / f"{mode}.jsonl", how, db_path)


@pytest.mark.parametrize("how", ["import", "spans"])
@pytest.mark.parametrize("mode", ["v2_span_only", "v1_legacy", "adk_1_10"])
def test_a_recorded_adk_run_with_content_is_llm_tool_llm(db_path, how, mode):
    schema = "adk_1_10" if mode == "adk_1_10" else mode[:2]
    traj = read(mode, how, db_path)
    # the ADK session groups the run; the ADK agent acts every step
    assert traj.session_id == SESSION
    assert traj.metadata["root_span"] == ROOT[schema]
    # one step per model call: schema 1's generate_content span inside call_llm is no step
    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, LLM_NAME[schema]),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, LLM_NAME[schema]),
    ]
    # 1.10: named by ``agent_run [weather]``, a span without any attribute
    assert {s.agent for s in traj.steps} == {"weather"}
    first, tool, final = traj.steps
    assert first.started_ns <= tool.started_ns <= final.started_ns
    assert "google_adk" in first.attributes["dialect"].split(",")

    # no span around the steps holds the question: the task is what the first call was asked
    assert traj.task == {"messages": [USER], "system": SYSTEM}

    # system instruction, user text, the function declaration (its JSON schema as parameters)
    definition = TOOL_DEFINITION
    if schema == "adk_1_10":
        definition = {**TOOL_DEFINITION, "parameters": GEMINI_SCHEMA}
    assert first.inputs == {
        "messages": [USER],
        "system": SYSTEM,
        "tools": [definition],
        "model": "fake-gemini",
    }
    # the model's function_call, its id kept for the link
    assert first.action == [{"role": "assistant", "parts": [CALL]}]
    assert first.attributes["tool_calls"] == ["call-1"]
    assert (first.attributes["input_tokens"], first.attributes["output_tokens"]) == (20, 5)
    # not Gemini's STOP in schema 1; ADK 1.10 records no finish reason
    assert first.attributes.get("finish_reasons") == (None if schema == "adk_1_10" else ["stop"])

    assert tool.inputs == {"arguments": {"city": "Paris"}}
    assert tool.action == RESULT
    assert tool.attributes["requested_by"] == 0 and tool.attributes["tool_call_id"] == "call-1"
    assert "result_from" not in tool.attributes  # its own span had the result

    # the function_response goes back to the model as a user turn
    assert final.inputs["messages"] == [
        USER,
        {"role": "assistant", "parts": [CALL]},
        {"role": "user", "parts": [RESPONSE]},
    ]
    assert final.action == [text("assistant", ANSWER)]
    assert (final.attributes["input_tokens"], final.attributes["output_tokens"]) == (30, 7)

    report = traj.metadata["capture"]
    assert report["replayable"] is True and report["notes"] == []
    assert report["steps_without_content"] == [] and report["unanswered_tool_calls"] == []
    assert report["spans"] == SPANS[schema]


@pytest.mark.parametrize("how", ["import", "spans"])
@pytest.mark.parametrize("mode", ["v2_default", "v1_no_content"])
def test_a_recorded_adk_run_without_content_keeps_its_structure(db_path, how, mode):
    schema = mode[:2]
    traj = read(mode, how, db_path)
    assert traj.session_id == SESSION
    # schema 1 without content: call_llm is still the step (not dropped for its "{}" keys)
    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, LLM_NAME[schema]),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, LLM_NAME[schema]),
    ]
    assert {s.agent for s in traj.steps} == {"weather"}
    for step in traj.steps:
        assert step.inputs is None and step.action is None
    assert traj.task == {"root_span": ROOT[schema]}
    first, tool, final = traj.steps
    # what is not content survives: model, usage, the tool's name and call id
    assert first.attributes["model"] == "fake-gemini"
    assert (final.attributes["input_tokens"], final.attributes["output_tokens"]) == (30, 7)
    assert tool.attributes["tool_call_id"] == "call-1"

    report = traj.metadata["capture"]
    assert report["replayable"] is False
    assert report["steps_without_content"] == [0, 1, 2]
    assert report["tool_steps_without_result"] == [1]
    assert CONTENT_HINT in report["notes"]
    adk_notes = [f"step {i}: {NO_CONTENT}" for i in (0, 2)]
    assert all((note in report["notes"]) == (schema == "v1") for note in adk_notes)
