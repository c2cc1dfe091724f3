"""Probabilistic delta debugging (Wang et al., FSE 2021): each node carries the probability that the
minimal repro needs it. Every test removes the set of least likely nodes that maximises the expected
gain (how many nodes go, times the chance that none of them is needed); a removal that loses the
failure raises the probabilities of the nodes it held (Bayes), one that keeps it drops them for good.
Only removals are tested, never ddmin's "keep this chunk alone", which on real graphs rarely fails.
Deterministic: ties keep the topological order."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import Proposals, SearchContext

EXPECTED_MINIMAL = 2  # prior: the repro needs about this many nodes, so the first test removes about half


def removal_set(order: list[int], probability: dict[int, float]) -> list[int]:
    """The prefix of the least likely nodes that maximises size * P(none of them is needed)."""
    ranked = sorted((n for n in order if probability[n] < 1.0), key=lambda n: probability[n])
    best, best_gain, survive = [], 0.0, 1.0
    for size, node in enumerate(ranked, start=1):
        survive *= 1.0 - probability[node]
        gain = size * survive
        if gain > best_gain:
            best, best_gain = ranked[:size], gain
    return best


class ProbabilisticDeltaDebugging:
    name = "probdd"
    exhaustive = True  # checks grow with the candidate's size: --minimal's, not the default search's

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        order = current.ordered()
        prior = min(0.5, EXPECTED_MINIMAL / max(len(order), 1))
        probability = {n: prior for n in order}
        while len(current) > 1:
            removed = removal_set(current.ordered(), probability)
            if not removed:
                return
            if len(removed) == len(current):  # removing everything leaves nothing to check
                removed = removed[: len(removed) // 2] or removed
                if len(removed) == len(current):
                    return
            if (yield [current.without(removed)]) is not None:
                current = current.without(removed)
                continue
            miss = 1.0
            for node in removed:
                miss *= 1.0 - probability[node]
            for node in removed:
                probability[node] = min(1.0, probability[node] / (1.0 - miss)) if miss < 1.0 else 1.0
