"""One node alone, one per op type. A wrong kernel fails with its node alone, wherever the node sits,
so a handful of checks can find a one-node repro that bisection or ddmin, which only ever remove nodes
from where they first found the failure, cannot reach from a larger local minimum. Rare op types are
tried first (an unusual kernel is likelier to be the wrong one); for each, a node of the current
candidate if it has one (the latest in topological order: nearest the failure), else one from the rest
of the model. Skipped once the candidate is already tiny: a few checks more are not worth one node less.
A turn tries at most bit_length(nodes) op types, what a bisection of one end costs: where no lone node
fails, the other strategies lose little; later turns go on with the next op types."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import Proposals, SearchContext

TINY = 3  # nodes: below this a repro is already as small as a vendor needs
SKIPPED_OPS = frozenset({"Constant"})  # no inputs: alone it computes nothing to compare


class SingleNodes:
    name = "singletons"

    @staticmethod
    def turn_checks(nodes: int) -> int:
        return max(1, nodes.bit_length())

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        if len(current) <= TINY:
            return
        nodes = context.model.nodes
        inside = sorted(current.nodes, reverse=True)
        outside = [i for i in range(len(nodes) - 1, -1, -1) if i not in current.nodes]
        chosen: dict[str, int] = {}
        for index in inside + outside:
            op = nodes[index].op_type
            if op not in SKIPPED_OPS and op not in chosen:
                chosen[op] = index
        counts: dict[str, int] = {}
        for node in nodes:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
        order = sorted(chosen, key=lambda op: counts[op])  # rare op types first (stable: nearest first on ties)
        batch = [current.keeping({chosen[op]}) if chosen[op] in current.nodes else Candidate(frozenset({chosen[op]}))
                 for op in order]
        if batch:
            yield batch
