"""Smaller inputs: the batch cut to 1, then each of the last two axes (spatial, sequence) halved, in
every fed tensor that has that axis at that size (graph inputs and cut tensors alike), for as long as the
failure survives. A repro that fails on a 1x8x6x10 tensor is easier to read, to attach and to run than
one on 1x96x240x320; the candidate is judged against a reference run of its own shrunk inputs."""

from __future__ import annotations

from reducer.candidate import Candidate, ShrinkAxis
from strategies.base import Proposals, SearchContext

AXES = (0, -1, -2)  # batch first (to 1), then the last two axes (halved)
MIN_SIZE = 2  # an axis this short is left alone


class SmallerInputs:
    name = "shapes"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        tried: set[ShrinkAxis] = set()
        while True:
            shapes = context.fed_shapes(current)
            proposals = []
            for axis in AXES:
                sizes = sorted({s[axis] for s in shapes.values() if len(s) >= 2 and s[axis] >= MIN_SIZE},
                               reverse=True)
                for size in sizes:
                    edit = ShrinkAxis(axis, size, 1 if axis == 0 else size // 2)
                    if edit not in tried:
                        proposals.append(edit)
            if not proposals:
                return
            tried.update(proposals)
            winner = yield [current.with_edit(edit) for edit in proposals]
            if winner is None:
                return
            current = current.with_edit(proposals[winner])
