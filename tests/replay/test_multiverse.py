import pytest

from agent_replay import CheckpointStore, ReplayPlan, diff, fork, record, replay, resume
from agent_replay.demo.agent import DEMO_SEED, DEMO_TASK, refund_approved, support_agent
from agent_replay.errors import PlanError, StoreError


def failing_demo_run():
    return record(
        support_agent, DEMO_TASK, seed=DEMO_SEED, verifier=refund_approved, session_id="parent"
    )


def test_fork_with_do_records_a_child_branch(db_path):
    parent = failing_demo_run()
    with CheckpointStore(db_path) as store:
        store.save(parent)
        before = store.stats()["steps"]
        child = fork(
            support_agent,
            parent,
            at_step=2,
            do="refund_policy_2026",
            session_id="fixed",
            verifier=refund_approved,
            store=store,
        )
        assert child.lineage.parent_session == "parent" and child.lineage.fork_step == 2
        assert child.lineage.intervention == {"do": "refund_policy_2026"}
        assert not child.outcome.failed
        # the two held prefix steps are the parent's own: stored once
        assert [s.step_hash for s in child.steps[:2]] == [s.step_hash for s in parent.steps[:2]]
        assert store.stats()["steps"] == before + len(child.steps) - 2
        assert store.load("fixed") == child
        assert store.children("parent") == ["fixed"]
    d = diff(parent, child)
    assert d.first_divergence == 2 and d["first_divergence"] == 2
    assert d.steps[2].changes == ("output",)
    assert "first divergence at step 2" in d.to_text()


def test_fork_remove_observe_and_model():
    parent = failing_demo_run()
    removed = fork(support_agent, parent, at_step=0, remove=True)
    assert removed.steps[0].name == "lookup_order"  # the removed step is not in the branch
    mocked = fork(
        support_agent,
        parent,
        at_step=3,
        observe={"window_days": 30, "text": "Refunds within 30 days."},
    )
    assert mocked.steps[3].output["window_days"] == 30
    assert fork(support_agent, parent, at_step=2, model="gpt-5").lineage.intervention == {
        "model": "gpt-5"
    }


def test_diff_of_identical_runs_has_no_divergence():
    run = failing_demo_run()
    again = replay(support_agent, run).trajectory("again", task=run.task, seed=run.seed)
    assert diff(run, again).first_divergence is None


def test_resume_continues_live_past_the_end():
    state = {"crash": True}

    def agent(ctx):
        first = ctx.llm("first", produce=lambda: "one")
        if state["crash"]:
            raise ConnectionError("worker died")
        second = ctx.tool("second", produce=lambda: "two", side_effects=True)
        return [first, second]

    crashed = record(agent, session_id="job")
    assert crashed.outcome.failed and len(crashed.steps) == 1
    state["crash"] = False
    resumed = resume(agent, crashed)
    assert [s.output for s in resumed.steps] == ["one", "two"]
    assert resumed.outcome.result == ["one", "two"]
    assert resumed.steps[0].step_hash == crashed.steps[0].step_hash


def test_factual_replay_of_the_demo_reproduces_the_failure():
    run = failing_demo_run()
    for seed in range(5):
        result = replay(
            support_agent, run, ReplayPlan.factual(), seed=seed, verifier=refund_approved
        )
        assert result.failed and result.result == run.outcome.result


@pytest.mark.parametrize("nested", [False, True])
def test_resume_runs_the_step_whose_failure_ended_the_run_again(nested):
    """Nested: the failing call was started inside a tool step, which failed with it; resume
    runs that tool again (it dropped only the inner step, and the tool, served its recorded
    failure, crashed the resumed run again)."""
    service = {"up": False}

    def fetch():
        if not service["up"]:
            raise ConnectionError("transient network error")
        return "data"

    def agent(ctx):
        plan = ctx.llm("plan", produce=lambda: "fetch it")
        if nested:
            return [plan, ctx.tool("fetch", produce=lambda: ctx.llm("inner", produce=fetch))]
        return [plan, ctx.tool("fetch", produce=fetch, side_effects=True)]

    crashed = record(agent, session_id="crashy")
    assert crashed.outcome.failed and crashed.steps[-1].error["type"] == "ConnectionError"
    service["up"] = True
    resumed = resume(agent, crashed)
    assert resumed.outcome.result == ["fetch it", "data"] and not resumed.outcome.failed
    assert resumed.lineage.parent_session == "crashy" and resumed.lineage.fork_step == 1
    assert resumed.steps[0].step_hash == crashed.steps[0].step_hash
    assert resumed.steps[1].error is None


