"""Canonical encoding: the exact bytes that are hashed, and the bytes that are stored.

The encoding is JSON with no whitespace, UTF-8 and ``repr``-exact floats. Values JSON cannot
hold are written as single-key *tagged* objects (``{"$tuple": [...]}``,
``{"$bytes": "<base64>"}``, ...). A user dict that could be mistaken for a tag, and any dict
whose keys are not all strings, is written as ``{"$map": [[key, value], ...]}``.

A value has two encodings. Its *canonical* bytes (:func:`encode`) sort every dict's keys (and
``$map`` pairs, and set members), so that equal values (``==``, with the same types) have the
same bytes however their dicts were built: their digest is the value's identity
(:func:`hash_value`). Its *stored* bytes (:func:`encode_stored`) keep each dict's keys in the
value's own order, so that what comes back from the store is the value as it was, down to the
order an agent iterates a dict in; they are the canonical bytes whenever every dict's keys
are already in canonical order (sorted, for string keys). ``decode`` reads both:
``decode(encode_stored(v).data) == v`` with the same types and key order, and
``encode(decode(b)) == b`` for canonical bytes ``b``.

Anything else (arbitrary objects, enums, dataclasses, strings holding lone surrogates) raises
:class:`~agent_replay.errors.CanonicalEncodingError` naming the path inside the value; the
caller adds which step it belongs to.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import enum
import hashlib
import json
import marshal
import math
import uuid as _uuid
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import CanonicalEncodingError

__all__ = [
    "GENESIS_HASH",
    "Memo",
    "Stored",
    "decode",
    "digest",
    "encode",
    "encode_stored",
    "escape_text",
    "escape_texts",
    "hash_value",
    "plain_json",
    "snapshot",
    "stored_bytes",
]

#: ``prev_hash`` of the first step of every chain.
GENESIS_HASH = "0" * 64

_TAGS = frozenset(
    {
        "$tuple",
        "$map",
        "$bytes",
        "$bytearray",
        "$set",
        "$frozenset",
        "$float",
        "$datetime",
        "$zoned",
        "$date",
        "$time",
        "$decimal",
        "$uuid",
    }
)


def _json_dumps(sort_keys: bool) -> Any:
    return json.JSONEncoder(
        sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode


def _c_dumps(sort_keys: bool) -> Any:
    """``_json_dumps`` without ``JSONEncoder.encode``'s per-call set-up: the same C encoder
    with the same settings, made once. It skips the circular-reference check, which
    ``_prepare`` makes redundant (it walks every container first, so a cycle fails there)."""
    try:
        from json.encoder import c_make_encoder, encode_basestring

        if c_make_encoder is None:
            return None
        chunks = c_make_encoder(
            None, _no_default, encode_basestring, None, ":", ",", sort_keys, False, False
        )
    except (ImportError, TypeError):  # no C accelerator, or a different signature
        return None
    return lambda value: "".join(chunks(value, 0))


def _no_default(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_dumps = _c_dumps(True) or _json_dumps(True)  # keys sorted: canonical
_dumps_ordered = _c_dumps(False) or _json_dumps(False)  # keys as they come: stored
_key = json.encoder.encode_basestring  # a dict key as _dumps writes it


def digest(data: bytes) -> str:
    """Hex SHA-256 of ``data``: the content address used everywhere."""
    return hashlib.sha256(data).hexdigest()


class Stored(NamedTuple):
    """A value's stored bytes and its two addresses (see the module docstring)."""

    data: bytes  #: dict keys in the value's own order: what is stored and what comes back
    hash: str  #: digest of the canonical bytes: the value's identity
    blob: str  #: digest of ``data``, under which it is stored; ``hash`` when the two agree


def encode(value: Any) -> bytes:
    """Canonical bytes of ``value``; raises ``CanonicalEncodingError`` if it has none."""
    return _encoded(value, lambda prepared: _canonical(prepared).encode("utf-8"))


