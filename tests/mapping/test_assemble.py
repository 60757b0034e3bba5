import dataclasses
import json

from agent_replay.mapping.assemble import assemble
from agent_replay.mapping.spans import NormalizedSpan
from agent_replay.model import StepKind

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def span(n, name, parent=None, **attributes):
    status = attributes.pop("_status", 0)
    return NormalizedSpan(
        trace_id=TRACE,
        span_id=f"{n:016x}",
        name=name,
        parent_span_id=None if parent is None else f"{parent:016x}",
        start_ns=n * 10,
        end_ns=n * 10 + 5,
        status_code=status,
        attributes=attributes,
    )


def chat(n, parent, inputs, outputs):
    return span(
        n,
        "chat m",
        parent,
        **{
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs),
        },
    )


def call(cid, name, args):
    part = {"type": "tool_call", "name": name, "arguments": args}
    if cid:
        part["id"] = cid
    return {"role": "assistant", "parts": [part]}


def result(cid, response):
    return {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": cid, "response": response}],
    }


USER = {"role": "user", "parts": [{"type": "text", "content": "go"}]}
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "boss"}


def test_tool_without_id_links_by_name_to_the_oldest_open_request():
    spans = [
        span(1, "invoke_agent boss", **AGENT),
        chat(2, 1, [USER], [call("c1", "search", {"q": 1}), call("c2", "search", {"q": 2})]),
        span(
            3,
            "execute_tool search",
            1,
            **{"gen_ai.tool.name": "search", "gen_ai.tool.call.result": "r1"},
        ),
        span(
            4,
            "execute_tool search",
            1,
            **{"gen_ai.tool.name": "search", "gen_ai.tool.call.result": "r2"},
        ),
    ]
    (traj,) = assemble(spans)
    tools = [s for s in traj.steps if s.kind is StepKind.TOOL]
    assert [(t.attributes["requested_by"], t.attributes["tool_call_id"]) for t in tools] == [
        (0, "c1"),
        (0, "c2"),
    ]
    assert traj.steps[0].attributes["tool_calls"] == ["c1", "c2"]
    assert {s.agent for s in traj.steps} == {"boss"}


def test_a_call_id_reused_by_a_later_turn_links_to_that_turns_request():
    """Servers that number calls per turn (call_0, call_1, ...) reuse ids across the turns of
    a conversation; every later tool step was linked to the first turn's request."""

    def tool(n, city):
        attributes = {"gen_ai.tool.name": "weather", "gen_ai.tool.call.id": "call_1",
                      "gen_ai.tool.call.arguments": json.dumps({"city": city})}  # fmt: skip
        return span(n, "execute_tool weather", 1, **attributes)

    spans = [
        span(1, "invoke_agent boss", **AGENT),
        chat(2, 1, [USER], [call("call_1", "weather", {"city": "Paris"})]),
        tool(3, "Paris"),
        chat(4, 1, [USER], [call("call_1", "weather", {"city": "Oslo"})]),
        tool(5, "Oslo"),
    ]
    (traj,) = assemble(spans)
    tools = [s for s in traj.steps if s.kind is StepKind.TOOL]
    assert [t.attributes["requested_by"] for t in tools] == [0, 2]


def test_a_tool_whose_clock_is_behind_comes_after_the_step_that_asked_for_it():
    """A tool on another host, whose clock is 5 µs behind, started "before" the llm step that
    asked for it: it came first and unlinked, and a replay ran it before its request."""
    attributes = {"gen_ai.tool.name": "weather", "gen_ai.tool.call.id": "c1",
                  "gen_ai.tool.call.result": "rainy"}  # fmt: skip
    skewed = dataclasses.replace(span(3, "execute_tool weather", 1, **attributes), start_ns=15)
    spans = [
        span(1, "invoke_agent boss", **AGENT),
        chat(2, 1, [USER], [call("c1", "weather", {"city": "Paris"})]),  # starts at 20
        skewed,
        chat(4, 1, [USER, call("c1", "weather", {"city": "Paris"}), result("c1", "rainy")], []),
    ]
    (traj,) = assemble(spans)
    assert [s.label for s in traj.steps] == ["llm:chat m", "tool:weather", "llm:chat m"]
    assert traj.steps[1].attributes["requested_by"] == 0


