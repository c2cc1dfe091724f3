"""Linear sweep: try removing each node alone, from the outputs back. At a fixpoint the result is
1-minimal: no single node can be removed."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import Proposals, SearchContext

BATCH = 32  # candidates per batch: enough for parallel checks, few enough to stay cheap to build


class LinearSweep:
    name = "linear"
    proves_one_minimal = True  # closing the search, a sweep that removes nothing leaves a 1-minimal result
    exhaustive = True  # a check per node: --minimal's, not the default search's

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        order = current.ordered()[::-1]
        position = 0
        while position < len(order):
            if len(current) <= 1:
                return
            chunk = order[position : position + BATCH]
            batch = [current.without([node]) for node in chunk]
            winner = yield batch
            if winner is None:
                position += len(chunk)
            else:
                current = batch[winner]
                position += winner + 1
