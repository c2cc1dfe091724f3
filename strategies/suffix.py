"""The front half of boundary bisection: how many nodes can be cut from the front of the topological
order (see strategies/bisect.py)."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import SearchContext
from strategies.bisect import Cut, cut_end


class ShortestFailingSuffix:
    name = "suffix"

    def search(self, current: Candidate, context: SearchContext) -> Cut:
        return (yield from cut_end(current, from_front=True, ways=context.parallel))
