"""Boundary bisection (Polygraphy's `--mode=bisect` idea): binary-search how many nodes can be cut
from the front of the topological order, then from the back. Few checks, coarse result."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import Proposals, SearchContext


class BoundaryBisection:
    name = "bisect"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        for from_front in (True, False):
            nodes = current.ordered()
            removable, too_many = 0, len(nodes)  # removing `removable` is known to fail; all is empty
            while too_many - removable > 1:
                middle = (removable + too_many) // 2
                kept = nodes[middle:] if from_front else nodes[: len(nodes) - middle]
                probe = Candidate(frozenset(kept))
                winner = yield [probe]
                if winner is None:
                    too_many = middle
                else:
                    removable, current = middle, probe
