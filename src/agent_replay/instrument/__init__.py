"""Replay agents as they are written: decorators, the ambient run, and SDK interception.

* ``@instrument.llm`` / ``@instrument.tool`` / ``@instrument.memory`` make a function's calls
  steps of the recorded or replayed run they happen in (plain calls outside one).
* ``instrument.installed("openai", "anthropic", "langchain", "litellm")`` patches the SDKs of
  the recipe registry for a block; ``instrument.patch("pkg.mod.Class.method", kind=...)``
  patches anything else. A held call returns the SDK's own type rebuilt from the recording
  without touching the network; a re-drawn call goes live; streams replay as streams.
* ``instrument.record_agent(agent, task)`` records an agent that takes no ``ctx``;
  ``instrument.replay_agent`` (``replay(..., pass_context=False)``) replays it.
* The run follows asyncio tasks by itself; :func:`bind_context` and
  :class:`ContextThreadPoolExecutor` carry it into threads.

See docs/instrument.md.
"""

from __future__ import annotations

from ..capture.context import current_context, inside_step
from ._intercept import model_hint
from .agents import arecord_agent, areplay_agent, record_agent, replay_agent
from .decorators import llm, memory, tool
from .frameworks import (
    FrameworkInfo,
    Installation,
    RecipeVersionWarning,
    available_frameworks,
    install,
    installed,
)
from .patching import Patch, patch
from .recipes import RECIPES, Recipe, Target
from .threads import ContextThreadPoolExecutor, bind_context

__all__ = [
    "RECIPES",
    "ContextThreadPoolExecutor",
    "FrameworkInfo",
    "Installation",
    "Patch",
    "Recipe",
    "RecipeVersionWarning",
    "Target",
    "arecord_agent",
    "areplay_agent",
    "available_frameworks",
    "bind_context",
    "current_context",
    "in_run",
    "inside_step",
    "install",
    "installed",
    "llm",
    "memory",
    "model_hint",
    "patch",
    "record_agent",
    "replay_agent",
    "tool",
]


def in_run() -> bool:
    """Whether the calling code runs inside a recorded or replayed run."""
    return current_context() is not None
