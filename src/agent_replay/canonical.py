"""Canonical encoding: the exact bytes that are hashed, stored and loaded.

The encoding is JSON with sorted keys, no whitespace, UTF-8 and ``repr``-exact floats. Values
JSON cannot hold are written as single-key *tagged* objects (``{"$tuple": [...]}``,
``{"$bytes": "<base64>"}``, ...). A user dict that could be mistaken for a tag, and any dict
whose keys are not all strings, is written as ``{"$map": [[key, value], ...]}`` with pairs in
canonical key order. So ``decode(encode(v)) == v`` with the same types, and
``encode(decode(b)) == b`` for every ``b`` this module wrote: what is hashed is exactly what is
stored and exactly what comes back.

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
from typing import Any

from .errors import CanonicalEncodingError

__all__ = [
    "GENESIS_HASH",
    "Memo",
    "decode",
    "digest",
    "encode",
    "encode_and_hash",
    "hash_value",
    "snapshot",
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
        "$date",
        "$time",
        "$decimal",
        "$uuid",
    }
)

_dumps = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


def _c_dumps() -> Any:
    """``_dumps`` without ``JSONEncoder.encode``'s per-call set-up: the same C encoder with
    the same settings, made once. It skips the circular-reference check, which ``_prepare``
    makes redundant (it walks every container first, so a cycle fails there)."""
    try:
        from json.encoder import c_make_encoder, encode_basestring

        if c_make_encoder is None:
            return None
        chunks = c_make_encoder(
            None, _no_default, encode_basestring, None, ":", ",", True, False, False
        )
    except (ImportError, TypeError):  # no C accelerator, or a different signature
        return None
    return lambda value: "".join(chunks(value, 0))


def _no_default(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_dumps = _c_dumps() or _dumps
_key = json.encoder.encode_basestring  # a dict key as _dumps writes it


def digest(data: bytes) -> str:
    """Hex SHA-256 of ``data``: the content address used everywhere."""
    return hashlib.sha256(data).hexdigest()


def encode(value: Any, memo: Memo | None = None) -> bytes:
    """Canonical bytes of ``value``; raises ``CanonicalEncodingError`` if it has none.

    With a :class:`Memo`, parts of ``value`` that were encoded before through the same memo
    are not encoded again; the bytes are the same.
    """
    if memo is not None:
        try:
            return _encode_shared(value, memo)
        except Exception:  # the plain path below raises the right error, with its path
            pass
    try:
        prepared = _prepare(value)
        text = _dumps(prepared)
    except CanonicalEncodingError as exc:
        raise CanonicalEncodingError(exc.bare_message, path=_locate(value)) from None
    except RecursionError:  # a cycle, or nesting deeper than the interpreter's stack
        raise CanonicalEncodingError(
            "value contains itself or is nested too deeply to be stored", path="$"
        ) from None
    except ValueError as exc:  # Python's guard against converting huge ints to text
        raise CanonicalEncodingError(f"value cannot be written as JSON ({exc})", path="$") from exc
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalEncodingError(
            "string is not valid Unicode (lone surrogate); it cannot be stored as UTF-8",
            path="$",
        ) from exc


def encode_and_hash(value: Any, memo: Memo | None = None) -> tuple[bytes, str]:
    """``(encode(value, memo), digest(...))`` in one call."""
    data = encode(value, memo)
    return data, hashlib.sha256(data).hexdigest()


_SCALARS = frozenset({str, int, float, bool, type(None), bytes})


def snapshot(value: Any) -> Any:
    """``value`` detached from whoever else holds it, equal to it and of the same types (what
    :func:`decode` of its :func:`encode` gives): later changes to the caller's objects - an
    agent appending to the message list it passed to a step - cannot reach the copy. Scalars
    come back as they are and a dict of scalars as a shallow copy; anything else makes the
    round trip. Raises :class:`CanonicalEncodingError` as :func:`encode` does."""
    t = type(value)
    if t in _SCALARS:
        return value
    if t is dict:  # (a loop: this runs for every step of every rollout)
        for item in value.values():
            if type(item) not in _SCALARS:
                break
        else:
            return value.copy()  # its keys are hashable: unchangeable for what matters here
    return decode(encode(value))


def hash_value(value: Any) -> str:
    """Content hash of ``value`` (hex SHA-256 of its canonical bytes)."""
    return hashlib.sha256(encode(value)).hexdigest()


def decode(data: bytes | str) -> Any:
    """Inverse of :func:`encode`. Raises ``ValueError`` on bytes this module did not write."""
    return json.loads(data, object_hook=_untag)


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
    pairs = [[_prepare(k), _prepare(v)] for k, v in value.items()]
    pairs.sort(key=lambda pair: _sort_key(pair[0]))
    return {"$map": pairs}


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


def _locate(value: Any, path: str = "$") -> str:
    """Where in ``value`` the first thing ``_prepare`` rejects sits (for error messages)."""
    try:
        _prepare(value)
        return path
    except CanonicalEncodingError:
        pass
    if isinstance(value, dict):
        for key, item in value.items():
            for child, where in ((key, f"{path}<key {key!r}>"), (item, f"{path}.{key}")):
                try:
                    _prepare(child)
                except CanonicalEncodingError:
                    return _locate(child, where)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for i, item in enumerate(value):
            try:
                _prepare(item)
            except CanonicalEncodingError:
                return _locate(item, f"{path}[{i}]")
    return path


def _sort_key(prepared: Any) -> bytes:
    return _dumps(prepared).encode("utf-8", "surrogatepass")


# -- encoding with shared parts ----------------------------------------------------------------
# The prompts of a conversation repeat every earlier message, so the steps of one chain hold
# the same messages many times. The canonical encoding is compositional: a list is "[" + its
# items' encodings joined by "," + "]", and a dict whose keys are all str (and that does not
# look like a tag) is its sorted '"key":value' pairs in braces. _encode_shared assembles a
# value's lists (at the top or directly under a top-level dict) that way from their items,
# and looks each container item up in the memo.
#
# An item is looked up by its marshal bytes, which pin down the exact types as well as the
# values (1, 1.0 and True differ; a subclass of a built-in type cannot be marshalled at all).
# Only items that _prepare leaves unchanged (plain JSON data) are stored: marshal writes every
# bytes-like object as bytes, so an item that equals a stored one byte for byte holds no
# bytes-like object either, and is the same plain data with the same canonical bytes.


class Memo:
    """Canonical bytes of list items already encoded, reused by :func:`encode` when the same
    item (same values and types) comes again. Use one per batch of related values (a chain's
    steps) and drop it afterwards; it is not thread-safe."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: dict[bytes, bytes] = {}


