"""drift(): where a run's fate sealed, and when the replays it rests on are not the run."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from agent_replay import CheckpointStore, drift, record
from agent_replay.cli import main

BROKEN = {"judge": False}


def agent(ctx):
    """Reads twice (noise), picks (the decision: bad half the time), then reports what it
    picked."""
    for part in ("head", "tail"):
        ctx.tool("read", produce=lambda: ctx.rng.randrange(1000), part=part)
    pick = ctx.llm("pick", produce=lambda: "bad" if ctx.rng.random() < 0.5 else "good")
    return ctx.tool("report", produce=lambda: pick, pick=pick)


def passes(result):
    return result == "good"


def never_passes(result):
    return False


def forgetful(result):
    """Passes what the recording failed once the judge is mended (a verifier that changed)."""
    return result == "good" or not BROKEN["judge"]


@pytest.fixture(scope="module")
def failed_run():
    return next(t for s in range(100) if (t := record(agent, seed=s, verifier=passes)).failed)


def test_the_fate_seals_at_the_deciding_step(failed_run):
    result = drift(failed_run, agent, passes, rollouts=40)
    assert result.failure_rates[3:] == (1.0, 1.0)  # pick held: the run fails
    assert all(0.25 < rate < 0.75 for rate in result.failure_rates[:3])
    assert result.commitment_index == 2 and not result.sealed_from_start
    assert result.fate == "after step 2" and result.warnings == ()


def test_an_outcome_no_step_can_change_is_sealed_from_the_start():
    """Every rollout fails whatever is re-drawn: entropy 0 everywhere. It was reported as
    'fate sealed: never (the outcome stays open)', the opposite of what happened."""
    run = record(agent, seed=0, verifier=never_passes)
    result = drift(run, agent, never_passes, rollouts=10)
    assert set(result.failure_rates) == {1.0} and set(result.entropy) == {0.0}
    assert result.sealed_from_start and result.commitment_index is None
    assert result.fate.startswith("before the first step (every rollout fails")
    assert "never" not in result.fate


def test_an_outcome_open_even_with_every_step_held_is_never_sealed(failed_run):
    import random

    coin = random.Random(3)

    def coin_judge(result):
        return coin.random() < 0.5

    result = drift(failed_run, agent, coin_judge, rollouts=40)
    assert result.commitment_index is None and not result.sealed_from_start
    assert result.fate == "never (the outcome stays open)"
    assert "reproduce the recorded failure only" in result.warnings[0]


def test_factual_replays_that_do_not_reproduce_the_run_are_warned_of(tmp_path, failed_run):
    """The recording failed under a judge that has since changed: every F(p) is 0 and the
    curve was shown as if it described the recorded failure."""
    BROKEN["judge"] = True
    run = next(t for s in range(100) if (t := record(agent, seed=s, verifier=forgetful)).failed)
    BROKEN["judge"] = False
    result = drift(run, agent, forgetful, rollouts=8)
    assert result.failure_rates[-1] == 0.0
    assert result.warnings == (
        "factual replays reproduce the recorded failure only 0% of the time (8 replays): "
        "the replay does not reproduce the run (a non-deterministic verifier, tool or agent "
        "code?), so F(p) is measured on another run",
    )
    assert result.to_dict()["warnings"] == list(result.warnings)
    assert "Warning:" in result.render_html()
    db = tmp_path / "runs.sqlite"
    with CheckpointStore(db) as store:
        store.save(run)
    args = ["drift", "--db", str(db), "--session", run.session_id, "--rollouts", "4"]
    args += ["--agent", f"{__name__}:agent", "--verifier", f"{__name__}:forgetful"]
    cli = CliRunner().invoke(main, args)
    assert cli.exit_code == 0, cli.output
    assert "warning: factual replays reproduce the recorded failure only 0%" in cli.output
    assert "fate sealed: before the first step (every rollout passes" in cli.output
    as_json = CliRunner().invoke(main, [*args, "--json"])
    data = json.loads(as_json.output)
    assert data["sealed_from_start"] and data["warnings"]


def test_silent_decay_is_health_falling_while_the_outcome_is_open(failed_run):
    def scorer(values):
        return lambda step: values[step.index]

    decaying = drift(
        failed_run, agent, passes, rollouts=40, state_scorer=scorer((1, 0.6, 0.5, 0.5))
    )
    assert decaying.health == (1, 1, 0.6, 0.5, 0.5)
    # health fell by 0.4 at step 1, while the outcome was still open (F(2) about a half)
    assert decaying.silent_decay and decaying.decay_step == 1
    late = drift(failed_run, agent, passes, rollouts=40, state_scorer=scorer((1, 1, 1, 0.2)))
    assert not late.silent_decay  # fell after the fate sealed: trouble the outcome shows
    flat = drift(failed_run, agent, passes, rollouts=40, state_scorer=scorer((0.2,) * 4))
    assert not flat.silent_decay


def test_an_outcome_seldom_changed_is_not_said_never_to_change():
    """QA: 2 rescues in 50 rollouts (F 0.96) were reported as 'the outcome does not depend on
    any step's draw'."""

    def rare(ctx):
        return ctx.llm("a", produce=lambda: "ok" if ctx.rng.random() < 0.04 else "bug")

    def ok(result):
        return result == "ok"

    run = next(t for s in range(100) if (t := record(rare, seed=s, verifier=ok)).failed)
    result = drift(run, rare, ok, rollouts=200)
    assert 0.9 < result.failure_rates[0] < 1.0 and result.sealed_from_start
    assert result.fate.startswith("before the first step (rollouts fail at least 9")
    assert "seldom" in result.fate and "does not depend" not in result.fate
