"""What an intercepted call's arguments and result become when stored, and back.

Plain data (what :mod:`agent_replay.canonical` encodes) is stored as is. A pydantic model
(every OpenAI, Anthropic, LangChain and LiteLLM response type is one) is stored as its own
``model_dump(mode="json")`` inside an *envelope* naming its class (and, for results, the
fields no one set), and rebuilt as that class on replay, with the same fields set. Anything
else cannot be stored: :func:`to_data` raises :class:`~agent_replay.errors.CanonicalEncodingError`
naming the step and the path inside the value, before anything is recorded.

Rebuilding never imports a top-level package that is not imported already, so a stored
trajectory cannot make the replaying process load arbitrary code; it only resolves classes
of packages the agent itself uses.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import decimal
import enum
import importlib
import sys
import uuid as _uuid
from collections.abc import Iterable
from typing import Any

from ..canonical import escape_text, escape_texts
from ..errors import CanonicalEncodingError, RebuildError

__all__ = ["ENVELOPE", "from_data", "is_envelope", "to_data", "type_path"]

ENVELOPE = "__agent_replay__"
"""Key of the envelopes this module writes (``{ENVELOPE: "pydantic", "type", "data"}``)."""

_SCALARS = (str, int, float, bool, type(None))
_OPAQUE = (bytes, bytearray, _dt.datetime, _dt.date, _dt.time, decimal.Decimal, _uuid.UUID)


def to_data(value: Any, *, where: str, inputs: bool = False, path: str = "$") -> Any:
    """A snapshot of ``value`` as storable data: pydantic models become envelopes.

    Containers are always copied: agents keep appending to the message list they passed, and
    a step must keep what the call saw. ``inputs=True`` also stores enum members as their
    value (arguments are compared, never handed back as such). Raises
    :class:`CanonicalEncodingError` naming ``where`` and the path for anything else.
    """
    t = type(value)
    if t is str:
        return escape_text(value)
    if t in _SCALARS:
        return value
    if t is dict:
        result = {
            escape_text(key) if type(key) is str else key: to_data(
                item, where=where, inputs=inputs, path=f"{path}.{key}"
            )
            for key, item in value.items()
        }
        if ENVELOPE in result:  # a user dict that looks like ours: keep it apart
            return {ENVELOPE: "dict", "data": result}
        return result
    if t is list:
        return [
            to_data(item, where=where, inputs=inputs, path=f"{path}[{i}]")
            for i, item in enumerate(value)
        ]
    if t is tuple:
        return tuple(
            to_data(item, where=where, inputs=inputs, path=f"{path}[{i}]")
            for i, item in enumerate(value)
        )
    if t is set:
        return set(value)  # members are hashable, so immutable enough; canonical checks them
    if isinstance(value, _OPAQUE) or t is frozenset:
        return bytes(value) if t is bytearray else value  # canonical encodes these itself
    if isinstance(value, enum.Enum):
        if inputs:
            return to_data(value.value, where=where, inputs=inputs, path=path)
        raise CanonicalEncodingError(
            f"enum member {value!r} cannot be stored as data; return its .value",
            path=path,
            where=where,
        )
    if isinstance(value, str):  # subclasses of the scalars: store the plain value
        return escape_text(str(value))
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if inputs and isinstance(value, type):
        # a class given as an argument (``response_format=City``): stored by name and, when it
        # has one, its JSON schema, so the same class matches and a changed one does not
        return _class_envelope(value)
    if _is_pydantic(value):
        envelope = {
            ENVELOPE: "pydantic",
            "type": type_path(type(value), where, path),
            "data": _dump(value, where, path),
        }
        if not inputs:
            # arguments are compared with the recording's, never handed back as objects, so
            # they keep the shape older recordings stored
            unset: list[list[str | int]] = []
            _unset_fields(value, [], unset)
            if unset:
                envelope["unset"] = unset
            ids = _response_ids(value)
            if ids:
                envelope["ids"] = ids
        return envelope
    if isinstance(value, dict):  # dict subclasses (OrderedDict, ...): store as a plain dict
        return to_data(dict(value), where=where, inputs=inputs, path=path)
    if isinstance(value, list):
        return to_data(list(value), where=where, inputs=inputs, path=path)
    hint = ""
    if hasattr(value, "__dataclass_fields__"):
        hint = " (a dataclass: return dataclasses.asdict(value), or make it a pydantic model)"
    elif hasattr(value, "__iter__") and hasattr(value, "__next__"):
        hint = " (an iterator or stream: declare the call as streaming, or return a list)"
    raise CanonicalEncodingError(
        f"value of type {t.__module__}.{t.__qualname__} cannot be stored as data{hint}",
        path=path,
        where=where,
    )


def _class_envelope(cls: type) -> dict[str, Any]:
    meta = getattr(cls, "__pydantic_generic_metadata__", None)
    named = meta["origin"] if meta and meta.get("origin") is not None else cls
    envelope: dict[str, Any] = {
        ENVELOPE: "class",
        "type": f"{cls.__module__}:{getattr(named, '__qualname__', cls.__name__)}",
    }
    schema = _class_schema(cls)
    if schema is not None:
        envelope["schema"] = escape_texts(schema)
    return envelope


def _class_schema(cls: type) -> Any:
    """The JSON schema of a pydantic model, dataclass or TypedDict class (``None`` for others)."""
    try:
        if hasattr(cls, "model_json_schema"):
            return cls.model_json_schema()  # type: ignore[attr-defined]
        if hasattr(cls, "__dataclass_fields__") or hasattr(cls, "__annotations__"):
            import pydantic

            return pydantic.TypeAdapter(cls).json_schema()
    except Exception:  # a class pydantic cannot describe: its name alone identifies it
        return None
    return None


def _is_pydantic(value: Any) -> bool:
    cls = type(value)
    return (
        hasattr(cls, "model_dump")
        and hasattr(cls, "model_validate")
        and hasattr(cls, "model_fields")
    )


def _dump(value: Any, where: str, path: str) -> Any:
    try:
        # warnings=False: SDK objects built leniently (openai's construct) may hold values
        # their annotations do not expect; the JSON dump is still faithful to what was received
        dumped = value.model_dump(mode="json", warnings=False)
    except Exception as exc:
        raise CanonicalEncodingError(
            f"{type(value).__qualname__}.model_dump(mode='json') failed ({exc}); it cannot be "
            "stored as data",
            path=path,
            where=where,
        ) from exc
    return escape_texts(dumped)


_MAX_UNSET = 10_000


def _unset_fields(value: Any, path: list[str | int], out: list[list[str | int]]) -> None:
    """Append to ``out`` the path of every declared field no one set, in ``value`` and in the
    models nested in it (through fields, lists and dicts).

    An SDK builds a response with exactly the fields the server sent; ``to_dict()`` and the
    request bodies it serialises from such objects leave the others out. The dump holds every
    field, so the rebuilt object forgets these again (see :func:`_forget_unset`).
    """
    if len(out) >= _MAX_UNSET:
        return
    if _is_pydantic(value):
        fields_set = getattr(value, "model_fields_set", None)
        if not isinstance(fields_set, (set, frozenset)):
            return
        for name in type(value).model_fields:
            if name not in fields_set:
                out.append([*path, name])
            try:
                item = getattr(value, name)
            except Exception:
                continue
            _unset_fields(item, [*path, name], out)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _unset_fields(item, [*path, i], out)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                _unset_fields(item, [*path, key], out)


_RESPONSE_IDS = ("_request_id", "_workspace_id")
"""Attributes the OpenAI and Anthropic SDKs set on a response from its HTTP headers (public
despite the underscore: both document ``response._request_id``)."""


def _response_ids(value: Any) -> dict[str, str]:
    ids = {}
    for name in _RESPONSE_IDS:
        try:
            found = getattr(value, name, None)
        except Exception:
            continue
        if isinstance(found, str):
            ids[name] = found
    return ids


def _set_response_ids(obj: Any, ids: Any) -> None:
    if not isinstance(ids, dict):
        return
    for name, found in ids.items():
        if name in _RESPONSE_IDS and isinstance(found, str):
            # a class that refuses it: the id is not worth failing a replay
            with contextlib.suppress(Exception):
                setattr(obj, name, found)


def copy_response_ids(source: Any, target: Any) -> None:
    """Give ``target`` the request ids ``source`` has (a response built again from another)."""
    _set_response_ids(target, _response_ids(source))


def _forget_unset(obj: Any, paths: Any) -> None:
    """Mark the fields at ``paths`` (from :func:`_unset_fields`) as not set in ``obj``."""
    if not isinstance(paths, list):
        return
    for path in paths:
        if not isinstance(path, list) or not path:
            continue
        node = obj
        try:
            for part in path[:-1]:
                node = node[part] if isinstance(node, (list, tuple, dict)) else getattr(node, part)
        except Exception:  # a path the rebuilt object does not have: nothing to forget
            continue
        fields_set = getattr(node, "__pydantic_fields_set__", None)
        if isinstance(fields_set, set) and _is_pydantic(node):
            fields_set.discard(path[-1])


def type_path(cls: type, where: str = "", path: str = "$") -> str:
    """``module:QualName`` of ``cls`` (the origin class of a parametrised pydantic generic)."""
    meta = getattr(cls, "__pydantic_generic_metadata__", None)
    if meta and meta.get("origin") is not None:
        cls = meta["origin"]
    qualname = cls.__qualname__
    if "<locals>" in qualname:
        raise CanonicalEncodingError(
            f"{cls.__module__}.{qualname} is defined inside a function, so a replay could not "
            "rebuild it; define it at module level",
            path=path,
            where=where,
        )
    return f"{cls.__module__}:{qualname}"


def is_envelope(value: Any, kind: str | None = None) -> bool:
    """Whether ``value`` is an envelope (of ``kind`` when given)."""
    return (
        type(value) is dict and ENVELOPE in value and (kind is None or value.get(ENVELOPE) == kind)
    )


def from_data(value: Any) -> Any:
    """Inverse of :func:`to_data`: envelopes become their classes again.

    Raises :class:`RebuildError` when a class cannot be resolved or rejects the data.
    """
    t = type(value)
    if t in _SCALARS:
        return value
    if t is dict:
        kind = value.get(ENVELOPE)
        if kind is not None:
            if kind == "pydantic":
                obj = rebuild_model(value["type"], value["data"])
                _forget_unset(obj, value.get("unset"))
                _set_response_ids(obj, value.get("ids"))
                return obj
            if kind == "dict":  # a user dict holding our key: its values only are data
                return {key: from_data(item) for key, item in value["data"].items()}
            if kind in ("stream", "iterator"):
                return [from_data(item) for item in value["items"]]
            if kind == "class":  # an argument that was a class (only rebuilt for edited inputs)
                return resolve_class(value["type"], model=False)
            raise RebuildError(f"unknown envelope {kind!r} in recorded data")
        out = None
        for key, item in value.items():
            new = from_data(item)
            if new is not item:
                if out is None:
                    out = dict(value)
                out[key] = new
        return value if out is None else out
    if t is list or t is tuple:
        items = [from_data(item) for item in value]
        return items if t is list else tuple(items)
    return value


_CLASSES: dict[str, type] = {}


def resolve_class(path: str, *, model: bool = True) -> type:
    """The class named ``module:QualName``, importing only inside already-imported packages
    (a pydantic model class unless ``model=False``)."""
    cls = _CLASSES.get(path)
    if cls is not None:
        return cls
    module_name, _, qualname = path.partition(":")
    module = sys.modules.get(module_name)
    if module is None:
        root = module_name.split(".", 1)[0]
        if root not in sys.modules:
            raise RebuildError(
                f"recorded type {path} belongs to package {root!r}, which this process has not "
                "imported; import it before replaying"
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise RebuildError(f"recorded type {path}: cannot import {module_name}: {exc}") from exc
    obj: Any = module
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise RebuildError(f"recorded type {path} no longer exists ({exc})") from exc
    if not isinstance(obj, type) or not hasattr(obj, "model_validate"):
        if model:
            raise RebuildError(f"recorded type {path} is not a pydantic model class")
        if not isinstance(obj, type):
            raise RebuildError(f"recorded type {path} is not a class")
        return obj  # not cached: the cache holds model classes only
    _CLASSES[path] = obj
    return obj


def rebuild_model(path: str, data: Any) -> Any:
    """An instance of the class ``path`` from its JSON dump."""
    cls = resolve_class(path)
    return validate(cls, data, path)


def validate(cls: type, data: Any, label: str) -> Any:
    """``cls`` built from ``data``: validated, else through the SDK's own lenient constructor.

    The OpenAI and Anthropic SDKs build responses without validation (their ``construct``),
    so a received object may hold values its annotations reject (a ``None`` where an ``int``
    is declared); rebuilding it the same way keeps it as it was received.
    """
    try:
        return cls.model_validate(data)  # type: ignore[attr-defined]
    except Exception as exc:
        if _lenient_construct(cls) and isinstance(data, dict):
            try:
                return cls.construct(**data)  # type: ignore[attr-defined]
            except Exception:
                pass
        raise RebuildError(f"recorded data does not rebuild as {label}: {exc}") from exc


def _lenient_construct(cls: type) -> bool:
    construct = getattr(cls, "construct", None)
    base = _pydantic_construct()
    return construct is not None and getattr(construct, "__func__", None) is not base


def _pydantic_construct() -> Any:
    import pydantic

    return pydantic.BaseModel.construct.__func__  # type: ignore[attr-defined]


def dig(data: Any, paths: Iterable[str]) -> Any:
    """The first non-None value at one of the dotted ``paths`` inside ``data`` (or None)."""
    for dotted in paths:
        node = data
        for part in dotted.split("."):
            if is_envelope(node, "pydantic"):
                node = node["data"]
            if not isinstance(node, dict):
                node = None
                break
            node = node.get(part)
        if is_envelope(node, "pydantic"):
            node = node["data"]
        if node is not None:
            return node
    return None
