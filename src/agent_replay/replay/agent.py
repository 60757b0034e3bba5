"""The replay agent: re-executes an imported trajectory step by step, without its code.

Each recorded step is re-issued in order. A step with a resample policy can be re-drawn; a step
without one is observation-only: always served as recorded, flagged in results, never scored.
When a re-drawn step's output differs from the recording, the change propagates: later steps'
inputs are rewritten wherever the old output appears (a message in a chat history, a tool
argument), so a resampled speaker in a group chat changes what every later speaker sees.

A step that failed in the middle of the recorded run (a tool error the agent showed the model, a
call it retried) is served as recorded, error included, and the replay goes on with the step's
recorded output, since the agent did; a failure of the last step ends the run, as it did.

Rewriting replaces values equal to an old output, and - inside strings - occurrences of old
text outputs at least ``MIN_SUBSTRING`` characters long (shorter texts like "ok" are only
replaced where they are the whole value, to avoid rewriting unrelated words). A structured
old output (an object or a list) also replaces a text that is its JSON encoding, with the new
output's text: an OTel tool result is JSON text that the tool step holds decoded and later
chat histories hold as it was sent. A re-drawn tool's result also becomes the content of the
response with its call id, whatever text that held (an app's formatting of the result).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..capture.context import AgentContext, StepCall
from ..errors import AgentReplayError, RecordedStepError
from ..model import Step, StepKind, Trajectory
from .policies import HoldPolicy, PolicyError, ResampleRequest, as_policy, load_policy

__all__ = [
    "MIN_SUBSTRING",
    "RESPONSE",
    "ReplayAgent",
    "propagation_pairs",
    "replayable_agent",
    "rewrite",
    "scoped_pairs",
    "unmatched_policy_keys",
]

MIN_SUBSTRING = 12

_log = logging.getLogger(__name__)

Assemble = Callable[[list[Any]], Any]


def default_assemble(outputs: list[Any]) -> dict[str, Any]:
    """The replay agent's result: every step output and the last one."""
    return {"outputs": outputs, "final": outputs[-1] if outputs else None}


