"""Shared CLI plumbing: options, store opening, entrypoint loading, error translation."""

from __future__ import annotations

import importlib
import json
import math
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from ..canonical import plain_json
from ..errors import AgentReplayError
from ..model import Trajectory
from ..replay.limits import RolloutLimits
from ..report._data import clip, visible
from ..store import CheckpointStore


def _store_path(ctx: click.Context, param: click.Parameter, value: Path) -> Path:
    if not str(value).strip() or str(value) == ".":  # '' comes in as Path('.')
        raise click.BadParameter("give the store's file name", ctx=ctx, param=param)
    return value


db_option = click.option(
    "--db",
    "db",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    callback=_store_path,
    help="SQLite store file.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
seed_option = click.option(
    "--seed",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Family of the rollouts' random streams: another seed repeats the analysis "
    "independently (aggregate: runs that recorded the same steps get families of their own).",
)


def open_store(path: Path, *, must_exist: bool = True, read_only: bool = False) -> CheckpointStore:
    """The store at ``path``; a ClickException that says what to do when it cannot be used.
    A store that need not exist is one to write into: one this user cannot write (which
    opens for reading) is refused at once. ``read_only`` for commands that only read: they
    change nothing in the file, not even an older store's schema (an older agent-replay can
    still open it afterwards)."""
    if must_exist and not path.exists():
        raise click.ClickException(f"{path} does not exist; record or import something first")
    if must_exist and path.is_file() and path.stat().st_size == 0:
        # reading must not turn someone's empty file into a store
        raise click.ClickException(
            f"{path} is empty, not a store yet; record or import something first"
        )
    try:
        store = CheckpointStore(path, read_only=read_only)
    except AgentReplayError as exc:
        raise click.ClickException(str(exc)) from exc
    if store.unwritable and not must_exist:
        store.close()
        raise click.ClickException(f"{path} cannot be written: {store.unwritable}")
    return store


@contextmanager
def friendly_errors() -> Iterator[None]:
    """Turn the package's errors into one-line CLI errors (exit code 1)."""
    try:
        yield
    except AgentReplayError as exc:
        raise click.ClickException(str(exc)) from exc


def load_entrypoint(spec: str, what: str = "entrypoint") -> Callable[..., Any]:
    """Import ``module:function`` (the current directory is importable)."""
    if ":" not in spec:
        raise click.BadParameter(f"{spec!r}: expected module:function", param_hint=what)
    module_name, _, attr = spec.partition(":")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint=what) from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise click.BadParameter(
                f"{module_name!r} has no attribute {attr!r}", param_hint=what
            ) from None
    if not callable(target):
        raise click.BadParameter(f"{spec} is not callable", param_hint=what)
    return target


def load_optional(spec: str | None, what: str) -> Callable[..., Any] | None:
    """:func:`load_entrypoint` for an option that may be left out (then ``None``)."""
    return load_entrypoint(spec, what) if spec else None


def echo(message: Any = None, **kwargs: Any) -> None:
    """``click.echo`` of text that may hold recorded content (step and agent names, values,
    ids): its control and bidirectional formatting characters are shown as escapes, not sent
    to the terminal to act on (report/_data.visible)."""
    click.echo(visible(message) if isinstance(message, str) else message, **kwargs)


_BREAKS = re.compile("[\t\n]")


def one_line(text: str) -> str:
    """An id (or other one-line field) with its tabs and newlines written as escapes: an id
    holding a newline cannot forge a line of the output (``echo`` escapes the rest)."""
    return _BREAKS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def echo_json(data: Any) -> None:
    echo(json.dumps(plain_json(data), indent=2, sort_keys=True))


def short(value: Any, width: int = 60) -> str:
    """One-line preview of a step value."""
    return "-" if value is None else clip(value, width)


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 step``, ``2 steps`` (``nouns`` where the plural is not ``noun`` + s)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def outcome_word(failed: bool | None) -> str:
    """How the CLI prints an outcome: ``FAILED``, ``passed`` or ``unknown``."""
    return "unknown" if failed is None else ("FAILED" if failed else "passed")


agent_option = click.option(
    "--agent",
    "agent_spec",
    default=None,
    metavar="MODULE:FUNCTION",
    help="Your agent. Omit for imported traces: they replay through the replay agent.",
)


