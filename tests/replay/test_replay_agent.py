import json
import random
from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace
from typing import ClassVar

import pytest

from agent_replay import ReplayPlan, attribute, replay, replayable_agent
from agent_replay.errors import PlanError
from agent_replay.model import StepDraft, StepKind, Trajectory
from agent_replay.replay.agent import propagation_pairs, rewrite
from agent_replay.replay.policies import (
    HoldPolicy,
    OpenAIChatPolicy,
    PolicyError,
    ResampleRequest,
    ScriptedPolicy,
)
from fake_openai import chat_completion, send_json, serving


def parts(role, text):
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def one_chat(attributes, session="t") -> Trajectory:
    """An imported run of one llm step ("hello" -> "hi") with these attributes."""
    draft = StepDraft(
        kind=StepKind.LLM,
        name="chat",
        inputs={"messages": [parts("user", "hello")]},
        action=[parts("assistant", "hi")],
        attributes=attributes,
    )
    return Trajectory(session, metadata={"source": "import:test"}).with_steps([draft])


def group_chat() -> Trajectory:
    """An imported three-speaker chat: each speaker sees the history so far."""
    lines = [
        ("Planner", "We should search the archive for the 2019 report first."),
        ("Searcher", "The archive says the 2019 report lists revenue of 5 million."),
        ("Writer", "Final answer: revenue was 5 million."),
    ]
    drafts, history = [], [parts("user", "What was revenue in the 2019 report?")]
    for agent, text in lines:
        drafts.append(
            StepDraft(
                kind=StepKind.LLM,
                name=f"{agent}.reply",
                agent=agent,
                inputs={"messages": list(history)},
                action=[parts("assistant", text)],
            )
        )
        history.append(parts("assistant", text))
    return Trajectory("chat", metadata={"source": "import:test"}).with_steps(drafts)


def final_text(result):
    return result["final"][0]["parts"][0]["content"]


def test_upstream_change_propagates_to_later_inputs():
    traj = group_chat()
    new_plan = [parts("assistant", "Let us ask the finance team instead of searching.")]
    seen = []

    def writer(request):
        seen.append(request.inputs["messages"])
        return request.step.output

    agent = replayable_agent(
        traj, {"Planner.reply": ScriptedPolicy([new_plan]), "agent:Writer": writer}
    )
    assert agent.observation_only == (1,)
    result = replay(agent, traj, ReplayPlan.ablate_from(0), seed=1)
    assert result.drafts[0].action == new_plan
    # the writer saw the new planner message in its history, not the recorded one
    assert seen[-1][1]["parts"][0]["content"].startswith("Let us ask the finance team")
    assert result.held_unresamplable == (1,)  # Searcher has no policy: held and flagged
    assert result.live_steps == 2


def test_factual_replay_of_an_import_is_exact():
    traj = group_chat()
    agent = replayable_agent(traj, {"llm": ScriptedPolicy(["x"])})
    result = replay(agent, traj)
    assert result.live_steps == 0 and result.trajectory().head_hash == traj.head_hash


def with_failed_step(last: bool) -> Trajectory:
    """A search that timed out; the agent showed the model the error and went on (or, with
    ``last``, the run ended there)."""
    drafts = [
        StepDraft(kind=StepKind.LLM, name="plan", inputs={"q": 1}, action="search"),
        StepDraft(
            kind=StepKind.TOOL,
            name="search",
            inputs={"arguments": {"q": "x"}},
            action="Error: timed out",
            error={"type": "TimeoutError", "module": "builtins", "message": "timed out"},
        ),
        StepDraft(kind=StepKind.LLM, name="answer", inputs={"q": 2}, action="sorry"),
    ]
    return Trajectory("failed", metadata={"source": "import:test"}).with_steps(
        drafts[:2] if last else drafts
    )


def test_a_failure_the_run_went_on_past_is_served_and_the_replay_goes_on():
    traj = with_failed_step(last=False)
    agent = replayable_agent(traj, {"llm": ScriptedPolicy(["again"])})
    factual = replay(agent, traj)
    assert factual.exception is None and not factual.failed
    assert factual.result["outputs"] == ["search", "Error: timed out", "sorry"]
    assert factual.trajectory().head_hash == traj.head_hash  # the failure is kept as recorded
    redrawn = replay(agent, traj, ReplayPlan.ablate_from(0), seed=3)
    assert redrawn.exception is None and redrawn.result["final"] == "again"
    # the last step's failure is how the run ended: it still ends the replay
    ended = with_failed_step(last=True)
    result = replay(replayable_agent(ended, {"llm": ScriptedPolicy(["again"])}), ended)
    assert result.failed and result.exception["type"] == "TimeoutError"


def test_legacy_two_argument_policies_still_work():
    traj = group_chat()
    agent = replayable_agent(traj, {"llm": lambda ctx, inputs: [parts("assistant", "same")]})
    result = replay(agent, traj, ReplayPlan.ablate_from(2), seed=0)
    assert final_text(result.result) == "same"


class _ChatServer(BaseHTTPRequestHandler):
    requests: ClassVar[list] = []
    fail_first = True
    always_fail = False

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        if type(self).fail_first or type(self).always_fail:
            type(self).fail_first = False
            send_json(self, {"error": {"message": "try again"}}, status=500)
            return
        last = body["messages"][-1]["content"]
        message = {"role": "assistant", "content": f"[{body['model']}] re-said: {last[-20:]}"}
        send_json(self, chat_completion(1, body["model"], message, "stop", (11, 7)))

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_server():
    _ChatServer.requests = []
    _ChatServer.fail_first = True
    _ChatServer.always_fail = False
    with serving(_ChatServer) as base_url:
        yield base_url


def test_openai_policy_with_the_real_client_and_its_retries(chat_server):
    traj = group_chat()
    policy = OpenAIChatPolicy(
        base_url=chat_server,
        api_key="sk-test",
        model="local-model",
        instructions=lambda step: f"You are {step.agent}.",
        max_retries=2,
    )
    agent = replayable_agent(traj, {"agent:Writer": policy})
    result = replay(agent, traj, ReplayPlan.ablate_from(2).swap_model("bigger-model"), seed=3)
    assert final_text(result.result).startswith("[bigger-model] re-said:")
    assert result.tokens == 18 and not result.tokens_estimated
    assert len(_ChatServer.requests) == 2  # one 500, retried once by the openai client
    path, body = _ChatServer.requests[-1]
    assert path == "/v1/chat/completions"
    assert body["messages"][0] == {"role": "system", "content": "You are Writer."}
    assert body["messages"][-1]["content"].startswith("The archive says")
    assert isinstance(body["seed"], int)