class ReplayAgent:
    """``agent(ctx, **task)`` that re-issues a trajectory's steps (see the module docstring).

    ``observation_only`` lists the steps it holds in every run: those with no policy (or
    whose policy does not cover them: a ``ScriptedPolicy`` table without their entry), side
    effects, or no recorded content (the capture report's ``steps_without_content``).
    ``held_by_policy`` lists the steps whose policy is a :class:`HoldPolicy`: re-drawn as
    recorded, so attribution holds them too, and does not score them.
    """

    def __init__(
        self,
        trajectory: Trajectory,
        policies: Mapping[str, Any],
        *,
        assemble: Assemble = default_assemble,
        propagate: bool = True,
    ) -> None:
        self.trajectory = trajectory
        self.assemble = assemble
        self.propagate = propagate
        self._policies: list[tuple[str, Callable[[ResampleRequest], Any]] | None] = []
        for step in trajectory.steps:
            key = _policy_key(step, policies)
            # a step the recording marks unresamplable (an opaque span, a side effect) or
            # captured without content (nothing to re-draw from: a policy would be sent
            # nulls) has no policy whatever the keys say: it is held, and observation-only
            fixed = (
                key is None
                or step.side_effects
                or not step.resamplable
                or (step.inputs is None and step.action is None)
                or not _covers(policies[key], step)
            )
            self._policies.append(None if fixed else (key, as_policy(policies[key])))
        self.observation_only = tuple(i for i, p in enumerate(self._policies) if p is None)
        # a hold policy re-draws the recorded output: the step cannot change a rollout, so
        # attribution holds it without spending rollouts on it (a plan may still force it)
        self.held_by_policy = tuple(
            i
            for i, p in enumerate(self._policies)
            if p is not None and isinstance(policies[p[0]], HoldPolicy)
        )
        self.__name__ = f"replay_agent[{trajectory.session_id}]"
        self._unfollowed = 0
        self._misshaped = 0
        self._unreached = 0
        self._lock = threading.Lock()

    @property
    def misshaped_outputs(self) -> int:
        """How many re-drawn LLM outputs so far were not shaped like the recorded output (a
        message dict where the recording has a list of messages, say): nothing downstream can
        be paired with them, so the change does not reach later steps; ``attribute`` warns."""
        return self._misshaped

    @property
    def unreached_tool_results(self) -> int:
        """How many re-drawn tool results so far reached no later step although an LLM step
        came after them: the later histories hold the result in a form the replay could not
        find (a formatted text, in a response without the step's call id), so those rollouts
        do not follow the re-draw; ``attribute`` warns."""
        return self._unreached

    @property
    def unfollowed_tool_calls(self) -> int:
        """How many re-drawn LLM steps so far asked for other tool calls than the recorded
        ones (another tool, or more or fewer calls). The replay agent re-issues the recorded
        steps, so a run past such a step does not follow the change; ``attribute`` warns."""
        return self._unfollowed

    def policy_name(self, index: int) -> str | None:
        entry = self._policies[index]
        return None if entry is None else entry[0]

    def __call__(self, ctx: AgentContext, *args: Any, **task: Any) -> Any:
        pairs: list[Pair] = []
        outputs: list[Any] = []
        # re-drawn tool steps whose new result no later step took yet: their pairs' indices
        unreached: dict[int, range] = {}
        steps = self.trajectory.steps
        while len(outputs) < len(steps):
            if ctx.position > len(outputs):
                # the replay served (or dropped) the steps a native recording's step started
                # inside it along with it: they are not issued again
                outputs.extend(step.output for step in steps[len(outputs) : ctx.position])
                continue
            step, entry = steps[len(outputs)], self._policies[len(outputs)]
            own = _step_scope(step)
            used: set[int] = set()
            inputs = rewrite(step.inputs, pairs, own, used=used) if pairs else step.inputs
            if used and unreached:  # a re-drawn tool result reached this step
                unreached = {i: span for i, span in unreached.items() if used.isdisjoint(span)}
            usage: dict[str, Any] = {}
            asked: list[bool] = []  # whether the policy was asked (not a forced action)
            produce = (
                None
                if entry is None
                else _producer(ctx, step, entry, usage, self.trajectory, outputs, asked)
            )
            call = StepCall(
                kind=step.kind,
                name=step.name,
                inputs=inputs,
                produce=produce,
                side_effects=step.side_effects,
                resamplable=entry is not None,
                agent=step.agent,
                attributes=usage,
            )
            try:
                output = ctx._step(call)
            except Exception as exc:
                if not _handled(step, exc, last=len(self.trajectory.steps) - 1):
                    raise
                output = step.output  # what the agent carried on with (an error message)
            outputs.append(output)
            if output is not step.output and output != step.output:
                if self.propagate:
                    # a tool's new result is its own call's: another call's equal result
                    # is not changed with it
                    scope = own if own is not None and own[0] else None
                    first = len(pairs)
                    pairs.extend(scoped_pairs(step.output, output, scope))
                    if scope is not None:
                        # the response to its call, by id, whatever text it holds
                        pairs.append((RESPONSE, output, scope))
                    if step.kind is StepKind.TOOL:
                        unreached[step.index] = range(first, len(pairs))
                redrawn = bool(asked) and step.kind is StepKind.LLM
                if redrawn and not _same_shape(output, step.output):
                    with self._lock:
                        self._misshaped += 1
                elif redrawn and _tools(output) != _tools(step.output):
                    with self._lock:
                        self._unfollowed += 1
        llm = [s.index for s in steps if s.kind is StepKind.LLM]
        lost = sum(1 for i in unreached if llm and llm[-1] > i)
        if lost:
            with self._lock:
                self._unreached += lost
        return self.assemble(outputs)


def _covers(policy: Any, step: Step) -> bool:
    """Whether ``policy`` can re-draw ``step``: a policy with ``covers(step)`` (a
    :class:`ScriptedPolicy` table) may have no entry for it; such a step has no policy."""
    covers = getattr(policy, "covers", None)
    return True if covers is None else bool(covers(step))


def following_counts(agent: Any) -> tuple[int, int, int]:
    """A replay agent's counts of re-draws later steps could not follow (unfollowed tool
    calls, misshaped outputs, unreached tool results); zeros for any other agent."""
    return (
        getattr(agent, "unfollowed_tool_calls", 0),
        getattr(agent, "misshaped_outputs", 0),
        getattr(agent, "unreached_tool_results", 0),
    )


