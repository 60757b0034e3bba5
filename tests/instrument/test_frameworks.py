"""The recipe registry: discovery, installed(), absent SDKs, unknown versions."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import warnings

import openai
import pytest

from agent_replay import instrument
from agent_replay.instrument import frameworks
from agent_replay.instrument.patching import resolve_target
from agent_replay.instrument.recipes import RECIPES, Recipe, Target


def test_available_frameworks_lists_the_importable_sdks_with_versions():
    found = {info.framework: info for info in instrument.available_frameworks()}
    assert set(found) >= {"openai", "anthropic", "langchain"}
    assert found["openai"].version == importlib.metadata.version("openai")
    assert found["openai"].supported
    assert found["langchain"].module == "langchain_core"


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.framework)
def test_every_recipe_target_exists_in_the_installed_sdk(recipe):
    if not frameworks._present(recipe):
        pytest.skip(f"{recipe.module} not installed")
    for target in recipe.targets:
        owner, attr, _raw = resolve_target(target.path)
        assert callable(getattr(owner, attr))


def test_recipes_are_plain_data():
    for recipe in RECIPES:
        assert dataclasses.is_dataclass(recipe)
        for target in recipe.targets:
            for value in dataclasses.asdict(target).values():
                assert isinstance(value, (str, bool, tuple, type(None)))


def test_installed_patches_for_the_block_and_restores_every_target():
    before = {
        t.path: resolve_target(t.path)[2]
        for r in RECIPES
        if frameworks._present(r)
        for t in r.targets
    }
    with instrument.installed() as report:
        assert {p.target for p in report.patches} == set(before)
        assert all(resolve_target(path)[2] is not raw for path, raw in before.items())
    assert all(resolve_target(path)[2] is raw for path, raw in before.items())
    assert report.patches == []


@pytest.fixture
def extra_recipes(monkeypatch):
    def use(*recipes):
        monkeypatch.setattr(frameworks, "RECIPES", (*RECIPES, *recipes))

    return use


def test_an_absent_sdk_is_skipped_with_a_note_never_an_import_error(extra_recipes):
    ghost = Recipe(
        framework="ghost",
        module="ghost_sdk_that_is_not_installed",
        distribution="ghost-sdk",
        versions=">=1",
        tested="1.0",
        targets=(Target("ghost_sdk_that_is_not_installed.Client.call", "llm", "ghost.call"),),
    )
    extra_recipes(ghost)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing SDK is not worth a warning
        with instrument.installed("ghost", "openai") as report:
            assert report.frameworks == ["openai"]
            assert report.notes == [
                "ghost: module 'ghost_sdk_that_is_not_installed' is not installed; skipped"
            ]


def test_a_version_outside_the_known_range_is_skipped_with_a_warning_naming_it(extra_recipes):
    old = dataclasses.replace(RECIPES[0], framework="openai-legacy", versions=">=0.1,<1")
    extra_recipes(old)
    original = openai.resources.chat.completions.Completions.__dict__["create"]
    with pytest.warns(instrument.RecipeVersionWarning) as caught:
        with instrument.installed("openai-legacy") as report:
            assert report.patches == []
            assert openai.resources.chat.completions.Completions.__dict__["create"] is original
    message = str(caught[0].message)
    assert f"version {openai.__version__}" in message and ">=0.1,<1" in message
    assert caught[0].filename == __file__  # points at the `with` line, not at our internals


def test_a_target_the_sdk_no_longer_has_is_skipped_with_a_warning(extra_recipes):
    broken = dataclasses.replace(
        RECIPES[0],
        framework="openai-broken",
        targets=(
            RECIPES[0].targets[0],
            Target("openai.resources.chat.completions.Completions.vanished", "llm", "x"),
        ),
    )
    extra_recipes(broken)
    with pytest.warns(instrument.RecipeVersionWarning, match="has no attribute 'vanished'"):
        with instrument.installed("openai-broken") as report:
            assert [p.target for p in report.patches] == [RECIPES[0].targets[0].path]


def test_an_unknown_framework_name_is_a_value_error():
    with pytest.raises(ValueError, match="known frameworks: openai, anthropic"):
        with instrument.installed("opneai"):
            pass


@pytest.mark.parametrize(
    ("version", "spec", "expected"),
    [
        ("3.57.0", ">=1.66,<4", True),
        ("4.0.0", ">=1.66,<4", False),
        ("1.66", ">=1.66,<4", True),
        ("1.65.9", ">=1.66,<4", False),
        ("1.0.0rc1", ">=1", True),  # release numbers only
        ("0.3.10", ">=0.3,<2", True),
        ("2.0", "==2", True),
        ("2.1", "!=2.1", False),
    ],
)
def test_version_ranges(version, spec, expected):
    assert frameworks.version_in_range(version, spec) is expected


def test_an_unreadable_version_clause_is_refused():
    with pytest.raises(ValueError, match="cannot read version clause"):
        frameworks.version_in_range("1.0", "~=1.0")