def test_an_import_without_a_policy_cannot_be_forced_edited_or_model_swapped():
    traj = group_chat()
    agent = replayable_agent(traj, {"agent:Writer": ScriptedPolicy([[parts("assistant", "x")]])})
    assert agent.observation_only == (0, 1)
    for plan in (
        ReplayPlan.factual().force(1, [parts("assistant", "forced")]),
        ReplayPlan.factual().edit(0, {"messages": []}),
        ReplayPlan.factual().swap_model("big", 1),
    ):
        with pytest.raises(PlanError, match="observation-only"):
            replay(agent, traj, plan)
    swapped = replay(agent, traj, ReplayPlan.factual().swap_model("big", 2))
    assert swapped.live_steps == 1  # a step named in swap_model is re-drawn, not held


def test_a_failing_policy_stops_the_replay_instead_of_failing_the_run(chat_server):
    """An endpoint that answers 500 is not the agent failing: replay raises PolicyError (and
    so does an analysis), no rollout outcome is made up."""
    _ChatServer.fail_first = False
    _ChatServer.always_fail = True
    traj = group_chat()
    policy = OpenAIChatPolicy(base_url=chat_server, api_key="k", model="m", max_retries=0)
    agent = replayable_agent(traj, {"agent:Writer": policy})
    with pytest.raises(PolicyError, match=r"step 2 .* resample policy 'agent:Writer' failed"):
        replay(agent, traj, ReplayPlan.ablate_from(0), verifier=lambda r: 1.0)
    with pytest.raises(PolicyError):
        attribute(traj, agent=agent, verifier=lambda r: 0.0, budget=10)


def test_steps_the_recording_marks_unresamplable_are_observation_only_under_a_catch_all():
    drafts = [
        StepDraft(kind=StepKind.LLM, name="plan", inputs={"q": 1}, action="a"),
        StepDraft(kind="span", name="GET /api", inputs={}, action="x", resamplable=False),
    ]
    traj = Trajectory("mixed", metadata={"source": "import:test"}).with_steps(drafts)
    agent = replayable_agent(traj, {"*": ScriptedPolicy(["b"])})
    assert agent.observation_only == (1,)
    result = replay(agent, traj, ReplayPlan.ablate_from(0))
    assert result.held_unresamplable == (1,)


def test_openai_policy_falls_back_to_the_recorded_calls_model(chat_server, monkeypatch):
    """An imported llm step keeps its model in ``attributes``; without model=, a plan hint or
    AGENT_REPLAY_MODEL, the policy re-draws with that model instead of refusing."""
    monkeypatch.delenv("AGENT_REPLAY_MODEL", raising=False)
    _ChatServer.fail_first = False
    traj = one_chat({"model": "gpt-4o-mini"}, session="m")
    policy = OpenAIChatPolicy(base_url=chat_server, api_key="k", max_retries=0)
    replay(replayable_agent(traj, {"llm": policy}), traj, ReplayPlan.ablate_from(0))
    assert [body["model"] for _, body in _ChatServer.requests] == ["gpt-4o-mini"]


def test_steps_captured_without_content_are_observation_only():
    """Content capture off: a step with neither inputs nor output has nothing a policy can
    re-draw from (it would be sent nulls): held, and never scored, under any policy."""
    drafts = [
        StepDraft(kind=StepKind.LLM, name="chat", inputs=None, action=None),
        StepDraft(kind=StepKind.LLM, name="chat", inputs={"q": 1}, action="a"),
    ]
    traj = Trajectory("nc", metadata={"source": "import:test"}).with_steps(drafts)
    calls = []
    agent = replayable_agent(traj, {"*": lambda request: calls.append(request) or "b"})
    assert agent.observation_only == (0,)
    result = attribute(traj, agent=agent, verifier=lambda r: 0.0, budget=20)
    assert result.steps[0].observation_only and result.steps[0].effect is None
    assert {request.step.index for request in calls} == {1}
    assert any("no recorded content" in w for w in result.warnings)


def test_attribution_holds_and_flags_the_steps_the_replay_agent_has_no_policy_for():
    """The replay agent's observation-only steps are flagged in the attribution result and
    named in its warnings, not reported as ordinary steps (they were held in every rollout)."""
    traj = group_chat()
    agent = replayable_agent(
        traj,
        {
            "agent:Planner": ScriptedPolicy([[parts("assistant", "Ask the finance team.")]]),
            "agent:Writer": ScriptedPolicy([[parts("assistant", "x")]]),
        },
    )
    assert agent.observation_only == (1,)
    result = attribute(traj, agent=agent, verifier=lambda r: 0.0, budget=40)
    assert [s.observation_only for s in result.steps] == [False, True, False]
    assert any("held in every rollout: [1]" in w for w in result.warnings)


def test_steps_with_a_hold_policy_are_held_and_not_scored_but_can_be_forced():
    """A hold policy re-draws the recorded output, so its step cannot change a rollout: with
    ``*=hold`` attribution spent its whole rollout cap (992 rollouts on three steps) to report
    +0.00 for every step and "undecided"; such steps are now held without rollouts."""
    traj = group_chat()
    writer = ScriptedPolicy([[parts("assistant", "x")]])
    agent = replayable_agent(traj, {"*": HoldPolicy(), "agent:Writer": writer})
    assert agent.observation_only == () and agent.held_by_policy == (0, 1)
    result = attribute(traj, agent=agent, verifier=lambda r: 0.0, budget=40)
    assert [s.observation_only for s in result.steps] == [True, True, False]
    assert [s.effect for s in result.steps[:2]] == [None, None]
    assert any("hold policy" in w and "[0, 1]" in w for w in result.warnings)
    everything = replayable_agent(traj, {"*": HoldPolicy()})
    nothing = attribute(traj, agent=everything, verifier=lambda r: 0.0)
    assert nothing.stop_reason == "nothing to attribute" and nothing.cost["rollouts"] == 8
    assert any("every step that could be re-drawn has a hold policy" in w for w in nothing.warnings)
    forced = replay(everything, traj, ReplayPlan.factual().force(0, [parts("assistant", "y")]))
    assert forced.result["outputs"][0] == [parts("assistant", "y")]  # a plan may still force it


def weather_call(city, call_id="w", text=None):
    parts_ = [] if text is None else [{"type": "text", "content": text}]
    parts_ += [
        {"type": "tool_call", "id": call_id, "name": "get_weather", "arguments": {"city": city}},
        {"type": "tool_call", "id": "c", "name": "get_calendar", "arguments": {"day": "mon"}},
    ]
    return [{"role": "assistant", "parts": parts_}]


