"""Simpler weights: each initializer the kept nodes read is filled with zeros, else with its mean, where
the failure survives (the candidate is compared against a reference run of itself). A repro that does
not depend on the exact trained values tells the vendor so; constants keep their values."""

from __future__ import annotations

import numpy as np

from reducer.candidate import Candidate, WeightFill
from strategies.base import Proposals, SearchContext

MIN_ELEMENTS = 2  # scalars and shape-like tensors say little and often must stay exact


class SimplerWeights:
    name = "weights"

    def search(self, current: Candidate, context: SearchContext) -> Proposals:
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
