"""Inside the Ifs that must stay (a failure in how the If itself is built): the nodes of each branch are
removed in chunks, halving, as ddmin removes top-level nodes; what the rest read from a removed node is
given as a constant inside the branch (its reference value in the branch the reference ran, zeros in the
other, which never runs). The whole branch first: one check where none of it matters."""

from __future__ import annotations

from reducer.candidate import BodyCut, Candidate, body_of
from strategies.base import Proposals, SearchContext

BODIES = ("then_branch", "else_branch")


class ReduceBodies:
    name = "bodies"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        model = context.model
        ifs = [i for i in current.nodes if model.nodes[i].op_type == "If" and model.nodes[i].domain in ("", "ai.onnx")]
        for index in sorted(ifs, key=lambda i: -model.node_weights[i]):
            for body in BODIES:
                size = len(body_of(model.nodes[index], body).node)
                dropped = set(_dropped(current, index, body))
                alive = [k for k in range(size) if k not in dropped]
                chunk = len(alive)
                while alive and chunk >= 1:
                    groups = [alive[start:start + chunk] for start in range(0, len(alive), chunk)]
                    trials = [_with_cut(current, index, body, dropped | set(group)) for group in groups]
                    found = yield trials
                    if found is None:
                        chunk //= 2
                        continue
                    current = trials[found]
                    dropped |= set(groups[found])
                    alive = [k for k in alive if k not in dropped]
                    chunk = min(chunk, len(alive))


def _dropped(candidate: Candidate, index: int, body: str) -> tuple[int, ...]:
    return next((e.dropped for e in candidate.edits
                 if isinstance(e, BodyCut) and e.node == index and e.body == body), ())


def _with_cut(candidate: Candidate, index: int, body: str, dropped: set[int]) -> Candidate:
    others = {e for e in candidate.edits if not (isinstance(e, BodyCut) and e.node == index and e.body == body)}
    return Candidate(candidate.nodes, tuple(sorted(others | {BodyCut(index, body, tuple(sorted(dropped)))}, key=repr)))
