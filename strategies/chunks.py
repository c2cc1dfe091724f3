"""Adaptive chunk deletion (Hypothesis' shrinker, C-Reduce's passes): walk the nodes from the outputs
back; where one node can go, find by doubling then bisection how long a run of neighbours can go with it.
A removable run of length L costs about 2*log2(L) checks, a node that must stay costs one."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import Proposals, SearchContext


class AdaptiveChunks:
    name = "chunks"
    exhaustive = True  # a check per node that must stay: --minimal's, not the default search's

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        order = current.ordered()[::-1]
        position = 0
        def without(count: int) -> Candidate:
            return current.without(order[position : position + count])

        while position < len(order) and len(current) > 1:
            first = without(1)
            if (yield [first]) is None:
                position += 1
                continue
            good, bad = 1, None  # removing `good` nodes from here fails the same way; `bad` does not
            while bad is None:
                trial = min(2 * good, len(order) - position)
                if trial == good or trial >= len(current):
                    break
                if (yield [without(trial)]) is None:
                    bad = trial
                else:
                    good = trial
            while bad is not None and bad - good > 1:
                middle = (good + bad) // 2
                if (yield [without(middle)]) is None:
                    bad = middle
                else:
                    good = middle
            current = without(good)
            del order[position : position + good]
