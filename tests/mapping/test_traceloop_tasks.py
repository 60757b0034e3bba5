"""The Traceloop SDK's ``@task`` and ``@tool`` spans (QA F8: a ``@task`` with nothing below it
vanished from the trajectory: 4 spans, 1 step, no opaque step, no note).

The SDK (``traceloop-sdk`` 0.62.4, ``decorators/base.py``) is not installed: its spans are made
here as its decorators write them, on its tracer ``traceloop.tracer``: ``{name}.{kind}``,
``traceloop.span.kind``, ``traceloop.entity.name``, ``traceloop.entity.input`` (JSON ``{"args":
[...], "kwargs": {...}}``) and ``traceloop.entity.output`` (the return value as JSON), both
left out with ``TRACELOOP_TRACE_CONTENT=false``. A ``@tool`` is a tool step; a ``@task`` is a
step of its own (an opaque ``span`` step, as a Langfuse ``span`` observation is) when nothing is
below it and it is inside no step, and otherwise the container of what is below it or a detail
of the step it is in: never a second step beside the ones it holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

from agent_replay import StepKind, Trajectory
from agent_replay.mapping import Role, map_span
from agent_replay.mapping.dialects import openllmetry
from agent_replay.mapping.spans import NormalizedSpan
from stored import captured, recorded

SDK_SCOPE = "traceloop.tracer"
HOW = pytest.mark.parametrize("how", ["processor", "spans"])
ANSWER = "booked"


@contextmanager
def entity(
    tracer: trace.Tracer,
    kind: str,
    name: str,
    *args: Any,
    result: Any = None,
    content: bool = True,
    **kwargs: Any,
) -> Iterator[Any]:
    """A span as the SDK's ``@{kind}(name=name)`` writes it around a call with ``args`` and
    ``kwargs`` that returns ``result``."""
    with tracer.start_as_current_span(f"{name}.{kind}") as span:
        span.set_attribute("traceloop.span.kind", kind)
        span.set_attribute("traceloop.entity.name", name)
        span.set_attribute("traceloop.workflow.name", "trip")
        if kind in ("task", "tool"):
            span.set_attribute("traceloop.entity.path", name)
        if content:
            span.set_attribute(
                "traceloop.entity.input", json.dumps({"args": list(args), "kwargs": kwargs})
            )
        yield span
        if content:
            span.set_attribute("traceloop.entity.output", json.dumps(result))


def chat(tracer: trace.Tracer, asked: str, answer: str) -> None:
    """A model call as Traceloop's OpenAI instrumentation (legacy form) records it."""
    with tracer.start_as_current_span(
        "openai.chat",
        kind=trace.SpanKind.CLIENT,
        attributes={
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": asked,
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": answer,
        },
    ):
        pass


def steps_of(traj: Trajectory) -> list[tuple[str, str]]:
    return [(step.kind.value, step.name) for step in traj.steps]


# -- a task with nothing below it ---------------------------------------------------------------


def run_trip(provider: Any, *, content: bool = True) -> str:
    """``@workflow trip`` > ``@agent planner`` > (the model call, ``@task book``)."""
    tracer = provider[0].get_tracer(SDK_SCOPE)
    with entity(tracer, "workflow", "trip", "plan a trip", result=ANSWER, content=content):
        with entity(tracer, "agent", "planner", goal="trip", content=content):
            chat(tracer, "plan a trip", "Go to Rome")
            with entity(tracer, "task", "book", "Rome", result={"ok": True}, content=content):
                pass
    return ANSWER


@HOW
def test_a_task_with_nothing_below_it_is_a_step_of_its_own(db_path, provider, how):
    traj = captured(how, db_path, provider, lambda: run_trip(provider), expect=ANSWER)
    assert steps_of(traj) == [("llm", "openai.chat"), ("span", "book")]
    book = traj.steps[1]
    assert book.inputs == "Rome"  # the one positional argument
    assert book.action == {"ok": True}
    assert book.agent == "planner" and book.error is None
    assert book.attributes["span_name"] == "book.task"
    capture = traj.metadata["capture"]
    assert capture["spans"] == 4 and capture["steps"] == 2
    assert capture["opaque_steps"] == ["book"]
    assert capture["replayable"] is True
    assert traj.task == "plan a trip"


def otlp_span(span_id: str, parent: str | None, name: str, start: int, **attributes: Any) -> dict:
    span = {
        "traceId": "fa" * 16,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(1_700_000_000_000_000_000 + start),
        "endTimeUnixNano": str(1_700_000_000_000_000_000 + start + 100),
        "attributes": [
            {"key": key, "value": {"stringValue": value}} for key, value in attributes.items()
        ],
    }
    if parent:
        span["parentSpanId"] = parent
    return span