@pytest.mark.parametrize(
    ("recorded", "redrawn"),
    [
        (weather_call("London", text="Let me check."), weather_call("Paris")),  # text dropped
        (weather_call("London"), weather_call("Paris", text="Checking both.")),  # text added
        (
            weather_call("London"),
            [{"role": "assistant", "parts": weather_call("Paris")[0]["parts"][::-1]}],
        ),
    ],
    ids=["text-dropped", "text-added", "calls-reordered"],
)
def test_a_changed_tool_call_reaches_its_tool_step_whatever_the_text_parts(recorded, redrawn):
    """Tool calls pair with the recorded call of the same tool, not by position among the
    parts: models often write a short text before their calls (Anthropic nearly always), and a
    re-draw that adds or drops it must still hand the tool step the new arguments."""
    drafts = [
        StepDraft(kind=StepKind.LLM, name="plan", inputs={"q": "Paris?"}, action=recorded),
        StepDraft(
            kind=StepKind.TOOL,
            name="get_weather",
            inputs={"city": "London"},
            action="rain",
            attributes={"tool_call_id": "w"},
        ),
        StepDraft(kind=StepKind.TOOL, name="get_calendar", inputs={"day": "mon"}, action="free"),
    ]
    traj = Trajectory("w", metadata={"source": "import:test"}).with_steps(drafts)
    seen = {}

    def tool(request):
        seen[request.step.name] = request.inputs
        return "ok"

    agent = replayable_agent(traj, {"plan": ScriptedPolicy([redrawn]), "tool": tool})
    replay(agent, traj, ReplayPlan.ablate_from(0))
    assert seen == {"get_weather": {"city": "Paris"}, "get_calendar": {"day": "mon"}}
    assert agent.unfollowed_tool_calls == 0  # same tools, same number of calls


def test_a_redraw_calling_other_tools_is_counted_and_attribution_warns():
    """The replay agent re-issues the recorded steps; a re-draw that asks for another tool
    cannot be followed, and attribution says so instead of blaming the task."""
    other = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "n", "name": "news"}]}]
    drafts = [
        StepDraft(kind=StepKind.LLM, name="plan", inputs={"q": 1}, action=weather_call("London")),
        StepDraft(kind=StepKind.TOOL, name="get_weather", inputs={"city": "London"}, action="r"),
    ]
    traj = Trajectory("o", metadata={"source": "import:test"}).with_steps(drafts)
    agent = replayable_agent(traj, {"plan": ScriptedPolicy([other])})
    result = attribute(traj, agent=agent, verifier=lambda r: 0.0, budget=20)
    assert agent.unfollowed_tool_calls > 0
    assert any("other tool calls than the recorded" in w for w in result.warnings)


def test_plain_lists_of_different_lengths_are_not_paired_item_by_item():
    assert propagation_pairs(["a", "b", "c"], ["b", "c"]) == [(["a", "b", "c"], ["b", "c"])]


def call(name, args, call_id):
    return {"type": "tool_call", "name": name, "id": call_id, "arguments": args}


def response(text, call_id):
    return {"type": "tool_call_response", "response": text, "id": call_id}


def test_a_changed_call_does_not_change_another_call_that_had_the_same_arguments():
    """HelloTool and ByeTool were both called with {"name": "Bob"}; the re-draw changes only
    HelloTool's. Substituting by value gave ByeTool Alice too (a call nobody made)."""
    asked = {"role": "assistant", "parts": [call("HelloTool", {"name": "Bob"}, "h1"),
                                            call("ByeTool", {"name": "Bob"}, "b1")]}  # fmt: skip
    redrawn = {"role": "assistant", "parts": [call("HelloTool", {"name": "Alice"}, "h2"),
                                              call("ByeTool", {"name": "Bob"}, "b2")]}  # fmt: skip
    drafts = [
        StepDraft(kind=StepKind.LLM, name="chat", inputs={"q": 1}, action=[asked]),
        StepDraft(kind=StepKind.TOOL, name="HelloTool", inputs={"name": "Bob"}, action="hi",
                  attributes={"tool_call_id": "h1"}),
        StepDraft(kind=StepKind.TOOL, name="ByeTool", inputs={"name": "Bob"}, action="bye",
                  attributes={"tool_call_id": "b1"}),
    ]  # fmt: skip
    traj = Trajectory("k", metadata={"source": "import:test"}).with_steps(drafts)
    seen = {}

    def tool(request):
        seen[request.step.name] = request.inputs
        return "ok"

    replay(replayable_agent(traj, {"chat": ScriptedPolicy([[redrawn]]), "tool": tool}), traj,
           ReplayPlan.ablate_from(0))  # fmt: skip
    assert seen == {"HelloTool": {"name": "Alice"}, "ByeTool": {"name": "Bob"}}


def test_a_redrawn_tool_result_does_not_change_another_calls_equal_result():
    """Two lookups both answered "order not found"; re-drawn, only order 17's changes. The
    final call's history showed the new answer for both calls."""
    not_found = "order not found in database"
    asked = {"role": "assistant", "parts": [call("lookup", {"o": 17}, "c17"),
                                            call("lookup", {"o": 42}, "c42")]}  # fmt: skip
    answers = {"role": "tool", "parts": [response(not_found, "c17"), response(not_found, "c42")]}
    drafts = [
        StepDraft(kind=StepKind.LLM, name="chat", inputs={"q": 1}, action=[asked]),
        StepDraft(kind=StepKind.TOOL, name="lookup", inputs={"o": 17}, action=not_found,
                  attributes={"tool_call_id": "c17"}),
        StepDraft(kind=StepKind.TOOL, name="lookup", inputs={"o": 42}, action=not_found,
                  attributes={"tool_call_id": "c42"}),
        StepDraft(kind=StepKind.LLM, name="answer", inputs={"messages": [asked, answers]},
                  action="neither exists"),
    ]  # fmt: skip
    traj = Trajectory("o", metadata={"source": "import:test"}).with_steps(drafts)
    seen = []

    def lookup(request):
        return "order 17: shipped" if request.inputs["o"] == 17 else not_found

    def answer(request):
        seen.append(request.inputs["messages"][-1])
        return "ok"

    agent = replayable_agent(traj, {"lookup": lookup, "answer": answer})
    replay(agent, traj, ReplayPlan.ablate_from(1))
    assert [p["response"] for p in seen[0]["parts"]] == ["order 17: shipped", not_found]


@pytest.mark.parametrize("redrawn", [{"temp": 12}, '{"temp": 12}', "sunny, 12C"])
def test_a_redrawn_json_tool_result_reaches_the_histories_that_hold_it_as_text(redrawn):
    """An OTel tool result is JSON text: the tool step holds it decoded, later histories as
    the text that was sent. Matched by value only, the re-draw never reached them, and
    attribution could not blame the tool (every effect +0.00)."""
    calls = [
        call("get_weather", {"city": "Paris"}, "c1"),
        call("get_weather", {"city": "Oslo"}, "c2"),
    ]
    asked = {"role": "assistant", "parts": calls}
    recorded = '{"temp":-40}'  # as sent, compact
    answers = {"role": "tool", "parts": [response(recorded, "c1"), response(recorded, "c2")]}
    drafts = [
        StepDraft(kind=StepKind.LLM, name="chat", inputs={"q": 1}, action=[asked]),
        StepDraft(kind=StepKind.TOOL, name="get_weather", inputs={"city": "Paris"},
                  action={"temp": -40}, attributes={"tool_call_id": "c1"}),
        StepDraft(kind=StepKind.TOOL, name="get_weather", inputs={"city": "Oslo"},
                  action={"temp": -40}, attributes={"tool_call_id": "c2"}),
        StepDraft(kind=StepKind.LLM, name="answer", inputs={"messages": [asked, answers]},
                  action="cold"),
    ]  # fmt: skip
    traj = Trajectory("j", metadata={"source": "import:test"}).with_steps(drafts)
    seen = []

    def weather(request):
        return redrawn if request.inputs["city"] == "Paris" else {"temp": -40}

    def answer(request):
        seen.append(request.inputs["messages"][-1])
        return "ok"

    replay(replayable_agent(traj, {"get_weather": weather, "answer": answer}), traj,
           ReplayPlan.ablate_from(1))  # fmt: skip
    text = redrawn if isinstance(redrawn, str) else json.dumps(redrawn)
    assert [p["response"] for p in seen[0]["parts"]] == [text, recorded]  # c2's stays


