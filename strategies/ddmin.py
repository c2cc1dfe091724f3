"""Zeller's ddmin over the node set: keep one chunk, else remove one chunk (from anywhere, the middle
included), refining the granularity until single nodes. Ends 1-minimal, at the price of checks."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import Proposals, SearchContext


def _split(items: list[int], parts: int) -> list[list[int]]:
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        chunks.append(items[start:end])
        start = end
    return [c for c in chunks if c]


class DeltaDebugging:
    name = "ddmin"
    exhaustive = True  # checks grow with the candidate's size: --minimal's, not the default search's

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        items = current.ordered()
        granularity = 2
        while len(items) >= 2:
            chunks = _split(items, granularity)
            if granularity > 2:  # at 2, keeping one half is removing the other: tested just below
                subsets = [current.keeping(chunk) for chunk in chunks]
                winner = yield subsets
                if winner is not None:
                    items, granularity = chunks[winner], 2
                    continue
            complements = [current.keeping(frozenset(items) - frozenset(chunk)) for chunk in chunks]
            winner = yield complements
            if winner is not None:
                items = complements[winner].ordered()
                granularity = max(granularity - 1, 2)
                continue
            if granularity >= len(items):
                return
            granularity = min(granularity * 2, len(items))
