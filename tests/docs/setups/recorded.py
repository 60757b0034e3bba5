"""A recorded failing run of a small native agent, a crashed run of it, a store and a
TracerProvider: the names the attribution, replay, fork and report examples use."""

from opentelemetry.sdk.trace import TracerProvider

from agent_replay import CheckpointStore, record

SERVICE_UP = True


def lookup(ctx):
    if not SERVICE_UP:
        raise ConnectionError("search service unreachable")
    return "bug" if ctx.rng.random() < 0.7 else "ok"


def agent(ctx, question):
    plan = ctx.llm("plan", produce=lambda: {"q": question}, prompt=question)
    hits = ctx.tool("search", produce=lambda: lookup(ctx), q=plan["q"])
    draft = ctx.llm("write", produce=lambda: hits, context=hits)
    return {"answer": draft}


def verifier(result):
    return 1.0 if result["answer"] == "ok" else 0.0


traj = trajectory = record(agent, {"question": "why?"}, seed=1, verifier=verifier)
assert traj.outcome.failed
SERVICE_UP = False
crashed_run = record(agent, {"question": "why?"}, seed=1, verifier=verifier)
SERVICE_UP = True
store = CheckpointStore("runs.sqlite")
store.save(traj)
tracer_provider = my_provider = TracerProvider()