def unfollowed_warnings(
    agent: Any, before: tuple[int, int, int], *, runs: str = "those rollouts do"
) -> list[str]:
    """Warnings for the re-draws that ``agent``'s runs since ``before`` (its
    :func:`following_counts` then) could not follow; ``runs`` names those runs (with the
    verb: "the branch does")."""
    unfollowed, misshaped, unreached = (
        now - then for now, then in zip(following_counts(agent), before, strict=True)
    )
    warnings = []
    if unfollowed:
        warnings.append(
            f"{unfollowed} re-drawn LLM step(s) asked for other tool calls than the recorded "
            "ones (another tool, or more or fewer calls); the replay agent re-issues the "
            f"recorded steps, so {runs} not follow the change: use the "
            "agent's own code (a native recording) to follow it"
        )
    if misshaped:
        warnings.append(
            f"{misshaped} re-drawn LLM output(s) were not shaped like the recorded output (a "
            "list of messages, say); later steps could not be changed by them, so "
            f"{runs} not follow the re-draw: check the resample policy's return value "
            "(ScriptedPolicy([messages]) for a message list)"
        )
    if unreached:
        warnings.append(
            f"{unreached} re-drawn tool result(s) reached no later step: the later histories "
            "hold the recorded result in another form (a formatted text, say) in a response "
            f"without the tool step's call id, so {runs} not follow the re-draw "
            "and the tool's effect is underestimated: import the trace with the tool call "
            "ids, or use the agent's own code (a native recording)"
        )
    return warnings


def _step_scope(step: Step) -> Scope | None:
    """The call a tool step answers, ``(id, tool name)``; ``None`` for other steps."""
    if step.kind is not StepKind.TOOL:
        return None
    call_id = step.attributes.get("tool_call_id")
    return (str(call_id) if call_id else None, step.name)


def _same_shape(new: Any, old: Any) -> bool:
    """Whether a re-drawn output is the same kind of container as the recorded one."""
    return isinstance(new, list) == isinstance(old, list) and isinstance(
        new, Mapping
    ) == isinstance(old, Mapping)


def _tools(output: Any) -> Counter[str]:
    """The tools an LLM output asks for, with how many calls of each."""
    return Counter(str(_call_scope(call)[1] or "") for call in _calls(output))


def _handled(step: Step, exc: Exception, *, last: int) -> bool:
    """Whether ``exc`` is ``step``'s recorded failure, served again, in a run that went on past
    it: the agent handled it (a LangChain tool error the model was shown, a retried call), so
    the replay goes on too. The last step's failure is how the run ended and stays raised."""
    if step.error is None or step.index >= last:
        return False
    return isinstance(exc, RecordedStepError) or type(exc).__name__ == step.error.get("type")


def _producer(
    ctx: AgentContext,
    step: Step,
    entry: tuple[str, Callable[..., Any]],
    usage: dict[str, Any],
    trajectory: Trajectory,
    outputs: list[Any],
    asked: list[bool],
) -> Callable[[Any], Any]:
    """The step's ``produce``: asks its policy. The run so far (``history``) is built only
    when a policy is asked (a held step costs nothing for it: building it at every step made
    replaying a long trajectory quadratic)."""
    name, policy = entry

    def produce(inputs: Any) -> Any:
        asked.append(True)
        request = ResampleRequest(
            step=step,
            inputs=inputs,
            rng=ctx.rng,
            model_hint=ctx.model_hint,
            ctx=ctx,
            usage=usage,
            history=tuple(zip(trajectory.steps, outputs, strict=False)),  # the steps before
            task=trajectory.task,
        )
        try:
            return policy(request)
        except AgentReplayError:
            raise
        except Exception as exc:
            # a policy that asks a server names it (an OpenAIChatPolicy's base URL): a
            # connection error says nothing of where it tried
            endpoint = getattr(getattr(policy, "__self__", policy), "endpoint", None)
            raise PolicyError(
                f"step {step.index} ({step.label}): resample policy {name!r} "
                f"failed: {type(exc).__name__}: {exc}"
                + (f" (endpoint {endpoint})" if isinstance(endpoint, str) else "")
            ) from exc

    return produce


def _policy_key(step: Step, policies: Mapping[str, Any]) -> str | None:
    for key in (step.name, f"agent:{step.agent}" if step.agent else None, step.kind.value, "*"):
        if key is not None and key in policies:
            return key
    return None