def _verifier_option(required: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    # no default=None: since click 8.3 an explicit default counts as given, and a required
    # option with one is never reported missing
    return click.option(
        "--verifier",
        "verifier_spec",
        required=required,
        metavar="MODULE:FUNCTION",
        help="Scores a result in [0, 1] (1 = success)"
        + (": every re-drawn run is scored by it." if required else "."),
    )


verifier_option = _verifier_option(required=False)
required_verifier_option = _verifier_option(required=True)
policy_option = click.option(
    "--policy",
    "policy_specs",
    multiple=True,
    metavar="[KEY=]POLICY",
    help="Resample policy of an imported trace's steps (repeatable). POLICY is a registered "
    "name (openai, hold) or MODULE:FUNCTION (fn(request) -> output). KEY picks the steps: a "
    "step name, agent:NAME, a kind (llm, tool, ...) or *; without KEY, the llm steps.",
)
session_option = click.option(
    "--session", "session_id", required=True, help="Session id (see `agent-replay sessions`)."
)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class Duration(click.ParamType):
    """``30d``, ``12h``, ``45m``, ``90s``, ``2w`` or plain seconds, as seconds."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None):
        if isinstance(value, float):
            return value
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(value))
        if match is None:
            self.fail(f"{value!r} is not a duration (e.g. 30d, 12h, 45m, 90s)", param, ctx)
        seconds = float(match[1]) * _UNITS[match[2] or "s"]
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is too long a duration", param, ctx)
        return seconds


def limits_options(
    command: Callable[..., Any] | None = None, *, branch: bool = False
) -> Callable[..., Any]:
    """``--max-rollout-steps`` and ``--rollout-timeout`` (see :func:`rollout_limits`); with
    ``branch``, for one run (``fork``, ``resume``): no step limit unless given."""

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        what = "The run" if branch else "A rollout"
        command = click.option(
            "--rollout-timeout",
            default=None,
            type=click.FloatRange(0, min_open=True),
            metavar="SECONDS",
            help=f"Stop {what.lower()} once it runs longer than this; it counts as a failure "
            "[default: none].",
        )(command)
        return click.option(
            "--max-rollout-steps",
            default=None,
            type=click.IntRange(1),
            metavar="N",
            help=f"{what} takes at most N steps; one that would run a further step live is "
            "stopped and counts as a failure [default: "
            + ("none]." if branch else "10 x the run's steps, at least 100]."),
        )(command)

    return add if command is None else add(command)


def rollout_limits(
    trajectories: Sequence[Trajectory], max_steps: int | None, timeout: float | None
) -> RolloutLimits | None:
    """The limits the options ask for: ``None`` (each run's default) when neither is given;
    a timeout alone keeps the default steps of the longest run."""
    if max_steps is None and timeout is None:
        return None
    if max_steps is None:
        longest = max(trajectories, key=lambda t: len(t.steps))
        max_steps = RolloutLimits.default(longest).steps
    return RolloutLimits(max_steps, timeout)


def parse_json_arg(text: str | None, what: str) -> Any:
    """A JSON command-line value; ``@path`` reads it from a file; bare words stay strings."""
    if text is None:
        return None
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(
                f"cannot read {text[1:]!r}: {exc.strerror if isinstance(exc, OSError) else exc}",
                param_hint=what,
            ) from None
    try:
        return json.loads(text)
    except ValueError:
        if text.strip() and text.strip()[0] in '[{"':
            raise click.BadParameter(f"not valid JSON: {text[:60]}", param_hint=what) from None
        return text


def resolve_agent(
    agent_spec: str | None,
    trajectory: Any,
    policy_specs: Sequence[str] = (),
    *,
    needs_code: bool = False,
    check_keys: bool = True,
) -> Callable:
    """The user's agent, or a replay agent for an imported trajectory. ``needs_code``: a
    natively recorded run without ``--agent`` or ``--policy`` is a usage error (its
    rollouts need the agent's code; the replay agent could only serve its steps).
    ``check_keys``: a ``--policy`` key that matches no step is a usage error."""
    if agent_spec is not None:
        if policy_specs:
            raise click.UsageError(
                "--policy re-draws an imported trace's steps through the replay agent; with "
                "--agent your code runs them: give one or the other"
            )
        return load_entrypoint(agent_spec, "--agent")
    from ..replay.agent import replayable_agent

    policies = dict(_policy(spec) for spec in policy_specs)
    if check_keys:
        check_policy_keys([trajectory], policies)
    native = not trajectory.source.startswith(("import", "otel"))
    if needs_code and native and not policies:
        raise click.UsageError(
            f"session {trajectory.session_id!r} was recorded from agent code: pass "
            "--agent MODULE:FUNCTION (that code) so its rollouts can re-run it"
        )
    agent = replayable_agent(trajectory, policies)
    if native and not policies:
        click.echo(
            "note: no --agent given; replaying through the replay agent (recorded steps only)",
            err=True,
        )
    return agent


def check_policy_keys(trajectories: Sequence[Any], keys: Iterable[str]) -> None:
    """A ``--policy`` key that no step of ``trajectories`` takes is a usage error that says
    what keys there are (it re-drew nothing: attribution found "nothing to attribute")."""
    from ..replay.agent import unmatched_policy_keys

    unmatched = unmatched_policy_keys(trajectories, list(keys))
    if not unmatched:
        return
    steps = [step for trajectory in trajectories for step in trajectory.steps]
    names = sorted({step.name for step in steps})
    agents = sorted({f"agent:{step.agent}" for step in steps if step.agent})
    kinds = sorted({step.kind.value for step in steps})
    known = ", ".join(map(repr, [*names[:20], *agents[:20], *kinds]))
    more = " ..." if len(names) > 20 or len(agents) > 20 else ""
    raise click.BadParameter(
        f"{', '.join(map(repr, unmatched))} {'matches' if len(unmatched) == 1 else 'match'} "
        f"no step (or a more specific key takes every step it would); the keys are step "
        f"names, agent:NAME, kinds and *: {known}{more}",
        param_hint="--policy",
    )


def _split_policy(spec: str) -> tuple[str, str, str]:
    return spec.rpartition("=") if "=" in spec else ("llm", "", spec)


def policy_keys(policy_specs: Iterable[str]) -> list[str]:
    """The keys of ``--policy [KEY=]POLICY`` options (``llm`` where none is given)."""
    return [_split_policy(spec)[0] for spec in policy_specs]


def _policy(spec: str) -> tuple[str, Any]:
    """``--policy [KEY=]POLICY`` as ``(key, policy)`` for :func:`replayable_agent`."""
    from ..replay.policies import load_policy

    key, _, policy = _split_policy(spec)
    if not key or not policy:
        raise click.BadParameter(f"{spec!r}: expected [KEY=]POLICY", param_hint="--policy")
    if ":" in policy:  # module:function (or a policy class, made with no arguments)
        target = load_entrypoint(policy, "--policy")
        if not isinstance(target, type):
            return key, target
        try:
            return key, target()
        except Exception as exc:  # a class that needs arguments, or refuses its settings
            raise click.BadParameter(
                f"{policy}: cannot be made with no arguments ({type(exc).__name__}: {exc}); "
                "name a module:function that returns the policy instead",
                param_hint="--policy",
            ) from None
    try:
        return key, load_policy(policy)
    except AgentReplayError as exc:  # an unknown name: a bad option value, like a bad spec
        raise click.BadParameter(str(exc), param_hint="--policy") from None


def output_dir(directory: Path, what: str, *, private: bool = False) -> Path:
    """``directory``, made if missing (``private``: for its owner only), checked writable
    before any work is spent on what will be written there: a bad output path is a usage
    error, not a traceback after the work."""
    try:
        directory.mkdir(mode=0o700 if private else 0o777, parents=True, exist_ok=True)
        # the real test: root passes os.access on directories it cannot write (procfs)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as exc:
        raise click.BadParameter(
            f"cannot write in {str(directory)!r}: {exc.strerror or exc}", param_hint=what
        ) from None
    return directory


def output_path(path: Path, what: str) -> Path:
    """``path`` to write later: its directory checked by :func:`output_dir`."""
    if path.is_dir():
        raise click.BadParameter(f"{str(path)!r} is a directory", param_hint=what)
    output_dir(path.parent, what)
    return path


def write_text(path: Path, text: str) -> None:
    """Write an output file; a failure is one CLI error line, not a traceback."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None
