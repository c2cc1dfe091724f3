"""The back half of boundary bisection: the shortest failing prefix of the topological order, then
its last node alone, with its direct producers, and with its ancestor cone (see strategies/bisect.py)."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import SearchContext
from strategies.bisect import Cut, shortest_failing_prefix


class ShortestFailingPrefix:
    name = "prefix"

    def search(self, current: Candidate, context: SearchContext) -> Cut:
        return (yield from shortest_failing_prefix(current, context))
