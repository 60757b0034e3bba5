"""Langfuse, LangSmith, ATIF, Who&When and JSONL importers on the real samples in ../shared."""

import json
from pathlib import Path

import pytest

from agent_replay import CheckpointStore
from agent_replay.errors import ImportFormatError
from agent_replay.ingest import detect_format, import_into, load, load_many
from agent_replay.model import StepKind
from weather_run import TOOL, TOOL_DEFINITION

SHARED = next(p / "shared" for p in Path(__file__).resolve().parents if (p / "shared").is_dir())
FIXTURES = SHARED / "fixtures"
WHO_AND_WHEN = SHARED / "datasets" / "who_and_when"


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        ("langfuse/koog-2025-08-26.json", "langfuse"),
        ("langsmith/langsmith_js_wrap_openai_default.json", "langsmith"),
        ("atif/simple_trajectory.json", "atif"),
        ("generated/openllmetry.jsonl", "otlp-json"),
        ("otlp/opentelemetry-proto_examples_trace.json", "otlp-json"),
    ],
)
def test_detection(path, fmt):
    assert detect_format((FIXTURES / path).read_bytes()) == fmt


def test_detection_of_whowhen_and_unknown_json():
    assert detect_format((WHO_AND_WHEN / "Hand-Crafted" / "1.json").read_bytes()) == "whowhen"
    with pytest.raises(ImportFormatError, match="unrecognised JSON"):
        detect_format(b'{"hello": "world"}')
    assert detect_format(b"\x0a\x02\x0a\x00") == "otlp-proto"


def test_langfuse_microsoft_agent_semconv_with_array_tool_call_ids():
    (traj,) = load(FIXTURES / "langfuse" / "microsoft-agent-2025-10-14.json")
    assert [s.label for s in traj.steps] == [
        "llm:chat gpt-4o",
        "tool:get_weather",
        "llm:chat gpt-4o",
    ]
    tool = traj.steps[1]
    # the id is an array [run_id, call_id] on both sides; the call id links them
    assert tool.attributes["tool_call_id"] == "call_Sz1QP8T7fuJkIECGDLFWOorq"
    assert tool.attributes["requested_by"] == 0
    assert tool.inputs == {"arguments": {"location": "Portland"}}
    # gen_ai.input.messages was lifted out of the attributes: it comes from the observation
    assert (
        traj.steps[0].inputs["messages"][0]["parts"][0]["content"].startswith("What's the weather")
    )
    assert traj.session_id == "thread_G78qCSLpzn0YQwFwrvK5OivI"  # gen_ai.conversation.id
    assert traj.task[0]["role"] == "user"  # trace input, decoded from JSON text
    assert traj.metadata["source"] == "import:langfuse"
    assert traj.metadata["langfuse"]["trace_id"]


