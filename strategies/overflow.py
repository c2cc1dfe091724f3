"""The onset of an overflow the driver has shown to carry the failure: a command whose reference leaves
fp16's range, and whose whole model stops failing with those values fed from the reference (one check:
Reduction.overflow_carries). The nodes that compute or read them are where the failure is; the first that
computes one is tried alone, grown upwards until what feeds it is faithful (the onset), then the whole
out-of-range region, grown alike. Bisection of where some failure shows would stop at whatever fails alone
first, by rounding too; this goes where the failure was shown to be, in one or two checks."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import Proposals, SearchContext
from strategies.localize import grown


class OverflowOnset:
    name = "overflow"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        region = context.overflow_region & current.nodes
        if not region or len(current) <= 1:
            return
        first = next((n for n in context.beyond_target if n in region), min(region))
        options = [grown(frozenset({first}), context, current), grown(region, context, current)]
        batch = list(dict.fromkeys(current.keeping(o) for o in options if 0 < len(o) < len(current)))
        if batch:
            yield batch
