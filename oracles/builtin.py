"""A built-in oracle: one runner in a warm isolated worker, and one check against the reference."""

from __future__ import annotations

import hashlib
import json
import queue

from oracles import make_runner
from oracles.base import Check, CheckJob, RunResult, Verdict
from oracles.worker import Worker
from reducer.candidate import save_model


class BuiltinOracle:
    names_failing_outputs = True  # its checks say which outputs fail: layerwise probes are worth a check
    def __init__(self, runner_spec: str, check: Check, timeout: float, check_params: dict, jobs: int = 1):
        runner = make_runner(runner_spec)  # validates the spec here, before any worker starts
        self.runner_spec = runner.spec
        self.check = check
        self.timeout = timeout
        self.max_abs_value = runner.max_abs_value
        self.environment = runner.describe()
        self.description = f"{runner.spec} --fail-on {check.name}"
        identity = {"runner": self.environment, "check": check.name, **check_params}
        self.fingerprint = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        self._workers = [Worker(runner.spec) for _ in range(max(1, jobs))]
        self._idle: queue.SimpleQueue[Worker] = queue.SimpleQueue()
        for worker in self._workers:
            worker.start()  # they import their runtime while the model loads
            self._idle.put(worker)

    @property
    def reference_worker(self) -> Worker:
        """A warm worker the reference run can borrow before the search starts."""
        return self._workers[0]

    def judge(self, job: CheckJob) -> Verdict:
        return self.observe(job)[1]

    def observe(self, job: CheckJob) -> tuple[RunResult, Verdict]:
        """The run itself (outputs, log) with its verdict: what a bug-report bundle shows."""
        path = job.workdir / "candidate.onnx"
        save_model(job.model, path)
        worker = self._idle.get()  # one check per worker at a time; several workers for --jobs
        try:
            result = worker.run(path, job.feeds, self.timeout)
        finally:
            self._idle.put(worker)
        verdict = self.check.judge(result, job.reference)
        verdict.log = result.text
        return result, verdict

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
