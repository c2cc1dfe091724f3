"""Localisation first (the seeds' flowchart: compare layerwise, extract the first failing layer): one
layerwise run names every failing tensor; the nodes that produce the earliest ones are tried alone,
then with what feeds them. A hint to check, never a conclusion: marking outputs can change fusions."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import Probe, Proposals, SearchContext

EARLIEST = 2  # failing tensors whose producers are tried: a wrong hint should cost few checks


class FirstDivergence:
    name = "localize"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        if len(current) <= 1:
            return
        verdict = yield Probe(current)
        if verdict is None or not verdict.failing or not verdict.signature.outputs:
            return
        failing = set(verdict.signature.outputs)
        producers = sorted({p for p in (context.model.producer_in(name, current.nodes) for name in failing)
                            if p is not None})
        # Origins first: failing nodes none of whose inputs fail introduce the error themselves; a node
        # downstream of a failing one may only pass it on.
        origins = [p for p in producers if not failing.intersection(context.model.node_reads[p])]
        earliest = (origins or producers)[:EARLIEST]
        options: list[frozenset[int]] = []
        for node in earliest:  # the node alone, grown upwards until what feeds it is faithful
            options.append(grown(frozenset({node}), context, current))
        options.append(with_producers(earliest[0], context, current))  # then the earliest with its producers
        seen, batch = set(), []
        for option in options:
            if option not in seen and len(option) < len(current):
                seen.add(option)
                batch.append(current.keeping(option))
        if batch:
            yield batch


def grown(nodes: frozenset[int], context: SearchContext, current: Candidate) -> frozenset[int]:
    """Add the producers of cut inputs the target could not hold (an overflow starts further up)."""
    while True:
        unfaithful = context.unfaithful_inputs(current.keeping(nodes))
        producers = {context.model.producer_in(name, current.nodes) for name in unfaithful}
        producers = {p for p in producers if p is not None and p not in nodes}
        if not producers:
            return nodes
        nodes = nodes | producers


def with_producers(node: int, context: SearchContext, current: Candidate) -> frozenset[int]:
    """A node with the kept nodes that feed it directly, grown until faithful."""
    feeding = context.model.dag.subgraph(current.nodes).predecessors(node)
    return grown(frozenset({node, *feeding}), context, current)
