import collections
import datetime
import decimal
import enum
import json
import math
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_replay import canonical
from agent_replay.errors import CanonicalEncodingError

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text()
    | st.binary(max_size=32)
)
hashable = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=5)
        | st.dictionaries(hashable, inner, max_size=3)
        | st.sets(hashable, max_size=3)
    ),
    max_leaves=25,
)


def same(a, b) -> bool:
    """Equality that treats NaN as equal to itself and checks types."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return canonical.encode(a) == canonical.encode(b)
    return canonical.encode(a) == canonical.encode(b)


@settings(max_examples=400)
@given(values)
def test_round_trip_is_exact(value):
    data = canonical.encode(value)
    back = canonical.decode(data)
    assert same(back, value)
    assert canonical.encode(back) == data  # what is hashed is what comes back


@given(st.dictionaries(st.text(max_size=5), st.integers(), max_size=6))
def test_key_order_does_not_matter(d):
    reordered = dict(reversed(list(d.items())))
    assert canonical.encode(d) == canonical.encode(reordered)


def key_orders(value) -> list:
    """Every dict's keys in order, depth first (sets hold no dicts: nothing to order)."""
    if isinstance(value, dict):
        return [list(value)] + [o for k, v in value.items() for o in key_orders(k) + key_orders(v)]
    if isinstance(value, (list, tuple)):
        return [o for item in value for o in key_orders(item)]
    return []


@settings(max_examples=400)
@given(values)
def test_stored_bytes_keep_every_dicts_key_order_and_the_identity_ignores_it(value):
    stored = canonical.encode_stored(value)
    back = canonical.decode(stored.data)
    assert same(back, value) and key_orders(back) == key_orders(value)
    assert canonical.encode_stored(back) == stored  # what comes back is stored the same way
    assert stored.hash == canonical.hash_value(value) == canonical.digest(canonical.encode(back))
    assert stored.blob == canonical.digest(stored.data)
    assert (stored.blob == stored.hash) == (stored.data == canonical.encode(value))
    snap = canonical.snapshot(value)
    assert same(snap, value) and key_orders(snap) == key_orders(value)


@pytest.mark.parametrize(
    "value",
    [
        {"z": 1, "a": 2},
        {2: "b", 1: "a"},  # a $map
        {"k": [{"z": {(2, 1): 0, (1, 2): 0}, "a": 1}]},  # a $map inside a list inside a dict
    ],
)
def test_reordered_dicts_share_their_identity_not_their_bytes(value):
    def reverse(v):
        if isinstance(v, dict):
            return {k: reverse(x) for k, x in reversed(list(v.items()))}
        if isinstance(v, list):
            return [reverse(x) for x in v]
        return v

    first, second = canonical.encode_stored(value), canonical.encode_stored(reverse(value))
    assert first.hash == second.hash
    assert first.data != second.data and first.blob != second.blob
    assert key_orders(canonical.decode(second.data)) == key_orders(reverse(value))


def test_tagged_types_and_escaping():
    value = {
        "t": (1, 2),
        "b": b"\x00",
        "s": {3, 1},
        "nan": math.inf,
        "dt": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        "dec": decimal.Decimal("1.10"),
        "u": uuid.UUID(int=5),
        "clash": {"$tuple": [1]},
        7: "int key",
    }
    back = canonical.decode(canonical.encode(value))
    assert back == value
    assert isinstance(back["t"], tuple) and back["clash"] == {"$tuple": [1]}


def test_exact_floats():
    for x in (0.1, 1e-320, 2.0**60, -0.0, 1.7976931348623157e308):
        assert canonical.decode(canonical.encode(x)) == x


@pytest.mark.parametrize("bad", [object(), lambda: 1, {"a": [1, {"b": object()}]}])
def test_unencodable_values_name_the_path(bad):
    with pytest.raises(CanonicalEncodingError) as info:
        canonical.encode(bad)
    assert "cannot be encoded deterministically" in str(info.value)


