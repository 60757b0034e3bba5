"""Runs under the session ids the store examples name, and the store they go in."""

import time  # noqa: F401  (the prune example uses it)

from agent_replay import CheckpointStore, record


def agent(ctx, question):
    return ctx.llm("answer", produce=lambda: question.upper(), prompt=question)


trajectory = record(agent, {"question": "refund?"}, session_id="session-id")
t1, t2, t3 = (record(agent, {"question": f"q{i}"}, session_id=f"t{i}") for i in (1, 2, 3))
store = CheckpointStore("runs.sqlite")
store.save_many([record(agent, {"question": s}, session_id=s) for s in ("s1", "s2")])
