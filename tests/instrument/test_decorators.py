"""@instrument.llm / tool / memory: functions as steps of the ambient run."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import pydantic
import pytest

from agent_replay import (
    CanonicalEncodingError,
    ReplayPlan,
    SideEffectBlockedError,
    instrument,
    record,
    replay,
)
from agent_replay.instrument import record_agent, replay_agent

CALLS: list[str] = []
DRAWS = itertools.count()  # a model that answers differently every time it is called


@instrument.tool
def search(query, limit=3):
    CALLS.append(f"search:{query}")
    return [f"{query}-{i}" for i in range(limit)]


@instrument.llm(name="planner", resamplable=True)
def plan(prompt, *, model="small", temperature=0.0):
    CALLS.append(f"plan:{model}")
    return {"model": model, "pick": next(DRAWS)}


@instrument.memory(name="remember", side_effects=True)
def remember(key, value):
    CALLS.append(f"remember:{key}")
    return "stored"


class Weather(pydantic.BaseModel):
    city: str
    temperature_c: float


@instrument.tool
def weather(city: str) -> Weather:
    CALLS.append(f"weather:{city}")
    return Weather(city=city, temperature_c=12.5)


def agent(topic):
    hits = search(topic)
    decision = plan(f"choose among {hits}", temperature=0.3)
    report = weather("Paris")
    remember("last", decision["pick"])
    return {"hits": hits, "pick": decision["pick"], "report": report.model_dump()}


@pytest.fixture(autouse=True)
def clean_calls():
    CALLS.clear()


def test_decorated_calls_are_steps_named_and_bound():
    traj = record_agent(agent, {"topic": "cats"})
    assert [s.label for s in traj.steps] == [
        "tool:search",
        "llm:planner",
        "tool:weather",
        "memory:remember",
    ]
    assert traj.steps[0].inputs == {"query": "cats"}  # defaults not passed are not stored
    assert traj.steps[1].inputs == {
        "prompt": "choose among ['cats-0', 'cats-1', 'cats-2']",
        "temperature": 0.3,
    }
    assert traj.steps[3].side_effects and not traj.steps[3].resamplable
    assert traj.steps[2].action["__agent_replay__"] == "pydantic"
    assert len(CALLS) == 4


def test_outside_a_run_they_are_plain_calls():
    assert search("dogs", limit=1) == ["dogs-0"]
    assert isinstance(weather("Oslo"), Weather)
    assert CALLS == ["search:dogs", "weather:Oslo"]


def test_held_replay_serves_results_as_their_own_types_without_calling():
    traj = record_agent(agent, {"topic": "cats"})
    CALLS.clear()
    seen = []

    def checking_agent(topic):
        out = agent(topic)
        seen.append(type(weather("Paris")))  # a fifth call: past the recording, runs live
        return out

    result = replay_agent(checking_agent, traj)
    assert result.result == traj.outcome.result
    assert CALLS == ["weather:Paris"]  # only the call the recording does not have
    assert seen == [Weather]
    assert result.diverged  # that extra call is a divergence, reported as such


def test_side_effects_are_never_run_live_in_a_replay():
    traj = record_agent(agent, {"topic": "cats"})
    CALLS.clear()
    # re-draw everything from the planner on: the memory write is held (it has side effects)
    result = replay_agent(agent, traj, ReplayPlan.ablate_from(1), seed=3)
    assert "remember:last" not in CALLS
    assert result.held_unresamplable == (3,)
    assert result.result["pick"] != traj.outcome.result["pick"]

    # a run that leaves the recording and reaches the write gets it refused, at the call
    def other_agent(topic):
        weather("Rome")  # not what was recorded at position 0
        remember("x", 1)

    blocked = replay_agent(other_agent, traj)
    assert blocked.outcome.failed
    assert blocked.exception["type"] == SideEffectBlockedError.__name__
    assert "remember:x" not in CALLS


def test_a_decorated_side_effect_off_the_recording_runs_its_mock_with_the_same_arguments():
    notes = []

    @instrument.tool(side_effects=True, mock=lambda channel, text: f"mock:{channel}:{text}")
    def notify(channel, text):
        notes.append(text)
        return f"sent:{channel}"

    def first(topic):
        return notify("ops", topic)

    traj = record_agent(first, {"topic": "cats"})
    notes.clear()

    def other(topic):
        weather("Rome")  # not what was recorded at position 0: the run left the recording
        return notify("ops", topic)

    result = replay_agent(other, traj)
    assert result.exception is None and result.result == "mock:ops:cats"
    (mocked,) = result.mocked_tools  # the step is named by the function's qualname
    assert mocked.endswith(".notify")
    assert notes == []


def test_an_async_decorated_side_effect_runs_its_async_mock_awaited():
    """QA: an async mock of an async decorated tool was never awaited: the rollout failed
    storing a coroutine."""

    async def queue_instead(to):
        return f"queued for {to}"

    @instrument.tool(side_effects=True, mock=queue_instead)
    async def send_email(to):
        raise AssertionError("never run in a replay")

    async def first(to):
        return "recorded"

    async def other(to):
        await asyncio.sleep(0)
        weather("Rome")  # not what was recorded: the run left the recording
        return await send_email(to)

    traj = record_agent(first, {"to": "a@b.c"})
    result = replay_agent(other, traj)
    assert result.exception is None and result.result == "queued for a@b.c"


def test_a_decorated_mock_needs_side_effects_and_a_callable():
    with pytest.raises(ValueError, match="without side_effects=True"):
        instrument.tool(mock=lambda: "x")(lambda: "y")
    with pytest.raises(TypeError, match="mock= must be callable"):
        instrument.tool(side_effects=True, mock="x")(lambda: "y")


def test_arguments_that_cannot_be_stored_fail_naming_the_step_before_the_call():
    class Handle:
        pass

    def bad_agent():
        search("ok")
        with contextlib.suppress(CanonicalEncodingError):  # the agent swallows it: the
            search(Handle())  # recording must refuse all the same
        return "done"

    with pytest.raises(CanonicalEncodingError) as info:
        record_agent(bad_agent)
    assert "step 1 (tool:search) inputs" in str(info.value)
    assert "$.query" in str(info.value)
    assert CALLS == ["search:ok"]  # the bad call never ran


def test_results_that_cannot_be_stored_fail_naming_the_step():
    @instrument.tool
    def opens_file():
        return object()

    with pytest.raises(CanonicalEncodingError) as info:
        record_agent(lambda: opens_file())
    assert "step 0 (tool:" in str(info.value) and "output" in str(info.value)
    assert "cannot be stored as data" in str(info.value)


def test_methods_leave_self_out_and_exclude_names_arguments_not_stored():
    class Agent:
        def __init__(self):
            self.client = object()

        @instrument.tool(exclude=("client",))
        def fetch(self, url, client=None):
            return f"got {url}"

        def run(self):
            return self.fetch("https://example.invalid", client=self.client)

    bot = Agent()
    traj = record_agent(bot.run)
    assert traj.steps[0].name.endswith("Agent.fetch")
    assert traj.steps[0].inputs == {"url": "https://example.invalid"}
    assert replay_agent(bot.run, traj).result == "got https://example.invalid"


def test_nested_instrumented_calls_are_one_step():
    @instrument.llm
    def inner(x):
        return x * 2

    @instrument.tool
    def outer(x):
        return inner(x) + 1  # part of the outer step: replaying outer never calls inner

    traj = record_agent(lambda: outer(5))
    assert [s.label for s in traj.steps] == [f"tool:{outer.__qualname__}"]
    assert traj.steps[0].action == 11


def test_async_functions_and_generators():
    @instrument.tool
    async def fetch(i):
        await asyncio.sleep(0)
        CALLS.append(f"fetch:{i}")
        return i * 10

    @instrument.llm
    def tokens(text):
        CALLS.append("tokens")
        yield from text.split()

    async def async_agent():
        values = await asyncio.gather(*(fetch(i) for i in range(3)))
        return [*values, list(tokens("a b c"))]

    traj = record_agent(async_agent)
    assert traj.outcome.result == [0, 10, 20, ["a", "b", "c"]]
    assert [s.inputs for s in traj.steps[:3]] == [{"i": 0}, {"i": 1}, {"i": 2}]
    CALLS.clear()
    result = replay_agent(async_agent, traj)
    assert result.result == traj.outcome.result and not result.diverged
    assert CALLS == []


def test_swap_model_replaces_the_model_argument_of_a_decorated_llm():
    def one_call():
        return plan("p")["model"]

    traj = record_agent(one_call)
    swapped = replay_agent(one_call, traj, ReplayPlan.ablate_from(0).swap_model("large"))
    assert traj.outcome.result == "small"
    assert swapped.result == "large"
    assert CALLS == ["plan:small", "plan:large"]


def test_static_and_class_methods_can_be_decorated():
    class Tools:
        base = 100

        @instrument.tool
        @staticmethod
        def double(x):
            return 2 * x

        @instrument.tool
        @classmethod
        def add_base(cls, x):
            return cls.base + x

    traj = record_agent(lambda: [Tools.double(2), Tools.add_base(1)])
    assert traj.outcome.result == [4, 101]
    assert [s.inputs for s in traj.steps] == [{"x": 2}, {"x": 1}]


def test_core_replay_with_pass_context_false_and_ctx_agents_together():
    # the same decorated functions inside a ctx agent: steps interleave with ctx steps
    def ctx_agent(ctx, topic):
        hits = search(topic)
        return ctx.llm("summarise", produce=lambda: f"{len(hits)} hits")

    traj = record(ctx_agent, {"topic": "owls"})
    assert [s.label for s in traj.steps] == ["tool:search", "llm:summarise"]
    assert replay(ctx_agent, traj).result == "3 hits"

    traj2 = record(agent, {"topic": "owls"}, pass_context=False)
    result = replay(agent, traj2, ReplayPlan.ablate_from(2), pass_context=False)
    assert result.live_steps == 1 and result.held_unresamplable == (3,)


def test_record_agent_saves_to_a_store_when_given(db_path):
    from agent_replay import CheckpointStore

    traj = record_agent(agent, {"topic": "bats"}, session_id="bats", store=db_path)
    with CheckpointStore(db_path) as store:
        loaded = store.load("bats")
    assert loaded.head_hash == traj.head_hash
    assert replay_agent(agent, loaded).result == traj.outcome.result


def test_sync_calls_inside_an_async_agent_are_steps():
    async def async_agent(topic):
        await asyncio.sleep(0)
        return search(topic, limit=1)  # a sync instrumented call under an async run

    traj = record_agent(async_agent, {"topic": "eels"})
    assert [s.label for s in traj.steps] == ["tool:search"]
    CALLS.clear()
    assert replay_agent(async_agent, traj).result == ["eels-0"] and CALLS == []