def test_path_in_error():
    with pytest.raises(CanonicalEncodingError, match=r"\$\.a\[1\]\.b"):
        canonical.encode({"a": [1, {"b": object()}]})


@pytest.mark.parametrize("encode", [canonical.encode, canonical.encode_stored])
def test_text_and_numbers_that_cannot_be_written_name_their_path(encode):
    """A lone surrogate or an int too long for text was reported "at $" however deep it sat."""
    with pytest.raises(CanonicalEncodingError, match=r"lone surrogate.* at \$\.a\[1\]\.b$"):
        encode({"a": ["ok", {"b": "x\ud800"}], "z": 1})
    with pytest.raises(CanonicalEncodingError, match=r" at \$\.k<key 'x\\udc80'>$"):
        encode({"k": {"x\udc80": 1}})
    with pytest.raises(CanonicalEncodingError, match=r"written as JSON .* at \$\[0\]\[2\]$"):
        encode([(1, 2, 10**5000)])


def test_decode_rejects_garbage():
    with pytest.raises(ValueError):
        canonical.decode(b'{"$bytes": "***"}')


# -- encoding with a memo: the same bytes as without -----------------------------------------


class _Color(enum.IntEnum):
    RED = 1


class _Str(str):
    def __str__(self) -> str:
        return "changed"


tricky = (
    st.sampled_from(
        [
            1,
            1.0,
            True,
            0.0,
            -0.0,
            math.nan,
            math.inf,
            "\ud800",
            b"a",
            bytearray(b"a"),
            (1,),
            frozenset({1}),
            {"$tuple": [1]},
            {"$map": []},
            {1: "a"},
            {True: "a"},
            _Color.RED,
            _Str("a"),
            collections.OrderedDict(a=1),
        ]
    )
    | st.builds(lambda: 10**5000)
    | st.builds(object)
)
memo_values = st.recursive(
    scalars | tricky,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner)
        | st.dictionaries(st.sampled_from(["a", "b", "$tuple", "messages"]), inner, max_size=3)
    ),
    max_leaves=12,
)


def _outcome(value, memo=None):
    try:
        return canonical.encode_stored(value, memo)
    except CanonicalEncodingError as exc:
        return ("error", str(exc))


@settings(max_examples=500)
@given(st.lists(memo_values, max_size=6))
def test_memo_gives_the_same_bytes(batch):
    memo = canonical.Memo()
    for value in batch:
        assert _outcome(value, memo) == _outcome(value)
        # again, now that its parts are in the memo, and inside the usual shapes
        assert _outcome(value, memo) == _outcome(value)
        for wrapped in ({"messages": [value, value]}, [value], {"action": value}):
            assert _outcome(wrapped, memo) == _outcome(wrapped)


@pytest.mark.parametrize(
    "first, second",
    [
        ([{"a": 1}], [{"a": True}]),
        ([{"a": 1}], [{"a": 1.0}]),
        ([[0.0]], [[-0.0]]),
        ([[b"a"]], [[bytearray(b"a")]]),
        ([["a"]], [[_Str("a")]]),
        ([[1]], [[_Color.RED]]),
        ([{"k": [1, 2]}], [{"k": (1, 2)}]),
        ([{"1": "a"}], [{1: "a"}]),
        ([{"b": [1]}], [{"$tuple": [1]}]),
        ([{"a": 1, "b": 2}], [{"b": 2, "a": 1}]),  # equal, but not stored alike
    ],
)
def test_memo_tells_apart_values_that_compare_equal(first, second):
    memo = canonical.Memo()
    assert _outcome({"messages": first}, memo) == _outcome({"messages": first})
    assert _outcome({"messages": second}, memo) == _outcome({"messages": second})