def _encode_shared(value: Any, memo: Memo) -> bytes:
    """``encode(value)``, with the lists at its top, or directly under a top-level dict whose
    keys ``_prepare`` keeps, assembled from their items."""
    if type(value) is list:
        return _encode_list(value, memo)
    if (
        type(value) is dict
        and any(type(item) is list for item in value.values())
        and all(type(k) is str for k in value)
        and not (len(value) == 1 and next(iter(value)) in _TAGS)
    ):
        pairs = [
            (_key(k) + ":").encode("utf-8")
            + (_encode_list(item, memo) if type(item) is list else _plain(item))
            for k, item in sorted(value.items())
        ]
        return b"{" + b",".join(pairs) + b"}"
    return _plain(value)


def _encode_list(value: list, memo: Memo) -> bytes:
    parts = []
    for item in value:
        t = type(item)
        if t is not dict and t is not list:
            parts.append(_plain(item))
            continue
        try:
            key = marshal.dumps(item, 2)
        except ValueError:  # a subclass, or too deep: no key, encode it afresh
            parts.append(_plain(item))
            continue
        data = memo.items.get(key)
        if data is None:
            prepared = _prepare(item)
            data = _dumps(prepared).encode("utf-8")
            if prepared is item:
                memo.items[key] = data
        parts.append(data)
    return b"[" + b",".join(parts) + b"]"


def _plain(value: Any) -> bytes:
    return _dumps(_prepare(value)).encode("utf-8")


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
        if key == "$date":
            return _dt.date.fromisoformat(payload)
        if key == "$time":
            return _dt.time.fromisoformat(payload)
        if key == "$decimal":
            return decimal.Decimal(payload)
        return _uuid.UUID(payload)
    except (TypeError, ValueError, KeyError, decimal.InvalidOperation) as exc:
        raise ValueError(f"malformed {key} value in canonical data: {exc}") from exc


def _hashable(value: Any) -> Any:
    # Keys of $map and members of $set were hashable when encoded; lists only appear here if
    # the data was not written by encode().
    if isinstance(value, (list, dict)):
        raise ValueError("unhashable key or set member in canonical data")
    return value
