"""Unit tests for llm_backend.priority.PriorityLevels."""

from __future__ import annotations

import pytest

from llm_backend.errors import InvalidRequest
from llm_backend.priority import PriorityLevels

LEVELS = PriorityLevels(count=3, default=3)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, 3),
        (1, 1),
        (2, 2),
        (3, 3),
        ("2", 2),
        (" 1 ", 1),
        ("3", 3),
        (2.0, 2),
        (1.0, 1),
    ],
)
def test_resolve_accepts(raw, expected):
    value = LEVELS.resolve(raw)
    assert value == expected
    assert type(value) is int


def test_resolve_none_gives_default():
    assert PriorityLevels(count=5, default=2).resolve(None) == 2


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (True, "got True"),
        (False, "got False"),
        (1.5, "got 1.5"),
        (2.25, "got 2.25"),
        ("high", "got 'high'"),
        ("", "got ''"),
        ("2.0", "got '2.0'"),
        ([1], "must be an integer level 1..3"),
        ({"level": 1}, "must be an integer level 1..3"),
    ],
)
def test_resolve_rejects_non_integers(raw, fragment):
    with pytest.raises(InvalidRequest) as info:
        LEVELS.resolve(raw)
    err = info.value
    assert err.field == "priority"
    assert "1..3" in err.message
    assert fragment in err.message


@pytest.mark.parametrize("raw", [0, 4, -1, 100, "0", "4", 4.0, 0.0])
def test_resolve_out_of_range(raw):
    with pytest.raises(InvalidRequest) as info:
        LEVELS.resolve(raw)
    err = info.value
    assert err.field == "priority"
    assert "out of range" in err.message
    assert "levels 1..3" in err.message
    assert "3 is the default" in err.message
    assert f"level {int(float(raw))}" in err.message


def test_single_level_only_accepts_one():
    levels = PriorityLevels(count=1, default=1)
    assert levels.resolve(None) == 1
    assert levels.resolve(1) == 1
    with pytest.raises(InvalidRequest) as info:
        levels.resolve(2)
    assert "1..1" in info.value.message


@pytest.mark.parametrize(
    ("count", "default", "match"),
    [
        (0, 1, "at least 1, got 0"),
        (-2, 1, "at least 1, got -2"),
        (3, 0, "default priority level 0 is not in 1..3"),
        (3, 4, "default priority level 4 is not in 1..3"),
        (1, 2, "default priority level 2 is not in 1..1"),
    ],
)
def test_constructor_rejects_invalid(count, default, match):
    with pytest.raises(ValueError, match=match):
        PriorityLevels(count=count, default=default)


def test_levels_are_frozen():
    with pytest.raises(AttributeError):
        LEVELS.count = 5  # type: ignore[misc]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_to_vllm_passes_level_through(level):
    assert LEVELS.to_vllm(level) == level
