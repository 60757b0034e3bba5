"""An unmodified OpenAI-SDK agent, recorded, replayed and attributed with agent-replay.

The agent below is plain OpenAI SDK code: no ``ctx``, no decorators. ``instrument.installed``
turns each ``chat.completions.create`` call into a step; ``record_agent`` records one run;
``replay_agent`` replays it (held calls never reach the API) and prefix rollouts
(``ReplayPlan.ablate_from(i)``: hold the steps before ``i``, re-draw the rest) estimate how much
each step is to blame for the failure.

It runs offline: the only fake part is the HTTP transport of the OpenAI client (an
``httpx2.MockTransport`` that plays a model choosing the right city 80% of the time). The
recorded run is the unlucky one, where the model looked up the wrong city at step 1.

    python examples/openai_sdk_agent.py
"""

from __future__ import annotations

import json
import random
import statistics

import httpx2
import openai

from agent_replay import ReplayPlan, instrument
from agent_replay.instrument import record_agent, replay_agent

WEATHER = {"Paris": "rainy, 14C", "Lyon": "sunny, 22C"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


# -- the agent: plain OpenAI SDK code ---------------------------------------------------------


def make_agent(client: openai.OpenAI):
    def get_weather(city: str) -> str:
        return WEATHER.get(city, "unknown")

    def weather_agent(question: str) -> str:
        rewrite = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": f"Rewrite as a search query: {question}"}],
        )
        messages = [
            {"role": "system", "content": f"Search query: {rewrite.choices[0].message.content}"},
            {"role": "user", "content": question},
        ]
        plan = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
        call = plan.choices[0].message.tool_calls[0]
        city = json.loads(call.function.arguments)["city"]
        messages += [
            plan.choices[0].message,
            {"role": "tool", "tool_call_id": call.id, "content": get_weather(city)},
        ]
        answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        return answer.choices[0].message.content

    return weather_agent


def verifier(answer: str) -> bool:
    return "Paris" in answer


# -- the offline "OpenAI API" ----------------------------------------------------------------


class FakeOpenAI:
    """Answers chat completions like a model that gets the city right 80% of the time."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.requests = 0
        self.first_plan = True

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests += 1
        body = json.loads(request.content)
        last = body["messages"][-1]
        message: dict = {"role": "assistant"}
        if last["role"] == "tool":
            city = next(m for m in body["messages"] if m.get("tool_calls"))["tool_calls"][0]
            city = json.loads(city["function"]["arguments"])["city"]
            message["content"] = f"The weather in {city}: {last['content']}."
        elif body.get("tools"):
            city = "Paris" if self.rng.random() < 0.8 else "Lyon"
            if self.first_plan:  # the recorded run is the unlucky one
                city, self.first_plan = "Lyon", False
            message["content"] = None
            message["tool_calls"] = [
                {
                    "id": f"call_{self.requests}",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
                }
            ]
        else:
            message["content"] = f"weather query v{self.rng.randint(1, 9)}"
        return httpx2.Response(
            200,
            json={
                "id": f"chatcmpl-{self.requests}",
                "object": "chat.completion",
                "created": 1700000000,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28},
            },
        )

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(
            api_key="sk-offline",
            base_url="http://127.0.0.1:9/v1",
            http_client=httpx2.Client(transport=httpx2.MockTransport(self.handle)),
        )


# -- record, replay, attribute ---------------------------------------------------------------


def main(rollouts: int = 40, quiet: bool = False) -> dict:
    api = FakeOpenAI()
    agent = make_agent(api.client())
    say = (lambda *a: None) if quiet else print
    with instrument.installed("openai"):
        task = {"question": "What's the weather in Paris?"}
        trajectory = record_agent(agent, task, verifier=verifier)
        say(f"recorded {len(trajectory.steps)} steps, failed={trajectory.outcome.failed}")
        say(f"  answer: {trajectory.outcome.result!r}")

        before = api.requests
        factual = replay_agent(agent, trajectory, verifier=verifier)
        factual_requests = api.requests - before
        same = factual.result == trajectory.outcome.result
        say(f"factual replay: same answer={same}, HTTP requests={factual_requests}")

        rates, requests = [], []
        for start in range(len(trajectory.steps)):
            before = api.requests
            failures = [
                replay_agent(
                    agent, trajectory, ReplayPlan.ablate_from(start), seed=seed, verifier=verifier
                ).failed
                for seed in range(rollouts)
            ]
            rates.append(statistics.mean(failures))
            requests.append((api.requests - before) / rollouts)

    # the blame of step i: how much holding it (instead of re-drawing it) raises the failure rate
    effects = [
        (rates[i + 1] if i + 1 < len(rates) else float(trajectory.outcome.failed)) - rates[i]
        for i in range(len(rates))
    ]
    culprit = max(range(len(effects)), key=effects.__getitem__)
    say("step  call                              P(fail | re-draw from here)  effect")
    for i, step in enumerate(trajectory.steps):
        say(f"{i:>4}  {step.name:<34}{rates[i]:>12.2f}{effects[i]:>22.2f}")
    say(f"culprit: step {culprit} ({trajectory.steps[culprit].name})")
    return {
        "steps": len(trajectory.steps),
        "failed": trajectory.outcome.failed,
        "factual_same": same,
        "factual_requests": factual_requests,
        "rates": rates,
        "requests_per_rollout": requests,
        "effects": effects,
        "culprit": culprit,
    }


if __name__ == "__main__":
    main()
