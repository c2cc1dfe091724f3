"""Boundary bisection (Polygraphy's `--mode=bisect` idea), back first: binary-search the shortest
failing prefix of the topological order, then how many nodes can be cut from the front. Few checks.

The shortest failing prefix ends where the failure first shows: its last node's output is a graph
output there. That is the localisation an oracle which cannot name failing outputs (a --check command)
can still give, for about log2(n) checks: the last node alone (grown upwards until what feeds it is
faithful), then its ancestor cone, are tried before the front is cut."""

from __future__ import annotations

import networkx as nx

from reducer.candidate import Candidate
from strategies.base import Proposals, SearchContext
from strategies.localize import grown


class BoundaryBisection:
    name = "bisect"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        for from_front in (False, True):
            nodes = current.ordered()
            removable, too_many = 0, len(nodes)  # removing `removable` is known to fail; all is empty
            while too_many - removable > 1:
                middle = (removable + too_many) // 2
                kept = nodes[middle:] if from_front else nodes[: len(nodes) - middle]
                probe = current.keeping(kept)
                winner = yield [probe]
                if winner is None:
                    too_many = middle
                else:
                    removable, current = middle, probe
            if not from_front and removable:
                last = max(current.nodes)
                graph = context.model.dag.subgraph(current.nodes)
                options = [grown(frozenset({last}), context, current), frozenset(nx.ancestors(graph, last) | {last})]
                batch = list(dict.fromkeys(current.keeping(o) for o in options if len(o) < len(current)))
                if batch:
                    winner = yield batch
                    if winner is not None:
                        current = batch[winner]