@pytest.mark.parametrize("how", ["import", "spans"])
def test_the_qa_recording_keeps_its_task(tmp_path: Path, db_path, how):
    """QA's reproduction (F8): workflow > agent > (llm, ``book.task``), imported from OTLP/JSON."""
    spans = [
        otlp_span(
            "f100000000000001",
            None,
            "trip.workflow",
            0,
            **{
                "traceloop.span.kind": "workflow",
                "traceloop.entity.name": "trip",
                "traceloop.workflow.name": "trip",
                "traceloop.entity.input": '{"args": ["plan a trip"], "kwargs": {}}',
                "traceloop.entity.output": '"done"',
                "traceloop.association.properties.session_id": "tl-sess",
            },
        ),
        otlp_span(
            "f100000000000002",
            "f100000000000001",
            "planner.agent",
            1,
            **{
                "traceloop.span.kind": "agent",
                "traceloop.entity.name": "planner",
                "traceloop.entity.input": '{"args": [], "kwargs": {"goal": "trip"}}',
            },
        ),
        otlp_span(
            "f100000000000003",
            "f100000000000002",
            "openai.chat",
            2,
            **{
                "llm.request.type": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": "plan a trip",
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": "Go to Rome",
            },
        ),
        otlp_span(
            "f100000000000004",
            "f100000000000002",
            "book.task",
            60,
            **{
                "traceloop.span.kind": "task",
                "traceloop.entity.name": "book",
                "traceloop.entity.input": '{"args": ["Rome"], "kwargs": {}}',
                "traceloop.entity.output": '{"ok": true}',
            },
        ),
    ]
    path = tmp_path / "traceloop.json"
    document = {
        "resourceSpans": [
            {
                "resource": {},
                "scopeSpans": [{"scope": {"name": SDK_SCOPE}, "spans": spans}],
            }
        ]
    }
    path.write_text(json.dumps(document))
    traj = recorded(path, how, db_path)
    assert traj.session_id == "tl-sess"
    assert steps_of(traj) == [("llm", "openai.chat"), ("span", "book")]
    assert (traj.steps[1].inputs, traj.steps[1].action) == ("Rome", {"ok": True})
    assert traj.metadata["capture"]["opaque_steps"] == ["book"]


# -- a task with steps below it, or inside a step ------------------------------------------------


@HOW
def test_a_task_around_steps_is_their_container_not_a_step(db_path, provider, how):
    def run() -> str:
        tracer = provider[0].get_tracer(SDK_SCOPE)
        with entity(tracer, "workflow", "trip", "plan a trip", result=ANSWER):
            with entity(tracer, "agent", "planner", goal="trip"):
                with entity(tracer, "task", "plan", "trip", result="Rome"):
                    chat(tracer, "plan a trip", "Go to Rome")
                    with entity(tracer, "tool", "search", result=["Rome"], query="hotels"):
                        pass
                with entity(tracer, "task", "outer", result=None):  # a task in a task
                    with entity(tracer, "task", "inner", 1, 2, result=3):
                        pass
        return ANSWER

    traj = captured(how, db_path, provider, run, expect=ANSWER)
    assert steps_of(traj) == [("llm", "openai.chat"), ("tool", "search"), ("span", "inner")]
    search, inner = traj.steps[1], traj.steps[2]
    assert search.inputs == {"arguments": {"query": "hotels"}} and search.action == ["Rome"]
    assert inner.inputs == {"args": [1, 2], "kwargs": {}} and inner.action == 3
    assert {step.agent for step in traj.steps} == {"planner"}
    assert traj.metadata["capture"]["opaque_steps"] == ["inner"]


@HOW
def test_a_task_inside_a_tool_is_part_of_that_step(db_path, provider, how):
    def run() -> str:
        tracer = provider[0].get_tracer(SDK_SCOPE)
        with entity(tracer, "workflow", "trip", "plan a trip", result=ANSWER):
            chat(tracer, "plan a trip", "Go to Rome")
            with entity(tracer, "tool", "book", city="Rome", result="booked"):
                with entity(tracer, "task", "pay", 120, result="paid"):
                    pass
        return ANSWER

    traj = captured(how, db_path, provider, run, expect=ANSWER)
    assert steps_of(traj) == [("llm", "openai.chat"), ("tool", "book")]
    assert traj.steps[1].inputs == {"arguments": {"city": "Rome"}}
    assert traj.steps[1].action == "booked"
    assert traj.metadata["capture"]["opaque_steps"] == []


@HOW
def test_a_task_recorded_without_content_is_a_step_that_says_so(db_path, provider, how):
    traj = captured(how, db_path, provider, lambda: run_trip(provider, content=False), ANSWER)
    assert steps_of(traj) == [("llm", "openai.chat"), ("span", "book")]
    book = traj.steps[1]
    assert book.inputs is None and book.action is None
    assert book.attributes["capture_notes"] == [openllmetry.ENTITY_NO_CONTENT]
    # as every opaque step, it is not counted among the steps without content: the note says
    assert f"step 1: {openllmetry.ENTITY_NO_CONTENT}" in traj.metadata["capture"]["notes"]


# -- how each span is read -----------------------------------------------------------------------


def span(scope: str, **attributes: Any) -> NormalizedSpan:
    return NormalizedSpan(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        name="book.task",
        parent_span_id=None,
        start_ns=1,
        end_ns=2,
        attributes=attributes,
        scope_name=scope,
    )


def test_an_sdk_task_is_left_for_the_assembler_with_its_name_and_content():
    m = map_span(
        span(
            SDK_SCOPE,
            **{
                "traceloop.span.kind": "task",
                "traceloop.entity.name": "book",
                "traceloop.entity.input": '{"args": [], "kwargs": {"city": "Rome"}}',
                "traceloop.entity.output": '"booked"',
            },
        )
    )
    assert m.role == Role.OTHER and m.kind is StepKind.SPAN  # its place in the tree decides
    assert (m.name, m.inputs, m.action) == ("book", {"city": "Rome"}, "booked")
    assert m.dialects == ["openllmetry"] and not m.notes


def test_a_langchain_task_stays_a_workflow():
    """A LangChain run's task span (a prompt template, a parser, a graph node) is no step."""
    m = map_span(
        span(
            openllmetry.LANGCHAIN_SCOPE,
            **{
                "traceloop.span.kind": "task",
                "traceloop.entity.name": "ChatPromptTemplate",
                "gen_ai.operation.name": "execute_task",
                "traceloop.entity.input": '{"inputs": {"q": "x"}, "tags": [], "metadata": {}, '
                '"kwargs": {}}',
            },
        )
    )
    assert m.role == Role.WORKFLOW and m.name == "ChatPromptTemplate"