def test_texts_swapped_by_a_redraw_are_swapped_in_later_strings_too():
    """Replacing one pair after the other undid a swap (A->B, then B->A: both read A)."""
    a, b = "Apple revenue: 94.9 billion", "Microsoft revenue: 69.6 billion"
    pairs = [(a, b), (b, a)]
    assert rewrite(f"1. {a}\n2. {b}", pairs) == f"1. {b}\n2. {a}"


def test_a_policy_output_not_shaped_like_the_recording_is_warned_about():
    """A message dict where the recording has a list of messages cannot be paired with
    anything downstream; it was reported as asking for other tool calls."""
    drafts = [
        StepDraft(kind=StepKind.LLM, name="plan", inputs={"q": 1}, action=weather_call("London")),
        StepDraft(kind=StepKind.TOOL, name="get_weather", inputs={"city": "London"}, action="r"),
    ]
    traj = Trajectory("s", metadata={"source": "import:test"}).with_steps(drafts)
    unwrapped = weather_call("Paris")[0]  # the message itself, not a list of messages
    agent = replayable_agent(traj, {"plan": lambda request: unwrapped})
    result = attribute(traj, agent=agent, verifier=lambda r: 0.0, budget=20)
    assert agent.misshaped_outputs > 0 and agent.unfollowed_tool_calls == 0
    assert any("not shaped like the recorded output" in w for w in result.warnings)
    assert not any("other tool calls" in w for w in result.warnings)


def test_calls_the_recording_has_in_two_messages_and_the_redraw_in_one():
    """Koog records one assistant message per tool call; a re-draw (as OpenAI answers) puts
    both calls in one message. The second call's new arguments must reach its tool step, and
    later histories must not show that call twice (the recorded message is dropped)."""
    hello = {"role": "assistant", "parts": [call("HelloTool", {"name": "Bob"}, "h1")]}
    bye = {"role": "assistant", "parts": [call("ByeTool", {"name": "Bobby"}, "b1")]}
    both = {"role": "assistant", "parts": [call("HelloTool", {"name": "Alice"}, "h2"),
                                           call("ByeTool", {"name": "Carol"}, "b2")]}  # fmt: skip
    said = [{"role": "tool", "parts": [response("hi", "h1")]},
            {"role": "tool", "parts": [response("bye", "b1")]}]  # fmt: skip
    drafts = [
        StepDraft(kind=StepKind.LLM, name="chat", inputs={"q": 1}, action=[hello, bye]),
        StepDraft(kind=StepKind.TOOL, name="HelloTool", inputs={"name": "Bob"}, action="hi",
                  attributes={"tool_call_id": "h1"}),
        StepDraft(kind=StepKind.TOOL, name="ByeTool", inputs={"name": "Bobby"}, action="bye",
                  attributes={"tool_call_id": "b1"}),
        StepDraft(kind=StepKind.LLM, name="final", action="done",
                  inputs={"messages": [hello, said[0], bye, said[1]]}),
    ]  # fmt: skip
    traj = Trajectory("split", metadata={"source": "import:test"}).with_steps(drafts)
    seen = {}

    def tool(request):
        seen[request.step.name] = request.inputs
        return f"to {request.inputs['name']}"

    def final(request):
        seen["history"] = request.inputs["messages"]
        return "done"

    agent = replayable_agent(traj, {"chat": ScriptedPolicy([[both]]), "tool": tool, "final": final})
    replay(agent, traj, ReplayPlan.ablate_from(0))
    assert seen["HelloTool"] == {"name": "Alice"} and seen["ByeTool"] == {"name": "Carol"}
    history = seen["history"]
    assert [m["role"] for m in history] == ["assistant", "tool", "tool"]
    assert history[0] == both
    assert [m["parts"][0]["id"] for m in history[1:]] == ["h2", "b2"]


def redraw_first(traj, output, tool=None):
    """The later steps' inputs when step 0 is re-drawn to ``output`` (tools answer ``tool``,
    everything else repeats its recording)."""
    seen = {}

    def policy(request):
        seen[request.step.index] = request.inputs
        if request.step.index == 0:
            return output
        return tool(request) if tool and request.step.kind is StepKind.TOOL else request.step.output

    replay(replayable_agent(traj, {"*": policy}), traj, ReplayPlan.ablate_from(0))
    return seen


def test_a_redrawn_tool_result_reaches_a_response_recorded_without_an_id():
    """Koog records tool responses without ids; the result's substitution is scoped to its
    call, and a response naming no call is anyone's (it was left unchanged)."""
    rainy = "Rainy in Paris"
    answer = {"role": "tool", "parts": [{"type": "tool_call_response", "response": rainy}]}
    drafts = [
        StepDraft(kind=StepKind.TOOL, name="weather", inputs={"c": "Paris"}, action=rainy,
                  attributes={"tool_call_id": "w1"}),
        StepDraft(kind=StepKind.LLM, name="final", action="done", inputs={"messages": [answer]}),
    ]  # fmt: skip
    traj = Trajectory("r", metadata={"source": "import:test"}).with_steps(drafts)
    seen = redraw_first(traj, "Sunny in Paris")
    assert seen[1]["messages"][0]["parts"][0]["response"] == "Sunny in Paris"


def test_calls_the_recording_has_in_one_message_and_the_redraw_spreads_stay_answered():
    """A re-draw that spreads two calls over two messages: the later history kept only the
    first (its second call vanished, its response answered nothing); the recorded message
    now stays, each call in it rewritten."""
    both = {"role": "assistant", "parts": [call("search", {"q": "a"}, "c1"),
                                           call("fetch", {"q": "b"}, "c2")]}  # fmt: skip
    spread = [{"role": "assistant", "parts": [call("search", {"q": "A"}, "c1")]},
              {"role": "assistant", "parts": [call("fetch", {"q": "B"}, "c2")]}]  # fmt: skip
    answers = [{"role": "tool", "parts": [response("r1", "c1")]},
               {"role": "tool", "parts": [response("r2", "c2")]}]  # fmt: skip
    drafts = [
        StepDraft(kind=StepKind.LLM, name="plan", inputs={"q": 1}, action=[both]),
        StepDraft(kind=StepKind.LLM, name="final", action="done",
                  inputs={"messages": [both, *answers]}),
    ]  # fmt: skip
    traj = Trajectory("s", metadata={"source": "import:test"}).with_steps(drafts)
    history = redraw_first(traj, spread)[1]["messages"]
    calls = [p["arguments"] for p in history[0]["parts"]]
    assert calls == [{"q": "A"}, {"q": "B"}] and len(history) == 3


