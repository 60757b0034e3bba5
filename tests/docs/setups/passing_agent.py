"""An agent that passes, for the pytest gate examples (``my_agent``, ``verifier``)."""


def my_agent(ctx, question):
    plan = ctx.llm("plan", produce=lambda: {"q": question}, prompt=question)
    return {"answer": ctx.tool("search", produce=lambda: "ok", q=plan["q"])}


def verifier(result):
    return 1.0 if result["answer"] == "ok" else 0.0


my_verifier = verifier
