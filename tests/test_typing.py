"""What a user's type checker sees of the package (mypy, as on a user's machine: the package
is installed, so its ``py.typed`` marker decides whether its annotations are read at all).
Found by type-checking programs written from the docs: every name was ``Any``, decorated
functions lost their signatures, and a missed ``await`` on a step type-checked."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

PROGRAM = """
    import agent_replay
    from agent_replay import AttributionResult, ScriptedPolicy, Session, attribute, instrument
    from agent_replay.capture.context import AgentContext, AsyncAgentContext


    @instrument.tool
    def search(q: str) -> list[str]:
        return [q]


    @instrument.llm(name="plan")
    def plan(topic: str) -> str:
        return topic


    async def agent(ctx: AsyncAgentContext, q: str) -> None:
        ctx.llm("plan", produce=lambda: q)


    def sync_agent(ctx: AgentContext, q: str) -> str:
        return str(ctx.tool("search", produce=lambda: q))


    reveal_type(search)
    reveal_type(plan)
    reveal_type(attribute)
    reveal_type(Session)
    search(123)


    def explained(result: AttributionResult) -> None:
        result.explain(12345)  # a trajectory or report, not a number


    reveal_type(agent_replay.otel.attach)
    reveal_type(ScriptedPolicy)
"""


def test_the_public_api_is_typed_for_users(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent(PROGRAM))
    out, err, status = mypy_api.run(
        [str(program), "--no-incremental", "--cache-dir", str(tmp_path / "cache")]
    )
    assert status == 1, out + err
    lines = out.splitlines()
    assert not any("import-untyped" in line or "py.typed" in line for line in lines), out
    assert 'Revealed type is "def (q: str) -> list[str]"' in out
    assert 'Revealed type is "def (topic: str) -> str"' in out
    assert "[unused-coroutine]" in out  # the missed await
    assert 'Argument 1 to "search" has incompatible type "int"' in out
    assert 'Revealed type is "Any"' not in out, out  # attribute and Session are typed
    assert 'Argument 1 to "explain" of "AttributionResult" has incompatible type' in out
    assert 'Revealed type is "def (store:' in out  # agent_replay.otel without an import
    assert sum("error:" in line for line in lines) == 3, out