def test_list_items_whose_type_field_is_a_list_do_not_crash_the_replay():
    """A tool's rows with a "type" field holding a list made the pairing raise TypeError,
    scored as the run failing."""
    rows = [{"name": "ivysaur", "type": ["grass", "poison"]}]
    drafts = [
        StepDraft(kind=StepKind.TOOL, name="lookup", inputs={"q": 1}, action=rows),
        StepDraft(kind=StepKind.LLM, name="final", inputs={"rows": rows}, action="done"),
    ]
    traj = Trajectory("u", metadata={"source": "import:test"}).with_steps(drafts)
    more = [*rows, {"name": "venusaur", "type": ["grass"]}]
    assert redraw_first(traj, more)[1] == {"rows": more}


def test_a_changed_argument_reaches_a_tool_step_holding_the_arguments_as_text():
    """The argument values pair too, scoped to their call: a tool step that recorded its
    arguments as a string gets the new value inside it (the rewrite dropped this)."""
    asked = [{"role": "assistant", "parts": [call("search", {"query": "weather in Paris today",
                                                             "n": 5}, "s1")]}]  # fmt: skip
    redrawn = [{"role": "assistant", "parts": [call("search", {"query": "weather in London today",
                                                               "n": 5}, "s2")]}]  # fmt: skip
    drafts = [
        StepDraft(kind=StepKind.LLM, name="plan", inputs={"q": 1}, action=asked),
        StepDraft(kind=StepKind.TOOL, name="search", action="r", attributes={"tool_call_id": "s1"},
                  inputs={"arguments": "{'query': 'weather in Paris today', 'n': 5}"}),
    ]  # fmt: skip
    traj = Trajectory("t", metadata={"source": "import:test"}).with_steps(drafts)
    seen = redraw_first(traj, redrawn, tool=lambda request: "r")
    assert seen[1] == {"arguments": "{'query': 'weather in London today', 'n': 5}"}


def test_the_openai_policy_gives_a_conversation_turn_its_role_and_the_task(chat_server):
    """A Who&When turn's inputs are only the speaker's system prompt: the request was the
    system prompt and a JSON dump of it (step 0), or a bare transcript with neither the role
    nor the task (later steps). Now every request has the speaker's system prompt, the task
    and the conversation so far."""
    from agent_replay.ingest import load
    from conftest import WHO_AND_WHEN

    _ChatServer.fail_first = False
    (traj,) = load(WHO_AND_WHEN / "Algorithm-Generated" / "1.json")
    policy = OpenAIChatPolicy(base_url=chat_server, api_key="k", model="m", max_retries=0)
    replay(replayable_agent(traj, {"llm": policy}), traj, ReplayPlan.ablate_from(0), seed=1)
    llm_steps = [s for s in traj.steps if s.kind is StepKind.LLM]
    assert len(_ChatServer.requests) == len(llm_steps) > 2
    for step, (_, body) in zip(llm_steps, _ChatServer.requests, strict=True):
        messages = body["messages"]
        role = step.inputs["system"][0]["content"]
        assert messages[0] == {"role": "system", "content": role}
        assert messages[1] == {"role": "user", "content": f"The task: {traj.task}"}
        assert sum(traj.task in m["content"] for m in messages) == 1  # once
        assert not any('"turn"' in m["content"] for m in messages)
        assert messages[-1]["content"] == (
            f"Continue the conversation as {step.agent}: write your next message."
        )
        assert len(messages) == 3 + step.index  # system, task, every earlier turn, the ask


def test_a_model_swap_fork_names_its_step_and_records_the_model_that_answered(chat_server):
    """``fork(model=)`` at a step no policy can re-draw stored a child identical to its parent
    (a force there is refused; so is this now); a re-drawn step recorded the old model."""
    from agent_replay import fork

    _ChatServer.fail_first = False
    traj = group_chat()
    policy = OpenAIChatPolicy(base_url=chat_server, api_key="k", model="m", max_retries=0)
    agent = replayable_agent(traj, {"agent:Writer": policy})
    with pytest.raises(PlanError, match="observation-only"):
        fork(agent, traj, at_step=1, model="bigger-model")
    child = fork(agent, traj, at_step=2, model="bigger-model")
    assert [body["model"] for _, body in _ChatServer.requests] == ["bigger-model"]
    assert child.steps[2].attributes["model"] == "bigger-model"
    assert final_text(child.outcome.result).startswith("[bigger-model] re-said:")


class _EmptyReply(BaseHTTPRequestHandler):
    reply: ClassVar[dict] = {}

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        send_json(self, type(self).reply)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("reply", [{"id": "x", "object": "chat.completion"}, {"choices": []}])
def test_a_reply_without_a_message_is_a_policy_error_that_says_so(reply):
    """A 200 without choices surfaced as "TypeError: 'NoneType' object is not subscriptable"."""
    _EmptyReply.reply = reply
    traj = group_chat()
    with serving(_EmptyReply) as base_url:
        policy = OpenAIChatPolicy(base_url=base_url, api_key="k", model="m", max_retries=0)
        agent = replayable_agent(traj, {"agent:Writer": policy})
        with pytest.raises(PolicyError, match=r"step 2 .*answered without a message"):
            replay(agent, traj, ReplayPlan.ablate_from(0))


def openai_call(name, city, call_id):
    arguments = json.dumps({"city": city})
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def openai_shaped_run() -> Trajectory:
    """A planner asking for two tools and a writer, recorded in OpenAI's message shape (as
    JSONL step records or ``from_steps`` data hold them)."""
    calls = [
        openai_call("get_weather", "Paris", "call_w"),
        openai_call("get_time", "Paris", "call_t"),
    ]
    asked = {"role": "assistant", "content": None, "tool_calls": calls}
    history = [{"role": "user", "content": "Weather and time in Paris?"}, asked,
               {"role": "tool", "tool_call_id": "call_w", "content": "Rainy in Paris"},
               {"role": "tool", "tool_call_id": "call_t", "content": "14:00 in Paris"}]  # fmt: skip
    drafts = [
        StepDraft(kind=StepKind.LLM, name="planner", inputs={"messages": history[:1]},
                  action=[asked]),
        StepDraft(kind=StepKind.TOOL, name="get_weather", inputs={"arguments": {"city": "Paris"}},
                  action="Rainy in Paris", attributes={"tool_call_id": "call_w"}),
        StepDraft(kind=StepKind.TOOL, name="get_time", inputs={"arguments": {"city": "Paris"}},
                  action="14:00 in Paris", attributes={"tool_call_id": "call_t"}),
        StepDraft(kind=StepKind.LLM, name="writer", inputs={"messages": history},
                  action=[{"role": "assistant", "content": "Rainy, 14:00"}]),
    ]  # fmt: skip
    return Trajectory("oa", metadata={"source": "import:test"}).with_steps(drafts)