def encode_stored(value: Any, memo: Memo | None = None) -> Stored:
    """The bytes to store for ``value`` with its identity and content address; raises
    ``CanonicalEncodingError`` as :func:`encode` does.

    With a :class:`Memo`, parts of ``value`` that were encoded before through the same memo
    are not encoded again; the result is the same.
    """
    try:  # (not through _encoded: this runs for the inputs and the output of every step)
        canon, data = _both(_prepare(value)) if memo is None else _encode_shared(value, memo)
    except Exception:  # _encoded says what cannot be encoded, and where
        canon, data = _encoded(value, _both)
    identity = hashlib.sha256(canon).hexdigest()
    if data is canon or data == canon:
        return Stored(canon, identity, identity)
    return Stored(data, identity, hashlib.sha256(data).hexdigest())


def stored_bytes(value: Any) -> bytes:
    """``encode_stored(value).data`` alone, without computing its addresses."""
    return _encoded(value, lambda prepared: _dumps_ordered(prepared).encode("utf-8"))


def _encoded(value: Any, write: Any) -> Any:
    """``write(_prepare(value))``, with every way that can fail turned into a
    :class:`CanonicalEncodingError` that says where."""
    try:
        return write(_prepare(value))
    except CanonicalEncodingError as exc:
        raise CanonicalEncodingError(exc.bare_message, path=_locate(value, _prepare)) from None
    except RecursionError:  # a cycle, or nesting deeper than the interpreter's stack
        raise CanonicalEncodingError(
            "value contains itself or is nested too deeply to be stored", path="$"
        ) from None
    except UnicodeEncodeError as exc:
        raise CanonicalEncodingError(
            "string is not valid Unicode (lone surrogate); it cannot be stored as UTF-8",
            path=_locate(value, lambda v: write(_prepare(v))),
        ) from exc
    except ValueError as exc:  # Python's guard against converting huge ints to text
        raise CanonicalEncodingError(
            f"value cannot be written as JSON ({exc})",
            path=_locate(value, lambda v: write(_prepare(v))),
        ) from exc


def _both(prepared: Any) -> tuple[bytes, bytes]:
    """``(canonical bytes, stored bytes)`` of a prepared value; the same object when equal."""
    data = _dumps_ordered(prepared).encode("utf-8")
    if type(prepared) is not dict and type(prepared) is not list:
        return data, data  # a scalar: one encoding
    canon = _canonical(prepared).encode("utf-8")
    return (data, data) if canon == data else (canon, data)


def _canonical(prepared: Any) -> str:
    text = _dumps(prepared)
    if '"$map"' in text:  # (a cheap test; it also matches a plain key "$map", harmlessly)
        text = _dumps(_sort_maps(prepared))
    return text


def _sort_maps(prepared: Any) -> Any:
    """A prepared value with the pairs of every ``$map`` in it in canonical key order (the
    JSON encoder sorts the keys of plain dicts itself)."""
    # (loops, not comprehensions: a comprehension is a frame of its own on Python < 3.12,
    # and this must reach as deep as _prepare did)
    if type(prepared) is list:
        items = []
        for item in prepared:
            items.append(_sort_maps(item))
        return items
    if type(prepared) is not dict:
        return prepared
    if len(prepared) == 1 and "$map" in prepared:
        pairs = []
        for key, item in prepared["$map"]:
            pairs.append([_sort_maps(key), _sort_maps(item)])
        pairs.sort(key=lambda pair: _sort_key(pair[0]))
        return {"$map": pairs}
    out = {}
    for key, item in prepared.items():
        out[key] = _sort_maps(item)
    return out


_SCALARS = frozenset({str, int, float, bool, type(None), bytes})


def snapshot(value: Any) -> Any:
    """``value`` detached from whoever else holds it, equal to it, of the same types and with
    its dicts' key order: later changes to the caller's objects - an agent appending to the
    message list it passed to a step - cannot reach the copy. Scalars come back as they are
    and a dict of scalars as a shallow copy; anything else makes the round trip through its
    stored bytes. Raises :class:`CanonicalEncodingError` as :func:`encode` does."""
    t = type(value)
    if t in _SCALARS:
        return value
    if t is dict:  # (a loop: this runs for every step of every rollout)
        for item in value.values():
            if type(item) not in _SCALARS:
                break
        else:
            return value.copy()  # its keys are hashable: unchangeable for what matters here
    return decode(stored_bytes(value))


