"""Where the failure that matters comes from. Binary search of the shortest prefix of the topological
order that, computed exactly (kept in fp32, or fed from the reference: reducer/counterfactual.py), makes
the whole model stop failing, or fail in at most a tenth of the elements it did. The last node of that
prefix is the origin: computed at the target's precision with all before it exact, the failure is carried;
exact too, it is not. Under a loose fp16 tolerance nearly every node fails alone by rounding: bisection of
where *a* failure first shows stops at such a bystander near the input, this search stops at the node
whose error the outputs carry (PP-OCR det folded: the BatchNormalization whose variance fp16 cannot hold).

The origin is tried alone (grown upwards until what feeds it is faithful), then with its producers, then the
prefix it ends (proven by the search's own probes, so one check). Where
neither fails alone, the error builds up over several nodes: a second search finds the latest start of the
origin's prefix that still carries it (its length on a log scale first, then refined: exactly where short,
to within a quarter where spread), and that region is tried, then the front cut there. The region's
proof is the search's own last probe, so it costs nothing more. A region of more than SPREAD_NODES nodes
ends the default search (Settled): no stretch of the order markedly shorter carries the failure. Numeric
failures whose cause is proven only (the driver answers Exact only then); about log2(n) checks for the end,
log2(log2 n) and log2 of the region's length for the start."""

from __future__ import annotations

from collections.abc import Callable, Generator

from reducer.candidate import Candidate
from reducer.counterfactual import SPREAD_NODES
from strategies.base import Exact, Proposals, SearchContext, Settled
from strategies.localize import grown, with_producers

SLACK = 4  # a spread region is found to within 1/SLACK of its length


class FailureOrigin:
    name = "origin"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        if len(current) <= 1 or not context.proves_cause:
            return
        nodes = current.ordered()
        # where an overflow starts is worth two probes first, the prefix with it and without it: the error
        # may well begin there
        first = next((nodes.index(n) for n in context.beyond_target if n in current.nodes), None)
        hints = () if first is None else (first + 1, first)
        # the end: nodes[:k] exact, from none (the original failure) to all of them (the reference itself)
        found = yield from boundary(0, len(nodes), lambda k: frozenset(nodes[:k]), hints)
        if found is None:
            return  # the driver cannot say: nothing to go on
        end = found[1]
        origin = nodes[end - 1]
        # the prefix the origin ends is proven by the search's own probes (its `without` run was the last
        # carrying probe; what lies below it is mostly the whole model, whose verdict is the first check's):
        # about one check of it alone, a result kept should the budget end the start's search
        prefix = frozenset(nodes[:end])
        options = [grown(frozenset({origin}), context, current), with_producers(origin, context, current), prefix]
        batch = self._batch(current, options)
        if batch:
            winner = yield batch
            if winner is not None and batch[winner].nodes != prefix:
                return
            if winner is not None:
                current = batch[winner]
        # the start: nodes[end - length:end] exact, from the origin alone (its candidate did not pass: taken not
        # to carry it) to the whole prefix (known to carry it)
        length = yield from region_length(end, lambda k: frozenset(nodes[k:end]))
        if length is None:
            return
        start = end - length
        region = grown(frozenset(nodes[start:end]), context, current)
        options = [region, grown(frozenset(nodes[start:]) & current.nodes, context, current)]
        batch = self._batch(current, options)
        winner = (yield batch) if batch else None
        found_region = current.nodes == region if winner is None else batch[winner].nodes == region
        if found_region and len(region) > SPREAD_NODES:
            # the shortest stretch of the order that carries it (to within a quarter): no prefix of it does,
            # nor a suffix a quarter shorter (the two searches showed it); only a scattered subset could, which
            # takes ddmin's many checks
            yield Settled("spread")

    @staticmethod
    def _batch(current: Candidate, options: list[frozenset[int]]) -> list[Candidate]:
        return list(dict.fromkeys(current.keeping(o) for o in options if 0 < len(o) < len(current)))


def region_length(end: int, exact_at: Callable[[int], frozenset[int]]) -> Generator[Exact, bool | None, int | None]:
    """How many nodes ending at `end` must be exact to carry the failure (`exact_at(k)`: nodes k..end exact).
    Its order of magnitude first, a binary search over powers of two (log2(log2 n) probes), then within
    that: exactly for a short region, to within a quarter of its length for a spread one (past that, more
    checks tell a vendor little). About half the probes of a plain bisection where the error is spread or
    starts close to the origin. Returns the carrying length, or None where the driver cannot say."""
    lengths = [1 << j for j in range(end.bit_length()) if 1 << j < end] + [end]
    short, long = 0, len(lengths) - 1  # lengths[short] is taken not to carry (the origin alone); the whole does
    while long - short > 1:
        middle = (short + long) // 2
        still_failing = yield Exact(exact_at(end - lengths[middle]))
        if still_failing is None:
            return None
        short, long = (middle, long) if still_failing else (short, middle)
    short, long = lengths[short], lengths[long]
    while long - short > (long // SLACK if long > SPREAD_NODES else 1):
        middle = (short + long) // 2
        still_failing = yield Exact(exact_at(end - middle))
        if still_failing is None:
            return None
        short, long = (middle, long) if still_failing else (short, middle)
    return long


def boundary(failing: int, carrying: int, exact_at: Callable[[int], frozenset[int]],
             hints: tuple[int, ...] = ()) -> Generator[Exact, bool | None, tuple[int, int] | None]:
    """Binary search between an index k where the whole model, with `exact_at(k)` computed exactly, still fails
    and one where it no longer carries the failure (either may be the larger); `hints` are probed first while
    they lie between. Returns the adjacent pair (failing, carrying), or None where the driver cannot say."""
    pending = list(hints)
    while abs(carrying - failing) > 1:
        pending = [k for k in pending if min(failing, carrying) < k < max(failing, carrying)]
        middle = pending.pop(0) if pending else (failing + carrying) // 2
        still_failing = yield Exact(exact_at(middle))
        if still_failing is None:
            return None
        failing, carrying = (middle, carrying) if still_failing else (failing, middle)
    return failing, carrying