def unmatched_policy_keys(trajectories: Sequence[Trajectory], keys: Sequence[str]) -> list[str]:
    """The policy keys that no step of any of ``trajectories`` would take its policy from (a
    misspelt step name, an agent or a kind the runs do not have)."""
    policies = dict.fromkeys(keys)
    used = {_policy_key(step, policies) for t in trajectories for step in t.steps}
    return [key for key in keys if key not in used]


def replayable_agent(
    trajectory: Trajectory,
    resample_fns: Mapping[str, Any] | None = None,
    *,
    assemble: Assemble = default_assemble,
    propagate: bool = True,
) -> ReplayAgent:
    """An agent that re-executes ``trajectory`` (an imported trace) for replay and attribution.

    ``resample_fns`` maps a step name, ``"agent:<name>"``, a step kind (``"llm"``, ``"tool"``,
    ...) or ``"*"`` to a policy (an object with ``.resample(request)``, a ``fn(request)``, or
    the seed's ``fn(ctx, inputs)``), most specific first. Without any, the policy named by
    ``AGENT_REPLAY_POLICY`` (e.g. ``openai``) is used for LLM steps when set. Pass the agent
    and the same trajectory to :func:`~agent_replay.replay` or ``attribute``.
    """
    policies = dict(resample_fns or {})
    if not policies and os.environ.get("AGENT_REPLAY_POLICY"):
        policies["llm"] = load_policy(os.environ["AGENT_REPLAY_POLICY"])
    return ReplayAgent(trajectory, policies, assemble=assemble, propagate=propagate)


# -- propagation -------------------------------------------------------------------------------

Scope = tuple[str | None, str | None]
"""Where a substitution applies: inside the tool call (or its tool step, or its response) with
this ``(id, name)``; ``None`` for everywhere."""

Pair = tuple[Any, Any, Scope | None]


def propagation_pairs(old: Any, new: Any) -> list[tuple[Any, Any]]:
    """(old, new) value pairs to substitute downstream when an output changed (scopes
    dropped: see :func:`scoped_pairs`)."""
    return [(a, b) for a, b, _ in scoped_pairs(old, new)]


def scoped_pairs(old: Any, new: Any, scope: Scope | None = None) -> list[Pair]:
    """``(old, new, scope)`` substitutions for when an output changed. A tool call's new
    arguments apply only to that call (its tool step, and the call in later histories), not to
    another call that happened to have the same arguments; ``scope`` limits all of them (a
    re-drawn tool's result applies to its own call's response, not to another tool's equal
    result)."""
    pairs: list[Pair] = []
    try:
        _pair(old, new, pairs, scope)
        # tool calls across the whole output, by tool name in order: a re-draw that puts in
        # one message the calls the recording has in several still pairs each with its call
        calls = _paired_calls(old, new)
        for a, b in calls:
            _pair(a, b, pairs, scope)
        merged, split = _regrouped(old, new, calls)
        pairs += [(message, REMOVED, None) for message in merged]
        if split:  # the recorded message stays, each call in it rewritten by its own pairs
            whole = {id(m) for m in split} | {
                id(m.get("parts", m.get("tool_calls"))) for m in split
            }
            pairs = [p for p in pairs if id(p[0]) not in whole]
    except Exception:  # odd shapes: substitute the whole output, never fail the rollout
        _log.debug("propagation fell back to the whole output", exc_info=True)
        pairs = [(old, new, scope)]
    seen: list[Pair] = []
    for pair in pairs:
        if pair[0] != pair[1] and pair not in seen and pair[0] not in (None, "", [], {}):
            seen.append(pair)
    return seen


def _pair(old: Any, new: Any, out: list[Pair], scope: Scope | None) -> None:
    out.append((old, new, scope))
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        if old.get("type") == "tool_call" and new.get("type") == "tool_call":
            call = _call_scope(old)
            a, b = old.get("arguments"), new.get("arguments")
            out.append((a, b, call))
            if not isinstance(a, str) and not isinstance(b, str):
                out.append((json.dumps(a), json.dumps(b), call))
            if new.get("id") and old.get("id") != new.get("id"):  # ids are unique
                out.append((old.get("id"), new.get("id"), scope))
            # the argument values too (a tool step may hold them as text), in the call's scope
            for key in (old.keys() & new.keys()) - {"id"}:
                _pair(old[key], new[key], out, call)
            return
        if _is_openai_call(old) and _is_openai_call(new):
            _pair_openai_call(old, new, out, scope)
            return
        for key in old.keys() & new.keys():
            _pair(old[key], new[key], out, scope)
    elif _is_seq(old) and _is_seq(new):
        _pair_items(old, new, out, scope)


