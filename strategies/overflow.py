"""The onset of an overflow the driver has shown to carry the failure: a command whose reference leaves
fp16's range, and whose whole model stops failing with those values fed from the reference (one check:
Reduction.overflow_carries). The nodes that compute or read them are where the failure is. The first that
computes one (or reads one from a weight: MEGnet's BatchNormalization and its 2.29e6 variance) is tried alone,
grown upwards until what feeds it is faithful (the onset), then with the nodes
that read it (a value overflows where it is stored at the target's precision: a converted model's outputs
stay fp32, so the onset alone may compute 3e5 and hand it out whole), then the whole out-of-range region,
grown alike. Bisection of where *some* failure shows would stop at whatever fails alone first, by rounding
too; this goes where the failure was shown to be, in one to three checks.

Where neither fails, the failure shows below the region: an Inf scaled back down holds a value in range in
the reference, and the NaN a check looks for appears at a node that reads it (the next subtraction or
normalisation), which no out-of-range value reaches. The onset then grows along what it reaches, galloping
(1, 3, 7 ... nodes more), and a bisection ends between the last that passed and the first that failed.

Where none of those fails either, the values carry the failure without overflowing (an fp32 target: PP-OCR's
server detector under O3, whose BatchNormalization reads a variance beyond 65504): the hint is refuted, and the
driver seeks the failure's cause, and proves it, as a tolerance failure's, instead of taking whatever fails
alone for an onset."""

from __future__ import annotations

import networkx as nx

from reducer.candidate import Candidate
from strategies.base import OverflowRefuted, Proposals, SearchContext
from strategies.localize import grown


class OverflowOnset:
    name = "overflow"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        region = context.overflow_region & current.nodes
        if not region or len(current) <= 1:
            return
        first = next((n for n in context.beyond_target if n in region), min(region))
        whole_region = grown(region, context, current)
        # the onset alone, then with what reads it: an out-of-range value overflows where it is stored at the
        # target's precision, which a graph output may not be (a converted model keeps fp32 inputs and outputs)
        readers = frozenset(context.model.dag.subgraph(current.nodes).successors(first))
        options = [grown(frozenset({first}), context, current), grown(frozenset({first}) | readers, context, current),
                   whole_region]
        batch = list(dict.fromkeys(current.keeping(o) for o in options if 0 < len(o) < len(current)))
        if not batch or (yield batch) is not None or len(whole_region) >= len(current):
            return  # the failure is in the region (the current candidate is no more than it)
        if context.finite_failure:
            # the whole model's outputs hold no NaN/Inf (its check counted them), and the out-of-range region
            # computed alone matches the reference: the target holds those values, so nothing overflows (an fp32
            # target under O3: T5's activations pass 65504); growing the onset down would take whatever fails
            # alone for it
            yield OverflowRefuted()
            return
        below = nx.descendants(context.model.dag.subgraph(current.nodes), first)
        order = [first, *sorted((below | region) - {first})]  # node indices are topological

        def onset(count: int) -> Candidate:
            return current.keeping(grown(frozenset(order[:count]), context, current))

        sizes = [1 << i for i in range(1, len(order).bit_length()) if 1 << i < len(order)] + [len(order)]
        probes: dict[Candidate, int] = {}  # candidate -> how many nodes of `order` it starts from
        for count in sizes:
            candidate = onset(count)
            if len(candidate) < len(current) and candidate not in probes and candidate not in batch:
                probes[candidate] = count
        if not probes:
            yield OverflowRefuted()
            return
        gallop = list(probes)
        winner = yield gallop
        if winner is None:  # nothing from the onset down fails alone: the values carry the failure, but no overflow
            yield OverflowRefuted()
            return
        current, too_many = gallop[winner], probes[gallop[winner]]
        passed = probes[gallop[winner - 1]] if winner > 0 else 1
        while too_many - passed > 1:
            middle = (passed + too_many) // 2
            candidate = onset(middle)
            if len(candidate) >= len(current):  # grown into the current one: known to fail
                too_many = middle
                continue
            if (yield [candidate]) is None:
                passed = middle
            else:
                current, too_many = candidate, middle
