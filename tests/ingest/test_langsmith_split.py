"""LangSmith runs of one trace split over documents (JSON Lines: one run per line) and over
batches (a run's post in one ``/runs/batch`` payload, its patch in another) are assembled
together: the trajectory is the one the runs give in one document, whatever the split and
its order, and whether the documents are in one file or in several files of one import. A
patch whose run is posted nowhere is not applied, and is reported with its file. The runs are
hand-made, in the shape of the SDK's ``RunCreate`` / ``RunUpdate``."""

import json

import pytest

from agent_replay import CheckpointStore
from agent_replay.ingest import import_into, load, load_many
from agent_replay.ingest.langsmith import LangSmithRuns, read_langsmith

ROOT = "01941f29-7c00-749f-8cdc-2faefd61e1b2"
LLM1 = "01941f29-7fe8-76be-98bf-883c0155279d"
TOOL = "01941f29-87b8-7683-8bfc-5a623d0de947"
LLM2 = "01941f29-8f88-7594-b861-1df9571adba8"
CALL = {
    "id": "call_o",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
}
QUESTION = {"role": "user", "content": "weather in Oslo?"}


def _stamp(second: int) -> str:
    return f"20250101T00000{second}000000Z"


def _run(run_id: str, second: int, end: int, run_type: str, name: str, **fields) -> dict:
    """A complete run (``post`` and ``patch`` split it) of the trace rooted at ROOT."""
    dotted = _stamp(0) + ROOT
    if run_id != ROOT:
        dotted += "." + _stamp(second) + run_id
    return {
        "id": run_id,
        "name": name,
        "run_type": run_type,
        "start_time": f"2025-01-01T00:00:0{second}Z",
        "end_time": f"2025-01-01T00:00:0{end}Z",
        "trace_id": ROOT,
        "dotted_order": dotted,
        "parent_run_id": None if run_id == ROOT else ROOT,
        "extra": {"metadata": {"thread_id": "ls-thread-1"}},
        "error": None,
        **fields,
    }