def _pair_openai_call(
    old: Mapping[str, Any], new: Mapping[str, Any], out: list[Pair], scope: Scope | None
) -> None:
    """Two tool calls in OpenAI's shape (``{"id", "type": "function", "function": {"name",
    "arguments": "<JSON text>"}}``): the arguments text, and the arguments decoded as a tool
    step holds them (with their values), in the call's scope, as for a ``tool_call`` part."""
    call = _call_scope(old)
    a, b = old["function"].get("arguments"), new["function"].get("arguments")
    out.append((a, b, call))
    decoded_a, decoded_b = _decoded(a), _decoded(b)
    if decoded_a is not None and decoded_b is not None:
        _pair(decoded_a, decoded_b, out, call)
        if not isinstance(decoded_a, str) and not isinstance(decoded_b, str):
            out.append((json.dumps(decoded_a), json.dumps(decoded_b), call))
    if new.get("id") and old.get("id") != new.get("id"):  # ids are unique
        out.append((old.get("id"), new.get("id"), scope))
    for key in (old["function"].keys() & new["function"].keys()) - {"arguments"}:
        _pair(old["function"][key], new["function"][key], out, call)


def _decoded(arguments: Any) -> Any:
    """Tool-call arguments as a tool step holds them: JSON text decoded (``None`` if not)."""
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return None


def _is_openai_call(value: Any) -> bool:
    """Whether ``value`` is a tool call in OpenAI's shape (an item of ``tool_calls``)."""
    return isinstance(value, Mapping) and isinstance(value.get("function"), Mapping)


def _calls(messages: Any) -> list[Mapping[str, Any]]:
    """Every tool call in an LLM output, in order: ``tool_call`` parts (the OTel shape) and
    the items of messages' ``tool_calls`` (OpenAI's)."""
    return [call for message in _messages(messages) for call in _call_list(message)]


def _messages(output: Any) -> list[Any]:
    if isinstance(output, list):
        return output
    return [output] if isinstance(output, Mapping) else []


def _call_list(message: Any) -> list[Mapping[str, Any]]:
    """The tool calls of one message, in either shape."""
    if not isinstance(message, Mapping):
        return []
    parts = message.get("parts")
    if isinstance(parts, list):
        return [p for p in parts if isinstance(p, Mapping) and p.get("type") == "tool_call"]
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        return [c for c in calls if _is_openai_call(c)]
    return []


def _pair_items(
    old: Sequence[Any], new: Sequence[Any], out: list[Pair], scope: Scope | None
) -> None:
    """Pair two lists item by item: by position when they line up kind by kind (messages by
    role, parts by type, tool calls by tool name), else each kind of message or part in order
    within its kind, so that a re-draw that adds or drops a text part before its tool calls,
    or calls its tools in another order, still pairs each call with the recorded call of the
    same tool. Lists of plain values that differ in length are not paired (their items would
    be matched arbitrarily)."""
    kinds_old, kinds_new = [_kind(a) for a in old], [_kind(b) for b in new]
    if kinds_old == kinds_new:
        for a, b in zip(old, new, strict=True):
            _pair(a, b, out, scope)
        return
    if None in kinds_old or None in kinds_new:
        return
    unpaired: dict[Any, list[Any]] = {}
    for kind, b in zip(kinds_new, new, strict=True):
        unpaired.setdefault(kind, []).append(b)
    for kind, a in zip(kinds_old, old, strict=True):
        candidates = unpaired.get(kind)
        if candidates:
            _pair(a, candidates.pop(0), out, scope)


class _Removed:
    """What a recorded message becomes downstream when the re-draw merged it into another."""

    def __repr__(self) -> str:
        return "REMOVED"


REMOVED = _Removed()


