import dataclasses
import itertools

import pytest

from agent_replay.errors import CanonicalEncodingError, ChainIntegrityError
from agent_replay.model import GENESIS_HASH, Step, StepDraft, StepKind, Trajectory, chain_steps


def drafts(n=4):
    return [
        StepDraft(
            kind=StepKind.LLM if i % 2 == 0 else StepKind.TOOL,
            name=f"s{i}",
            inputs={"i": i},
            action=f"out{i}",
            agent="a",
        )
        for i in range(n)
    ]


def test_chain_links_and_head():
    steps = chain_steps(drafts())
    assert steps[0].prev_hash == GENESIS_HASH
    for a, b in itertools.pairwise(steps):
        assert b.prev_hash == a.step_hash
    traj = Trajectory("s", steps)
    assert traj.head_hash == steps[-1].step_hash
    traj.verify()


def test_every_field_is_covered_by_the_head_hash():
    base = Trajectory("s", chain_steps(drafts()))
    for field in (
        "kind",
        "name",
        "inputs",
        "action",
        "agent",
        "resamplable",
        "side_effects",
        "started_ns",
        "attributes",
        "error",
    ):
        changed = drafts()
        value = {
            "kind": StepKind.MEMORY,
            "name": "x",
            "inputs": {"i": 99},
            "action": "y",
            "agent": "b",
            "resamplable": False,
            "side_effects": True,
            "started_ns": 5,
            "attributes": {"k": 1},
            "error": {"type": "E", "message": "m"},
        }[field]
        setattr(changed[1], field, value)
        assert Trajectory("s", chain_steps(changed)).head_hash != base.head_hash, field


def test_verify_names_first_bad_step():
    steps = list(chain_steps(drafts()))
    steps[2] = dataclasses.replace(steps[2], action="tampered")
    with pytest.raises(ChainIntegrityError) as info:
        Trajectory("s", tuple(steps)).verify()
    assert info.value.step_index == 2


def test_unencodable_value_names_the_step():
    bad = drafts()
    bad[2].action = object()
    with pytest.raises(CanonicalEncodingError, match=r"step 2 \(llm:s2\) output"):
        chain_steps(bad)


def test_unknown_kind_becomes_span():
    assert StepKind.parse("WHATEVER") is StepKind.SPAN
    assert StepKind.parse("LLM") is StepKind.LLM


def test_a_conversation_seals_to_the_same_bytes_with_and_without_the_memo():
    # prompts repeat earlier messages: chain_steps shares their encoding through a memo
    history = [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    conversation = []
    for turn in range(4):
        reply = {"role": "assistant", "parts": [{"type": "text", "content": f"r{turn}"}]}
        conversation.append(
            StepDraft(
                kind=StepKind.LLM,
                name="chat",
                inputs={"messages": list(history), "model": "m", "n": 1.0 if turn else 1},
                action=[reply],
                attributes={"tool_calls": [f"c{turn}"]},
            )
        )
        history += [reply, {"role": "user", "parts": [{"type": "text", "content": True}]}]
    chained = chain_steps(conversation)
    prev = GENESIS_HASH
    for index, (draft, step) in enumerate(zip(conversation, chained, strict=True)):
        alone = Step.seal(draft, index, prev)
        assert (alone.input_bytes, alone.output_bytes, alone.header_bytes) == (
            step.input_bytes,
            step.output_bytes,
            step.header_bytes,
        )
        assert alone == step
        prev = step.step_hash
    Trajectory("s", chained).verify()


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"agent": "other"},
        {"agent": None},
        {"attributes": {"requested_by": 0, "tool_call_id": "c"}},
        {"agent": "other", "attributes": {"x": True}},
    ],
)
def test_a_step_placed_elsewhere_is_the_step_its_changed_draft_seals_to(change):
    """Merging re-places stored steps (index, link, agent, links to other steps) instead of
    sealing their drafts again: the result must be the same step, byte for byte."""
    step = chain_steps(drafts())[1]
    draft = dataclasses.replace(step.draft(), **change)
    sealed = Step.seal(draft, 5, "ab" * 32)
    placed = step.placed(5, "ab" * 32, change.get("attributes"), change.get("agent", step.agent))
    assert placed == sealed and placed.header_bytes == sealed.header_bytes
    assert placed.step_hash == sealed.step_hash != step.step_hash


def test_placing_a_step_where_it_is_returns_it():
    step = chain_steps(drafts())[2]
    assert step.placed(step.index, step.prev_hash) is step
    assert step.placed(step.index, step.prev_hash, step.attributes, step.agent) is step
    # an equal value of another type is another step: its header encodes differently
    moved = step.placed(step.index, step.prev_hash, {**step.attributes, "n": 1})
    assert moved.placed(moved.index, moved.prev_hash, {"n": True}).step_hash != moved.step_hash
