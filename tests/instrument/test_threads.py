"""The ambient run in threads and asyncio tasks the agent starts."""

from __future__ import annotations

import asyncio
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from agent_replay import ReplayPlan, instrument
from agent_replay.instrument import (
    ContextThreadPoolExecutor,
    bind_context,
    record_agent,
    replay_agent,
)

RUNS: list[str] = []


@instrument.tool
def lookup(key):
    RUNS.append(key)
    return f"value of {key} from {threading.current_thread().name.split('_')[0]}"


def test_a_plain_thread_pool_does_not_carry_the_run():
    """What the docs warn about: without the context, a worker's call is a plain call."""

    def agent():
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(lookup, "a").result()

    RUNS.clear()
    traj = record_agent(agent)
    assert traj.steps == ()
    replay_agent(agent, traj)
    assert RUNS == ["a", "a"]  # live both times: never recorded


def test_context_thread_pool_and_bind_context_carry_the_run():
    def agent():
        with ContextThreadPoolExecutor(max_workers=2, thread_name_prefix="worker") as pool:
            first = pool.submit(lookup, "a").result()  # one after the other: a fixed order
            second = pool.submit(lookup, "b").result()
        box = []
        thread = threading.Thread(target=bind_context(lambda: box.append(lookup("c"))))
        thread.start()
        thread.join()
        return [first, second, box[0]]

    RUNS.clear()
    traj = record_agent(agent)
    assert [s.inputs for s in traj.steps] == [{"key": "a"}, {"key": "b"}, {"key": "c"}]
    assert traj.outcome.result[0] == "value of a from worker"
    assert RUNS == ["a", "b", "c"]
    held = replay_agent(agent, traj)
    assert held.result == traj.outcome.result and held.live_steps == 0
    assert RUNS == ["a", "b", "c"]  # nothing ran again
    redrawn = replay_agent(agent, traj, ReplayPlan.ablate_from(2))
    assert redrawn.live_steps == 1 and RUNS == ["a", "b", "c", "c"]


def test_concurrent_steps_from_many_threads_get_distinct_positions():
    def agent():
        with ContextThreadPoolExecutor(max_workers=8) as pool:
            return sorted(pool.map(lookup, [f"k{i}" for i in range(200)]))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up here
    try:
        traj = record_agent(agent)
    finally:
        sys.setswitchinterval(interval)
    assert [s.index for s in traj.steps] == list(range(200))
    assert sorted(s.inputs["key"] for s in traj.steps) == sorted(f"k{i}" for i in range(200))
    traj.verify()


def test_asyncio_tasks_inherit_the_run():
    @instrument.tool
    async def fetch(i):
        await asyncio.sleep(0.001 * (3 - i))  # finish in reverse order
        return i

    async def agent():
        tasks = [asyncio.create_task(fetch(i)) for i in range(3)]
        return [await t for t in tasks]

    traj = record_agent(agent)
    # numbered in the order the tasks started, whatever order they finished in
    assert [s.inputs["i"] for s in traj.steps] == [0, 1, 2]
    result = replay_agent(agent, traj)
    assert result.result == [0, 1, 2] and not result.diverged and result.live_steps == 0