def _regrouped(old: Any, new: Any, calls: list[tuple[Any, Any]]) -> tuple[list[Any], list[Any]]:
    """Recorded assistant messages of tool calls only, when the re-draw groups the same calls
    in fewer or more messages: ``(merged, split)``. Merged: the recording has a message per
    call and the re-draw one for several (as Koog records and OpenAI answers); the recorded
    messages beyond the re-draw's number are dropped from later histories, so no call shows
    twice. Split: the re-draw spreads over several messages the calls the recording has in
    one; that recorded message is not replaced by the first of them (the others' calls would
    be lost), it stays with each call rewritten (a history stays well formed)."""
    if not (isinstance(old, list) and isinstance(new, list)):
        return [], []
    said = [m for m in old if isinstance(m, Mapping) and m.get("role") == "assistant"]
    kept = [m for m in new if isinstance(m, Mapping) and m.get("role") == "assistant"]
    paired = {id(a) for a, _ in calls}

    def calls_only(message: Mapping[str, Any]) -> bool:
        calls = _call_list(message)
        parts = message.get("parts")
        only = len(calls) == len(parts) if isinstance(parts, list) else not message.get("content")
        return bool(calls) and only and all(id(c) in paired for c in calls)

    if len(said) > len(kept):
        return [m for m in said[len(kept) :] if calls_only(m)], []
    if len(said) < len(kept):
        return [], [m for m in said if calls_only(m) and len(_call_list(m)) > 1]
    return [], []


def _paired_calls(old: Any, new: Any) -> list[tuple[Any, Any]]:
    """The tool calls of two outputs (in either shape) paired by tool name, in order."""
    calls_new: dict[Any, list[Any]] = {}
    for part in _calls(new):
        calls_new.setdefault(_key(_call_scope(part)[1]), []).append(part)
    pairs = []
    for part in _calls(old):
        candidates = calls_new.get(_key(_call_scope(part)[1]))
        if candidates:
            pairs.append((part, candidates.pop(0)))
    return pairs


def _kind(item: Any) -> tuple[Any, ...] | None:
    """What an item of a message list is, for pairing: ``None`` for a plain value."""
    if not isinstance(item, Mapping):
        return None
    if item.get("type") == "tool_call" or _is_openai_call(item):
        return ("tool_call", _key(_call_scope(item)[1]))
    return (_key(item.get("type")), _key(item.get("role")))


