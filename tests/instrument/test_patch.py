"""instrument.patch on any target: shapes, undo, bad targets."""

from __future__ import annotations

import asyncio
import sys
import types

import pytest
import wrapt

from agent_replay import ReplayPlan, instrument
from agent_replay.errors import PatchTargetError
from agent_replay.instrument import record_agent, replay_agent

LOG: list[str] = []


class Base:
    def greet(self, who):
        LOG.append(f"greet:{who}")
        return f"hello {who}"


class Service(Base):
    label = "svc"
    not_callable = 42

    def __init__(self, name="svc"):
        self.name = name

    def run(self, job, *, retries=0):
        LOG.append(f"run:{job}")
        return {"job": job, "by": self.name}

    async def arun(self, job):
        LOG.append(f"arun:{job}")
        return job.upper()

    def items(self, n):
        for i in range(n):
            LOG.append(f"item:{i}")
            yield i

    @staticmethod
    def pure(x):
        LOG.append("pure")
        return x + 1

    @classmethod
    def build(cls, x):
        LOG.append("build")
        return f"{cls.label}:{x}"


def helper(a, b=2):
    LOG.append("helper")
    return a * b


@pytest.fixture(autouse=True)
def target_module(monkeypatch):
    module = types.ModuleType("ar_patch_targets")
    module.Service = Service
    module.Base = Base
    module.helper = helper
    monkeypatch.setitem(sys.modules, "ar_patch_targets", module)
    LOG.clear()
    return module


def test_methods_functions_and_their_shapes_become_steps(target_module):
    svc = Service("alpha")

    def agent():
        out = [
            svc.run("build", retries=1),
            asyncio.run(svc.arun("x")),
            list(svc.items(2)),
            Service.pure(1),
            Service.build(5),
            target_module.helper(3),
            svc.greet("bob"),
        ]
        return out

    targets = {
        "ar_patch_targets.Service.run": {"kind": "tool", "name": "{self.name}.run"},
        "ar_patch_targets.Service.arun": {"kind": "tool"},
        "ar_patch_targets.Service.items": {"kind": "llm"},
        "ar_patch_targets.Service.pure": {"kind": "tool"},
        "ar_patch_targets.Service.build": {"kind": "tool"},
        "ar_patch_targets.helper": {"kind": "memory", "name": "helper"},
        "ar_patch_targets.Service.greet": {"kind": "tool"},  # inherited from Base
    }
    handles = [instrument.patch(t, **opts) for t, opts in targets.items()]
    try:
        traj = record_agent(agent)
        assert [s.label for s in traj.steps] == [
            "tool:alpha.run",
            "tool:ar_patch_targets.Service.arun",
            "llm:ar_patch_targets.Service.items",
            "tool:ar_patch_targets.Service.pure",
            "tool:ar_patch_targets.Service.build",
            "memory:helper",
            "tool:ar_patch_targets.Service.greet",
        ]
        assert traj.steps[0].inputs == {"job": "build", "retries": 1}
        assert traj.steps[5].inputs == {"a": 3}
        assert traj.outcome.result == [
            {"job": "build", "by": "alpha"},
            "X",
            [0, 1],
            2,
            "svc:5",
            6,
            "hello bob",
        ]
        LOG.clear()
        held = replay_agent(agent, traj)
        assert held.result == traj.outcome.result and LOG == []
        edited = replay_agent(agent, traj, ReplayPlan.factual().edit(5, {"a": 10, "b": 3}))
        assert edited.result[5] == 30 and LOG == ["helper"]
    finally:
        for handle in reversed(handles):
            handle.undo()
    assert "greet" not in Service.__dict__  # the inherited method is not shadowed any more
    assert Service.__dict__["run"] is Service.run
    assert isinstance(Service.__dict__["pure"], staticmethod)
    assert target_module.helper is helper


def test_a_handle_is_a_context_manager_and_undo_is_idempotent():
    original = Service.__dict__["run"]
    with instrument.patch("ar_patch_targets.Service.run", kind="tool") as handle:
        assert Service.__dict__["run"] is not original
        assert handle.active
        assert "active" in repr(handle)
    assert Service.__dict__["run"] is original
    handle.undo()
    assert not handle.active and Service.__dict__["run"] is original


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_such_package_xyz.thing", "module 'no_such_package_xyz' is not installed"),
        ("ar_patch_targets.Missing.run", "ar_patch_targets has no attribute 'Missing'"),
        ("ar_patch_targets.Service.nope", "ar_patch_targets.Service has no attribute 'nope'"),
        ("ar_patch_targets.Service.not_callable", "it is a int, not a function or method"),
        ("openai.resources.chat.completions.Completions.creat", "has no attribute 'creat'"),
        ("nodots", "give a dotted path"),
    ],
)
def test_bad_targets_are_named_in_a_clear_error(target, message):
    with pytest.raises(PatchTargetError) as info:
        instrument.patch(target)
    assert target in str(info.value)
    assert message in str(info.value)
    assert info.value.target == target


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kind must be one of"):
        instrument.patch("ar_patch_targets.helper", kind="agent")


def test_undo_under_a_later_wrapper_keeps_that_wrapper_and_passes_through():
    seen = []

    def outer(wrapped, instance, args, kwargs):
        seen.append("outer")
        return wrapped(*args, **kwargs)

    original = Service.__dict__["run"]
    handle = instrument.patch("ar_patch_targets.Service.run", kind="tool")
    wrapt.wrap_function_wrapper("ar_patch_targets", "Service.run", outer)
    try:
        svc = Service()
        traj = record_agent(lambda: svc.run("a"))
        assert len(traj.steps) == 1 and seen == ["outer"]
        handle.undo()
        traj = record_agent(lambda: svc.run("b"))
        assert traj.steps == ()  # ours is a pass-through now
        assert seen == ["outer", "outer"]  # theirs still runs
        assert Service.__dict__["run"].__wrapped__.__wrapped__ is original  # wrapt, ours, SDK
    finally:
        Service.run = original


def test_swap_model_reaches_llm_patches_only(target_module):
    def llm_call(model):
        return model

    def tool_call(model):
        return model

    target_module.llm_call, target_module.tool_call = llm_call, tool_call

    def agent():  # module attributes are looked up at call time, as SDK code does
        return [target_module.llm_call(model="m1"), target_module.tool_call(model="m1")]

    with (
        instrument.patch("ar_patch_targets.llm_call"),
        instrument.patch("ar_patch_targets.tool_call", kind="tool"),
    ):
        traj = record_agent(agent)
        swapped = replay_agent(agent, traj, ReplayPlan.ablate_from(0).swap_model("m2"))
    assert traj.outcome.result == ["m1", "m1"]
    assert swapped.result == ["m2", "m1"]  # a tool's own `model` parameter is left alone
