"""Stored form of arguments and results: round trips, snapshots, refusals."""

from __future__ import annotations

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_replay import canonical
from agent_replay.errors import CanonicalEncodingError, RebuildError
from agent_replay.instrument._data import ENVELOPE, from_data, to_data

json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_like)
def test_plain_data_round_trips_through_storage(value):
    stored = to_data(value, where="step 0 (tool:t) output")
    assert canonical.decode(canonical.encode(stored)) == stored
    assert from_data(canonical.decode(canonical.encode(stored))) == value


@given(st.dictionaries(st.text(max_size=8), json_like, max_size=3))
def test_a_user_dict_using_the_envelope_key_survives(extra):
    value = {ENVELOPE: "pydantic", "type": "os:system", **extra}
    assert from_data(to_data(value, where="w")) == value  # never taken for an envelope


class Point(pydantic.BaseModel):
    x: int
    tags: list[str] = []


def test_models_become_envelopes_and_come_back_as_themselves():
    stored = to_data({"points": [Point(x=1, tags=["a"])]}, where="w")
    assert stored["points"][0][ENVELOPE] == "pydantic"
    back = from_data(canonical.decode(canonical.encode(stored)))
    assert back == {"points": [Point(x=1, tags=["a"])]}
    assert type(back["points"][0]) is Point


def test_containers_are_snapshots():
    messages = [{"role": "user", "content": "hi"}]
    stored = to_data(messages, where="w")
    messages.append({"role": "assistant"})
    messages[0]["content"] = "changed"
    assert stored == [{"role": "user", "content": "hi"}]


def test_refusals_name_the_step_and_the_path():
    with pytest.raises(CanonicalEncodingError) as info:
        to_data({"a": [1, object()]}, where="step 4 (llm:x) inputs")
    assert str(info.value).startswith("step 4 (llm:x) inputs: value of type builtins.object")
    assert str(info.value).endswith("at $.a[1]")


def test_a_local_class_is_refused_at_record_time():
    class Local(pydantic.BaseModel):
        x: int

    with pytest.raises(CanonicalEncodingError, match="defined inside a function"):
        to_data(Local(x=1), where="w")


def test_rebuilding_never_imports_a_new_top_level_package():
    envelope = {ENVELOPE: "pydantic", "type": "some_package_never_imported.mod:Model", "data": {}}
    with pytest.raises(RebuildError, match="has not imported"):
        from_data(envelope)
    not_a_model = {ENVELOPE: "pydantic", "type": "os:system", "data": {}}
    with pytest.raises(RebuildError, match="not a pydantic model class"):
        from_data(not_a_model)


class Inner(pydantic.BaseModel):
    a: int | None = None
    b: int | None = None


class Outer(pydantic.BaseModel):
    inner: list[Inner] = []
    note: str | None = None
    stamp: float = pydantic.Field(default_factory=lambda: __import__("time").time())


def test_a_rebuilt_model_has_the_fields_set_the_original_had():
    original = Outer(inner=[Inner(a=1), Inner(b=2)])
    back = from_data(canonical.decode(canonical.encode(to_data(original, where="w"))))
    assert back.model_fields_set == {"inner"}
    assert [i.model_fields_set for i in back.inner] == [{"a"}, {"b"}]
    assert back.model_dump(exclude_unset=True) == original.model_dump(exclude_unset=True)
    assert back.stamp == original.stamp  # a value no one set is kept, not made again


def test_an_envelope_stored_without_unset_fields_still_rebuilds():
    # what recordings made before the fields-set fix hold: every field, all of them set
    stored = {ENVELOPE: "pydantic", "type": f"{__name__}:Inner", "data": {"a": 1, "b": None}}
    back = from_data(stored)
    assert back == Inner(a=1, b=None) and back.model_fields_set == {"a", "b"}


def test_lone_surrogates_are_escaped_in_keys_values_and_model_dumps():
    stored = to_data({"k\ud800": ["a\udc00", Inner(a=1)], "ok": "é"}, where="w")
    assert stored["k\\ud800"][0] == "a\\udc00" and stored["ok"] == "é"
    canonical.encode(stored)  # storable
    assert to_data(Note(text="x\ud800"), where="w")["data"] == {"text": "x\\ud800"}


class Note(pydantic.BaseModel):
    text: str