def _key(value: Any) -> Any:
    """``value`` usable as a dict key (a data field named "type" can hold a list)."""
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def _is_seq(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _call_scope(part: Mapping[str, Any]) -> Scope:
    """``(id, tool name)`` of a tool call in either shape (or of a tool call response)."""
    call_id = part.get("id")
    name = part["function"].get("name") if _is_openai_call(part) else part.get("name")
    return (str(call_id) if call_id else None, name)


def _context(value: Mapping[str, Any], scope: Scope | None) -> Scope | None:
    """The scope inside ``value``: a tool call or its response names its call (one that names
    neither an id nor a tool, as some recordings' responses, is anyone's)."""
    if value.get("type") in ("tool_call", "tool_call_response") or _is_openai_call(value):
        named = _call_scope(value)
        return named if named[0] or named[1] else scope
    if value.get("tool_call_id"):  # a tool message in the OpenAI shape
        return (str(value["tool_call_id"]), value.get("name"))
    return scope


def _applies(pair: Scope | None, here: Scope | None) -> bool:
    """Whether a substitution scoped to ``pair`` applies at ``here``: everywhere outside any
    call; inside a call, only its own (by id when both have one, else by tool name)."""
    if pair is None or here is None:
        return True
    if pair[0] and here[0]:
        return pair[0] == here[0]
    return pair[1] is not None and pair[1] == here[1]


def rewrite(
    value: Any,
    pairs: Sequence[tuple[Any, ...]],
    scope: Scope | None = None,
    *,
    used: set[int] | None = None,
) -> Any:
    """``value`` with every old output replaced by its new one (see the module docstring);
    ``pairs`` are ``(old, new)`` or ``(old, new, scope)``, ``scope`` is where ``value`` sits
    (a tool step's own call). A message merged away by the re-draw is dropped from the lists
    it is in, and left where it is anything else. A pair whose old value is :data:`RESPONSE`
    gives the content of the tool call response of its scope's call id the new result,
    whatever it held. ``used`` collects the indices of the pairs that changed something."""
    result = _rewrite(value, pairs, scope, set() if used is None else used)
    return value if result is REMOVED else result


def _rewrite(
    value: Any, pairs: Sequence[tuple[Any, ...]], scope: Scope | None, used: set[int]
) -> Any:
    active = [
        (i, p[0], p[1])
        for i, p in enumerate(pairs)
        if _applies(p[2] if len(p) > 2 else None, scope)
    ]
    for i, old, new in active:
        if type(value) is type(old) and value == old:
            used.add(i)
            return new
    if isinstance(value, str):
        encoded = _encoded(value, active, used)
        return _replace_text(value, active, used) if encoded is None else encoded
    if isinstance(value, Mapping):
        inner = _context(value, scope)
        out = {}
        for k, v in value.items():
            item = _rewrite(v, pairs, inner, used)
            out[k] = v if item is REMOVED else item
        _respond(value, out, inner, pairs, used)
        return out
    if isinstance(value, list):
        items = (_rewrite(v, pairs, scope, used) for v in value)
        return [item for item in items if item is not REMOVED]
    if isinstance(value, tuple):
        items = (_rewrite(v, pairs, scope, used) for v in value)
        return tuple(v if item is REMOVED else item for v, item in zip(value, items, strict=True))
    return value


class _Response:
    """The old value of a pair that answers a tool call: see :func:`rewrite`."""

    def __repr__(self) -> str:
        return "RESPONSE"


RESPONSE = _Response()


def _respond(
    value: Mapping[str, Any],
    out: dict[str, Any],
    here: Scope | None,
    pairs: Sequence[tuple[Any, ...]],
    used: set[int],
) -> None:
    """A tool call response (an OTel ``tool_call_response`` part, an OpenAI ``role: tool``
    message) of a call whose tool was re-drawn, matched by call id: its content is the new
    result, as the text it holds (JSON text for a structured result) - an app often sends
    the model a formatted result that no substitution by value can find."""
    if here is None or not here[0]:
        return
    if value.get("type") == "tool_call_response":
        key = "response" if "response" in value or "result" not in value else "result"
    elif value.get("role") == "tool" and value.get("tool_call_id"):
        key = "content"
    else:
        return
    for i, pair in enumerate(pairs):
        if pair[0] is not RESPONSE or len(pair) < 3 or not pair[2] or pair[2][0] != here[0]:
            continue
        held, new = value.get(key), pair[1]
        if isinstance(held, str):
            if not isinstance(new, str):
                try:
                    new = json.dumps(new, ensure_ascii=False)
                except (TypeError, ValueError):
                    new = str(new)
        elif key == "content" or held is None:
            continue  # OpenAI content parts, or nothing recorded: left as they are
        out[key] = new
        used.add(i)


def _encoded(value: str, pairs: Sequence[tuple[int, Any, Any]], used: set[int]) -> str | None:
    """The new output's text when ``value`` is the JSON text of a structured old output."""
    if value.lstrip()[:1] not in ("{", "["):
        return None
    structured = [(i, old, new) for i, old, new in pairs if isinstance(old, (Mapping, list))]
    if not structured:
        return None
    try:
        decoded = json.loads(value)
    except ValueError:
        return None
    for i, old, new in structured:
        if isinstance(decoded, list) is isinstance(old, list) and decoded == old:
            if isinstance(new, str):
                used.add(i)
                return new
            try:
                text = json.dumps(new, ensure_ascii=False)
            except (TypeError, ValueError):  # not JSON: the text stays as recorded
                return None
            used.add(i)
            return text
    return None


def _replace_text(value: str, pairs: Sequence[tuple[int, Any, Any]], used: set[int]) -> str:
    """Occurrences of old texts in ``value`` replaced all at once (one after the other, a swap
    of two texts would undo itself), longest first where they overlap."""
    texts = {
        old: (i, new)
        for i, old, new in pairs
        if isinstance(old, str)
        and isinstance(new, str)
        and len(old) >= MIN_SUBSTRING
        and old in value
    }
    if not texts:
        return value
    pattern = re.compile("|".join(map(re.escape, sorted(texts, key=len, reverse=True))))

    def replaced(match: re.Match[str]) -> str:
        i, new = texts[match.group(0)]
        used.add(i)
        return new

    return pattern.sub(replaced, value)
