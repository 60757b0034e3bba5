"""``--policy [KEY=]POLICY`` on the command line: an imported trace attributed with a policy per
step, the policies and the verifier given as ``module:function`` from the working directory."""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner

from agent_replay import CheckpointStore
from agent_replay.cli import main
from agent_replay.model import StepDraft, StepKind, Trajectory

POLICIES = '''
def plan(request):
    """The planning call: the right city seven times in ten."""
    city = "Paris" if request.rng.random() < 0.7 else "London"
    part = {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": city}}
    return [{"role": "assistant", "parts": [part]}]


def weather(request):
    """The tool, re-run on the arguments it is given now."""
    return "rainy" if request.inputs["arguments"]["city"] == "Paris" else "sunny"


def answer(request):
    """The answer follows the tool result in the conversation."""
    said = request.inputs["messages"][-1]["parts"][0]["response"]
    return [{"role": "assistant", "parts": [{"type": "text", "content": f"It is {said}."}]}]


def rainy(result):
    return "rainy" in result["final"][0]["parts"][0]["content"]


class Hold:
    def resample(self, request):
        return request.step.output
'''


def imported() -> Trajectory:
    """A recorded run asking the weather of the wrong city, as an import would give it."""
    user = {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}
    call = {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "London"}}
    asked = [{"role": "assistant", "parts": [call]}]
    response = {"type": "tool_call_response", "id": "c1", "response": "sunny"}
    drafts = [
        StepDraft(
            kind=StepKind.LLM, name="plan", agent="bot", inputs={"messages": [user]}, action=asked
        ),
        StepDraft(
            kind=StepKind.TOOL,
            name="get_weather",
            inputs={"arguments": {"city": "London"}},
            action="sunny",
        ),
        StepDraft(
            kind=StepKind.LLM,
            name="answer",
            agent="bot",
            inputs={"messages": [user, *asked, {"role": "tool", "parts": [response]}]},
            action=[{"role": "assistant", "parts": [{"type": "text", "content": "It is sunny."}]}],
        ),
    ]
    return Trajectory("weather", metadata={"source": "import:test"}).with_steps(drafts)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    (tmp_path / "weather_policies.py").write_text(textwrap.dedent(POLICIES))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with CheckpointStore(tmp_path / "runs.sqlite") as store:
        store.save(imported())
    return tmp_path


def attribute(*policies: str):
    args = ["attribute", "--db", "runs.sqlite", "--session", "weather", "--json"]
    args += ["--verifier", "weather_policies:rainy", "--budget", "300"]
    for policy in policies:
        args += ["--policy", policy]
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_a_policy_per_step_names_the_planning_call(workdir):
    result = attribute(
        "plan=weather_policies:plan",
        "get_weather=weather_policies:weather",
        "answer=weather_policies:answer",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["culprit_index"] == 0 and report["culprit_agent"] == "bot"


def test_without_a_tool_policy_the_tool_is_held_and_nothing_changes(workdir):
    # no policy for the tool: it is held, so a re-drawn plan cannot change its answer
    result = attribute("plan=weather_policies:plan")
    assert result.exit_code == 3, result.output  # no culprit
    # a policy class is made with no arguments; a registered name works as before
    assert attribute("*=weather_policies:Hold").exit_code == 3
    assert attribute("hold").exit_code == 3


@pytest.mark.parametrize("spec", ["=weather_policies:plan", "plan=", "plan=nope", "x=no_module:f"])
def test_bad_policy_specs_are_refused_with_a_message(workdir, spec):
    result = CliRunner().invoke(
        main,
        [
            "attribute",
            "--db",
            "runs.sqlite",
            "--session",
            "weather",
            "--verifier",
            "weather_policies:rainy",
            "--policy",
            spec,
        ],
    )
    assert result.exit_code in (1, 2)
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no crash
    assert "--policy" in result.output or "no resample policy" in result.output


def test_a_policy_key_that_matches_no_step_is_a_usage_error(workdir):
    """A misspelt step name re-drew nothing: attribution said "nothing to attribute" and
    advised raising --rollouts or --budget."""
    result = CliRunner().invoke(
        main,
        ["attribute", "--db", "runs.sqlite", "--session", "weather", "--verifier",
         "weather_policies:rainy", "--policy", "get_wether=weather_policies:weather",
         "--policy", "plan=weather_policies:plan"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "'get_wether' matches no step" in result.output and "'get_weather'" in result.output
    aggregate = CliRunner().invoke(
        main,
        ["aggregate", "--db", "runs.sqlite", "--verifier", "weather_policies:rainy",
         "--policy", "agent:nobody=weather_policies:plan"],
    )  # fmt: skip
    assert aggregate.exit_code == 2 and "'agent:nobody' matches no step" in aggregate.output


def test_fork_warns_of_a_redraw_the_replay_agent_cannot_follow(workdir):
    """attribute warned of re-drawn calls to other tools than the recorded ones; fork said
    nothing, and its branch silently re-issued the recorded tool step."""
    (workdir / "other_tools.py").write_text(
        "def news(request):\n"
        "    part = {'type': 'tool_call', 'id': 'n1', 'name': 'get_news', 'arguments': {}}\n"
        "    return [{'role': 'assistant', 'parts': [part]}]\n"
    )
    args = ["fork", "--db", "runs.sqlite", "--session", "weather", "--at-step", "0"]
    args += ["--model", "m2", "--policy", "plan=other_tools:news"]
    result = CliRunner().invoke(main, [*args, "--child", "b1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "warning: 1 re-drawn LLM step(s) asked for other tool calls" in result.stderr
    result = CliRunner().invoke(main, [*args, "--child", "b2", "--json"], catch_exceptions=False)
    (warning,) = json.loads(result.stdout)["warnings"]
    assert warning.startswith("1 re-drawn LLM step(s) asked for other tool calls")
    assert "so the branch does not follow the change" in warning


@pytest.mark.parametrize(
    "spec", ["llm=agent_replay:ScriptedPolicy", "agent_replay:OpenAIChatPolicy"]
)
def test_a_policy_class_that_cannot_be_made_without_arguments_is_a_usage_error(
    workdir, spec, monkeypatch
):
    """QA: a traceback and exit 1 (``llm=openai`` for the same OpenAIChatPolicy without an
    endpoint was already exit 2)."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(
        main,
        ["attribute", "--db", "runs.sqlite", "--session", "weather", "--verifier",
         "weather_policies:rainy", "--policy", spec],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "cannot be made with no arguments" in result.output


def test_a_forced_action_is_not_blamed_on_a_policy(workdir):
    """QA: ``fork --do`` warned that a re-drawn output was not shaped like the recorded one
    and to check the resample policy: the value was forced, not re-drawn."""
    forced = '{"role": "assistant", "content": "It is rainy."}'
    result = CliRunner().invoke(
        main,
        ["fork", "--db", "runs.sqlite", "--session", "weather", "--at-step", "0", "--do", forced,
         "--policy", "*=weather_policies:Hold"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "not shaped like" not in result.output
