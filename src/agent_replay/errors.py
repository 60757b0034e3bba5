"""One exception hierarchy for the whole package.

Every error agent-replay raises on purpose derives from :class:`AgentReplayError`, so callers
can catch the package's errors without catching their own agent's bugs.
"""

from __future__ import annotations

from typing import Any


class AgentReplayError(Exception):
    """Base class of every error raised on purpose by agent-replay."""


class CanonicalEncodingError(AgentReplayError, TypeError):
    """A value cannot be encoded deterministically (so it cannot be hashed, stored or replayed).

    ``path`` names where in the value the offending object sits (``inputs.messages[2]``);
    ``where`` names the step or record it belongs to when known.
    """

    def __init__(self, message: str, *, path: str = "", where: str = "") -> None:
        self.path = path
        self.where = where
        prefix = f"{where}: " if where else ""
        at = f" at {path}" if path else ""
        super().__init__(f"{prefix}{message}{at}")

    def located(self, where: str) -> CanonicalEncodingError:
        """The same error, naming the step or record it happened in."""
        return CanonicalEncodingError(self.bare_message, path=self.path, where=where)

    @property
    def bare_message(self) -> str:
        text = str(self)
        if self.where and text.startswith(self.where + ": "):
            text = text[len(self.where) + 2 :]
        if self.path and text.endswith(f" at {self.path}"):
            text = text[: -len(f" at {self.path}")]
        return text


class ChainIntegrityError(AgentReplayError):
    """A stored session does not match its hashes: tampered with, corrupted, or truncated.

    ``session_id`` and ``step_index`` (the first bad step, ``None`` when the session header
    itself is bad) say where.
    """

    def __init__(
        self, message: str, *, session_id: str | None = None, step_index: int | None = None
    ) -> None:
        self.session_id = session_id
        self.step_index = step_index
        super().__init__(message)


class StoreError(AgentReplayError):
    """The store file cannot be used: not SQLite, not an agent-replay store, or a newer schema."""


class SessionChangedError(StoreError):
    """A stored session changed between reading its end and saving steps after it (another
    writer); read it again."""


class SessionNotFoundError(StoreError, KeyError):
    """No session with that id in the store."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "session not found"


class VerifierError(AgentReplayError):
    """The verifier raised, or returned something that is not a number in [0, 1]."""


class ReplayError(AgentReplayError):
    """A replay cannot be set up (bad plan, unusable trajectory)."""


class PlanError(ReplayError, ValueError):
    """A replay plan names a step that does not exist or asks for an impossible intervention."""


class ReplayDivergenceError(ReplayError):
    """In strict mode: a live call does not match the recorded step at its position.

    ``live`` describes the live call, ``position`` where it happened, ``closest`` the recorded
    calls that resemble it most (the vcrpy way of making a mismatch debuggable).
    """

    def __init__(self, message: str, *, position: int, live: str, closest: list[str]) -> None:
        self.position = position
        self.live = live
        self.closest = closest
        super().__init__(message)


class UnfaithfulReplayError(ReplayError):
    """Every factual replay (everything held) left the recording: the agent given does not
    replay this run, so no rollout of it would measure the run. ``divergence`` is where the
    first replay left it (a :class:`~agent_replay.replay.Divergence`)."""

    def __init__(self, message: str, *, divergence: Any) -> None:
        self.divergence = divergence
        super().__init__(message)


class SideEffectBlockedError(AgentReplayError):
    """A side-effecting tool would have run live during a replay; agent-replay refused.

    Raised inside the agent (so its outcome records it) when a plan or a diverged run asks
    for the live execution of a tool declared ``side_effects=True`` without a mock observation.
    """


class RolloutLimitExceeded(BaseException):
    """Raised inside the agent when a rollout reaches its :class:`RolloutLimits` (too many
    steps, or out of time): a run that an intervention sent into a loop is stopped, and the
    rollout counts as a failure.

    It derives from ``BaseException``, as ``asyncio.CancelledError`` does, so that an
    agent's ``except Exception`` (a tool wrapper turning errors into messages) does not
    swallow it and carry on looping. ``reason`` is ``"steps"`` or ``"seconds"``.
    """

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class RecordedStepError(AgentReplayError):
    """Re-raised during replay when a held step had raised during recording.

    Built-in exception types are re-raised as themselves; a class the program has imported
    as a subclass of it and of this (so ``except`` clauses catch it as they did); anything
    else as this. ``type_name`` and the original message are always there.
    """

    def __init__(self, type_name: str, message: str) -> None:
        self.type_name = type_name
        super().__init__(f"{type_name}: {message}")


class SuccessfulRunError(AgentReplayError):
    """Attribution of a failure was requested on a run that passed."""


class FailedRunError(AgentReplayError):
    """Credit for a success (``mode="credit"``) was requested on a run that failed."""


class ImportFormatError(AgentReplayError, ValueError):
    """A trace file or payload cannot be read; ``source`` and ``position`` say where."""

    def __init__(self, message: str, *, source: str = "<data>", position: str = "") -> None:
        self.source = source
        self.position = position
        self.detail = message  # the message without source and position
        at = f" (at {position})" if position else ""
        super().__init__(f"{source}: {message}{at}")


class PatchTargetError(AgentReplayError, ValueError):
    """``instrument.patch`` was given a target that does not exist or is not callable.

    ``target`` is the dotted path as given.
    """

    def __init__(self, message: str, *, target: str) -> None:
        self.target = target
        super().__init__(message)


class RebuildError(AgentReplayError):
    """A recorded response cannot be turned back into the SDK's own type during replay."""