def test_tool_answered_only_in_a_later_prompt_is_synthesized_before_that_prompt():
    first = chat(2, 1, [USER], [call("c1", "search", {"q": 1})])
    second = chat(3, 1, [USER, call("c1", "search", {"q": 1}), result("c1", "found")], [])
    (traj,) = assemble([span(1, "invoke_agent boss", **AGENT), first, second])
    assert [s.label for s in traj.steps] == ["llm:chat m", "tool:search", "llm:chat m"]
    tool = traj.steps[1]
    assert tool.inputs == {"arguments": {"q": 1}} and tool.action == "found"
    assert tool.attributes["synthesized"] and tool.attributes["requested_by"] == 0
    assert tool.agent == "boss"
    report = traj.metadata["capture"]
    assert report["synthesized_tool_steps"] == [1] and report["unanswered_tool_calls"] == []


def test_tool_step_without_result_takes_it_from_the_later_prompt():
    spans = [
        span(1, "invoke_agent boss", **AGENT),
        chat(2, 1, [USER], [call("c1", "search", {"q": 1})]),
        span(
            3,
            "execute_tool search",
            1,
            **{"gen_ai.tool.name": "search", "gen_ai.tool.call.id": "c1"},
        ),
        chat(4, 1, [USER, call("c1", "search", {"q": 1}), result("c1", "found")], []),
    ]
    (traj,) = assemble(spans)
    assert traj.steps[1].action == "found"
    assert traj.steps[1].attributes["result_from"] == "later llm input"
    assert traj.metadata["capture"]["tool_steps_without_result"] == []


def test_a_bare_tool_argument_is_named_only_by_the_one_argument_of_its_call():
    """openinference-langchain records ``get_weather(city="Paris")`` as ``input.value="Paris"``;
    the call that asked for it names the argument, and nothing else is guessed."""

    def tool_inputs(args, bare):
        tool = {"gen_ai.tool.name": "weather", "gen_ai.tool.call.id": "c1"}
        tool["gen_ai.tool.call.arguments"] = json.dumps(bare)
        spans = [
            span(1, "invoke_agent boss", **AGENT),
            chat(2, 1, [USER], [call("c1", "weather", args)]),
            span(3, "execute_tool weather", 1, **tool),
        ]
        (traj,) = assemble(spans)
        step = traj.steps[1]
        assert step.attributes["requested_by"] == 0
        return step.inputs, step.attributes.get("arguments_from")

    named = ({"arguments": {"city": "Paris"}}, "llm tool call")
    assert tool_inputs({"city": "Paris"}, "Paris") == named
    assert tool_inputs({"city": "Paris"}, "Rome") == ({"arguments": "Rome"}, None)
    two = {"city": "Paris", "unit": "C"}
    assert tool_inputs(two, "Paris") == ({"arguments": "Paris"}, None)
    assert tool_inputs({"city": "Paris"}, {"city": "Paris"}) == (
        {"arguments": {"city": "Paris"}},
        None,
    )


