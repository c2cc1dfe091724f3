"""Single-entry/single-exit regions around the failure, found from dominators and post-dominators
(networkx), tried whole: binary search for the smallest region that still fails on its own."""

from __future__ import annotations

import networkx as nx

from reducer.candidate import Candidate
from strategies.base import Proposals, SearchContext

SOURCE, SINK = "source", "sink"


def _chain(idom: dict, node) -> list:
    chain = [node]
    while idom.get(chain[-1], chain[-1]) != chain[-1]:
        chain.append(idom[chain[-1]])
    return chain


def sese_regions(graph: nx.DiGraph, focus: int) -> list[frozenset[int]]:
    """Regions (entry a, exit b) holding `focus`: a dominates b, b post-dominates a."""
    flow = nx.DiGraph(graph)
    flow.add_edges_from((SOURCE, n) for n in graph if graph.in_degree(n) == 0)
    flow.add_edges_from((n, SINK) for n in graph if graph.out_degree(n) == 0)
    idom = nx.immediate_dominators(flow, SOURCE)
    ipdom = nx.immediate_dominators(flow.reverse(copy=False), SINK)
    entries = [n for n in _chain(idom, focus) if n != SOURCE]
    exits = [n for n in _chain(ipdom, focus) if n != SINK]
    regions = set()
    for entry in entries:
        below = nx.descendants(graph, entry) | {entry}
        post_dominators = set(_chain(ipdom, entry))
        for exit_ in exits:
            if exit_ not in below or exit_ not in post_dominators or entry not in _chain(idom, exit_):
                continue
            region = below & (nx.ancestors(graph, exit_) | {exit_})
            regions.add(frozenset(region))
    return sorted(regions, key=len)


class DominatorRegions:
    name = "regions"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        producers = context.failing_producers(current)
        if not producers:
            return
        graph = context.model.dag.subgraph(current.nodes)
        regions = [r for r in sese_regions(graph, producers[-1]) if len(r) < len(current)]
        too_small, fits = -1, len(regions)  # index `fits` stands for the current candidate
        while fits - too_small > 1:
            middle = (too_small + fits) // 2
            winner = yield [current.keeping(regions[middle])]
            if winner is None:
                too_small = middle
            else:
                fits = middle
