"""A built-in oracle: one runner in warm isolated workers, and one check against the reference."""

from __future__ import annotations

import hashlib
import json
import queue
import threading

from oracles import make_runner
from oracles.base import Check, CheckJob, RunResult, Verdict
from oracles.worker import Worker
from reducer.errors import RunnerUnavailableError


def worker_environments(uses_gpu: bool, jobs: int | None) -> list[dict[str, str]]:
    """One environment per worker. GPU runners get one worker per visible GPU by default, each pinned to
    its GPU with CUDA_VISIBLE_DEVICES (more jobs than GPUs share them round-robin)."""
    if not uses_gpu:
        return [{} for _ in range(jobs or 1)]
    from oracles.gpu import visible_gpus

    gpus = [g.index for g in visible_gpus()]
    if not gpus:  # none resolved (no nvidia-smi, or devices named by UUID): leave the choice to CUDA
        return [{} for _ in range(jobs or 1)]
    return [{"CUDA_VISIBLE_DEVICES": gpus[k % len(gpus)]} for k in range(jobs or len(gpus))]


class BuiltinOracle:
    names_failing_outputs = True  # its checks say which outputs fail: layerwise probes are worth a check

    def __init__(self, runner_spec: str, check: Check, timeout: float, check_params: dict, jobs: int | None = 1,
                 env: dict[str, str] | None = None):
        runner = make_runner(runner_spec)  # validates the spec here, before any worker starts
        why_not = runner.unavailable_reason()
        if why_not:
            raise RunnerUnavailableError(f"runner {runner.spec} cannot run here: {why_not}")
        self.runner_spec = runner.spec
        self.check = check
        self.timeout = timeout
        self.max_abs_value = runner.max_abs_value
        self.computes_exactly = getattr(runner, "computes_exactly", False)  # nodes kept in fp32 on request
        self.exact_on_trust = getattr(runner, "exact_on_trust", False)  # see Reduction._show_fp32
        self._uses_gpu = getattr(runner, "uses_gpu", False)
        self.environments = worker_environments(self._uses_gpu, jobs)
        self._workers = [Worker(runner.spec, env={**placement, **(env or {})}) for placement in self.environments]
        self.jobs = len(self._workers)
        self._reference_worker: Worker | None = None  # started for the first candidate with edits
        self._reference_lock = threading.Lock()
        self._idle: queue.SimpleQueue[Worker] = queue.SimpleQueue()
        for worker in self._workers:
            worker.start()  # they import their runtime while the model loads
            self._idle.put(worker)
        self.environment = runner.describe()  # after the start: describing may import the runtime here too
        self.description = f"{runner.spec} --fail-on {check.name}"
        identity = {"runner": self.environment, "check": check.name, **check_params}
        self.fingerprint = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    @property
    def reference_worker(self) -> Worker | None:
        """A warm worker the reference run (ONNX Runtime on the CPU) can borrow before the search starts."""
        return None if self._uses_gpu else self._workers[0]

    def judge(self, job: CheckJob) -> Verdict:
        return self.observe(job)[1]

    def observe(self, job: CheckJob) -> tuple[RunResult, Verdict]:
        """The run itself (outputs, log) with its verdict: what a bug-report bundle shows."""
        from reducer.candidate import save_model  # imported here: the CLI starts workers before the reducer loads

        path = job.workdir / "candidate.onnx"
        # large weights are not copied for a check: the runner reads them from the original model's folder
        weights = save_model(job.model, path, weights_in_place=True, external_data=job.external_data,
                             checked=job.checked)
        extra = {"external_dir": str(weights)} if weights is not None else {}
        worker = self._idle.get()  # one check per worker at a time; several workers for --jobs
        try:
            result = worker.run(path, job.feeds, self.timeout, **extra)
        finally:
            self._idle.put(worker)
        if result.status == "unavailable":
            raise RunnerUnavailableError(f"runner {self.runner_spec} cannot run here: {result.error}")
        reference = job.reference if job.reference is not None else self._reference(path, job, extra)
        if reference is None:
            return result, Verdict(False, None, "the reference run of this candidate fails", lasting=False)
        verdict = self.check.judge(result, reference)
        verdict.log = result.text
        return result, verdict

    def _reference(self, path, job: CheckJob, extra: dict) -> dict | None:
        """The reference outputs of a candidate whose edits make the captured values stale."""
        from reducer.activations import REFERENCE_RUNNER

        with self._reference_lock:  # one reference worker, shared by the --jobs threads
            if self._reference_worker is None:
                self._reference_worker = Worker(REFERENCE_RUNNER)
                self._reference_worker.start()
            result = self._reference_worker.run(path, job.feeds, self.timeout, **extra)
        return result.outputs if result.status == "ok" else None

    def close(self) -> None:
        for worker in [*self._workers, *([self._reference_worker] if self._reference_worker else [])]:
            worker.close()