@pytest.mark.parametrize("reordered", [False, True], ids=["same-order", "reordered"])
def test_openai_shaped_calls_reach_their_tool_steps_and_keep_their_responses(reordered):
    """A re-drawn call in OpenAI's shape (arguments as JSON text under "function") never
    reached the tool steps, and calls were paired by position: a re-draw calling the tools
    in another order gave each tool's result the other call's id in the writer's history."""
    traj = openai_shaped_run()
    calls = [openai_call("get_weather", "Berlin", "W2"), openai_call("get_time", "Rome", "T2")]
    text = "Let me check." if reordered else None
    redrawn = {"role": "assistant", "content": text,
               "tool_calls": calls[::-1] if reordered else calls}  # fmt: skip
    seen = {}

    def tool(request):
        seen[request.step.name] = request.inputs
        return f"{request.step.name} in {request.inputs['arguments']['city']}"

    def writer(request):
        seen["history"] = request.inputs["messages"]
        return [{"role": "assistant", "content": "ok"}]

    policies = {"planner": ScriptedPolicy([[redrawn]]), "tool": tool, "writer": writer}
    agent = replayable_agent(traj, policies)
    replay(agent, traj, ReplayPlan.ablate_from(0))
    assert seen["get_weather"] == {"arguments": {"city": "Berlin"}}
    assert seen["get_time"] == {"arguments": {"city": "Rome"}}
    assert seen["history"][1] == redrawn
    answers = {m["tool_call_id"]: m["content"] for m in seen["history"][2:]}
    assert answers == {"W2": "get_weather in Berlin", "T2": "get_time in Rome"}
    assert agent.unfollowed_tool_calls == 0


def test_an_openai_shaped_redraw_calling_other_tools_is_counted():
    traj = openai_shaped_run()
    other = {"role": "assistant", "content": None,
             "tool_calls": [openai_call("get_news", "Paris", "n1")]}  # fmt: skip
    agent = replayable_agent(traj, {"planner": ScriptedPolicy([[other]])})
    replay(agent, traj, ReplayPlan.ablate_from(0))
    assert agent.unfollowed_tool_calls == 1


def test_the_openai_policy_answers_an_openai_shaped_recording_in_its_shape():
    """The reply to an OpenAI-shaped recording came back in the OTel parts shape: nothing
    downstream (the tool steps, the writer's history) could be paired with it."""
    call_ = openai_call("get_weather", "Berlin", "call_9")
    message = {"role": "assistant", "content": None, "tool_calls": [call_]}
    _EmptyReply.reply = chat_completion(1, "m", message, "tool_calls", (5, 5))
    traj = openai_shaped_run()
    seen = {}

    def tool(request):
        seen[request.step.name] = request.inputs
        return "r"

    with serving(_EmptyReply) as base_url:
        policy = OpenAIChatPolicy(base_url=base_url, api_key="k", model="m", max_retries=0)
        result = replay(replayable_agent(traj, {"planner": policy, "tool": tool}), traj,
                        ReplayPlan.ablate_from(0))  # fmt: skip
    assert result.result["outputs"][0] == [message]
    assert seen["get_weather"] == {"arguments": {"city": "Berlin"}}


def formatted_result_run(call_id, openai_shape=False) -> Trajectory:
    """A tool whose result the app formats before sending it to the model ("rainy, 57F" for
    ``{"temp_f": 57, ...}``): no substitution by value can find it in the later history."""
    if openai_shape:
        asked = {"role": "assistant", "content": None,
                 "tool_calls": [openai_call("get_weather", "Paris", call_id or "x")]}  # fmt: skip
        answer = {"role": "tool", "tool_call_id": call_id, "content": "rainy, 57F"}
    else:
        asked = {"role": "assistant", "parts": [call("get_weather", {"city": "Paris"}, call_id)]}
        answer = {"role": "tool", "parts": [response("rainy, 57F", call_id)]}
    attributes = {"tool_call_id": call_id} if call_id else {}
    drafts = [
        StepDraft(kind=StepKind.LLM, name="plan", inputs={"q": 1}, action=[asked]),
        StepDraft(kind=StepKind.TOOL, name="get_weather", inputs={"city": "Paris"},
                  action={"temp_f": 57, "conditions": "rainy"}, attributes=attributes),
        StepDraft(kind=StepKind.LLM, name="final", inputs={"messages": [asked, answer]},
                  action="It is rainy."),
    ]  # fmt: skip
    return Trajectory("f", metadata={"source": "import:test"}).with_steps(drafts)


@pytest.mark.parametrize("openai_shape", [False, True], ids=["parts", "openai"])
def test_a_redrawn_tool_result_replaces_a_formatted_response_to_its_call(openai_shape):
    """The response with the tool step's call id held text the app made of the result: the
    re-drawn result never reached the next model call (it saw "rainy, 57F" whatever the tool
    answered). The response is now the new result, as JSON text."""
    traj = formatted_result_run("call_1", openai_shape)
    new = {"temp_f": 50, "conditions": "foggy"}
    seen = redraw_first_tool(traj, new)
    answer = seen["messages"][-1]
    held = answer["content"] if openai_shape else answer["parts"][0]["response"]
    assert held == json.dumps(new)


def redraw_first_tool(traj, result):
    """The last step's inputs when the tool step is re-drawn to ``result``."""
    seen = {}

    def final(request):
        seen.update(request.inputs)
        return "ok"

    policies = {"tool": lambda request: result, "final": final}
    replay(replayable_agent(traj, policies), traj, ReplayPlan.ablate_from(1))
    return seen


def test_a_redrawn_tool_result_that_reaches_no_later_step_is_counted_and_warned_about():
    """Without a call id the formatted response cannot be matched: attribution scored the
    tool's re-draws as having no effect, silently."""
    traj = formatted_result_run(None)
    agent = replayable_agent(traj, {"tool": lambda request: {"temp_f": 50}})
    result = attribute(traj, agent=agent, verifier=lambda r: 0.0, budget=20)
    assert agent.unreached_tool_results > 0
    assert any("re-drawn tool result(s) reached no later step" in w for w in result.warnings)
    reached = formatted_result_run("call_1")
    agent = replayable_agent(reached, {"tool": lambda request: {"temp_f": 50}})
    result = attribute(reached, agent=agent, verifier=lambda r: 0.0, budget=20)
    assert agent.unreached_tool_results == 0
    assert not any("reached no later step" in w for w in result.warnings)


