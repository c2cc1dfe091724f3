"""The one interface every strategy implements.

A strategy is a generator: it yields a batch of candidates, in order of preference, and is sent back
the index of the first one that still fails the same way (which becomes the current candidate), or
None when none did. Batches let the driver check candidates in any order or in parallel while the
outcome stays that of checking them one by one.

A strategy may also yield a Probe: the driver runs the candidate once with every tensor it computes
marked as an output (a layerwise run) and sends back the Verdict, whose signature names every failing
tensor. Marking outputs can change what an engine does, so a probe only guides; it never decides.

It may yield OverflowRefuted where a command's overflow hint, shown to carry the failure, does not explain it
(no stretch of nodes from where the values leave fp16's range fails alone): the driver proves causes from then on.

It may yield Settled once its result is as small as the default (economy) search should hope for: the driver
then ends the default search there, and `--minimal` goes on.

And it may yield an Exact: the driver runs the *whole model* with those nodes computed exactly (kept in
fp32, or their outputs fed from the reference: see reducer/counterfactual.py) and sends back whether the
whole model still fails (True), or no longer carries the failure (False). That is how a strategy asks
where the failure that matters comes from, not merely where some failure shows.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Protocol

from oracles.base import Verdict
from reducer.candidate import Candidate
from reducer.model import Model


@dataclass(frozen=True)
class Probe:
    candidate: Candidate
    # a command that named the whole model's failing outputs (`failing_outputs=[...]`) answers it too; not asked of
    # it by default, as a probe whose candidates are each a check and a proof costs more than it saves
    by_command: bool = False


@dataclass(frozen=True)
class Exact:
    nodes: frozenset[int]


@dataclass(frozen=True)
class Settled:
    reason: str  # why further search is --minimal's work: "spread"


@dataclass(frozen=True)
class OverflowRefuted:
    """The values beyond fp16's range carry the failure, but nothing that starts where they do fails alone, as an
    overflow would: the failure is something else those nodes take part in (an fp32 target's fused kernels)."""


Proposals = Generator["list[Candidate] | Probe | Exact | Settled | OverflowRefuted", "int | Verdict | bool | None",
                      None]


@dataclass
class SearchContext:
    model: Model
    failing_outputs: tuple[str, ...]  # outputs that failed in the current candidate's verdict
    # cut tensors whose captured values the target cannot hold (the driver's faithfulness rule)
    unfaithful_inputs: Callable[[Candidate], list[str]] = lambda candidate: []
    # the shapes of the tensors a candidate is fed (graph inputs and cut tensors), after its shape edits
    fed_shapes: Callable[[Candidate], dict[str, tuple[int, ...]]] = lambda candidate: {}
    # checks the driver runs at once (--jobs): a strategy may offer that many alternatives per step
    parallel: int = 1
    # nodes whose reference output holds a finite value the target cannot (beyond fp16's 65504), in
    # topological order: where an overflow starts. Empty where the target's range is not known.
    beyond_target: tuple[int, ...] = ()
    # whether the driver would check a candidate at all (it can be built, and it is faithful)
    checkable: Callable[[Candidate], bool] = lambda candidate: True
    # whether the failure is numeric and its cause is to be proven (Exact is answered); False for errors
    proves_cause: bool = False
    # nodes shown to carry an overflow: with the values beyond the target's range (these nodes compute or
    # read them) fed from the reference, the whole model stops failing. Empty where not shown.
    overflow_region: frozenset[int] = frozenset()
    # checks the default search has left before its budget ends it (None: no budget: --minimal, --max-checks
    # aside): a strategy may secure a proven result first where its longer search would not fit
    checks_left: Callable[[], int | None] = lambda: None
    # Exact is answered with the nodes fed from the reference (else kept in fp32 by the target's converter, whose
    # casts around a node that only moves values can change what its readers get: ddddocr's LSTM)
    exact_by_reference: bool = True
    # nodes the whole model's failure message names (an error names the node it failed on; see Model.named_in);
    # empty for a numeric failure, whose message names tensors
    named: tuple[int, ...] = ()
    # a proven repro of at most this many nodes ends the default search (0: none does; --minimal goes on)
    final_size: int = 0
    # for a NaN/Inf on an fp16 target, in topological order: nodes that turn a 0 into NaN/Inf (a Log, a division)
    # whose reference input comes near 0, where fp16 rounding upstream can make it 0; where the failure may show
    near_zero: tuple[int, ...] = ()
    # the whole model's check counted no NaN/Inf where the reference is finite (Verdict.finite_counted)
    finite_failure: bool = False
    # the whole model's failing output elements, where its check counts them (None: not counted)
    failing_elements: int | None = None

    def named_in(self, current: Candidate) -> list[int]:
        """The named nodes `current` keeps."""
        return [index for index in self.named if index in current.nodes]

    def failing_producers(self, current: Candidate) -> list[int]:
        producers = {self.model.producer_in(name, current.nodes) for name in self.failing_outputs}
        return sorted(p for p in producers if p is not None)


class Strategy(Protocol):
    """A turn cut short by the driver's budget resumes on the strategy's next turn: what it proposes
    again costs nothing (verdicts already used are not counted again)."""

    name: str

    def search(self, current: Candidate, context: SearchContext) -> Proposals: ...
