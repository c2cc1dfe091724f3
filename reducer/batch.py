"""`onnx-reduce batch`: every model of a corpus checked, the failing ones reduced, each in its own
`onnx-reduce reduce` process (a crash, a hang or a malformed model costs that model only), side by side.

RUN_DIR holds models/NAME/ (each reduction's output), records/NAME.json (a model's finished result: a re-run of
the same command skips it), logs/NAME.log, summary.json and junit.xml."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from reducer import batch_cache, output_dir
from reducer.batch_corpus import Entry, load_corpus
from reducer.errors import (
    EXIT_INTERRUPTED,
    EXIT_NOT_FAILING,
    EXIT_NOT_REPRODUCED,
    EXIT_REDUCED,
    EXIT_TERMINATED,
)

RECORD_VERSION = 1
KILL_GRACE = 10.0  # seconds a reduction has to write its report after SIGTERM before it is killed
FAILING = ("reduced", "not-reproduced", "expected-failure")
REDUCED = ("reduced", "expected-failure")
ERRORS = ("error", "timeout")
# what the command line gives every model, as `reduce` options (manifest settings override the first ones)
SETTING_FLAGS = {"inputs": "--inputs", "runner": "--runner", "fail_on": "--fail-on", "atol": "--atol", "rtol": "--rtol"}
VALUE_FLAGS = {"seed": "--seed", "input_range": "--input-range", "check_timeout": "--check-timeout",
               "repeat": "--repeat", "min_fails": "--min-fails", "faithful_max": "--faithful-max",
               "strategy": "--strategy", "max_checks": "--max-checks", "time_limit": "--time-limit", "jobs": "--jobs"}
LIST_FLAGS = {"input_shapes": "--input-shapes", "fail_regex": "--fail-regex",
              "ignore_fail_regex": "--ignore-fail-regex", "fail_code": "--fail-code",
              "ignore_fail_code": "--ignore-fail-code"}
SWITCHES = {"no_faithful": "--no-faithful", "minimal": "--minimal", "no_cause_check": "--no-cause-check"}


@dataclass
class BatchOptions:
    defaults: dict  # reduce options from the command line, by the names above; "check": a command or []
    jobs: int = 1  # models side by side
    model_timeout: float | None = None
    gpus: list[str] = field(default_factory=list)  # CUDA_VISIBLE_DEVICES values, one per model in turn
    cache: Path | None = None  # results shared from night to night (reducer/batch_cache.py)
    executor: str = "local"  # "local": threads of this process; "ray": Ray tasks (reducer/batch_ray.py)
    address: str | None = None  # the Ray cluster's; None: RAY_ADDRESS, else a fresh local Ray instance


def reduce_argv(entry: Entry, defaults: dict, out: Path) -> list[str]:
    """The `onnx-reduce reduce` command line of one model: the command line's options, the manifest's over them."""
    values = {**defaults, **entry.settings}
    argv = ["reduce", str(entry.path), "-o", str(out)]
    for key, flag in {**SETTING_FLAGS, **VALUE_FLAGS}.items():
        if values.get(key) is not None:
            argv += [flag, str(values[key])]
    for key, flag in LIST_FLAGS.items():
        for value in values.get(key) or ():
            argv += [flag, str(value)]
    argv += [flag for key, flag in SWITCHES.items() if values.get(key)]
    if values.get("check"):
        argv += ["--check", *values["check"]]
    return argv


def plan_jobs(entries: list[Entry], options: BatchOptions) -> None:
    """Batch jobs x each reduction's jobs capped at what the machine has; GPU runners get one GPU per model."""
    from reducer.options import usable_jobs

    if options.executor == "ray":
        return  # the cluster's free CPUs and GPUs decide, node by node, not this machine's
    gpu = any(model_uses_gpu(entry, options.defaults) for entry in entries)
    if gpu:
        from oracles.gpu import visible_gpus

        options.gpus = [g.index for g in visible_gpus()]
    each = int(options.defaults.get("jobs") or 1)
    capped, why = usable_jobs(options.jobs * each, gpu)
    if why:
        options.jobs = max(1, capped // each)
        print(f"onnx-reduce: note: --jobs {options.jobs} models at a time x --reduce-jobs {each}: {why}",
              file=sys.stderr)


def model_uses_gpu(entry: Entry, defaults: dict) -> bool:
    """Whether the model's reduction runs on a GPU: a GPU runner, and no --check command (whose device is its
    own business)."""
    values = {**defaults, **entry.settings}
    return not values.get("check") and uses_gpu(values.get("runner"))


def tally(outcomes) -> dict[str, int]:
    """The counts the progress lines and summary.html show: failing, reduced (or expected), errors."""
    outcomes = list(outcomes)
    return {"failing": sum(o in FAILING for o in outcomes), "reduced": sum(o in REDUCED for o in outcomes),
            "errors": sum(o in ERRORS for o in outcomes)}


@functools.cache
def uses_gpu(runner: str | None) -> bool:
    from oracles import make_runner

    try:
        return bool(getattr(make_runner(runner or "onnxruntime:cpu:fp16"), "uses_gpu", False))
    except Exception:  # a bad runner spec: its reduction says so, in its own error record
        return False


@dataclass
class ModelJob:
    """One model's reduction, as the executor hands it to whichever process runs it (a thread of the batch, or
    a Ray task on another node): plain data, every path absolute."""

    entry: Entry
    run_dir: Path
    argv: list[str]
    timeout: float | None
    cache: Path | None = None
    versions: dict | None = None  # the runtimes' versions for the cache key; None: those where it runs
    env: dict[str, str] = field(default_factory=dict)  # over the environment it runs in (a GPU slot)
    uses_gpu: bool = False


class ReductionWatch:
    """The reductions one process has running, so that a stop ends them: SIGTERM to each process group (each
    writes its report), SIGKILL after KILL_GRACE."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running: set[subprocess.Popen] = set()
        self.stopping = False

    def launch(self, argv: list[str], **popen) -> subprocess.Popen | None:
        """The reduction started, unless a stop came first (then None)."""
        with self.lock:
            if self.stopping:
                return None
            process = subprocess.Popen(argv, **popen)
            self.running.add(process)
            return process

    def finished(self, process: subprocess.Popen) -> None:
        with self.lock:
            self.running.discard(process)

    def stop_all(self) -> None:
        with self.lock:
            self.stopping = True
            running = list(self.running)
        for process in running:
            _signal_group(process, signal.SIGTERM)  # each reduction writes its report, then ends
        deadline = time.monotonic() + KILL_GRACE
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                end_group(process)


def run_model(job: ModelJob, watch: ReductionWatch, stop_requested: Callable[[], bool] | None = None) -> dict | None:
    """One model reduced in its own `onnx-reduce reduce` process (killed with its process group after the
    timeout), its log and records/NAME.json written: the work of both executors, wherever it runs. None when
    a stop came first (the model is redone by the next run). `stop_requested`, asked every half second: the
    batch is stopping (a Ray task cannot be told so through `watch`, which lives in its own process)."""
    entry = job.entry
    out = job.run_dir / "models" / entry.name
    log_path = job.run_dir / "logs" / f"{entry.name}.log"
    _own_folder(out)
    (job.run_dir / "records" / f"{entry.name}.json").unlink(missing_ok=True)
    key = None
    if job.cache:
        versions = job.versions if job.versions is not None else batch_cache.runtime_versions()
        key = batch_cache.result_key(entry.path, job.argv[:2] + job.argv[4:], versions)
    if key is not None:
        cached = _from_cache(job, key, out)
        if cached is not None:
            return cached
    env = {**os.environ, **job.env}
    started = time.monotonic()
    timed_out = False
    with open(_new_file(log_path), "w") as log:
        process = watch.launch([sys.executable, "-m", "reducer", *job.argv], cwd=out, env=env, stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                               preexec_fn=_die_with_parent)
        if process is None:
            return None
        try:
            code = _wait(process, job.timeout, stop_requested)
        except subprocess.TimeoutExpired:
            timed_out = True
            end_group(process)
            code = process.returncode
        except StopRequested:  # the reduction gets SIGTERM and writes its report, as with a local Ctrl-C
            watch.stop_all()
            return None
        except BaseException:  # interrupted from outside (a Ray worker's KeyboardInterrupt): the reduction too
            watch.stop_all()
            raise
        finally:
            watch.finished(process)
    if watch.stopping:
        return None  # interrupted: redone by the next run
    seconds = time.monotonic() - started
    record = model_record(entry, out, code, seconds, timed_out, job.timeout, log_path)
    # a reduction killed from outside (the OOM killer, a user) says nothing of the model: redone on resume
    complete = timed_out or (code >= 0 and code not in (EXIT_INTERRUPTED, EXIT_TERMINATED))
    record.update(version=RECORD_VERSION, argv=job.argv, complete=complete, host=socket.gethostname(),
                  gpu=env.get("CUDA_VISIBLE_DEVICES") if job.uses_gpu else None)
    _write_json(job.run_dir / "records" / f"{entry.name}.json", record)
    if key is not None and complete and record["outcome"] not in ERRORS:
        batch_cache.store(job.cache, key, out, record)
    return record


class StopRequested(Exception):
    """The batch is stopping: seen by a reduction's waiting thread."""


def _wait(process: subprocess.Popen, timeout: float | None, stop_requested: Callable[[], bool] | None) -> int:
    """process.wait in short steps, so that a stop (or an interrupt raised in this thread from outside) is seen
    within a step, not after the whole timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if stop_requested is not None and stop_requested():
            raise StopRequested
        step = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
        try:
            return process.wait(timeout=max(0.0, step))
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline:
                raise


def _from_cache(job: ModelJob, key: str, out: Path) -> dict | None:
    """A night's result for an unchanged model under unchanged runtimes: no check at all tonight."""
    entry = job.entry
    started = time.monotonic()
    cached = batch_cache.restore(job.cache, key, out)
    if cached is None:
        return None
    record = {**cached, "name": entry.name, "path": entry.shown, "output": f"models/{entry.name}",
              "expect": entry.expect, "known_bug": entry.bug, "cached": key, "checks": 0,
              "checks_then": cached.get("checks", 0), "seconds": round(time.monotonic() - started, 3),
              "version": RECORD_VERSION, "argv": job.argv, "complete": True}
    if cached.get("bundle"):
        record["bundle"] = f"models/{entry.name}/bundle.zip"
    _write_json(job.run_dir / "records" / f"{entry.name}.json", record)
    return record


class Batch:
    """Runs the models not finished yet, `jobs` at a time in threads of this process; Ctrl-C or SIGTERM kills
    the running ones. Subclasses run the same ModelJobs elsewhere (reducer/batch_ray.py)."""

    def __init__(self, entries: list[Entry], run_dir: Path, options: BatchOptions, progress):
        self.entries, self.run_dir, self.options, self.progress = entries, run_dir, options, progress
        self.records: dict[str, dict] = {}
        self._watch = ReductionWatch()
        self._lock = threading.Lock()
        self._slots = list(range(max(1, options.jobs)))  # which GPU a model gets: its slot's
        self._versions = batch_cache.runtime_versions() if options.cache else None

    def run(self) -> dict[str, dict]:
        for folder in ("models", "records", "logs"):
            _own_folder(self.run_dir / folder)
        todo = []
        for entry in self.entries:
            record = self._finished(entry)
            if record:
                self.records[entry.name] = record
            else:
                todo.append(entry)
        self.progress.start(len(self.entries), len(self.entries) - len(todo))
        try:
            self._execute(todo)
        except BaseException:
            # a model that finished while the batch stopped has its complete record on disk: it counts now, as
            # it will on resume (a Ray task's result can be on disk before the driver hears of it)
            for entry in todo:
                record = None if entry.name in self.records else self._finished(entry)
                if record:
                    self.records[entry.name] = record
            raise
        return self.records

    def _done(self, record: dict | None) -> None:
        if record:
            self.records[record["name"]] = record
            self.progress.done(record)

    def _execute(self, todo: list[Entry]) -> None:
        pool = ThreadPoolExecutor(max_workers=max(1, self.options.jobs), thread_name_prefix="batch")
        try:
            pending = {pool.submit(self._run_one, entry) for entry in todo}
            while pending:
                done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in done:
                    self._done(future.result())
        except BaseException:
            self._watch.stop_all()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _finished(self, entry: Entry) -> dict | None:
        """The model's record from an earlier run of the same command, when it finished."""
        try:
            record = json.loads((self.run_dir / "records" / f"{entry.name}.json").read_text())
        except (OSError, ValueError):
            return None
        same = isinstance(record, dict) and record.get("version") == RECORD_VERSION
        if same and record.get("argv") == self._argv(entry) and record.get("complete"):
            return record
        return None

    def _argv(self, entry: Entry) -> list[str]:
        return reduce_argv(entry, self.options.defaults, self.run_dir.absolute() / "models" / entry.name)

    def _job(self, entry: Entry) -> ModelJob:
        return ModelJob(entry, self.run_dir.absolute(), self._argv(entry), self.options.model_timeout,
                        self.options.cache, self._versions, uses_gpu=model_uses_gpu(entry, self.options.defaults))

    def _run_one(self, entry: Entry) -> dict | None:
        with self._lock:
            if self._watch.stopping:
                return None
            slot = self._slots.pop(0)
        try:
            job = self._job(entry)
            if self.options.gpus and job.uses_gpu:
                job.env["CUDA_VISIBLE_DEVICES"] = self.options.gpus[slot % len(self.options.gpus)]
            self.progress.begin(entry.name)
            return run_model(job, self._watch)
        finally:
            with self._lock:
                self._slots.append(slot)


def model_record(entry: Entry, out: Path, code: int, seconds: float, timed_out: bool, timeout: float | None,
                 log: Path) -> dict:
    """What became of one model, from its reduction's exit code and report.json."""
    record = base_record(entry, code, seconds)
    if timed_out:
        return {**record, "outcome": "timeout", "reason": f"no result after {timeout:g} s: killed"}
    report = _read_report(out) if code in (EXIT_REDUCED, EXIT_NOT_FAILING, EXIT_NOT_REPRODUCED) else None
    if report is None:
        return {**record, "outcome": "error", "reason": _error_line(log, code)}
    record.update(nodes_before=report.get("nodes_before"), nodes_after=report.get("nodes_after"),
                  checks=report.get("checks", 0), status=report.get("status"))
    status = report.get("status")
    if status in ("not-failing", "flaky"):
        outcome = "unexpected-pass" if entry.expect == "fail" else ("flaky" if status == "flaky" else "passing")
        return {**record, "outcome": outcome, "reason": _one_line((report.get("original") or {}).get("reason", ""))}
    if status not in ("reduced", "budget-exhausted", "not-reproduced"):
        return {**record, "outcome": "error", "reason": f"the reduction ended as {status}"}
    record["outcome"] = "not-reproduced" if status == "not-reproduced" else "reduced"
    if entry.expect == "fail":
        record["outcome"] = "expected-failure"
    record.update(_repro_signature(out, report))
    if (out / "bundle.zip").is_file():
        record["bundle"] = f"models/{entry.name}/bundle.zip"
    return record


def base_record(entry: Entry, code: int | None, seconds: float) -> dict:
    """A model's record before its reduction's report is read."""
    return {"name": entry.name, "path": entry.shown, "output": f"models/{entry.name}", "expect": entry.expect,
            "known_bug": entry.bug, "exit_code": code, "seconds": round(seconds, 3), "nodes_before": None,
            "nodes_after": None, "checks": 0, "bug": None}


def _repro_signature(out: Path, report: dict) -> dict:
    import onnx

    from reducer.dedup import bug_id, repro_signature, summary_line

    try:
        model = onnx.load(str(out / "minimal.onnx"), load_external_data=False)
    except Exception as exc:
        return {"reason": f"minimal.onnx cannot be read ({type(exc).__name__})"}
    final = report.get("final") or {}
    try:
        signature = repro_signature(model, report.get("signature") or {}, str(final.get("reason", "")))
    except Exception as exc:  # a repro we cannot read costs its bug id, never the batch
        return {"reason": f"its repro's signature could not be computed ({type(exc).__name__}: {_one_line(exc)})"}
    reason = f"{summary_line(signature)}; {report.get('nodes_before')} -> {report.get('nodes_after')} nodes"
    return {"signature": signature, "signature_id": bug_id(signature), "signature_summary": summary_line(signature),
            "reason": reason}


def _read_report(out: Path) -> dict | None:
    try:
        report = json.loads((out / "report.json").read_text())
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def _error_line(log: Path, code: int) -> str:
    """The reduction's own one-line error, else how it ended."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    if code < 0:
        return f"killed by {signal.Signals(-code).name if -code in signal.valid_signals() else -code}"
    said = [line for line in lines if line.startswith(("onnx-reduce: error:", "onnx-reduce: internal error:"))]
    if said:
        return _one_line(said[-1].removeprefix("onnx-reduce: ").removeprefix("error: "))
    return f"exit code {code}" + (f": {_one_line(lines[-1])}" if lines else "")


def _one_line(text: str) -> str:
    lines = str(text).strip().splitlines()
    return lines[0][:300] if lines else ""


def _signal_group(process: subprocess.Popen, number: int) -> None:
    try:
        os.killpg(process.pid, number)
    except (ProcessLookupError, PermissionError):
        pass


def end_group(process: subprocess.Popen, grace: float = 2.0) -> None:
    """A model that hangs or outlived its grace: its whole process group (reduction, workers, checks) gets SIGTERM,
    and SIGKILL after `grace` seconds."""
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(process, signal.SIGKILL)
    process.wait()


def _libc_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl() if sys.platform.startswith("linux") else None
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: SIGTERM when the batch dies, even by SIGKILL, so no reduction outlives it (and holds its
    output folder's lock when the batch is run again)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def _own_folder(path: Path) -> None:
    if path.is_symlink():
        raise output_dir.OutputError(f"{path}: a symbolic link where the batch writes; refused")
    path.mkdir(parents=True, exist_ok=True)


def _new_file(path: Path) -> Path:
    """A file the batch writes: never through a symbolic link planted there."""
    if path.is_symlink():
        path.unlink()
    return path


def _write_json(path: Path, data) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")


def write_text(path: Path, text: str) -> None:
    """Atomic: a reader (or a resumed run) sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    _new_file(tmp).write_text(text)
    os.replace(tmp, path)


class BatchProgress:
    """One line per finished model on stderr: how far, how many fail, and an ETA from this run's pace. On a
    terminal, a live status line under them (done, failing, reduced, errors, the models running, ETA) updates
    while models run; elsewhere (logs, CI) only the lines, unchanged."""

    def __init__(self, stream=None, live: bool | None = None):
        self.stream, self.started = stream or sys.stderr, time.monotonic()
        self.total = self.finished = self.skipped = 0
        self.counts = {"failing": 0, "reduced": 0, "errors": 0}
        self.running: dict[str, float] = {}  # model name -> when its reduction started
        self._lock = threading.Lock()
        self._live = None
        if self.stream.isatty() if live is None else live:
            from rich.console import Console
            from rich.live import Live

            self._console = Console(file=self.stream)
            self._live = Live(_StatusLine(self), console=self._console, refresh_per_second=4, transient=True)

    def start(self, total: int, skipped: int) -> None:
        self.total, self.finished, self.skipped = total, skipped, skipped
        if self._live is not None:
            self._live.start()
        if skipped:
            self.line(f"{skipped} of {total} models finished in an earlier run: not redone")

    def begin(self, name: str) -> None:
        """A model's reduction starts (called from the batch's threads)."""
        with self._lock:
            self.running[name] = time.monotonic()

    def done(self, record: dict) -> None:
        with self._lock:
            self.running.pop(record["name"], None)
        self.finished += 1
        outcome = record["outcome"]
        for name, count in tally([outcome]).items():
            self.counts[name] += count
        self.line(f"{self._counts_text()} | {record['name']}: {outcome}"
                  + (f" ({record['reason']})" if record.get("reason") else ""))

    def _counts_text(self) -> str:
        ran = self.finished - self.skipped
        eta = f"{(time.monotonic() - self.started) / ran * (self.total - self.finished):.0f} s" if ran else "?"
        return (f"{self.finished}/{self.total} done, {self.counts['failing']} failing, {self.counts['reduced']} "
                f"reduced, {self.counts['errors']} errors, ETA {eta}")

    def status(self) -> str:
        """The live line: the counts, then the models running, longest-running first."""
        with self._lock:
            running = sorted(self.running, key=self.running.get)
        shown = ", ".join(running[:4]) + (f" +{len(running) - 4}" if len(running) > 4 else "")
        return (f"[{time.monotonic() - self.started:7.1f}s] {self._counts_text()}"
                + (f" | running ({len(running)}): {shown}" if running else ""))

    def line(self, text: str) -> None:
        text = f"[{time.monotonic() - self.started:7.1f}s] {text}"
        if self._live is not None:
            self._console.print(text, markup=False, highlight=False, soft_wrap=True)  # above the live line
        else:
            print(text, file=self.stream, flush=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()


class _StatusLine:
    """Rendered by rich at each refresh, so the clock and the ETA move between finished models."""

    def __init__(self, progress: BatchProgress):
        self.progress = progress

    def __rich__(self):
        from rich.text import Text

        return Text(self.progress.status(), style="bold cyan", no_wrap=True, overflow="ellipsis")


def run_batch(corpus: Path, run_dir: Path, options: BatchOptions, baseline: Path | None = None) -> int:
    """The whole batch; returns the exit code: 0 no new bug, 1 new bugs. An interrupt writes the summary of what
    finished and goes on as a KeyboardInterrupt."""
    from reducer import batch_report

    entries = load_corpus(corpus, skip=run_dir)
    plan_jobs(entries, options)
    previous = batch_report.read_baseline(baseline) if baseline else None
    claim = output_dir.claim(run_dir)  # one batch at a time in RUN_DIR
    started = time.time()
    progress = BatchProgress()
    try:
        if options.executor == "ray":
            from reducer.batch_ray import RayBatch

            batch = RayBatch(entries, run_dir, options, progress)
        else:
            batch = Batch(entries, run_dir, options, progress)
        commands = [c for c in [options.defaults.get("check"), *(e.settings.get("check") for e in entries)] if c]
        try:
            records = batch.run()
            summary = batch_report.summarize(entries, records, previous, trusted_commands=commands)
        except KeyboardInterrupt:  # also while the baseline's bundles are re-verified: what finished is kept
            progress.stop()
            summary = batch_report.summarize(entries, batch.records, None, interrupted=True)
            summary["run"] = batch_report.run_facts(started, options.jobs)
            batch_report.write_reports(run_dir, summary)
            progress.line(f"interrupted: {len(batch.records)} of {len(entries)} models finished, in "
                          f"{run_dir / 'summary.json'}; run the same command again to go on")
            raise
        summary["run"] = batch_report.run_facts(started, options.jobs)
        batch_report.write_reports(run_dir, summary)
    finally:
        progress.stop()
        claim.release()
    for line in batch_report.closing_lines(summary, run_dir):
        progress.line(line)
    return EXIT_NOT_FAILING if summary["counts"]["new_bugs"] else 0

