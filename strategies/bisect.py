"""Boundary bisection (Polygraphy's `--mode=bisect` idea), back first: binary-search the shortest
failing prefix of the topological order (`prefix`), then how many nodes can be cut from the front
(`suffix`). Few checks. The default order runs the two ends as separate strategies: the front cut's
checks are often needless once the prefix's last node is tried alone."""

from __future__ import annotations

from collections.abc import Callable, Generator

import networkx as nx

from reducer.candidate import Candidate
from reducer.counterfactual import feeding
from reducer.model import RESHAPES
from strategies.base import SearchContext
from strategies.localize import grown, with_producers

# An error's message names the node it failed on, yet the shortest failing prefix can end a little past it: where
# the named node's output is a graph output, the fp16 converter (and an engine's fusions) treat it otherwise
# (the ViT's Resize: the prefix needs the Cast and Transpose after it). Three probes past it, then bisection.
NAMED_STEPS = (1, 2, 4)

Cut = Generator["list[Candidate]", "int | None", Candidate]  # proposals; returns the candidate it ends on


def cut_end(current: Candidate, from_front: bool, ways: int = 1, hints: tuple[int, ...] = (),
            narrow: Callable[[Candidate, frozenset[int]], frozenset[int] | None] | None = None,
            tidy: Callable[[int, frozenset[int]], int] | None = None) -> Cut:
    """Search of how many nodes can go from one end of the topological order: binary with one check at
    a time; with `ways` checks at once (--jobs), each step probes `ways` cut points, most removed first,
    splitting what is left into ways + 1 parts (fewer steps, so less wall time, for a few more checks).
    `hints`: cut points to probe first, in order, while the search has not already settled them.
    `narrow(failing, passing)`: a smaller node set worth one check once a probe fails, given the largest probe known
    to pass (where the failure shows); taken, the search goes on within it: each probe keeps only its nodes, a
    probe that would keep all of them is known to fail and one that would keep none is known not to (neither is
    checked). `tidy(cut, inside)`: a larger cut that fails exactly where `cut` does (it removes only what shows the
    same values), probed in its place; where it reaches a cut known to pass, `cut` is known to pass too."""
    nodes = current.ordered()
    inside = current.nodes  # what a probe may keep: narrowed, the accepted smaller set
    removable, too_many = 0, len(nodes)  # removing `removable` is known to fail; all is empty
    hints = list(hints)
    while too_many - removable > 1:
        gap = too_many - removable
        hints = [cut for cut in hints if removable < cut < too_many]
        if hints:
            cuts, hints = sorted(hints[:ways], reverse=True), hints[ways:]
        else:
            cuts = sorted({removable + gap * k // (ways + 1) for k in range(1, ways + 1)} - {removable}, reverse=True)
        if tidy is not None:
            tidied = {cut: tidy(cut, inside) for cut in cuts}
            passing = [cut for cut, t in tidied.items() if t >= too_many]
            if passing:  # it shows what a cut known to pass shows: it passes, unchecked
                too_many = min(passing)
                continue
            cuts = sorted(set(tidied.values()), reverse=True)
        kept = [inside & frozenset(nodes[cut:] if from_front else nodes[: len(nodes) - cut]) for cut in cuts]
        known = [(cut, bool(k)) for cut, k in zip(cuts, kept, strict=True) if not k or k == current.nodes]
        if known:  # settled without a check: narrowed, the cut removes nothing of it, or all of it
            for cut, fails in known:
                removable, too_many = (max(removable, cut), too_many) if fails else (removable, min(too_many, cut))
            continue
        probes = [current.keeping(k) for k in kept]
        winner = yield probes
        if winner is None:
            too_many = cuts[-1]
            continue
        removable, current = cuts[winner], probes[winner]
        too_many = cuts[winner - 1] if winner > 0 else too_many
        if narrow is None or too_many - removable <= 1:
            continue
        passing = inside & frozenset(nodes[too_many:] if from_front else nodes[: len(nodes) - too_many])
        smaller = narrow(current, passing)
        if smaller and len(smaller) < len(current):
            narrowed = current.keeping(smaller)
            if (yield [narrowed]) is not None:
                current, inside = narrowed, smaller
    return current


def shortest_failing_prefix(current: Candidate, context: SearchContext) -> Cut:
    """The shortest failing prefix ends where the failure first shows: its last node's output is a graph
    output there. That is the localisation an oracle which cannot name failing outputs (a --check
    command) can still give, for about log2(n) checks: the last node alone (grown upwards until what
    feeds it is faithful), then with its direct producers, then its ancestor cone, are tried next.
    Where the reference holds a value the target cannot (an fp16 overflow), the prefix ending at the first
    node that computes one is probed first, then that prefix without it: an overflow shows where it starts (with no
    overflow, for a NaN/Inf, the prefix ending at the first Log or division whose input comes near 0). So is
    the prefix ending at the latest node an error's message names (an engine names the node it failed on), then
    that prefix without it, then past it by NAMED_STEPS; once cut, the nodes it names are tried alone first.
    A failing probe's failing tensors' cone is tried as soon as it fails (failing_cone), not at the end only."""
    before = len(current)
    nodes = current.ordered()
    origin = next((nodes.index(n) for n in context.beyond_target if n in current.nodes), None)
    if origin is None:  # no overflow: a NaN/Inf then shows where a Log or a division meets a value rounded to 0
        origin = next((nodes.index(n) for n in context.near_zero if n in current.nodes), None)
    hints = () if origin is None else ending_at(nodes, origin)
    named = context.named_in(current)
    if named:
        hints += ending_at(nodes, nodes.index(named[-1]), NAMED_STEPS)
    current = yield from cut_end(current, from_front=False, ways=context.parallel, hints=hints,
                                 narrow=lambda failing, passing: failing_cone(failing, passing, context),
                                 tidy=past_trailing_reshapes(nodes, context) if context.proves_cause else None)
    if len(current) < before:
        last = max(current.nodes)
        graph = context.model.dag.subgraph(current.nodes)
        options = [grown(frozenset({last}), context, current), with_producers(last, context, current),
                   frozenset(nx.ancestors(graph, last) | {last})]
        if named := context.named_in(current):  # what the message names, alone: the nodes of a tensor it names
            options.insert(0, grown(frozenset(named), context, current))
        batch = list(dict.fromkeys(current.keeping(o) for o in options if len(o) < len(current)))
        if batch:
            winner = yield batch
            if winner is not None:
                current = batch[winner]
    return current


def past_trailing_reshapes(nodes: list[int], context: SearchContext) -> Callable[[int, frozenset[int]], int]:
    """For a numeric failure: a prefix that ends on a node that only reshapes a tensor it computes and no other node of
    it reads fails exactly where the prefix without that node does, since the tensor, then read by a node left out
    only, is shown instead: the same values in another shape. The cut past such nodes, so that a failing prefix does
    not keep them (riann: its GRU's Squeeze). Not where another node of the prefix reads the tensor: the prefix
    without the reshape does not show it (captcha-whisperer's Unsqueezes of hidden states the next cell reads)."""
    model = context.model
    position = {node: k for k, node in enumerate(nodes)}

    def shows_alone(index: int, kept: int, inside: frozenset[int]) -> bool:
        """Whether the probe keeping `inside`'s nodes among the first `kept` shows the same values without this one,
        a reshape it keeps."""
        node = model.nodes[index]
        if index not in inside or node.op_type not in RESHAPES or node.domain not in ("", "ai.onnx") or not node.input:
            return False
        producer = model.producer_in(node.input[0], inside)
        return producer is not None and not any(
            reader != index and reader in inside and position.get(reader, kept) < kept
            and node.input[0] in model.node_reads[reader] for reader in model.dag.successors(producer))

    def tidy(cut: int, inside: frozenset[int]) -> int:
        kept = len(nodes) - cut
        while kept > 1 and shows_alone(nodes[kept - 1], kept, inside):
            kept -= 1
        return len(nodes) - kept

    return tidy


def ending_at(nodes: list[int], end: int, past: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Cut points (nodes removed from the back) for the prefix ending at `nodes[end]`, then that prefix without it,
    then the prefixes `past` nodes beyond it."""
    return tuple(len(nodes) - end - 1 - step for step in (0, -1, *past) if end + step < len(nodes))


def failing_cone(failing: Candidate, passing: frozenset[int], context: SearchContext) -> frozenset[int] | None:
    """What of a failing prefix computes the tensors that fail, where that drops at least a quarter of it: a prefix
    keeps every branch above its cut (a bidirectional LSTM's other direction: captcha-whisperer's 306 of 598
    nodes), the cone only what the failure reads, computed as the prefix computed it, so it fails the same way;
    only its proof is in doubt. One check, where the prefix's own last node's cone comes only at the search's end,
    which a tight budget may not reach. The tensors are the oracle's where it names them; else (a command) they
    are among the outputs the prefix leaves unread that a node of it, not of `passing` (a shorter prefix that
    passed), writes: one both leave unread is computed alike in both, and passed."""
    model = context.model
    sources = set(context.failing_producers(failing))
    if not sources and passing:  # `passing` empty, they are every output the prefix shows: its whole live part
        cut = model.cut_by(failing.numbers)
        shown = [*(name for name in model.graph_outputs if cut.writes(name)), *cut.unread]
        sources = {model.producer_in(name, failing.nodes) for name in shown} - passing - {None}
    # one walk up from all of them, within the prefix (a 50k-node prefix's subgraph view walked once per source
    # would cost seconds)
    cone = feeding(model, sources, failing.nodes)
    return cone if cone and 4 * len(cone) <= 3 * len(failing) else None


class BoundaryBisection:
    name = "bisect"

    def search(self, current: Candidate, context: SearchContext) -> Cut:
        current = yield from shortest_failing_prefix(current, context)
        return (yield from cut_end(current, from_front=True, ways=context.parallel))
