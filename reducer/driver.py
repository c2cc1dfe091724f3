"""The search driver: asks strategies for candidates, judges them (cache, faithfulness, oracle), keeps the
best on disk at every improvement, and stops when no strategy makes progress."""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oracles.base import CheckJob, Oracle, Verdict
from reducer.activations import ActivationStore
from reducer.cache import VerdictCache
from reducer.candidate import Candidate, materialize, save_model
from reducer.model import Model
from strategies.base import Probe, SearchContext

MINIMAL = "minimal.onnx"


@dataclass
class StrategyStats:
    checks: int = 0
    cache_hits: int = 0
    accepted: int = 0
    nodes_removed: int = 0
    seconds: float = 0.0


@dataclass
class Counters:
    checks: int = 0
    cache_hits: int = 0
    unfaithful: int = 0
    unrunnable: int = 0
    per_strategy: dict[str, StrategyStats] = field(default_factory=dict)


@dataclass
class _Pending:
    """A check prepared in the driver's thread, run by the oracle (maybe in another), recorded back."""

    key: str
    job: CheckJob
    built: object
    verdict: Verdict | None = None


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
        elif max_abs is not None and record.max_abs > max_abs:
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
    ):
        self.model = model
        self.store = store
        self.oracle = oracle
        self.out_dir = out_dir
        self.strategies = strategies
        self.faithful = faithful
        self.jobs = max(1, jobs)
        self._reported_unfaithful: set[str] = set()
        self.started = time.perf_counter() if started is None else started
        self.progress = progress or Progress()
        self.counters = Counters()
        self.cache = VerdictCache(out_dir / "cache.jsonl", f"{store.key}:{oracle.fingerprint}")
        self.work_dir = out_dir / "work"
        self.history_path = out_dir / "history.jsonl"
        self.original: Verdict | None = None
        self.best: Candidate = Candidate(frozenset(range(len(model))))
        self.best_verdict: Verdict | None = None
        self._strategy = "initial"

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
            self.cache.put(job.key, verdict)
            job.verdict = verdict
        return [item.verdict if isinstance(item, _Pending) else item for item in pending]

    def _prepare(self, candidate: Candidate, use_cache: bool, mark_all: bool):
        """A cached verdict, None (not checkable), or the check to run (counted here, in order)."""
        if not candidate.nodes:
            return None
        stats = self.counters.per_strategy.setdefault(self._strategy, StrategyStats())
        key = ("layerwise:" if mark_all else "") + candidate.key()
        cached = self.cache.get(key) if use_cache else None
        if cached is not None:
            self.counters.cache_hits += 1
            stats.cache_hits += 1
            return cached
        built = materialize(self.model, candidate, self.store, mark_all=mark_all)
        if built.unrunnable:
            self.counters.unrunnable += 1
            return None
        if self.faithful:
            reasons = unfaithful_reasons(self.model, self.store, built.fed, self.oracle.max_abs_value)
            if reasons:
                self.counters.unfaithful += 1
                tensor, reason = next(iter(reasons.items()))
                if tensor not in self._reported_unfaithful:  # once per tensor; the count is in the report
                    self._reported_unfaithful.add(tensor)
                    self.progress.message(f"rejected without a check: {reason} (the target cannot hold it)")
                return None
        self.counters.checks += 1
        stats.checks += 1
        workdir = self.work_dir / f"check-{self.counters.checks:06d}"
        job = CheckJob(
            model=built.proto,
            feeds={name: self.store.path(name) for name in built.fed},
            reference={
                name: self.store.load(built.reference_name(name))
                for name in built.outputs
                if built.reference_name(name) in self.store
            },
            workdir=workdir,
        )
        return _Pending(key, job, built)

    def _run_check(self, pending: _Pending) -> Verdict:
        """The oracle on one prepared candidate; thread-safe, so several can run at once."""
        pending.job.workdir.mkdir(parents=True, exist_ok=True)
        try:
            verdict = self.oracle.judge(pending.job)
        finally:
            shutil.rmtree(pending.job.workdir, ignore_errors=True)
        built = pending.built
        if built.observed and verdict.signature:  # name the tensors, not the Identity outputs showing them
            signature = verdict.signature
            verdict.signature = type(signature)(signature.kind, signature.detail,
                                                tuple(built.reference_name(o) for o in signature.outputs))
        return verdict

    def unfaithful_inputs(self, candidate: Candidate) -> list[str]:
        if not self.faithful:
            return []
        built = materialize(self.model, candidate, self.store)
        return list(unfaithful_reasons(self.model, self.store, built.fed, self.oracle.max_abs_value))

    def interesting(self, verdict: Verdict | None) -> bool:
        return bool(verdict and verdict.failing and verdict.signature.same_failure(self.original.signature))

    # -- search ----------------------------------------------------------------------------------
    def start(self) -> Verdict:
        """Judge the whole model once; the reduction keeps this failure's signature."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.history_path.unlink(missing_ok=True)  # this run's steps only
        self.original = self.judge(self.best) or Verdict(False, None, "the full model could not be checked")
        self.best_verdict = self.original
        return self.original

    def search(self) -> None:
        active = list(self.strategies)
        while True:
            progressed = []
            for strategy in active:
                before = len(self.best)
                self._run_strategy(strategy)
                if len(self.best) < before:
                    progressed.append(strategy)
            if not progressed:
                return
            # A strategy that found nothing is not asked again; the last one (linear sweep by default)
            # always closes the round, so the result is checked for 1-minimality.
            active = [s for s in self.strategies if s in progressed or s is self.strategies[-1]]

    def _run_strategy(self, strategy) -> None:
        self._strategy = strategy.name
        stats = self.counters.per_strategy.setdefault(strategy.name, StrategyStats())
        started = time.perf_counter()
        context = SearchContext(self.model, self.best_verdict.signature.outputs, self.unfaithful_inputs)
        proposals = strategy.search(self.best, context)
        try:
            batch = next(proposals)
            while True:
                if isinstance(batch, Probe):  # only worth a check where the oracle names failing outputs
                    layerwise = self.oracle.names_failing_outputs
                    batch = proposals.send(self.judge(batch.candidate, mark_all=True) if layerwise else None)
                    continue
                winner, verdict = self._first_interesting(batch, strategy.name)
                if winner is not None:
                    candidate = batch[winner]
                    stats.accepted += 1
                    stats.nodes_removed += len(self.best) - len(candidate)
                    self._accept(candidate, verdict, strategy.name)
                    context.failing_outputs = verdict.signature.outputs
                batch = proposals.send(winner)
        except StopIteration:
            pass
        finally:
            stats.seconds += time.perf_counter() - started

    def _first_interesting(self, batch: list[Candidate], strategy: str) -> tuple[int | None, Verdict | None]:
        """The first candidate, in the batch's order, that fails the same way. With several jobs, a window
        of candidates is checked at once; the answer is the one checking them in order would give."""
        for start in range(0, len(batch), self.jobs):
            window = batch[start : start + self.jobs]
            verdicts = self.judge_all(window)
            self.progress.update(len(self.best), self.counters, strategy)
            for offset, verdict in enumerate(verdicts):
                if self.interesting(verdict):
                    return start + offset, verdict
        return None, None

    def _accept(self, candidate: Candidate, verdict: Verdict, strategy: str) -> None:
        self.best, self.best_verdict = candidate, verdict
        self.write_best()
        step = {
            "strategy": strategy,
            "nodes": len(candidate),
            "checks": self.counters.checks,
            "cache_hits": self.counters.cache_hits,
            "seconds": round(time.perf_counter() - self.started, 3),
            "failing_outputs": list(verdict.signature.outputs),
        }
        with open(self.history_path, "a") as history:
            history.write(json.dumps(step) + "\n")

    def write_best(self) -> Path:
        built = materialize(self.model, self.best, self.store)
        path = self.out_dir / MINIMAL
        save_model(built.proto, path)
        return path

    def write_best_inputs(self) -> Path:
        built = materialize(self.model, self.best, self.store)
        path = self.out_dir / "minimal_inputs.npz"
        tmp = self.out_dir / "minimal_inputs.tmp.npz"
        np.savez(tmp, **{name: np.asarray(self.store.load(name)) for name in built.fed})
        os.replace(tmp, path)
        return path

    def reverify(self) -> Verdict | None:
        """Check the final model once more, not trusting the search's verdict: a reduced model must
        still fail. The re-check is cached under its own key, so an identical re-run checks nothing."""
        self._strategy = "reverify"
        key = "reverify:" + self.best.key()
        cached = self.cache.get(key)
        if cached is not None:
            self.counters.cache_hits += 1
            return cached
        verdict = self.judge(self.best, use_cache=False)
        if verdict is not None:
            self.cache.put(key, verdict)
        return verdict

    def close(self) -> None:
        self.cache.close()
        self.oracle.close()
        shutil.rmtree(self.work_dir, ignore_errors=True)