@pytest.mark.parametrize(
    ("script", "weights", "message"),
    [
        ([], None, "empty list"),
        ({"plan": []}, None, r"entry 'plan' is an empty list"),
        (["a", "b"], [-1.0, 2.0], "at least 0"),
        (["a", "b"], [0, 0], "not all be 0"),
        (["a", "b"], [float("nan"), 1.0], "finite"),
        (["a", "b"], [1.0], "1 weights for the 2 alternatives"),
    ],
)
def test_a_script_with_nothing_to_draw_or_bad_weights_is_refused(script, weights, message):
    """ScriptedPolicy([]) served the recorded output (scored as no effect); weights like
    [-1.0, 2.0] were accepted, and a wrong number failed only inside the rollout."""
    with pytest.raises(ValueError, match=message):
        ScriptedPolicy(script, weights=weights)


def test_a_step_a_script_table_has_no_entry_for_is_held_and_flagged():
    """A mapping without the step's entry served its recorded output as a re-draw: the step
    was scored (+0.00) as if its re-draws changed nothing."""
    traj = group_chat()
    table = ScriptedPolicy({"Planner.reply": [[parts("assistant", "x")]], 2: lambda r: "y"})
    agent = replayable_agent(traj, {"*": table})
    assert agent.observation_only == (1,)
    assert not table.covers(traj.steps[1]) and table.covers(traj.steps[2])
    result = attribute(traj, agent=agent, verifier=lambda r: 0.0, budget=20)
    assert result.steps[1].observation_only and result.steps[1].effect is None
    assert any("no entry in its ScriptedPolicy table" in w for w in result.warnings)
    request = ResampleRequest(step=traj.steps[1], inputs=None, rng=random.Random(0))
    with pytest.raises(PolicyError, match=r"step 1 .*has no entry for it"):
        table.resample(request)


def test_a_connection_error_names_the_endpoint_it_tried():
    """ "APIConnectionError: Connection error." did not say which server was tried."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    traj = group_chat()
    policy = OpenAIChatPolicy(base_url=url, api_key="k", model="m", max_retries=0, timeout=5)
    agent = replayable_agent(traj, {"agent:Writer": policy})
    with pytest.raises(PolicyError, match=rf"APIConnectionError: .*\(endpoint {url}/?\)"):
        replay(agent, traj, ReplayPlan.ablate_from(0))


def test_an_openai_policy_without_an_endpoint_or_a_key_is_refused(monkeypatch):
    """Without a base URL it called api.openai.com with a dummy key: every re-draw failed
    with "Connection error." (offline) or 401, far from where the policy was made."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(PolicyError, match="no endpoint: pass base_url= or set OPENAI_BASE_URL"):
        OpenAIChatPolicy(model="m")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    assert OpenAIChatPolicy(model="m").endpoint == "https://api.openai.com/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    assert OpenAIChatPolicy(model="m").endpoint == "http://localhost:8000/v1"


def test_a_model_swap_on_a_step_without_content_says_why_a_policy_does_not_help():
    """fork --model on a step imported without content said "give it a resample policy"
    when it had one: no policy can re-draw a step with neither inputs nor output."""
    from agent_replay import fork

    drafts = [
        StepDraft(kind=StepKind.LLM, name="chat", inputs=None, action=None),
        StepDraft(kind=StepKind.LLM, name="chat", inputs={"q": 1}, action="a"),
    ]
    traj = Trajectory("nc", metadata={"source": "import:test"}).with_steps(drafts)
    agent = replayable_agent(traj, {"*": lambda request: "b"})
    with pytest.raises(PlanError, match="recorded without content") as raised:
        fork(agent, traj, at_step=0, model="m2")
    assert "give it a resample policy" not in str(raised.value)


def test_a_reply_without_choices_is_shown_whole_in_the_error():
    """The reply was cut at 200 characters of its repr, mid-field."""
    _EmptyReply.reply = chat_completion(1, "m", {"role": "assistant"}, "stop", (11, 7))
    _EmptyReply.reply["choices"] = []
    traj = group_chat()
    with serving(_EmptyReply) as base_url:
        policy = OpenAIChatPolicy(base_url=base_url, api_key="k", model="m", max_retries=0)
        agent = replayable_agent(traj, {"agent:Writer": policy})
        with pytest.raises(PolicyError) as raised:
            replay(agent, traj, ReplayPlan.ablate_from(0))
    text = str(raised.value).split("no choices in its reply: ")[1]
    assert json.loads(text.split(" (endpoint ")[0][:-1])["usage"]["total_tokens"] == 18


def test_openai_shaped_calls_merged_or_spread_by_the_redraw_stay_answered_once():
    """The regrouping of calls (see the OTel-shaped tests above) in OpenAI's shape: calls the
    recording has in two messages and the re-draw in one reach their tool steps and show once
    in later histories; calls spread over two messages leave the recorded one, rewritten."""
    hello = {"role": "assistant", "content": None,
             "tool_calls": [openai_call("HelloTool", "Bob", "h1")]}  # fmt: skip
    bye = {"role": "assistant", "content": None,
           "tool_calls": [openai_call("ByeTool", "Bobby", "b1")]}  # fmt: skip
    calls = [openai_call("HelloTool", "Alice", "h2"), openai_call("ByeTool", "Carol", "b2")]
    both = {"role": "assistant", "content": None, "tool_calls": calls}
    said = [{"role": "tool", "tool_call_id": "h1", "content": "hi"},
            {"role": "tool", "tool_call_id": "b1", "content": "bye"}]  # fmt: skip
    drafts = [
        StepDraft(kind=StepKind.LLM, name="chat", inputs={"q": 1}, action=[hello, bye]),
        StepDraft(kind=StepKind.TOOL, name="HelloTool", inputs={"city": "Bob"}, action="hi",
                  attributes={"tool_call_id": "h1"}),
        StepDraft(kind=StepKind.TOOL, name="ByeTool", inputs={"city": "Bobby"}, action="bye",
                  attributes={"tool_call_id": "b1"}),
        StepDraft(kind=StepKind.LLM, name="final", action="done",
                  inputs={"messages": [hello, said[0], bye, said[1]]}),
    ]  # fmt: skip
    traj = Trajectory("m", metadata={"source": "import:test"}).with_steps(drafts)
    seen = redraw_first(traj, [both], tool=lambda request: f"to {request.inputs['city']}")
    assert seen[1] == {"city": "Alice"} and seen[2] == {"city": "Carol"}
    assert seen[3]["messages"] == [
        both,
        {"role": "tool", "tool_call_id": "h2", "content": "to Alice"},
        {"role": "tool", "tool_call_id": "b2", "content": "to Carol"},
    ]
    # the other way round: the recorded message stays, each call in it rewritten
    drafts = [
        StepDraft(kind=StepKind.LLM, name="plan", inputs={"q": 1}, action=[both]),
        StepDraft(kind=StepKind.LLM, name="final", action="done",
                  inputs={"messages": [both, *said]}),
    ]  # fmt: skip
    traj = Trajectory("s", metadata={"source": "import:test"}).with_steps(drafts)
    history = redraw_first(traj, [hello, bye])[1]["messages"]
    assert history[0]["tool_calls"] == hello["tool_calls"] + bye["tool_calls"]
    assert len(history) == 3


