"""Where the failure that matters comes from: binary search of the shortest prefix of the topological
order that, computed exactly (kept in fp32, or fed from the reference), makes the whole model stop
failing, or fail in at most a tenth of the elements it did. The last node of that prefix is the origin:
with it computed at the target's precision the failure is carried, without it it is not. Under a loose
fp16 tolerance nearly every node fails alone by rounding; bisection of where *a* failure first shows
finds such a bystander near the input, this search finds the node whose error the outputs carry (det
folded: the BatchNormalization whose variance fp16 cannot hold). The origin is then tried alone (grown
upwards until what feeds it is faithful), with its producers, and as the front cut of the order there.
Numeric failures only (the driver answers Exact only then); about log2(n) checks."""

from __future__ import annotations

from reducer.candidate import Candidate
from strategies.base import Exact, Proposals, SearchContext
from strategies.localize import grown, with_producers


class FailureOrigin:
    name = "origin"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        if len(current) <= 1 or not context.proves_cause:
            return
        nodes = current.ordered()
        # nodes[:low] exact: the whole model still fails (nothing exact: the original failure);
        # nodes[:high] exact: it does not (all of them: the reference itself)
        low, high = 0, len(nodes)
        hint = next((nodes.index(n) + 1 for n in context.beyond_target if n in current.nodes), None)
        while high - low > 1:
            middle = hint if hint is not None and low < hint < high else (low + high) // 2
            hint = None  # an overflow's start is worth one probe first: the error may well begin there
            still_failing = yield Exact(frozenset(nodes[:middle]))
            if still_failing is None:
                return  # the driver cannot say: nothing to go on
            if still_failing:
                low = middle
            else:
                high = middle
        origin = nodes[high - 1]
        options = [grown(frozenset({origin}), context, current), with_producers(origin, context, current),
                   grown(frozenset(nodes[high - 1:]), context, current)]
        batch = list(dict.fromkeys(current.keeping(o) for o in options if len(o) < len(current)))
        if batch:
            yield batch