def test_unanswered_calls_and_missing_content_are_reported():
    spans = [
        span(1, "invoke_agent boss", **AGENT),
        chat(2, 1, [USER], [call("c9", "search", {})]),
        span(3, "chat m", 1, **{"gen_ai.operation.name": "chat"}),  # no content captured
        span(4, "lonely leaf", 1),
    ]
    (traj,) = assemble(spans)
    report = traj.metadata["capture"]
    assert report["unanswered_tool_calls"] == ["c9"]
    assert report["steps_without_content"] == [1]
    assert report["opaque_steps"] == ["lonely leaf"]
    assert report["replayable"] is False
    assert any("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in n for n in report["notes"])


def test_unencodable_values_do_not_lose_the_trajectory():
    class Opaque:
        def __repr__(self):
            return "<opaque>"

    # too deep to hash: kept as the text it is on every Python (3.11's JSON decoder gives up
    # on it, 3.12's reads it and the value goes back to its text, whole)
    deep = "[" * 5000 + "]" * 5000
    spans = [
        span(1, "invoke_agent boss", **AGENT),
        span(
            2, "execute_tool t", 1, **{"gen_ai.tool.name": "t", "gen_ai.tool.call.result": Opaque()}
        ),
        span(3, "execute_tool u", 1, **{"gen_ai.tool.name": "u", "gen_ai.tool.call.result": deep}),
    ]
    (traj,) = assemble(spans)
    traj.verify()
    assert traj.steps[0].action == {"unencodable": "<opaque>"}
    assert "could not be stored" in traj.steps[0].attributes["capture_notes"][0]
    assert traj.steps[1].action == deep
    # the trajectory's capture report says so too (it was made before sealing added the note)
    assert any(
        n.startswith("step 0: output could not be stored")
        for n in traj.metadata["capture"]["notes"]
    )


def test_root_error_marks_the_run_failed():
    spans = [
        span(1, "invoke_agent boss", _status=2, **AGENT),
        chat(2, 1, [USER], []),
    ]
    (traj,) = assemble(spans)
    assert traj.failed is True


def test_cyclic_parent_links_do_not_hang():
    a = NormalizedSpan(
        trace_id=TRACE,
        span_id="a" * 16,
        name="x",
        parent_span_id="b" * 16,
        attributes={"gen_ai.operation.name": "chat"},
    )
    b = NormalizedSpan(
        trace_id=TRACE,
        span_id="b" * 16,
        name="y",
        parent_span_id="a" * 16,
        attributes={"gen_ai.operation.name": "invoke_agent"},
    )
    (traj,) = assemble([a, b])  # returns instead of hanging: the cycle is walked from its start
    assert [s.label for s in traj.steps] == ["llm:x"]


def test_an_llm_span_inside_an_llm_step_is_the_same_call():
    # a framework's llm span without content around the provider instrumentation's chat span
    usage = {"gen_ai.usage.input_tokens": 7, "gen_ai.request.model": "m"}
    spans = [
        span(1, "invoke_agent boss", **AGENT),
        span(2, "llm", 1, **{"openinference.span.kind": "LLM"}),
        chat(3, 2, [USER], [call("c1", "search", {"q": 1})]),
        span(4, "generate_content m", 2, **{"gen_ai.operation.name": "chat", **usage}),
    ]
    (traj,) = assemble(spans)
    (step,) = traj.steps
    assert (step.kind, step.name, step.agent) == (StepKind.LLM, "llm", "boss")
    # the outer step takes what only the inner spans recorded, the first one first
    assert step.inputs == {"messages": [USER]}
    assert step.action == [call("c1", "search", {"q": 1})]
    assert step.attributes["tool_calls"] == ["c1"]
    assert step.attributes["input_tokens"] == 7 and step.attributes["model"] == "m"
    assert traj.metadata["capture"]["replayable"] is True


def test_a_retried_attempt_inside_an_llm_step_is_no_failure_of_the_call():
    # LangChain's llm span around two provider calls: a rate-limited one, then the answer
    spans = [
        span(1, "invoke_agent boss", **AGENT),
        span(2, "llm", 1, **{"openinference.span.kind": "LLM"}),
        span(3, "chat m", 2, _status=2, **{"gen_ai.operation.name": "chat", "error.type": "429"}),
        chat(4, 2, [USER], [call("c1", "search", {"q": 1})]),
    ]
    (traj,) = assemble(spans)
    (step,) = traj.steps
    assert step.error is None and not traj.outcome
    assert step.action == [call("c1", "search", {"q": 1})]
    failed = [span(1, "invoke_agent boss", **AGENT), *spans[1:3]]
    failed[1] = span(2, "llm", 1, _status=2, **{"openinference.span.kind": "LLM"})
    (traj,) = assemble(failed)  # the call itself failed: its own status says so
    assert traj.steps[0].error is not None


def test_an_llm_span_beside_an_llm_step_is_the_same_call_only_when_it_says_so():
    """An llm span under the same parent, within an llm step's time, with the same response
    id (or, lacking ids, the same output) is that call recorded twice; parallel and
    sequential calls are not, nor a span of the same instrumentation."""

    def timed(s, start, end, scope="", **extra):
        attributes = {**s.attributes, **extra}
        return dataclasses.replace(
            s, start_ns=start, end_ns=end, attributes=attributes, scope_name=scope
        )

    answer = [call("c1", "search", {"q": 1})]
    other = [call("c2", "search", {"q": 2})]
    outer = timed(chat(2, 1, [USER], answer), 20, 60, **{"gen_ai.response.id": "r1"})
    same = timed(chat(3, 1, [USER], answer), 30, 50, **{"gen_ai.response.id": "r1"})
    (traj,) = assemble([span(1, "invoke_agent boss", **AGENT), outer, same])
    assert [s.span_id for s in traj.steps] == [outer.span_id]

    no_ids = timed(chat(3, 1, [USER], answer), 30, 50)
    (traj,) = assemble([span(1, "invoke_agent boss", **AGENT), outer, no_ids])
    assert [s.span_id for s in traj.steps] == [outer.span_id]  # matched by the output

    for beside in (
        timed(chat(3, 1, [USER], answer), 30, 50, **{"gen_ai.response.id": "r2"}),  # parallel
        timed(chat(3, 1, [USER], other), 30, 50),  # parallel, another answer
        timed(chat(3, 1, [USER], answer), 61, 80),  # the same answer, asked again later
    ):
        (traj,) = assemble([span(1, "invoke_agent boss", **AGENT), outer, beside])
        assert [s.span_id for s in traj.steps] == [outer.span_id, beside.span_id]

    # regression: concurrent calls through one instrumentation that records no response id
    # (OpenInference), giving the same answer, are two calls; another instrumentation's span
    # of the call is the same call
    one, another = "openinference.instrumentation.openai", "opentelemetry.instrumentation.langchain"
    outer = timed(chat(2, 1, [USER], answer), 20, 60, one)
    concurrent = timed(chat(3, 1, [USER], answer), 30, 50, one)
    (traj,) = assemble([span(1, "invoke_agent boss", **AGENT), outer, concurrent])
    assert [s.span_id for s in traj.steps] == [outer.span_id, concurrent.span_id]
    twin = timed(chat(3, 1, [USER], answer), 30, 50, another)
    (traj,) = assemble([span(1, "invoke_agent boss", **AGENT), outer, twin])
    assert [s.span_id for s in traj.steps] == [outer.span_id]


def test_the_task_is_the_first_prompt_when_the_root_has_no_input():
    answer = {"role": "assistant", "parts": [{"type": "text", "content": "done"}]}
    system = {"role": "system", "parts": [{"type": "text", "content": "be brief"}]}
    spans = [
        span(1, "invoke_agent boss", **AGENT),
        span(2, "chat m", 1, **{"gen_ai.operation.name": "chat"}),  # no content captured
        chat(3, 1, [system, USER, answer, USER], [answer]),
    ]
    (traj,) = assemble(spans)
    # the messages before the first answer (a system message among them stays one)
    assert traj.task == {"messages": [system, USER]}
    (without_content,) = assemble(spans[:2])
    assert without_content.task == {"root_span": "invoke_agent boss"}


def test_an_agent_span_in_a_parent_cycle_with_nothing_below_is_a_step():
    """Malformed parent links that loop back to an agent span (A's parent is B, B's is A)
    hold no GenAI span below it: the agent span is a step, as it would be without the loop."""
    trace = "c" * 32
    agent = NormalizedSpan(
        trace_id=trace,
        span_id="a" * 16,
        name="invoke_agent a",
        parent_span_id="b" * 16,
        start_ns=1,
        end_ns=9,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
    )
    other = NormalizedSpan(
        trace_id=trace, span_id="b" * 16, name="http", parent_span_id="a" * 16, start_ns=2, end_ns=3
    )
    (trajectory,) = assemble([agent, other])
    assert [(s.kind, s.name) for s in trajectory.steps] == [(StepKind.AGENT, "a")]
