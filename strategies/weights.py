"""Smaller and simpler weights, where the failure survives (each candidate is compared against a reference
run of itself). Smaller first: a node whose output no other kept node reads (Conv or ConvTranspose with
one group, Gemm, MatMul by a 2-D weight) keeps half its output channels, then half of those, with its
weight and bias cut to match. Then simpler: each initializer the kept nodes read is filled with zeros,
else with its mean. A repro that does not depend on the trained values, nor on 256 channels where 2 fail
the same way, tells the vendor so and is a smaller attachment; constants keep their values."""

from __future__ import annotations

import numpy as np

from reducer.candidate import Candidate, FewerChannels, WeightFill, channel_slices, output_channels
from strategies.base import Proposals, SearchContext

MIN_ELEMENTS = 2  # scalars and shape-like tensors say little and often must stay exact


class SimplerWeights:
    name = "weights"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
        current = yield from _fewer_channels(current, context)
        model = context.model
        done = {e.name for e in current.edits if isinstance(e, WeightFill)}
        read = dict.fromkeys(name for i in current.ordered() for name in model.node_reads[i])
        for name in read:
            if name not in model.initializers or name in done:
                continue
            array = model.initializer_array(name)
            if array.dtype.kind != "f" or array.size < MIN_ELEMENTS:
                continue
            mean = float(np.mean(array, dtype=np.float64))
            fills = [WeightFill(name, 0.0)] + ([WeightFill(name, mean)] if np.isfinite(mean) and mean != 0 else [])
            batch = [current.with_edit(fill) for fill in fills]
            winner = yield batch
            if winner is not None:
                current = batch[winner]


def _fewer_channels(current: Candidate, context: SearchContext):
    """Halve each sink node's output channels for as long as the failure survives; returns the candidate."""
    model = context.model
    for index in current.ordered():
        read_elsewhere = {name for i in current.nodes if i != index for name in model.node_reads[i]}
        if read_elsewhere & set(model.node_writes[index]):
            continue  # another kept node reads its output: its shape must stay
        node = model.nodes[index]
        keep = output_channels(node, model.initializer_shapes)
        if keep is None or read_elsewhere & set(channel_slices(node, model.initializer_shapes, keep)):
            continue  # nothing to cut, or a weight another kept node reads too
        for edit in current.edits:
            if isinstance(edit, FewerChannels) and edit.node == index:
                keep = edit.keep
        while keep > 1:
            edits = tuple(e for e in current.edits if not (isinstance(e, FewerChannels) and e.node == index))
            trial = Candidate(current.nodes, edits).with_edit(FewerChannels(index, keep // 2))
            if (yield [trial]) is None:
                break
            current, keep = trial, keep // 2
    return current
