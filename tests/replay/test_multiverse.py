from agent_replay import CheckpointStore, ReplayPlan, diff, fork, record, replay, resume
from agent_replay.demo.agent import DEMO_SEED, DEMO_TASK, refund_approved, support_agent


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