@settings(max_examples=300)
@given(values)
def test_c_encoder_matches_json_encoder(value):
    reference = json.JSONEncoder(
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode
    prepared = canonical._prepare(value)
    assert canonical._dumps(prepared) == reference(prepared)
    assert canonical._dumps_ordered(prepared) == json.JSONEncoder(
        separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode(prepared)


@given(values)
def test_a_snapshot_is_what_storing_gives_back_and_shares_nothing(value):
    copy = canonical.snapshot(value)
    assert canonical.encode(copy) == canonical.encode(value)
    assert same(copy, value)
    if isinstance(value, (list, dict, set, bytearray)):
        assert copy is not value


def test_a_snapshot_is_detached_from_what_the_caller_keeps_changing():
    messages = [{"role": "user", "content": ["hi"]}]
    inputs = {"messages": messages, "n": 1}
    copy = canonical.snapshot(inputs)
    messages.append({"role": "assistant"})
    messages[0]["content"].append("edited")
    assert copy == {"messages": [{"role": "user", "content": ["hi"]}], "n": 1}


def test_cycles_and_very_deep_nesting_are_encoding_errors_not_recursion_errors():
    """A RecursionError escaped into the agent from ``ctx.tool`` (and, caught there, made
    ``record`` complain about steps still running); it is a CanonicalEncodingError now."""
    from agent_replay import record

    cycle: list = []
    cycle.append(cycle)
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    for value in (cycle, deep):
        with pytest.raises(CanonicalEncodingError, match="contains itself or is nested"):
            canonical.encode(value)

        def agent(ctx, value=value):
            return ctx.tool("t", produce=lambda: value)

        with pytest.raises(CanonicalEncodingError, match="step 0"):
            record(agent)


def test_a_map_deep_inside_lists_is_as_storable_as_before():
    """Sorting the pairs of a $map re-walked the value with comprehensions, two frames per
    level on Python 3.11: a value 500 lists deep holding a $map could no longer be stored."""
    value = {2: 1, 1: 2}
    for _ in range(900):
        value = [value]
    stored = canonical.encode_stored(value)
    assert canonical.decode(stored.data) == value
    assert stored.hash == canonical.hash_value(value)


def test_a_datetime_in_a_named_zone_comes_back_in_that_zone():
    """It came back at a fixed offset: a day after 1 a.m. on the night New York's clocks went
    back, the replayed value said -05:00 where the recorded one said -04:00 (and fold was
    lost), with no divergence reported."""
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        new_york = zoneinfo.ZoneInfo("America/New_York")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no time zone database on this machine")
    ambiguous = datetime.datetime(2024, 11, 3, 1, 30, fold=1, tzinfo=new_york)
    back = canonical.decode(canonical.encode(ambiguous))
    assert back == ambiguous and back.tzinfo is new_york and back.fold == 1
    later = back + datetime.timedelta(days=-1)
    assert later.utcoffset() == datetime.timedelta(hours=-4)  # summer time the day before
    # where the zone is unknown (no tz database), the same instant at its recorded offset
    unknown = canonical.decode(b'{"$zoned":["2024-11-03T01:30:00-05:00","Nowhere/Never"]}')
    assert unknown.timestamp() == ambiguous.timestamp()  # (== is False across zones at a fold)
    assert unknown.utcoffset() == datetime.timedelta(hours=-5)


def test_plain_json_keeps_the_shape_and_makes_every_leaf_json():
    import datetime
    import enum

    class Colour(enum.IntEnum):
        RED = 1

    value = {
        "nan": float("nan"),
        "inf": [float("inf"), -float("inf")],
        1: ("a", {2, 1}),
        "when": datetime.date(2024, 1, 2),
        "enum": Colour.RED,
        "obj": object,
    }
    plain = canonical.plain_json(value)
    assert plain["nan"] == "NaN" and plain["inf"] == ["Infinity", "-Infinity"]
    assert plain["1"] == ["a", [1, 2]] and plain["when"] == "2024-01-02"
    assert plain["enum"] == 1 and type(plain["enum"]) is int and plain["obj"] == repr(object)
    json.dumps(plain, allow_nan=False)
    same = {"a": [1, 2.5, None, True]}
    assert canonical.plain_json(same) is same  # plain JSON is not copied
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert canonical.plain_json(deep) == "<nested too deeply to show>"
