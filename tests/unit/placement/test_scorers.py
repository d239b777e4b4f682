"""Best fit and spread, and how a node's engines are chosen from the GPUs that passed."""

from __future__ import annotations

import pytest

from control_plane.placement.model import Strategy
from control_plane.placement.scorers import (
    SCORERS,
    BestFit,
    Candidate,
    NodeChoice,
    Spread,
    best_choice,
    choose_on_node,
)

from .fleet import GIB

BEST_FIT = SCORERS[Strategy.BEST_FIT]
SPREAD = SCORERS[Strategy.SPREAD]


def test_scorers_prefer_less_or_more_memory_left() -> None:
    tight, loose = Candidate(0, 80 * GIB, 1 * GIB), Candidate(1, 80 * GIB, 2 * GIB)
    assert BestFit().key(tight) < BestFit().key(loose)
    assert Spread().key(loose) < Spread().key(tight)
    assert {scorer.name for scorer in SCORERS.values()} == {s.value for s in Strategy}


def test_best_fit_fills_gpus_in_use_before_empty_ones() -> None:
    empty_tight = Candidate(0, 24 * GIB, 1 * GIB, in_use=False)
    used_loose = Candidate(1, 80 * GIB, 30 * GIB, in_use=True)
    assert BestFit().key(used_loose) < BestFit().key(empty_tight)
    assert Spread().key(used_loose) < Spread().key(empty_tight)
    group = [Candidate(0, 80 * GIB, 1 * GIB), Candidate(1, 80 * GIB, 30 * GIB, in_use=True),
             Candidate(2, 80 * GIB, 20 * GIB, in_use=True)]
    choice = choose_on_node("a", group, tensor_parallel_size=2, replicas=1, scorer=BEST_FIT)
    assert choice is not None and choice.engines == ((2, 1),)
    choice = choose_on_node("a", group, tensor_parallel_size=3, replicas=1, scorer=BEST_FIT)
    assert choice is not None and choice.engines == ((2, 1, 0),)
    # One empty GPU taken, none left empty on the node.
    assert choice.rank == (1, 51 * GIB, 0, "a", (2, 1, 0))


def _gpus(*lefts: float, total: int = 80) -> list[Candidate]:
    return [Candidate(i, total * GIB, int(left * GIB)) for i, left in enumerate(lefts)]


@pytest.mark.parametrize(("scorer", "lefts", "tp", "replicas", "engines"), [
    (BEST_FIT, (30, 5, 50, 5), 1, 1, ((1,),)),
    (SPREAD, (30, 5, 50, 5), 1, 1, ((2,),)),
    (BEST_FIT, (30, 5, 50, 6), 2, 1, ((1, 3),)),
    (SPREAD, (30, 5, 50, 6), 2, 1, ((2, 0),)),
    (BEST_FIT, (30, 5, 50, 6), 1, 3, ((1,), (3,), (0,))),
    (BEST_FIT, (30, 5, 50, 6), 2, 2, ((1, 3), (0, 2))),
    # Ties go to the lower index.
    (BEST_FIT, (10, 10, 10, 10), 2, 1, ((0, 1),)),
    (SPREAD, (10, 10, 10, 10), 1, 2, ((0,), (1,))),
], ids=["best-fit", "spread", "best-fit-tp2", "spread-tp2", "replicas", "two-tp2", "tie-best-fit",
        "tie-spread"])
def test_choose_on_node(scorer: BestFit | Spread, lefts: tuple[float, ...], tp: int,
                        replicas: int, engines: tuple[tuple[int, ...], ...]) -> None:
    choice = choose_on_node("a", _gpus(*lefts), tensor_parallel_size=tp, replicas=replicas,
                            scorer=scorer)
    assert choice is not None
    assert choice.engines == engines
    assert choice.left == sum(int(lefts[i] * GIB) for engine in engines for i in engine)


def test_engines_combine_only_gpus_of_equal_memory() -> None:
    # GPUs 0-1 are 80 GiB, 2-3 are 48 GiB: a tp=2 engine takes two of the same size, the pair
    # that best fits.
    candidates = _gpus(3, 40) + [Candidate(2, 48 * GIB, 2 * GIB), Candidate(3, 48 * GIB, 4 * GIB)]
    choice = choose_on_node("a", candidates, tensor_parallel_size=2, replicas=1, scorer=BEST_FIT)
    assert choice is not None and choice.engines == ((2, 3),) and choice.total == 48 * GIB
    choice = choose_on_node("a", candidates, tensor_parallel_size=2, replicas=1, scorer=SPREAD)
    assert choice is not None and choice.engines == ((1, 0),) and choice.total == 80 * GIB
    assert choose_on_node("a", candidates[:3], tensor_parallel_size=2, replicas=1,
                          scorer=BEST_FIT) is not None
    assert choose_on_node("a", [candidates[0], candidates[2]], tensor_parallel_size=2,
                          replicas=1, scorer=BEST_FIT) is None


def test_best_choice_breaks_ties_by_node_name_then_gpu_index() -> None:
    def choice(node: str, left: int, engines: tuple[tuple[int, ...], ...]) -> NodeChoice:
        indexes = tuple(i for engine in engines for i in engine)
        return NodeChoice(node, engines, 80, left, (0, left, 0, node, indexes))

    assert best_choice([choice("b", 1, ((0,),)), choice("a", 1, ((3,),)),
                        choice("c", 0, ((5,),))]) == choice("c", 0, ((5,),))
    tied = best_choice([choice("b", 1, ((0,),)), choice("a", 1, ((3,),))])
    assert tied is not None and tied.node == "a"
    assert best_choice([]) is None


@pytest.mark.parametrize(("candidates", "expected"), [
    # In use beats empty, however tight the empty GPU would be.
    ([Candidate(0, 24 * GIB, 1 * GIB), Candidate(1, 80 * GIB, 50 * GIB, in_use=True)], 1),
    # A large engine (fills >= 3/4 of the 24 GiB GPU) takes the tightest such empty GPU.
    ([Candidate(0, 140 * GIB, 120 * GIB), Candidate(1, 24 * GIB, 2 * GIB)], 1),
    # A small engine opens the largest GPU, whose room takes the next engines.
    ([Candidate(0, 24 * GIB, 19 * GIB), Candidate(1, 140 * GIB, 135 * GIB),
      Candidate(2, 80 * GIB, 75 * GIB)], 1),
    # Exactly three quarters counts as filling the GPU.
    ([Candidate(0, 140 * GIB, 100 * GIB), Candidate(1, 80 * GIB, 20 * GIB)], 1),
], ids=["in-use-first", "large-engine-tightest", "small-engine-largest", "three-quarters"])
def test_best_fit_opens_the_tightest_gpu_it_fills_else_the_largest(
        candidates: list[Candidate], expected: int) -> None:
    best = min(candidates, key=lambda c: (BestFit().key(c), c.gpu_index))
    assert best.gpu_index == expected


@pytest.mark.parametrize("scorer", list(SCORERS.values()), ids=lambda scorer: scorer.name)
@pytest.mark.parametrize("in_use", [False, True])
@pytest.mark.parametrize("total", [24, 80, 141])
def test_keys_are_monotone_in_what_a_gpu_keeps(scorer: BestFit | Spread, in_use: bool,
                                               total: int) -> None:
    # Placement looks for a node's least key at the two ends of its GPUs ordered by load only.
    keys = [scorer.key(Candidate(0, total * GIB, left * GIB // 4, in_use=in_use))
            for left in range(4 * total + 1)]
    assert keys in (sorted(keys), sorted(keys, reverse=True))