def test_langfuse_koog_legacy_flattened_prompts():
    (traj,) = load(FIXTURES / "langfuse" / "koog-2025-08-26.json")
    llm = [s for s in traj.steps if s.kind is StepKind.LLM]
    assert len(llm) == 2
    assert "openllmetry" in llm[0].attributes["dialect"]
    assert [m["role"] for m in llm[1].inputs["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert llm[0].action[0]["parts"][0]["name"] == "HelloTool"
    tools = [s for s in traj.steps if s.kind is StepKind.TOOL]
    assert [(t.name, t.inputs, t.action) for t in tools] == [
        ("HelloTool", {"arguments": {"name": "Bob"}}, "Hello my darling Bob!"),
        ("ByeTool", {"arguments": {"name": "Bob"}}, "Bye my dear Bob!"),
    ]
    assert all(t.attributes["requested_by"] == traj.steps.index(llm[0]) for t in tools)


def test_langfuse_openai_agents_responses_api_and_scores():
    (traj,) = load(FIXTURES / "langfuse" / "openai-agents-2025-09-30.json")
    assert [s.label for s in traj.steps] == ["llm:response", "tool:get_weather", "llm:response"]
    assert {s.agent for s in traj.steps} == {"Hello world"}
    # the TOOL span has no call id: it is linked by name, and not synthesized twice
    assert traj.steps[1].attributes["tool_call_id"] == "call_Kud0j0DxWSmLzv9W5m6qVqXn"
    assert traj.metadata["capture"]["synthesized_tool_steps"] == []
    assert {s["name"] for s in traj.metadata["langfuse"]["scores"]} == {"toxicity", "hallucination"}


def test_every_langfuse_fixture_imports():
    paths = sorted((FIXTURES / "langfuse").glob("*.json"))
    assert paths, FIXTURES / "langfuse"
    for path in paths:
        trajectories = load(path)
        assert trajectories, path
        for traj in trajectories:
            traj.verify()
            assert traj.metadata["capture"]["steps"] == len(traj.steps)


def test_langsmith_post_patch_payloads_python_and_js():
    for name in ("langsmith_py_wrap_openai_.json", "langsmith_js_wrap_openai_default.json"):
        (traj,) = load(FIXTURES / "langsmith" / name)
        (step,) = traj.steps
        assert step.kind is StepKind.LLM
        assert step.inputs == {
            "messages": [{"role": "user", "parts": [{"type": "text", "content": "howdy"}]}],
            "model": "gpt-4o-mini",
        }
        assert step.action[0]["parts"][0]["content"].startswith("Howdy!")
        assert step.ended_ns > step.started_ns  # the patch's end_time was merged in


def test_langsmith_run_tree_with_dotted_order_and_child_runs():
    root = "11111111-1111-4111-8111-111111111111"
    llm = "22222222-2222-4222-8222-222222222222"
    tool = "33333333-3333-4333-8333-333333333333"
    stamp = {
        root: "20250101T000000000000Z",
        llm: "20250101T000001000000Z",
        tool: "20250101T000002000000Z",
    }
    tree = {
        "id": root,
        "name": "agent",
        "run_type": "chain",
        "trace_id": root,
        "dotted_order": stamp[root] + root,
        "inputs": {"question": "weather?"},
        "extra": {"metadata": {"thread_id": "thread-9"}},
        "child_runs": [
            {  # the tool ran second but is listed first: dotted_order decides
                "id": tool,
                "name": "get_weather",
                "run_type": "tool",
                "trace_id": root,
                "dotted_order": f"{stamp[root]}{root}.{stamp[tool]}{tool}",
                "inputs": {"input": "Paris"},
                "outputs": {"output": "rainy"},
                "error": "timeout",
            },
            {
                "id": llm,
                "name": "ChatOpenAI",
                "run_type": "llm",
                "trace_id": root,
                "dotted_order": f"{stamp[root]}{root}.{stamp[llm]}{llm}",
                "start_time": "2025-01-01T00:00:01+00:00",
                # LangChain keeps a chat model's bound tools in its invocation parameters
                "extra": {"invocation_params": {"model": "gpt-4o", "tools": [TOOL]}},
                "inputs": {
                    "messages": [
                        [
                            {
                                "lc": 1,
                                "type": "constructor",
                                "id": ["langchain", "schema", "messages", "HumanMessage"],
                                "kwargs": {"content": "weather?"},
                            }
                        ]
                    ]
                },
                "outputs": {
                    "generations": [
                        [
                            {
                                "message": {
                                    "lc": 1,
                                    "type": "constructor",
                                    "id": ["langchain", "schema", "messages", "AIMessage"],
                                    "kwargs": {
                                        "content": "",
                                        "tool_calls": [
                                            {
                                                "name": "get_weather",
                                                "args": {"city": "Paris"},
                                                "id": "call_1",
                                            }
                                        ],
                                    },
                                }
                            }
                        ]
                    ]
                },
            },
        ],
    }
    (traj,) = load(tree, format="langsmith")
    assert traj.session_id == "thread-9"
    assert [s.label for s in traj.steps] == ["llm:ChatOpenAI", "tool:get_weather"]
    assert traj.steps[0].inputs["messages"] == [
        {"role": "user", "parts": [{"type": "text", "content": "weather?"}]}
    ]
    assert traj.steps[0].inputs["tools"] == [TOOL_DEFINITION]
    # the run kept the bare argument ({"input": "Paris"}); the call names it
    assert traj.steps[1].inputs == {"arguments": {"city": "Paris"}}
    assert traj.steps[1].attributes["arguments_from"] == "llm tool call"
    assert traj.steps[1].action == "rainy"
    assert traj.steps[1].error == {"type": "error", "message": "timeout"}
    assert traj.steps[1].attributes["requested_by"] == 0  # linked by name (no id on the run)
    assert traj.task == {"question": "weather?"}


def test_langsmith_run_error_names_what_was_raised():
    """``@traceable`` and LangChain's tracer write a run's ``error`` as the ``repr`` of the
    exception followed by its traceback; the failed step and run take its type and message."""
    run_id = "44444444-4444-4444-8444-444444444444"
    error = (
        "TimeoutError('weather service timed out')\n\nTraceback (most recent call last):\n"
        '  File "agent.py", line 3, in get_weather\nTimeoutError: weather service timed out'
    )
    run = {
        "id": run_id,
        "name": "get_weather",
        "run_type": "tool",
        "trace_id": run_id,
        "dotted_order": "20250101T000000000000Z" + run_id,
        "inputs": {"city": "Paris"},
        "outputs": None,
        "error": error,
    }
    (traj,) = load(run, format="langsmith")
    (step,) = traj.steps
    raised = {"type": "TimeoutError", "message": "weather service timed out"}
    assert (step.kind, step.error, step.action) == (StepKind.TOOL, raised, None)
    assert traj.outcome.failed is True and traj.outcome.error == raised


def test_atif_steps_tool_calls_and_observations():
    (traj,) = load(FIXTURES / "atif" / "multi_tool_trajectory.json")
    assert traj.session_id == "sess-def456-multi"
    assert traj.task.startswith("Compare the latest quarterly revenue")
    kinds = [s.kind.value for s in traj.steps]
    assert kinds.count("llm") == 3 and kinds.count("tool") == 4
    first_tools = traj.steps[1:4]
    assert [t.attributes["tool_call_id"] for t in first_tools] == [
        "call_fin_aapl",
        "call_fin_msft",
        "call_news",
    ]
    assert first_tools[0].action.startswith("Apple Inc. (AAPL)")
    # the second llm step saw the first's calls and their results
    seen = traj.steps[4].inputs["messages"]
    assert [m["role"] for m in seen] == ["user", "assistant", "tool", "system"]
    assert len(seen[2]["parts"]) == 3
    assert traj.steps[0].action[0]["parts"][0]["type"] == "reasoning"
    assert traj.steps[0].attributes["input_tokens"] == 1850
    assert {s.agent for s in traj.steps} == {"research-analyst"}


def test_an_atif_call_answered_by_a_subagent_keeps_the_reference(tmp_path):
    """QA: a result holding only ``subagent_trajectory_ref`` gave the tool step no output,
    the reference to the subagent's run kept nowhere."""
    ref = [{"session_id": "sub-1", "trajectory_path": "sub.json"}]
    doc = {
        "schema_version": "ATIF-v1.4",
        "session_id": "parent",
        "agent": {"name": "coder", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "do x"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "Delegating",
                "tool_calls": [
                    {"tool_call_id": "c3", "function_name": "spawn", "arguments": {"task": "x"}}
                ],
                "observation": {
                    "results": [{"source_call_id": "c3", "subagent_trajectory_ref": ref}]
                },
            },
        ],
    }
    path = tmp_path / "parent.json"
    path.write_text(json.dumps(doc))
    (traj,) = load(path)
    spawn = next(s for s in traj.steps if s.name == "spawn")
    assert spawn.action == {"subagent_trajectory_ref": ref}


def test_an_unnamed_langfuse_observation_is_named_for_its_type():
    """QA: it got the generic name ``span``."""
    (traj,) = load(FIXTURES / "langfuse" / "openai-assistants-2024-05-29.json")
    assert [s.name for s in traj.steps][-1] == "generation"


def test_whowhen_all_184_runs_with_labels_at_their_step():
    paths = sorted(WHO_AND_WHEN.glob("*/*.json"))
    assert len(paths) == 184
    result = load_many(paths)
    assert not result.failed and len(result.trajectories) == 184
    aligned = 0
    for traj in result.trajectories:
        info = traj.metadata["whowhen"]
        assert traj.failed is True
        assert len(traj.steps) == len(json.loads(Path(info_path(info)).read_text())["history"])
        step = info["mistake_step"]
        if traj.steps[step].agent == info["mistake_agent"]:
            aligned += 1
    # README: a handful of labels disagree with the agent at history[mistake_step]
    assert 176 <= aligned < 184


def info_path(info):
    return WHO_AND_WHEN / info["subset"] / f"{info['file']}.json"


def test_whowhen_agent_names_are_normalised():
    (hand,) = load(WHO_AND_WHEN / "Hand-Crafted" / "1.json")
    assert hand.session_id == "whowhen:hand-crafted:1"
    assert hand.steps[0].kind is StepKind.SPAN and not hand.steps[0].resamplable  # the human
    assert {s.agent for s in hand.steps} >= {"Orchestrator", "WebSurfer"}
    to_websurfer = [s for s in hand.steps if s.attributes.get("to") == "WebSurfer"]
    assert to_websurfer and all(s.agent == "Orchestrator" for s in to_websurfer)
    assert hand.metadata["whowhen"]["mistake_agent"] == "WebSurfer"
    assert hand.metadata["whowhen"]["mistake_step"] == 12
    (algo,) = load(WHO_AND_WHEN / "Algorithm-Generated" / "1.json")
    assert algo.steps[1].agent == "Computer_terminal" and algo.steps[1].kind is StepKind.TOOL
    assert algo.steps[0].inputs["system"][0]["content"].startswith("## Your role\nExcel_Expert")
    assert algo.steps[0].action[0]["name"] == "Excel_Expert"


@pytest.mark.timeout(20)
def test_whowhen_roles_are_split_without_backtracking():
    """Read by hand now (a regular expression took 15 s on an 80 KB role), the same way."""
    from agent_replay.ingest.whowhen import agent_of

    assert agent_of({"role": "Orchestrator (-> WebSurfer)"}) == (
        "Orchestrator",
        "-> WebSurfer",
        "WebSurfer",
    )
    assert agent_of({"role": "Orchestrator (thought)"}) == ("Orchestrator", "thought", None)
    assert agent_of({"role": "WebSurfer"}) == ("WebSurfer", None, None)
    assert agent_of({"role": "a\n(b)"}) == ("a", "b", None)  # a line break before "("
    assert agent_of({"role": "a (b\nc)"}) == ("a (b\nc)", None, None)  # not across lines
    assert agent_of({"role": "b(\t\n()"}) == ("b(", "", None)
    long = "a" + " " * 200_000 + "(x"
    assert agent_of({"role": long}) == (long, None, None)


def test_jsonl_step_records_sessions_and_whole_trajectories(tmp_path):
    path = tmp_path / "run.jsonl"
    lines = [
        {"session": {"session_id": "a", "task": "t", "outcome": {"score": 0.0}}},
        {"session_id": "a", "kind": "llm", "name": "plan", "inputs": {"q": 1}, "output": "p"},
        {
            "session_id": "a",
            "kind": "tool",
            "name": "search",
            "action": {"q": "x"},
            "observation": "found",
            "side_effects": True,
        },
        {"kind": "llm", "name": "solo", "inputs": None, "action": "x", "agent": "bot"},
        {
            "session_id": "w",
            "steps": [{"kind": "memory", "name": "m", "output": 1}],
            "task": "whole",
        },
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    by_id = {t.session_id: t for t in load(path)}
    assert set(by_id) == {"a", "run", "w"}
    a = by_id["a"]
    assert a.task == "t" and a.failed is True
    assert a.steps[0].action == "p" and not a.steps[0].observed
    assert a.steps[1].observed and a.steps[1].output == "found" and a.steps[1].side_effects
    assert by_id["run"].steps[0].agent == "bot"
    assert by_id["w"].steps[0].kind is StepKind.MEMORY
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "llm", "name": "ok"}\n{"kind": "nonsense", "name": "x"}\n')
    with pytest.raises(ImportFormatError) as info:
        load(bad)
    assert info.value.position == "line 2" and "kind" in info.value.detail


def test_load_raises_for_the_first_bad_source_load_many_keeps_the_rest(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"resourceSpans": [')
    good = FIXTURES / "atif" / "simple_trajectory.json"
    with pytest.raises(ImportFormatError) as info:
        load([bad, good])
    assert info.value.source == str(bad)
    result = load_many([bad, good, tmp_path / "missing.json"])
    assert [s.ok for s in result.sources] == [False, True, False]
    assert len(result.trajectories) == 1
    assert "cannot read" in str(result.sources[2].error)


def test_one_source_where_several_are_expected_is_that_source(tmp_path):
    """``load_many("traces.json")`` read 49 "sources", one per letter of the path."""
    good = FIXTURES / "atif" / "simple_trajectory.json"
    for one in (str(good), good, good.read_bytes()):
        result = load_many(one)
        assert len(result.sources) == 1 and len(result.trajectories) == 1
    with CheckpointStore(tmp_path / "runs.sqlite") as store:
        imported = import_into(store, str(good))
    assert len(imported.sources) == 1 and len(imported.sessions) == 1


def test_integer_timestamps_keep_every_digit():
    """Milliseconds and nanoseconds as integers (LangSmith, Langfuse, ATIF) are scaled in
    integers, not through a float that rounds 1728803137170 ms to ...169999872 ns."""
    from agent_replay.ingest._common import timestamp_ns

    assert timestamp_ns(1728803137170) == 1728803137170000000
    assert timestamp_ns(1728803137170000001) == 1728803137170000001
    assert timestamp_ns(1728803137.17) == 1728803137170000000
    assert timestamp_ns("1728803137170") == 1728803137170000000
    assert timestamp_ns(float("inf")) is None and timestamp_ns(-1) is None


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("20241013T070537170001Z", 1728803137170001000),  # LangSmith's dotted_order stamp
        ("2024-10-13T07:05:37.170001Z", 1728803137170001000),
        ("2024-10-13T07:05:37.17Z", 1728803137170000000),  # not 3 or 6 digits (3.10)
        ("2024-10-13T07:05:37.123456789Z", 1728803137123456789),  # nanoseconds kept
        ("2024-10-13T09:05:37.5+02:00", 1728803137500000000),
        ("2024-10-13 07:05:37", 1728803137000000000),  # no zone: UTC
        ("20241013T999999000000Z", None),
        ("yesterday", None),
    ],
)
def test_text_timestamps_read_the_same_on_every_python(text, ns):
    """The forms the importers meet, read by this package's rules rather than by what the
    running Python's ``fromisoformat`` happens to accept (3.11 reads the dotted_order stamp
    as ISO basic format, 3.10 does not)."""
    from agent_replay.ingest._common import timestamp_ns

    assert timestamp_ns(text) == ns
