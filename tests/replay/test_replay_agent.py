import json
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest

from agent_replay import ReplayPlan, attribute, replay, replayable_agent
from agent_replay.errors import PlanError
from agent_replay.model import StepDraft, StepKind, Trajectory
from agent_replay.replay.policies import OpenAIChatPolicy, PolicyError, ScriptedPolicy
from fake_openai import chat_completion, send_json, serving


def parts(role, text):
    return {"role": role, "parts": [{"type": "text", "content": text}]}


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