def plain_json(value: Any) -> Any:
    """``value`` as data that JSON text holds as it is, for reports and ``--json`` output
    (recorded content is arbitrary; what is stored is untouched): dicts, lists, strings,
    finite numbers, bools and ``None`` are kept; a tuple is a list, a set a list in a stable
    order; a key that is not a string becomes its ``repr``; a NaN or infinite float its name
    (``"NaN"``, ``"Infinity"``, ``"-Infinity"``: bare, they make JSON most parsers refuse); a
    datetime, date or time its ISO text; anything else its ``repr``."""
    try:
        _strict_dumps(value)
        return value
    except (TypeError, ValueError):
        pass
    except RecursionError:
        return "<nested too deeply to show>"
    try:
        return _plain(value)
    except RecursionError:
        return "<nested too deeply to show>"


_strict_dumps = json.JSONEncoder(allow_nan=False).encode


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value if type(value) in (str, bool, int) or value is None else _plain_scalar(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else repr(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [_plain(item) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    return repr(value)


def _plain_scalar(value: Any) -> Any:
    """A str, int or bool of a subclass (an enum member, say): its plain value."""
    for kind in (bool, int, str):
        if isinstance(value, kind):
            return kind(value)
    return repr(value)


def escape_text(value: str) -> str:
    """``value``, with lone surrogates escaped (``\\ud800``) when it has any.

    Such text cannot be stored as UTF-8, and any server, SDK or exception message can hold
    one: captured calls and exceptions escape it rather than failing the whole recording. A
    held replay serves the escaped text; escaping it again changes nothing, so an agent
    passing it back makes the same request it made when recording.
    """
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def escape_texts(value: Any) -> Any:
    """A JSON value with :func:`escape_text` applied to every string (the value itself when none
    needs it)."""
    t = type(value)
    if t is str:
        return escape_text(value)
    if t is dict:
        items = [
            (escape_text(key) if type(key) is str else key, key, escape_texts(item), item)
            for key, item in value.items()
        ]
        if all(k is k0 and v is v0 for k, k0, v, v0 in items):
            return value
        return {k: v for k, _, v, _ in items}
    if t is list:
        new = [escape_texts(item) for item in value]
        return value if all(a is b for a, b in zip(new, value, strict=True)) else new
    return value


def hash_value(value: Any) -> str:
    """Content hash of ``value`` (hex SHA-256 of its canonical bytes): its identity."""
    return hashlib.sha256(encode(value)).hexdigest()


def decode(data: bytes | str) -> Any:
    """The value of canonical or stored bytes (:func:`encode`, :func:`encode_stored`).
    Raises ``ValueError`` on bytes this module did not write."""
    # what json.loads(data, object_hook=_untag) does, less making a decoder and guessing the
    # encoding on every call (a load decodes every step's header and content)
    text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
    return _DECODER.decode(text)


# -- encoding ---------------------------------------------------------------------------------
# _prepare runs on every value stored, so it builds no paths; when it fails, _locate walks the
# value again to say where.


def _prepare(value: Any) -> Any:
    """Return a JSON-native tree for ``value``; the same object when nothing needs changing."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is dict:
        return _prepare_dict(value)
    if t is float:
        if math.isfinite(value):
            return value
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if t is list:
        out = None
        for i, item in enumerate(value):
            it = type(item)
            new = item if (it is str or it is int or it is bool or item is None) else _prepare(item)
            if new is not item and out is None:
                out = value[:i]
            if out is not None:
                out.append(new)
        return value if out is None else out
    if t is tuple:
        return {"$tuple": [_prepare(item) for item in value]}
    if t is bytes:
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if t is bytearray:
        return {"$bytearray": base64.b64encode(bytes(value)).decode("ascii")}
    if t is set or t is frozenset:
        items = sorted((_prepare(item) for item in value), key=_sort_key)
        return {"$set" if t is set else "$frozenset": items}
    return _prepare_other(value)


def _prepare_dict(value: dict) -> Any:
    out = None
    for key, item in value.items():
        if type(key) is not str:
            return _prepare_odd_dict(value)
        it = type(item)
        if it is str or it is int or it is bool or item is None:
            continue
        new = _prepare(item)
        if new is not item:
            if out is None:
                out = dict(value)
            out[key] = new
    if len(value) == 1 and next(iter(value)) in _TAGS:
        return _prepare_odd_dict(value)  # would read back as a tag: write it as a $map
    return value if out is None else out


def _prepare_odd_dict(value: dict) -> Any:
    if all(isinstance(k, str) and not isinstance(k, enum.Enum) for k in value) and not (
        len(value) == 1 and str(next(iter(value))) in _TAGS
    ):
        return _prepare_dict({str(k): v for k, v in value.items()})  # str subclasses as str
    return {"$map": [[_prepare(k), _prepare(v)] for k, v in value.items()]}  # sorted by _canonical


def _prepare_other(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        raise CanonicalEncodingError(
            f"enum member {value!r} is not stored as such; pass its .value instead"
        )
    if isinstance(value, bool):  # bool subclasses do not exist, but keep the order explicit
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _prepare(float(value))
    if isinstance(value, _dt.datetime):
        if isinstance(value.tzinfo, ZoneInfo) and value.tzinfo.key:
            # the instant and the zone it is read in (an offset alone is wrong across a
            # daylight-saving change: a day later New York is not at -05:00 any more)
            return {"$zoned": [value.isoformat(), value.tzinfo.key]}
        return {"$datetime": value.isoformat()}
    if isinstance(value, _dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, _dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, _uuid.UUID):
        return {"$uuid": str(value)}
    hint = ""
    if hasattr(value, "model_dump"):
        hint = " (a pydantic model: store value.model_dump(mode='json'))"
    elif hasattr(value, "__dataclass_fields__"):
        hint = " (a dataclass: store dataclasses.asdict(value))"
    raise CanonicalEncodingError(
        f"value of type {type(value).__qualname__} cannot be encoded deterministically{hint}"
    )


def _locate(value: Any, check: Any, path: str = "$") -> str:
    """Where in ``value`` (which ``check`` refuses) the first part ``check`` refuses sits, for
    error messages: the innermost key, item or member that fails on its own."""

    def fails(part: Any) -> bool:
        try:
            check(part)
        except (CanonicalEncodingError, UnicodeEncodeError, ValueError):
            return True
        return False

    if isinstance(value, dict):
        for key, item in value.items():
            for child, where in ((key, f"{path}<key {key!r}>"), (item, f"{path}.{key}")):
                if fails(child):
                    return _locate(child, check, where)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for i, item in enumerate(value):
            if fails(item):
                return _locate(item, check, f"{path}[{i}]")
    return path


def _sort_key(prepared: Any) -> bytes:
    return _dumps(prepared).encode("utf-8", "surrogatepass")


# -- encoding with shared parts ----------------------------------------------------------------
# The prompts of a conversation repeat every earlier message, so the steps of one chain hold
# the same messages many times. Both encodings are compositional: a list is "[" + its items'
# encodings joined by "," + "]", and a dict whose keys are all str (and that does not look
# like a tag) is its '"key":value' pairs in braces, sorted for the canonical bytes and in its
# own order for the stored ones. _encode_shared assembles a value's lists (at the top or
# directly under a top-level dict) that way from their items, and looks each container item
# up in the memo.
#
# An item is looked up by its marshal bytes, which pin down the exact types as well as the
# values (1, 1.0 and True differ; a subclass of a built-in type cannot be marshalled at all)
# and the order of every dict's keys. Only items that _prepare leaves unchanged (plain JSON
# data) are stored: marshal writes every bytes-like object as bytes, so an item that equals a
# stored one byte for byte holds no bytes-like object either, and is the same plain data with
# the same bytes.


class Memo:
    """Both encodings of list items already encoded, reused by :func:`encode_stored` when the
    same item (same values, types and key order) comes again. Use one per batch of related
    values (a chain's steps) and drop it afterwards; it is not thread-safe."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: dict[bytes, tuple[bytes, bytes]] = {}


def _encode_shared(value: Any, memo: Memo) -> tuple[bytes, bytes]:
    """``(canonical bytes, stored bytes)`` of ``value``, with the lists at its top, or directly
    under a top-level dict whose keys ``_prepare`` keeps, assembled from their items."""
    if type(value) is list:
        return _encode_list(value, memo)
    if (
        type(value) is dict
        and any(type(item) is list for item in value.values())
        and all(type(k) is str for k in value)
        and not (len(value) == 1 and next(iter(value)) in _TAGS)
    ):
        pairs = []
        for k, item in value.items():
            canon, data = _encode_list(item, memo) if type(item) is list else _both(_prepare(item))
            key = (_key(k) + ":").encode("utf-8")
            pairs.append((k, key + canon, key + data))
        data = b"{" + b",".join(pair[2] for pair in pairs) + b"}"
        pairs.sort(key=lambda pair: pair[0])
        return b"{" + b",".join(pair[1] for pair in pairs) + b"}", data
    return _both(_prepare(value))


def _encode_list(value: list, memo: Memo) -> tuple[bytes, bytes]:
    known = memo.items
    pairs = []
    for item in value:
        t = type(item)
        if t is not dict and t is not list:
            pairs.append(_both(_prepare(item)))
            continue
        try:
            key = marshal.dumps(item, 2)
        except ValueError:  # a subclass, or too deep: no key, encode it afresh
            key = None
        pair = known.get(key)  # type: ignore[arg-type]
        if pair is None:
            prepared = _prepare(item)
            pair = _both(prepared)
            if prepared is item and key is not None:
                known[key] = pair
        pairs.append(pair)
    if not pairs:
        return b"[]", b"[]"
    canon_parts, data_parts = zip(*pairs, strict=True)
    data = b"[" + b",".join(data_parts) + b"]"
    if canon_parts == data_parts:  # (identical objects compare without looking at bytes)
        return data, data
    return b"[" + b",".join(canon_parts) + b"]", data


# -- decoding ---------------------------------------------------------------------------------

_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _untag(obj: dict) -> Any:
    if len(obj) != 1:
        return obj
    ((key, payload),) = obj.items()
    if key not in _TAGS:
        return obj
    try:
        if key == "$tuple":
            return tuple(payload)
        if key == "$map":
            return {_hashable(k): v for k, v in payload}
        if key == "$bytes":
            return base64.b64decode(payload, validate=True)
        if key == "$bytearray":
            return bytearray(base64.b64decode(payload, validate=True))
        if key == "$set":
            return {_hashable(item) for item in payload}
        if key == "$frozenset":
            return frozenset(_hashable(item) for item in payload)
        if key == "$float":
            return _FLOATS[payload]
        if key == "$datetime":
            return _dt.datetime.fromisoformat(payload)
        if key == "$zoned":
            instant, zone = payload
            value = _dt.datetime.fromisoformat(instant)
            try:
                return value.astimezone(ZoneInfo(zone))
            except ZoneInfoNotFoundError:  # no tz database here: the same instant, its offset
                return value
        if key == "$date":
            return _dt.date.fromisoformat(payload)
        if key == "$time":
            return _dt.time.fromisoformat(payload)
        if key == "$decimal":
            return decimal.Decimal(payload)
        return _uuid.UUID(payload)
    except (TypeError, ValueError, KeyError, decimal.InvalidOperation) as exc:
        raise ValueError(f"malformed {key} value in canonical data: {exc}") from exc


_DECODER = json.JSONDecoder(object_hook=_untag)


def _hashable(value: Any) -> Any:
    # Keys of $map and members of $set were hashable when encoded; lists only appear here if
    # the data was not written by encode().
    if isinstance(value, (list, dict)):
        raise ValueError("unhashable key or set member in canonical data")
    return value
