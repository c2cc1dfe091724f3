"""Control flow taken apart: each kept If is replaced by the branch the reference took (its nodes become
ordinary nodes, which every other strategy may then drop; what they read from outside is fed from the
reference as any cut tensor), and each kept Loop is cut to one iteration. The biggest first: an If whose
inlining keeps the failure makes everything after it cheaper."""

from __future__ import annotations

from reducer.candidate import Candidate, LoopTrips
from strategies.base import Proposals, SearchContext


class InlineControlFlow:
    name = "branches"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        model = context.model
        tried: set[int] = set()
        while True:
            ifs = [i for i in current.nodes if i in model.inlined and i not in tried]
            if not ifs:
                break
            index = max(ifs, key=lambda i: (model.node_weights[i], -i))
            tried.add(index)
            trial = current.keeping((current.nodes - {index}) | set(model.inlined[index]))
            if (yield [trial]) is not None:
                current = trial
        done = {e.node for e in current.edits if isinstance(e, LoopTrips)}
        for index in sorted(current.nodes, key=lambda i: -model.node_weights[i]):
            node = model.nodes[index]
            if node.op_type != "Loop" or node.domain not in ("", "ai.onnx") or index in done:
                continue
            trial = current.with_edit(LoopTrips(index, 1))
            if (yield [trial]) is not None:
                current = trial
