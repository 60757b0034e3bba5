"""Attribution-style rollouts on an unmodified SDK agent whose failure is planted at step 1.

The agent (real anthropic client + a real LangChain tool) triages the question, asks the
model which city to look up, runs the tool and answers. The model picks the right city 80%
of the time; the recorded run got the wrong one. Prefix rollouts (``ablate_from(i)``: hold
steps before i, re-draw the rest) must show that re-drawing the planted step changes the
failure rate and re-drawing a harmless one does not, and every re-drawn model call must make
exactly one HTTP request.
"""

from __future__ import annotations

import random
import statistics

from langchain_core.tools import tool

from agent_replay import ReplayPlan, instrument
from agent_replay.instrument import record_agent, replay_agent

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
ROLLOUTS = 30


class Model:
    """What the fake API answers: a triage label, a city choice, or an answer."""

    def __init__(self) -> None:
        self.rng = random.Random(7)
        self.planted = False

    def __call__(self, body, n):
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and last and last[0].get("type") == "tool_result":
            return f"Answer: {last[0]['content']}"
        if body.get("tools"):
            if not self.planted:  # the recorded run: the model picks the wrong city
                self.planted = True
                city = "Lyon"
            else:
                city = "Paris" if self.rng.random() < 0.8 else "Lyon"
            return {"tool_call": ("get_weather", {"city": city})}
        return f"triage label {self.rng.randint(0, 9)}"  # varies, and nothing depends on it


def make_agent(client, executions):
    @tool
    def get_weather(city: str) -> str:
        """Look up the weather."""
        executions.append(city)
        return f"{city}: rainy, 14C"

    def agent(question):
        user = {"role": "user", "content": question}
        client.messages.create(model="claude-test", max_tokens=50, messages=[user])
        plan = client.messages.create(
            model="claude-test", max_tokens=50, messages=[user], tools=[WEATHER_TOOL]
        )
        call = next(block for block in plan.content if block.type == "tool_use")
        result = get_weather.invoke(call.input)
        answer = client.messages.create(
            model="claude-test",
            max_tokens=50,
            messages=[
                user,
                {"role": "assistant", "content": plan.content},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result}],
                },
            ],
        )
        return answer.content[0].text

    return agent


def verifier(answer):
    return "Paris" in answer


def test_redrawing_the_planted_step_changes_the_failure_rate_and_harmless_ones_do_not(
    make_api,
):
    api = make_api(Model())
    executions: list[str] = []
    agent = make_agent(api.anthropic(), executions)
    with instrument.installed("anthropic", "langchain"):
        traj = record_agent(agent, {"question": "Weather in Paris?"}, verifier=verifier)
        assert traj.outcome.failed
        assert [s.label for s in traj.steps] == [
            "llm:anthropic.messages.create",
            "llm:anthropic.messages.create",
            "tool:get_weather",
            "llm:anthropic.messages.create",
        ]
        assert api.count == 3 and executions == ["Lyon"]

        factual = replay_agent(agent, traj, verifier=verifier)
        assert factual.failed and api.count == 3 and executions == ["Lyon"]

        rates, requests = {}, {}
        for start in range(4):
            failed, made = [], []
            for seed in range(ROLLOUTS):
                before = api.count
                result = replay_agent(
                    agent, traj, ReplayPlan.ablate_from(start), seed=seed, verifier=verifier
                )
                failed.append(result.failed)
                made.append(api.count - before)
            rates[start] = statistics.mean(failed)
            requests[start] = set(made)

    # every re-drawn model call is one request; held ones none (steps 0, 1 and 3 are calls)
    print("failure rates by first re-drawn step:", rates)
    assert requests == {0: {3}, 1: {2}, 2: {1}, 3: {1}}
    # holding the planted choice keeps the run failing, whatever is re-drawn after it
    assert rates[2] == rates[3] == 1.0
    # re-drawing it fixes most runs: the model's 80% of right answers
    assert 0.05 <= rates[1] <= 0.4
    effect = {step: rates[step + 1] - rates[step] for step in range(3)}
    culprit = max(effect, key=effect.get)
    assert culprit == 1
    # the triage (harmless) step's re-draw changes nothing beyond sampling noise
    assert abs(effect[0]) <= 0.2
    assert effect[2] == 0.0  # the tool step: re-drawing it cannot matter
