"""Values that recordings depend on, pinned: the seeds and random streams a held prefix
replays, and the canonical bytes every hash is taken of. A store written under one Python
must replay and verify under another (CI runs this under 3.10, 3.11 and 3.14), so these
must not change with the interpreter, and a change to the code that moves them breaks every
stored recording."""

import datetime
import decimal
import math
import uuid

from agent_replay import canonical
from agent_replay.capture.seeds import KeyedRandom, derive_seed, stream_seed


def test_seeds_are_pinned():
    base = derive_seed(7, "step")
    assert base == 16882983939909122124
    assert derive_seed(0) == 13441156890354882375
    assert derive_seed("run", 3, "body") == 2541226921247409744
    assert (derive_seed(True), derive_seed(1)) == (5034453286478133252, 2909030486109283042)
    assert stream_seed(base, 0) == 15000012429711666517
    assert stream_seed(base, 41) == 5551755448535084505


def test_every_random_method_of_a_keyed_stream_is_pinned():
    """``ctx.rng`` offers every ``random.Random`` method; each draws through ``random`` or
    ``getrandbits`` of the stream, by code of the standard library that could differ
    between Pythons (it does not, from 3.10 to 3.14)."""
    r = KeyedRandom(12345)
    drawn = [
        r.random(),
        r.choice("abcdefg"),
        r.randint(1, 10**6),
        r.randrange(0, 1000, 7),
        r.uniform(2, 3),
        r.gauss(0, 1),
        r.getrandbits(100),
        r.choices(range(10), k=5),
        r.sample(range(100), 5),
        r.randbytes(5),
        r.triangular(),
        r.expovariate(2.0),
        r.betavariate(2, 3),
    ]
    shuffled = list(range(10))
    r.shuffle(shuffled)
    assert drawn == [
        0.1330796686614273,
        "b",
        125350,
        315,
        2.506880215507456,
        -0.26601767609126276,
        608200925366715173332796381958,
        [8, 1, 3, 7, 8],
        [50, 65, 48, 18, 37],
        b"\xc5%\x1c\xf2,",
        0.3482096792954665,
        0.09726779829213195,
        0.2847910795888341,
    ]
    assert shuffled == [6, 1, 0, 5, 7, 9, 8, 4, 2, 3]


def test_canonical_bytes_are_pinned():
    value = {
        "text": 'naïve ☃ \u2028 "q" \\ \x00',
        "ints": [0, -1, 2**70, True, False, None],
        "floats": [0.1, -0.0, 1e-320, 2.0**60, 1.7976931348623157e308, math.inf, -math.inf],
        "nan": math.nan,
        "t": (1, (2,)),
        "b": b"\x00\xff",
        "ba": bytearray(b"ab"),
        "s": {3, 1, 2},
        "fs": frozenset({"b", "a"}),
        "dt": datetime.datetime(
            2026, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone(-datetime.timedelta(hours=5.5))
        ),
        "naive": datetime.datetime(2026, 1, 2, 3, 4, 5),
        "d": datetime.date(2026, 11, 30),
        "tm": datetime.time(23, 59, 59, 999999),
        "dec": [decimal.Decimal(x) for x in ("1.10", "-0", "1E+3", "NaN")],
        "u": uuid.UUID(int=5),
        "clash": {"$tuple": [1]},
        7: "int key",
        (1, "a"): {"z": 1, "a": 2},
    }
    data = canonical.encode(value)
    assert data == (
        b'{"$map":[["b",{"$bytes":"AP8="}],["ba",{"$bytearray":"YWI="}],'
        b'["clash",{"$map":[["$tuple",[1]]]}],["d",{"$date":"2026-11-30"}],'
        b'["dec",[{"$decimal":"1.10"},{"$decimal":"-0"},{"$decimal":"1E+3"},'
        b'{"$decimal":"NaN"}]],["dt",{"$datetime":"2026-01-02T03:04:05.000006-05:30"}],'
        b'["floats",[0.1,-0.0,1e-320,1.152921504606847e+18,1.7976931348623157e+308,'
        b'{"$float":"inf"},{"$float":"-inf"}]],["fs",{"$frozenset":["a","b"]}],'
        b'["ints",[0,-1,1180591620717411303424,true,false,null]],'
        b'["naive",{"$datetime":"2026-01-02T03:04:05"}],["nan",{"$float":"nan"}],'
        b'["s",{"$set":[1,2,3]}],'
        b'["t",{"$tuple":[1,{"$tuple":[2]}]}],'
        b'["text","na\xc3\xafve \xe2\x98\x83 \xe2\x80\xa8 \\"q\\" \\\\ \\u0000"],'
        b'["tm",{"$time":"23:59:59.999999"}],'
        b'["u",{"$uuid":"00000000-0000-0000-0000-000000000005"}],[7,"int key"],'
        b'[{"$tuple":[1,"a"]},{"a":2,"z":1}]]}'
    )
    assert canonical.hash_value(value) == canonical.digest(data)
