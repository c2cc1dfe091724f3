"""Control flow taken apart: each kept If is replaced by the branch the reference took, and each Loop whose
iteration count the reference gives by its body unrolled (their nodes become ordinary nodes, which every other
strategy may then drop; what they read from outside is fed from the reference as any cut tensor); each Loop
still kept is cut to one iteration. For the inputs fed, an If (a Loop) and its inlined nodes compute the same
values, so all of them at once is tried first: one check where the failure does not lie in how the control
flow itself is run. Then one at a time, the biggest first: one whose inlining keeps the failure makes
everything after it cheaper. A Loop that one iteration does not keep failing is cut to the fewest that do, by
bisection up to the iterations the reference ran. Where the failure is a drift whose cause is proven, the trip counts
are left to --minimal."""

from __future__ import annotations

from reducer.candidate import Candidate, LoopTrips
from strategies.base import Proposals, SearchContext


class InlineControlFlow:
    name = "branches"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        model = context.model
        flat = _all_inlined(current.nodes, model.inlined)
        if flat != current.nodes:
            trial = current.keeping(flat)
            if (yield [trial]) is not None:
                current = trial
        tried: set[int] = set()
        while True:
            flows = [i for i in current.nodes if i in model.inlined and i not in tried]
            if not flows:
                break
            index = max(flows, key=lambda i: (model.node_weights[i], -i))
            tried.add(index)
            trial = current.keeping((current.nodes - {index}) | set(model.inlined[index]))
            if (yield [trial]) is not None:
                current = trial
        if context.proves_cause and context.checks_left() is not None:
            # a drift's Loops keep their trip counts in the default search: fewer iterations leave the same nodes,
            # and the bisection costs log2 of each Loop's iterations before the search for the cause has begun
            # (credsweeper's three LSTM Loops: 21 checks, for a repro that holds none of them); --minimal cuts them
            return
        done = {e.node for e in current.edits if isinstance(e, LoopTrips)}
        loops = [i for i in current.nodes if model.nodes[i].op_type == "Loop"
                 and model.nodes[i].domain in ("", "ai.onnx") and i not in done]
        if len(loops) > 1:  # every Loop cut at once first, as the Ifs
            trial = current
            for index in loops:
                trial = trial.with_edit(LoopTrips(index, 1))
            if (yield [trial]) is not None:
                current, done = trial, done | set(loops)
        for index in sorted(current.nodes, key=lambda i: -model.node_weights[i]):
            node = model.nodes[index]
            if node.op_type != "Loop" or node.domain not in ("", "ai.onnx") or index in done:
                continue
            trial = current.with_edit(LoopTrips(index, 1))
            if (yield [trial]) is not None:
                current = trial
                continue
            # the failure needs more iterations (a value that grows each one): the fewest that keep it, by
            # bisection between 1 (does not) and the most the reference ran, once that is seen to keep it (a
            # failure that any constant trip count loses, as a parser's on a Loop without one, costs one check)
            low, high, best = 1, model.iterations.get(index, 0), None
            if high > 2:
                trial = current.with_edit(LoopTrips(index, high))
                if (yield [trial]) is None:
                    continue
                best = trial
            while high - low > 1:
                middle = (low + high) // 2
                trial = current.with_edit(LoopTrips(index, middle))
                if (yield [trial]) is not None:
                    high, best = middle, trial
                else:
                    low = middle
            if best is not None:
                current = best


def _all_inlined(nodes: frozenset[int], inlined: dict[int, list[int]]) -> frozenset[int]:
    """`nodes` with every If replaced by its taken branch, and the Ifs inside that branch by theirs."""
    flat = set(nodes)
    todo = [i for i in flat if i in inlined]
    while todo:
        index = todo.pop()
        flat.discard(index)
        for inner in inlined[index]:
            flat.add(inner)
            if inner in inlined:
                todo.append(inner)
    return frozenset(flat)