def test_the_openai_policy_samples_as_the_recorded_call_did(chat_server):
    """A step recorded at temperature 0.2 was re-drawn at 1.0 (the policy's default): the
    rollouts measured another sampling policy than the agent's."""
    _ChatServer.fail_first = False
    traj = one_chat({"model": "m", "parameters": {"temperature": 0.2, "top_p": 0.9}}, session="t")
    for policy, expected in (
        (OpenAIChatPolicy(base_url=chat_server, api_key="k", max_retries=0), 0.2),
        (OpenAIChatPolicy(base_url=chat_server, api_key="k", max_retries=0, temperature=0.7), 0.7),
    ):
        _ChatServer.requests = []
        replay(replayable_agent(traj, {"llm": policy}), traj, ReplayPlan.ablate_from(0))
        ((_, body),) = _ChatServer.requests
        assert body["temperature"] == expected and body["top_p"] == 0.9


def test_recorded_sampling_parameters_written_as_text_are_used():
    """QA: Langfuse keeps span attributes as text (Koog's ``"temperature": "0.2"``): the
    parameter was skipped and the step re-drawn at 1.0."""
    from agent_replay.replay.policies import _recorded_parameters

    step = SimpleNamespace(attributes={"parameters": {"temperature": "0.2", "max_tokens": "64"}})
    assert _recorded_parameters(step, {}) == {"temperature": 0.2, "max_tokens": 64}
    step = SimpleNamespace(attributes={"parameters": {"temperature": "hot", "top_p": "nan"}})
    assert _recorded_parameters(step, {}) == {}


def test_requests_keep_every_tool_message_answering_a_call_before_it():
    """QA: a re-draw that made no tool call left the recorded tool message answering nothing
    in later requests, and an endpoint refuses such a request (400) - which stopped the
    attribution; Koog's results carry no call id (sent as ""); text sent beside a tool
    result was dropped; reasoning was sent as what the assistant said."""
    from agent_replay.replay.policies import to_openai_messages

    call = {"type": "tool_call", "id": "c1", "name": "weather", "arguments": {"city": "Paris"}}
    recorded = {
        "messages": [
            parts("user", "weather?"),
            {"role": "assistant", "parts": [{"type": "reasoning", "content": "use a tool"}, call]},
            {
                "role": "user",
                "parts": [
                    {"type": "tool_call_response", "response": "rainy"},  # no id (Koog)
                    {"type": "text", "content": "Also, answer in French."},
                ],
            },
        ]
    }
    messages = to_openai_messages(recorded)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[1]["content"] == "" and messages[1]["tool_calls"][0]["id"] == "c1"
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "rainy"}
    assert messages[3] == {"role": "user", "content": "Also, answer in French."}
    # the call re-drawn away upstream: the result answers nothing, and is sent as text
    redrawn = {"messages": [parts("user", "weather?"), parts("assistant", "It is rainy.")]}
    redrawn["messages"].append(
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "r"}]}
    )
    messages = to_openai_messages(redrawn)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[2]["content"] == "(tool result) r"
    # a call that nothing answers is dropped from its message
    unanswered = {"messages": [parts("user", "q"), {"role": "assistant", "parts": [call]}]}
    unanswered["messages"].append(parts("user", "never mind"))
    messages = to_openai_messages(unanswered)
    assert "tool_calls" not in messages[1] and messages[1]["content"] == ""


def test_a_redrawn_call_replaces_the_recorded_calls_of_an_openai_message():
    """QA: with the recorded output one OpenAI message dict, a re-draw calling another city
    kept the recorded calls beside the new text: scored as re-drawn, served as held."""
    from agent_replay.replay.policies import shape_like

    def fn_call(city, call_id):
        function = SimpleNamespace(name="weather", arguments=json.dumps({"city": city}))
        return SimpleNamespace(id=call_id, function=function)

    recorded = {"role": "assistant", "content": "", "tool_calls": [openai_call("w", "Paris", "a")]}
    message = SimpleNamespace(content=None, tool_calls=[fn_call("Berlin", "b")])
    reply = shape_like(recorded, message, "tool_calls")
    assert reply["content"] is None and len(reply["tool_calls"]) == 1
    assert json.loads(reply["tool_calls"][0]["function"]["arguments"]) == {"city": "Berlin"}
    text_only = shape_like(recorded, SimpleNamespace(content="No.", tool_calls=None), "stop")
    assert text_only == {"role": "assistant", "content": "No."}


def test_a_policy_function_with_an_optional_argument_gets_the_request():
    """QA: ``fn(request, unit="F")`` was taken for the seed's ``fn(ctx, inputs)``."""
    from agent_replay.replay.policies import as_policy

    def policy(request, unit="F"):
        return f"{request.inputs['city']}: 57{unit}"

    request = SimpleNamespace(inputs={"city": "Paris"}, ctx=None)
    assert as_policy(policy)(request) == "Paris: 57F"


def test_an_async_client_is_refused_with_a_clear_error():
    import openai

    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k")
    policy = OpenAIChatPolicy(client=client, model="m")
    step = SimpleNamespace(index=0, label="llm:chat", attributes={}, output=[])
    request = ResampleRequest(
        step=step, inputs={"messages": [parts("user", "hi")]}, rng=random.Random(0)
    )
    with pytest.raises(PolicyError, match=r"synchronous client \(openai.OpenAI\)"):
        policy.resample(request)


def test_the_openai_policy_sends_the_recorded_stops_penalties_and_token_cap(chat_server):
    """QA: the import kept ``stop``, the penalties and ``max_completion_tokens``, and the
    re-draw was sent without them (another sampling policy than the recorded call's)."""
    _ChatServer.fail_first = False
    recorded = {
        "temperature": 0.3,
        "stop": ["\nUser:"],
        "frequency_penalty": "0.5",
        "presence_penalty": 0.1,
        "max_completion_tokens": 256,
        "top_k": 40,  # no chat completions parameter: not sent
        "seed": 7,  # the rollout's stream gives the seed
    }
    traj = one_chat({"model": "m", "parameters": recorded}, session="p")
    for policy, cap in (
        (OpenAIChatPolicy(base_url=chat_server, api_key="k", max_retries=0), None),
        (OpenAIChatPolicy(base_url=chat_server, api_key="k", max_retries=0, max_tokens=9), 9),
    ):
        _ChatServer.requests = []
        replay(replayable_agent(traj, {"llm": policy}), traj, ReplayPlan.ablate_from(0))
        ((_, body),) = _ChatServer.requests
        assert body["temperature"] == 0.3 and body["stop"] == ["\nUser:"]
        assert body["frequency_penalty"] == 0.5 and body["presence_penalty"] == 0.1
        assert "top_k" not in body and body["seed"] != 7
        if cap is None:
            assert body["max_completion_tokens"] == 256 and "max_tokens" not in body
        else:
            assert body["max_tokens"] == cap and "max_completion_tokens" not in body
