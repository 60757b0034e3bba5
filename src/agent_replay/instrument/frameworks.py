"""Applying the recipe registry: which SDKs are here, and patching them for a block.

``installed("openai", "anthropic")`` patches every target of those recipes and undoes them on
exit. An SDK that is not installed is skipped with a note in the returned report (never an
ImportError); one whose version is outside the recipe's known range is skipped with a
:class:`RecipeVersionWarning` naming the version found; a target the installed SDK no longer
has is skipped with a warning too. Unknown framework names are a ``ValueError``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import PatchTargetError
from .patching import Patch, patch
from .recipes import RECIPES, Recipe

__all__ = [
    "FrameworkInfo",
    "Installation",
    "RecipeVersionWarning",
    "available_frameworks",
    "install",
    "installed",
    "version_in_range",
]

_log = logging.getLogger(__name__)


class RecipeVersionWarning(UserWarning):
    """An SDK's installed version is outside what its recipe is known to work with."""


@dataclass(frozen=True)
class FrameworkInfo:
    """One recipe whose SDK is importable here: its version and whether the recipe covers it."""

    framework: str
    module: str
    version: str | None
    versions: str
    supported: bool


@dataclass
class Installation:
    """What :func:`install` did: the active patches and a note per skipped SDK or target."""

    patches: list[Patch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    frameworks: list[str] = field(default_factory=list)

    def undo(self) -> None:
        """Undo every patch, last first (idempotent)."""
        while self.patches:
            self.patches.pop().undo()

    def __enter__(self) -> Installation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


def _recipe(name: str) -> Recipe:
    for recipe in RECIPES:
        if recipe.framework == name:
            return recipe
    known = ", ".join(r.framework for r in RECIPES)
    raise ValueError(f"no recipe for {name!r}; known frameworks: {known} (or use instrument.patch)")


def _version(recipe: Recipe) -> str | None:
    try:
        return importlib.metadata.version(recipe.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _present(recipe: Recipe) -> bool:
    try:
        return importlib.util.find_spec(recipe.module) is not None
    except (ImportError, ValueError):
        return False


def available_frameworks() -> list[FrameworkInfo]:
    """The recipes whose SDK is importable in this environment (nothing is imported)."""
    found = []
    for recipe in RECIPES:
        if not _present(recipe):
            continue
        version = _version(recipe)
        found.append(
            FrameworkInfo(
                framework=recipe.framework,
                module=recipe.module,
                version=version,
                versions=recipe.versions,
                supported=version is not None and version_in_range(version, recipe.versions),
            )
        )
    return found


def install(*frameworks: str) -> Installation:
    """Patch the targets of the named recipes (every recipe when none is named).

    Returns an :class:`Installation` (undo it, or use it as a context manager); its ``notes``
    say what was skipped and why. Raises ``ValueError`` for an unknown framework name.
    """
    return _install(frameworks, stacklevel=3)


def _install(frameworks: tuple[str, ...], *, stacklevel: int) -> Installation:
    recipes = [_recipe(name) for name in frameworks] if frameworks else list(RECIPES)
    done = Installation()
    try:
        for recipe in recipes:
            _install_recipe(recipe, done, stacklevel + 1)
    except BaseException:
        done.undo()
        raise
    return done


def _install_recipe(recipe: Recipe, done: Installation, stacklevel: int) -> None:
    if not _present(recipe):
        note = f"{recipe.framework}: module {recipe.module!r} is not installed; skipped"
        done.notes.append(note)
        _log.info("agent-replay: %s", note)
        return
    version = _version(recipe)
    if version is None or not version_in_range(version, recipe.versions):
        found = "an unknown version" if version is None else f"version {version}"
        note = (
            f"{recipe.framework}: {recipe.distribution} {found} is outside the range the recipe "
            f"is known to work with ({recipe.versions}); skipped. Use instrument.patch(...) to "
            "intercept it anyway"
        )
        done.notes.append(note)
        warnings.warn(note, RecipeVersionWarning, stacklevel=stacklevel)
        return
    for target in recipe.targets:
        try:
            handle = patch(
                target.path,
                target.kind,
                target.name,
                exclude=target.exclude,
                model_arg=target.model_arg,
                model_attrs=target.model_attrs,
                stream_arg=target.stream_arg,
                iterator=target.iterator,
                stream_class=target.stream_class,
                response_type=target.response_type,
                manager_class=target.manager_class,
                manager_args=target.manager_args,
                usage_input=target.usage_input,
                usage_output=target.usage_output,
                reparse=target.reparse,
                reparse_response=target.reparse_response,
                reparse_args=target.reparse_args,
            )
        except PatchTargetError as exc:
            note = f"{recipe.framework} {version}: {exc}; target skipped"
            done.notes.append(note)
            warnings.warn(note, RecipeVersionWarning, stacklevel=stacklevel)
            continue
        interceptor = handle._interceptor
        if (interceptor.is_async or interceptor.is_async_gen) != target.is_async:
            handle.undo()
            shape = "async" if target.is_async else "sync"
            note = (
                f"{recipe.framework} {version}: {target.path} is no longer {shape} as the recipe "
                "expects; target skipped"
            )
            done.notes.append(note)
            warnings.warn(note, RecipeVersionWarning, stacklevel=stacklevel)
            continue
        done.patches.append(handle)
    done.frameworks.append(recipe.framework)


@contextlib.contextmanager
def installed(*frameworks: str) -> Iterator[Installation]:
    """``with instrument.installed("openai", "anthropic") as report:`` patch for the block.

    Not meant to be entered from several threads at once: patches are process-wide.
    """
    done = _install(frameworks, stacklevel=4)  # warnings point at the `with` line
    try:
        yield done
    finally:
        done.undo()


_SPEC = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([0-9][0-9A-Za-z.\-+]*)\s*$")


def _release(version: str) -> tuple[int, ...]:
    numbers = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits.group()))
        if digits.end() != len(part):  # 1.2rc1: the release part ends here
            break
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def version_in_range(version: str, spec: str) -> bool:
    """Whether ``version`` satisfies every clause of ``spec`` (``">=1.40,<4"``), comparing
    release numbers only. Raises ``ValueError`` for a clause it cannot read."""
    have = _release(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        match = _SPEC.match(clause)
        if match is None:
            raise ValueError(f"cannot read version clause {clause!r}")
        op, bound = match.group(1), _release(match.group(2))
        ok = {
            ">=": have >= bound,
            "<=": have <= bound,
            ">": have > bound,
            "<": have < bound,
            "==": have == bound,
            "!=": have != bound,
        }[op]
        if not ok:
            return False
    return True