def test_recorded_steps_keep_what_they_were_given_and_gave_back(db_path):
    """The usual agent loop appends to the message list it passes: each step keeps the
    history as it was at that call, the chain verifies and equals what the store holds."""

    def agent(ctx):
        messages = [{"role": "user", "content": "hi"}]
        for i in range(3):
            reply = ctx.llm("chat", produce=lambda i=i: {"content": [f"r{i}"]}, messages=messages)
            messages.append({"role": "assistant", "content": reply["content"]})
            reply["content"].append("changed by the agent")
        return len(messages)

    with CheckpointStore(db_path) as store:
        traj = record(agent, session_id="loop")
        traj.verify()
        assert [len(s.inputs["messages"]) for s in traj.steps] == [1, 2, 3]
        assert [s.action for s in traj.steps] == [{"content": [f"r{i}"]} for i in range(3)]
        store.save(traj)
        assert store.load("loop").steps == traj.steps
        child = fork(agent, traj, at_step=1, do={"content": ["forced"]}, store=store)
        child.verify()
        assert child.steps[1].action == {"content": ["forced"]}
        assert [len(s.inputs["messages"]) for s in child.steps] == [1, 2, 3]


def test_fork_ids_and_bad_interventions_are_refused_before_anything_runs(db_path):
    calls = []

    def agent(ctx):
        calls.append(1)
        return ctx.llm("a", produce=lambda: ctx.rng.random())

    traj = record(agent, session_id="base")
    with CheckpointStore(db_path) as store:
        store.save(traj)
        first = fork(agent, traj, at_step=0, do=0.5, store=store)
        second = fork(agent, traj, at_step=0, do=0.25, store=store)
        assert (first.session_id, second.session_id) == ("base-fork-0", "base-fork-0-2")
        calls.clear()
        with pytest.raises(StoreError, match="already exists"):
            fork(agent, traj, at_step=0, do=0.1, session_id="base-fork-0", store=store)
        with pytest.raises(PlanError, match="needs a mapping"):
            fork(agent, traj, at_step=0, edit="x")
        # True was taken as step 1 (and stored as the fork step True); "0" raised a bare
        # TypeError from a comparison
        for step in (True, "0", 0.0):
            with pytest.raises(PlanError, match="at_step must be a step index"):
                fork(agent, traj, at_step=step, do=0.1)
        assert calls == []


def test_diff_pairs_steps_by_operation_so_a_removed_step_shifts_nothing():
    def agent(ctx):
        a = ctx.llm("a", produce=lambda: "x", default="skipped")
        b = ctx.tool("b", produce=lambda: "y")
        c = ctx.tool("c", produce=lambda: "z", b=b)
        return [a, b, c]

    traj = record(agent, session_id="abc")
    child = fork(agent, traj, at_step=1, remove=True)
    d = diff(traj, child)
    assert [(s.index, s.index_b, s.changes) for s in d.steps] == [
        (0, 0, ()),
        (1, None, ("missing in b",)),
        (2, 1, ("inputs",)),  # c got b's default, not its output
    ]
    assert d.first_divergence == 1
    assert "missing in b" in d.to_text() and "2/1" in d.to_text()


def test_diff_of_a_removal_pairs_the_shared_prefix_first():
    """Matching operations alone paired the parent's second `plan` with the child's first
    and named step 0, which both runs share byte for byte, as the first divergence."""

    def agent(ctx):
        values = [ctx.llm("plan", produce=lambda: "p") for _ in range(2)]
        values.append(ctx.llm("search", produce=lambda: ctx.rng.randint(0, 1)))
        return values

    parent = record(agent, seed=0)
    child = fork(agent, parent, at_step=1, remove=True)
    result = diff(parent, child)
    assert result.first_divergence == child.lineage.fork_step == 1
    assert "missing in b" in result.to_text().splitlines()[2]


def test_a_fork_child_whose_agent_draws_in_its_body_replays_as_recorded():
    """The fork ran the body's draws from the rollout's streams and a replay of the child
    from its seed's: another result, with no divergence reported."""

    def agent(ctx):
        a = ctx.llm("a", produce=lambda: ctx.rng.randint(0, 100))
        drawn = ctx.rng.randint(0, 10**6)  # in the body, after the fork step
        b = ctx.llm("b", produce=lambda: drawn)
        return [a, drawn, b]

    child = fork(agent, record(agent, seed=1), at_step=0, do=5)
    again = replay(agent, child)
    assert again.result == child.outcome.result and not again.diverged
