"""Cone of influence: keep only the ancestors of the nodes whose outputs fail. One check can drop
every branch that does not feed the failure."""

from __future__ import annotations

import networkx as nx

from reducer.candidate import Candidate
from strategies.base import Proposals, SearchContext


class ConeOfInfluence:
    name = "cone"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        producers = context.failing_producers(current)
        if not producers:
            return
        graph = context.model.dag.subgraph(current.nodes)
        cones = [frozenset(nx.ancestors(graph, p) | {p}) for p in producers]
        options = sorted(set(cones), key=len)  # one failing output's cone first, smallest first
        union = frozenset().union(*cones)
        if union not in options:
            options.append(union)
        batch = [current.keeping(cone) for cone in options if len(cone) < len(current)]
        if batch:
            yield batch