RUNS = [
    _run(
        ROOT,
        0,
        7,
        "chain",
        "agent",
        inputs={"question": "weather in Oslo?"},
        outputs={"answer": "Sorry, unavailable."},
    ),
    _run(
        LLM1,
        1,
        2,
        "llm",
        "ChatOpenAI",
        inputs={"messages": [QUESTION], "model": "gpt-4o-mini"},
        outputs={
            "choices": [
                {
                    "message": {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    "finish_reason": "tool_calls",
                }
            ]
        },
        prompt_tokens=12,
        completion_tokens=6,
    ),
    _run(
        TOOL,
        3,
        4,
        "tool",
        "get_weather",
        inputs={"city": "Oslo"},
        outputs={},
        error="TimeoutError('weather API timed out')",
    ),
    _run(
        LLM2,
        5,
        6,
        "llm",
        "ChatOpenAI",
        inputs={
            "messages": [
                QUESTION,
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_o", "content": "error: timeout"},
            ],
            "model": "gpt-4o-mini",
        },
        outputs={
            "choices": [
                {
                    "message": {"role": "assistant", "content": "Sorry, unavailable."},
                    "finish_reason": "stop",
                }
            ]
        },
        prompt_tokens=30,
        completion_tokens=4,
    ),
]
#: what a run's patch holds (the SDK's RunUpdate); its post holds the rest
PATCHED = ("end_time", "outputs", "error", "prompt_tokens", "completion_tokens")


def _post(run: dict) -> dict:
    return {k: v for k, v in run.items() if k not in PATCHED}


def _patch(run: dict) -> dict:
    keys = ("id", "trace_id", "dotted_order", *PATCHED)
    return {k: run[k] for k in keys if k in run}


def _facts(trajectories) -> list:
    return [
        (
            t.session_id,
            t.outcome,
            t.task,
            [(s.step_hash, s.attributes.get("requested_by"), s.error) for s in t.steps],
        )
        for t in trajectories
    ]


def _read(*documents, sources=None) -> LangSmithRuns:
    """The runs of ``documents``, each read by a collector of its own (as each file is)
    and then merged, as an import merges its files'."""
    runs = LangSmithRuns()
    for i, doc in enumerate(documents):
        one = LangSmithRuns()
        one.add(doc, sources[i] if sources else f"file{i}.json")
        runs.update(one)
    return runs


@pytest.fixture(scope="module")
def whole():
    """The trace read from one JSON array of its runs: three steps, the tool's error on the
    tool step, which the first llm step asked for; the run itself did not fail."""
    trajectories = read_langsmith(RUNS)
    ((session, outcome, task, steps),) = _facts(trajectories)
    assert (session, outcome, task) == ("ls-thread-1", None, {"question": "weather in Oslo?"})
    assert [s.label for s in trajectories[0].steps] == [
        "llm:ChatOpenAI",
        "tool:get_weather",
        "llm:ChatOpenAI",
    ]
    assert steps[1][1:] == (0, {"type": "TimeoutError", "message": "weather API timed out"})
    return _facts(trajectories)


def test_json_lines_one_run_a_line_give_what_the_array_gives(whole):
    """Each line of a JSON Lines file is a document: the runs of all of them are one trace,
    not one trajectory per run (a lone tool run was its own root, and its error failed it)."""
    runs = LangSmithRuns()
    for run in RUNS:
        runs.add(run, "ls_runs.jsonl")
    assert _facts(runs.trajectories()) == whole
    assert runs.warnings() == [] and len(runs) == 4


@pytest.mark.parametrize("order", [1, -1], ids=["in order", "reversed"])
def test_batches_of_one_trace_in_two_files_give_the_whole_trace(whole, order):
    """Root and first llm call in one /runs/batch payload, the failing tool and the second
    call in another: the tool keeps its parent (not a failed root) and its request."""
    parts = [{"post": RUNS[:2]}, {"post": RUNS[2:]}][::order]
    assert _facts(_read(*parts).trajectories()) == whole


@pytest.mark.parametrize("order", [1, -1], ids=["posts first", "patches first"])
def test_patches_in_another_file_complete_their_posts(whole, order):
    posts = {"post": [_post(r) for r in RUNS]}
    patches = {"patch": [_patch(r) for r in RUNS]}
    runs = _read(*[posts, patches][::order])
    assert _facts(runs.trajectories()) == whole
    assert runs.warnings() == []


def test_a_js_patch_without_id_and_a_hex_id_find_their_post(whole):
    """The JS SDK's patches carry no id (it ends their dotted_order); an id written as 32 hex
    digits is the same run as the UUID."""
    patches = [_patch(r) for r in RUNS]
    del patches[0]["id"]
    patches[1]["id"] = LLM1.replace("-", "")
    runs = _read({"post": [_post(r) for r in RUNS]}, {"patch": patches})
    assert _facts(runs.trajectories()) == whole


def test_patches_whose_runs_are_posted_nowhere_are_reported_with_their_file():
    runs = _read({"patch": [_patch(r) for r in RUNS]}, sources=["only_patch.json"])
    assert len(runs) == 4 and runs.trajectories() == []
    (warning,) = runs.warnings()
    assert warning.startswith("only_patch.json: 4 LangSmith run patch(es) had no run to apply to")


def test_only_the_patches_without_their_run_are_reported(whole):
    """A file holding the patches of this trace and of a run posted nowhere: the trace is
    whole, and the one stray patch is reported with the file it came in."""
    stray = {**_patch(RUNS[1]), "id": "01941f29-0000-7000-8000-000000000000"}
    stray["dotted_order"] = _stamp(0) + ROOT + "." + _stamp(9) + stray["id"]
    runs = _read(
        {"post": [_post(r) for r in RUNS]},
        {"patch": [_patch(r) for r in RUNS] + [stray]},
        sources=["posts.json", "patches.json"],
    )
    assert _facts(runs.trajectories()) == whole
    assert [w.split(" had ")[0] for w in runs.warnings()] == [
        "patches.json: 1 LangSmith run patch(es)"
    ]


# -- files of one import ------------------------------------------------------------------


def _write(directory, name: str, *documents) -> str:
    """``documents`` as a file: one JSON document, or JSON Lines when there are several."""
    path = directory / name
    path.write_text("\n".join(json.dumps(d) for d in documents) + "\n")
    return str(path)


def _imported(db_path, paths):
    """The stored trajectories of importing ``paths`` in one call, and its warnings."""
    with CheckpointStore(db_path) as store:
        result = import_into(store, paths)
        assert not result.errors
        return [store.load(s.session_id) for s in result.sessions], result.warnings


@pytest.fixture
def split(tmp_path):
    """The trace as one array of runs, and split several ways over files."""
    batch = {"post": [_post(r) for r in RUNS], "patch": [_patch(r) for r in RUNS]}
    return {
        "array": [_write(tmp_path, "flat_list.json", RUNS)],
        "one batch": [_write(tmp_path, "batch.json", batch)],
        "json lines": [_write(tmp_path, "ls_runs.jsonl", *RUNS)],
        "batches a line": [
            _write(tmp_path, "batches.jsonl", *({"post": [r]} for r in RUNS)),
        ],
        "two batches": [
            _write(tmp_path, "batch1.json", {"post": RUNS[:2]}),
            _write(tmp_path, "batch2.json", {"post": RUNS[2:]}),
        ],
        "two batches reversed": [
            _write(tmp_path, "batch2r.json", {"post": RUNS[2:]}),
            _write(tmp_path, "batch1r.json", {"post": RUNS[:2]}),
        ],
        "posts then patches": [
            _write(tmp_path, "only_post.json", {"post": batch["post"]}),
            _write(tmp_path, "only_patch.json", {"patch": batch["patch"]}),
        ],
        "patches then posts": [
            _write(tmp_path, "only_patch2.json", {"patch": batch["patch"]}),
            _write(tmp_path, "only_post2.json", {"post": batch["post"]}),
        ],
    }


SPLITS = [
    "one batch",
    "json lines",
    "batches a line",
    "two batches",
    "two batches reversed",
    "posts then patches",
    "patches then posts",
]


@pytest.mark.parametrize("how", SPLITS)
def test_a_trace_split_over_lines_or_files_loads_as_one(split, whole, how):
    result = load_many(split[how])
    assert not result.errors and result.warnings == []
    assert _facts(result.trajectories) == _facts(load(split["array"])) == whole


@pytest.mark.parametrize("how", SPLITS)
def test_a_trace_split_over_lines_or_files_is_stored_as_one(split, whole, db_path, how):
    """What the store holds is what one file gives: one session of three steps, not the last
    line's one step with the tool's error as the run's; no patch file "with nothing in it"."""
    stored, warnings = _imported(db_path, split[how])
    assert _facts(stored) == whole and warnings == []


def test_a_patch_file_imported_without_its_posts_is_reported(tmp_path, db_path):
    path = _write(tmp_path, "only_patch.json", {"patch": [_patch(r) for r in RUNS]})
    result = load_many([path])
    assert result.trajectories == [] and not result.errors
    stored, warnings = _imported(db_path, [path])
    assert stored == [] and warnings == result.warnings
    (warning,) = warnings
    assert warning.startswith(f"{path}: 4 LangSmith run patch(es) had no run to apply to")
