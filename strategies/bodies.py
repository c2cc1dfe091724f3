"""Inside the control flow that must stay (an If whose failure lies in how the If itself is built, a Loop or
a Scan): the nodes of each body are removed in chunks, halving, as ddmin removes top-level nodes; what the
rest read from a removed node is given as a constant inside the body (its reference value in the If branch
the reference ran; zeros of the inferred type and shape in a branch that never runs and in a Loop/Scan
body, whose values change each iteration). The whole body first: one check where none of it matters. Then
the control-flow nodes kept inside a body, the same way, at every depth. A drift whose cause is proven keeps its
Loop and Scan bodies whole in the default search (zeros each iteration are not the computation that drifted)."""

from __future__ import annotations

from reducer.candidate import BodyCut, Candidate, body_names, graph_at
from strategies.base import Proposals, SearchContext

Within = tuple[tuple[int, str], ...]


class ReduceBodies:
    name = "bodies"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        model = context.model
        flows = [i for i in current.nodes if body_names(model.nodes[i])]
        if context.proves_cause and context.checks_left() is not None:
            # a drift's Loop and Scan bodies stay whole in the default search: a node cut there is given zeros each
            # iteration, another computation than the one whose drift the proof is about, and the cuts cost about
            # two checks a body node (chars2vec's two LSTM Loops: 14 checks for one node); --minimal cuts them
            flows = [i for i in flows if model.nodes[i].op_type == "If"]
        for index in sorted(flows, key=lambda i: -model.node_weights[i]):
            pending: list[tuple[str, Within]] = [(body, ()) for body in body_names(model.nodes[index])]
            while pending:  # outermost bodies first: a node cut there takes its own bodies with it
                body, within = pending.pop(0)
                graph = graph_at(model.nodes[index], body, within)
                dropped = set(_dropped(current, index, body, within))
                alive = [k for k in range(len(graph.node)) if k not in dropped]
                chunk = len(alive)
                while alive and chunk >= 1:
                    groups = [alive[start:start + chunk] for start in range(0, len(alive), chunk)]
                    trials = [_with_cut(current, index, body, within, dropped | set(group)) for group in groups]
                    found = yield trials
                    if found is None:
                        chunk //= 2
                        continue
                    current = trials[found]
                    dropped |= set(groups[found])
                    alive = [k for k in alive if k not in dropped]
                    chunk = min(chunk, len(alive))
                for k in alive:  # control flow kept inside this body: its own bodies next
                    pending.extend((body, (*within, (k, inner))) for inner in body_names(graph.node[k]))


def _dropped(candidate: Candidate, index: int, body: str, within: Within) -> tuple[int, ...]:
    return next((e.dropped for e in candidate.edits if isinstance(e, BodyCut)
                 and (e.node, e.body, e.within) == (index, body, within)), ())


def _with_cut(candidate: Candidate, index: int, body: str, within: Within, dropped: set[int]) -> Candidate:
    others = {e for e in candidate.edits
              if not (isinstance(e, BodyCut) and (e.node, e.body, e.within) == (index, body, within))}
    cut = BodyCut(index, body, tuple(sorted(dropped)), within)
    return Candidate(candidate.nodes, tuple(sorted(others | {cut}, key=repr)))
