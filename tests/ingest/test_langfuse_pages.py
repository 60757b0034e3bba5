"""Langfuse exports taken page by page: a list holding one trace in several entries is read as
that one trace (QA F5: the first page's steps were dropped), and the flattened usage counts
of an observation without a usage object are its token counts."""

import copy
import json
from pathlib import Path

import pytest

from agent_replay import CheckpointStore
from agent_replay.ingest import import_into, load
from agent_replay.ingest.langfuse import read_langfuse

SHARED = next(p / "shared" for p in Path(__file__).resolve().parents if (p / "shared").is_dir())
LANGFUSE = SHARED / "fixtures" / "langfuse"
KOOG = LANGFUSE / "koog-2025-08-26.json"
SCORED = LANGFUSE / "openai-agents-2025-09-30.json"  # two scores on its trace


def _doc(path: Path) -> dict:
    return json.loads(path.read_text())


def _pages(doc: dict, *cuts: slice) -> list[dict]:
    """``doc`` as entries of the same trace, each with the observations of one cut."""
    return [
        {"trace": copy.deepcopy(doc["trace"]), "observations": doc["observations"][cut]}
        for cut in cuts
    ]


def _facts(trajectory):
    return [
        (s.kind.value, s.name, s.agent, s.span_id, dict(s.attributes), s.step_hash)
        for s in trajectory.steps
    ]


@pytest.fixture
def whole():
    (trajectory,) = load(KOOG)
    return trajectory


def test_a_trace_in_two_entries_of_a_list_is_read_as_the_whole_trace(whole):
    (paged,) = load(_pages(_doc(KOOG), slice(None, 6), slice(6, None)))
    assert len(paged.steps) == len(whole.steps) == 6
    assert _facts(paged) == _facts(whole)  # the first call (47/106 tokens), agents and all
    assert paged.metadata == whole.metadata and paged.task == whole.task


def test_pages_that_overlap_keep_each_observation_once(whole):
    (paged,) = load(_pages(_doc(KOOG), slice(None, 8), slice(4, None), slice(2, 3)))
    assert _facts(paged) == _facts(whole)
    assert paged.metadata == whole.metadata


def test_the_api_shape_split_in_two_is_merged_too(whole):
    doc = _doc(KOOG)
    pages = [
        {**doc["trace"], "observations": doc["observations"][cut]}
        for cut in (slice(None, 5), slice(5, None))
    ]
    (paged,) = load(pages)
    assert _facts(paged) == _facts(whole)


def test_a_paged_list_is_stored_as_the_whole_trace(tmp_path, db_path, whole):
    path = tmp_path / "paged.json"
    path.write_text(json.dumps(_pages(_doc(KOOG), slice(None, 6), slice(6, None))))
    with CheckpointStore(db_path) as store:
        result = import_into(store, [path])
        assert not result.errors and not result.warnings
        (session,) = result.sessions
        assert session.steps == 6
        stored = store.load(session.session_id)
    assert [s.step_hash for s in stored.steps] == [s.step_hash for s in whole.steps]


def test_the_scores_of_every_page_are_kept_once():
    doc = _doc(SCORED)
    (expected,) = load(doc)
    first, second = _pages(doc, slice(None, 2), slice(2, None))
    first["trace"]["scores"] = doc["trace"]["scores"][:1]  # the second page repeats it
    (paged,) = load([first, second])
    assert paged.metadata["langfuse"]["scores"] == expected.metadata["langfuse"]["scores"]
    assert len(paged.metadata["langfuse"]["scores"]) == 2
    assert _facts(paged) == _facts(expected)


def test_an_observation_again_with_other_content_keeps_its_first_copy_and_is_noted(whole):
    first, second = _pages(_doc(KOOG), slice(None, 6), slice(5, None))
    second["observations"][0] = {**second["observations"][0], "name": "renamed"}
    (paged,) = load([first, second])
    assert _facts(paged) == _facts(whole)
    (note,) = [n for n in paged.metadata["capture"]["notes"] if "came again" in n]
    assert note.startswith("1 observation(s) of trace ")


def test_different_traces_of_a_list_stay_apart():
    docs = [_doc(KOOG), _doc(SCORED)]
    assert [len(t.steps) for t in read_langfuse(docs)] == [
        len(t.steps) for doc in docs for t in read_langfuse(doc)
    ]
    assert len(read_langfuse(docs)) == 2


def test_entries_without_a_trace_id_are_not_merged():
    doc = _doc(SCORED)
    del doc["trace"]["id"]
    alone = read_langfuse(doc)
    assert len(read_langfuse([doc, copy.deepcopy(doc)])) == 2 * len(alone)


def test_flattened_usage_counts_are_the_token_counts():
    """The google-vertex export has no ``usageDetails``, only ``inputUsage`` /
    ``outputUsage``: its generation was imported without token counts."""
    (trajectory,) = load(LANGFUSE / "google-vertex-tools-langchain-2025-09-19.json")
    (step,) = trajectory.steps
    assert (step.attributes["input_tokens"], step.attributes["output_tokens"]) == (1200, 15)


def test_flattened_zero_counts_beside_an_empty_usage_object_are_no_counts(whole):
    """Koog's spans hold ``usageDetails: {}`` and ``inputUsage: 0``: no counts, as before."""
    counted = [s.name for s in whole.steps if "input_tokens" in s.attributes]
    assert counted == ["llm.chat", "llm.chat"]
    doc = _doc(KOOG)
    for obs in doc["observations"]:
        obs.pop("usageDetails", None)  # flattened counts only: 0 and 0 is none recorded
    (trajectory,) = load(doc)
    assert [s.name for s in trajectory.steps if "input_tokens" in s.attributes] == counted
