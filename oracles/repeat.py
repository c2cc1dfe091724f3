"""Flaky oracles: engine builds pick different tactics from one build to the next, so one run of a
candidate may fail and the next pass. `--repeat N --min-fails K` judges each candidate up to N times and
calls it failing when K runs fail; it stops as soon as the outcome is settled, and it counts how often
the runs of one candidate disagreed, so the report can say how flaky the failure is."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from oracles.base import CheckJob, Oracle, RunResult, Verdict
from reducer.errors import UsageError


@dataclass
class Flakiness:
    candidates: int = 0  # candidates judged
    runs: int = 0  # oracle runs made for them
    disagreed: int = 0  # candidates whose runs disagreed

    def to_json(self) -> dict:
        return vars(self).copy()


def check_repeat(repeat: int, min_fails: int) -> None:
    if repeat < 1 or not 1 <= min_fails <= repeat:
        raise UsageError("--repeat must be at least 1 and --min-fails between 1 and --repeat")


class RepeatedOracle:
    """Any oracle, each verdict taken from up to `repeat` runs."""

    def __init__(self, inner: Oracle, repeat: int, min_fails: int):
        check_repeat(repeat, min_fails)
        self.inner = inner
        self.repeat, self.min_fails = repeat, min_fails
        self.description = f"{inner.description} --repeat {repeat} --min-fails {min_fails}"
        self.fingerprint = hashlib.sha256(f"{inner.fingerprint}:{repeat}:{min_fails}".encode()).hexdigest()
        self.names_failing_outputs = inner.names_failing_outputs
        self.flakiness = Flakiness()
        if hasattr(inner, "observe"):  # the final re-check and the bundle's run repeat too, as every check does
            self.observe = self._observe

    def _observe(self, job: CheckJob) -> tuple[RunResult, Verdict]:
        """The inner oracle's `observe`, repeated as `judge` is: the verdict of the runs, the outputs of the run
        it was taken from."""
        results: list[RunResult] = []

        def run() -> Verdict:
            result, verdict = self.inner.observe(job)
            results.append(result)
            return verdict

        verdict, shown = self._repeated(run)
        return results[shown], verdict

    def __getattr__(self, name: str):  # max_abs_value, environment, jobs, reference_worker: the inner oracle's
        return getattr(self.inner, name)

    def judge(self, job: CheckJob, every_run: bool = False) -> Verdict:
        """Stops once `min_fails` runs failed or too few runs are left for that, unless `every_run`."""
        return self._repeated(lambda: self.inner.judge(job), every_run)[0]

    def _repeated(self, run: Callable[[], Verdict], every_run: bool = False) -> tuple[Verdict, int]:
        """The verdict of up to `repeat` runs, and which run it shows (its reason, its log)."""
        verdicts: list[Verdict] = []
        while len(verdicts) < self.repeat:
            verdicts.append(run())
            fails = sum(v.failing for v in verdicts)
            settled = fails >= self.min_fails or fails + self.repeat - len(verdicts) < self.min_fails
            if settled and not every_run:
                break
        failing = [v for v in verdicts if v.failing]
        self.flakiness.candidates += 1
        self.flakiness.runs += len(verdicts)
        self.flakiness.disagreed += 0 < len(failing) < len(verdicts)
        tally = f"failed {len(failing)} of {len(verdicts)} runs"
        if len(failing) >= self.min_fails:
            common = Counter((v.signature.kind, v.signature.detail) for v in failing).most_common(1)[0][0]
            chosen = next(v for v in failing if (v.signature.kind, v.signature.detail) == common)
            runs = (len(failing), len(verdicts))
            return Verdict(True, chosen.signature, f"{chosen.reason} ({tally})", chosen.log, runs, chosen.elements,
                           lasting=all(v.lasting for v in verdicts), message=chosen.message,
                           nonfinite_elements=chosen.nonfinite_elements), _index(verdicts, chosen)
        shown = failing[0] if failing else verdicts[-1]
        # a passing run's count (0 where its check counts): a proof reads a verdict without one as a run not judged
        passed = next((v.elements for v in verdicts if not v.failing), None)
        return Verdict(False, None, f"{tally}, fewer than --min-fails {self.min_fails}"
                       + (f"; a failing run said: {shown.reason}" if failing else ""), shown.log,
                       (len(failing), len(verdicts)), passed,
                       lasting=all(v.lasting for v in verdicts)), _index(verdicts, shown)

    def close(self) -> None:
        self.inner.close()


def _index(verdicts: list[Verdict], verdict: Verdict) -> int:
    return next(i for i, v in enumerate(verdicts) if v is verdict)
