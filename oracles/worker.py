"""Warm, isolated worker processes: a runner is imported once and serves many checks; a crash or a hang
kills only the worker, and becomes a verdict."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from oracles.base import LOG_TAIL_CHARS, RunResult, signal_name


@contextmanager
def _captured_fds(log_path: Path):
    """Send this process's stdout/stderr (C++ libraries' included) to a file while a runner works."""
    saved = [os.dup(1), os.dup(2)]
    with open(log_path, "wb") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def _read_tail(path: Path) -> str:
    try:
        return path.read_bytes()[-LOG_TAIL_CHARS:].decode(errors="replace")
    except OSError:
        return ""


def _serve(conn, runner_spec: str, factory, log_path: str, env: dict[str, str]) -> None:
    import numpy as np

    os.setsid()  # its own process group: killing a hung worker kills what its runner started too
    os.environ.update(env)  # e.g. CUDA_VISIBLE_DEVICES: set before any runtime is imported
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    if factory is None:
        from oracles import make_runner as factory
    runners = {runner_spec: factory(runner_spec)}  # imported once; a task may name another (the reference)
    try:  # the runtime imports now, while the driver is still busy, not in the first check
        getattr(runners[runner_spec], "warm_up", lambda: None)()
    except Exception:  # noqa: S110 (a runtime that cannot import says so in its first check)
        pass
    log_path = Path(log_path)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        kind, model_path, feed_paths, extra = task
        start = time.perf_counter()
        try:
            spec = extra.get("runner_spec", runner_spec)
            if spec not in runners:
                runners[spec] = factory(spec)
            runner = runners[spec]
            with _captured_fds(log_path):
                feeds = {name: np.load(path, allow_pickle=False) for name, path in feed_paths.items()}
                if kind == "capture":  # straight to the store: activations never cross the pipe
                    _capture(runner, Path(model_path), feeds, extra)
                    outputs = {}
                else:
                    outputs = runner.run(Path(model_path), feeds, extra.get("external_dir"))
            result = RunResult("ok", outputs)
        except Exception as exc:  # a runner's build or run error is data, not a worker failure
            status = "unavailable" if getattr(exc, "unavailable", False) else "error"
            result = RunResult(status, error=f"{type(exc).__name__}: {exc}")
        result.log = _read_tail(log_path)
        result.seconds = time.perf_counter() - start
        conn.send(result)


def _capture(runner, model_path: Path, feeds: dict, extra: dict) -> None:
    """The reference run: every tensor written to the activation store, a bounded group at a time."""
    from reducer.activations import ActivationStore

    external_dir = extra.get("external_dir")
    if hasattr(runner, "capture"):
        produced = runner.capture(model_path, feeds, external_dir)
    else:
        produced = runner.run(model_path, feeds, external_dir).items()
    arrays = (pair for pair in produced if pair[0] not in feeds)
    ActivationStore.write(Path(extra["store_dir"]), extra["key"], itertools.chain(feeds.items(), arrays))


class Worker:
    """One warm worker process for one runner; restarted after it dies or is killed for a hang."""

    def __init__(self, runner_spec: str, factory=None, env: dict[str, str] | None = None):
        """`factory(spec)` builds the runner in the worker (default: the registry); it must be importable
        by name, since the worker is a fresh process. `env` is set in the worker before anything runs
        (a GPU worker's CUDA_VISIBLE_DEVICES)."""
        self.runner_spec = runner_spec
        self.factory = factory
        self.env = dict(env or {})
        self._log_dir: str | None = None
        self._context = multiprocessing.get_context("spawn")  # no fork after threads or GPU libraries
        self._process = None
        self._conn = None
        self.restarts = 0

    def start(self) -> None:
        """Spawn the process now, without waiting: it imports its runner while the caller works on."""
        if self._process is None or not self._process.is_alive():
            if self._conn is not None:
                self.restarts += 1
            self._start()

    def _start(self) -> None:
        parent, child = self._context.Pipe()
        if self._log_dir is None:
            self._log_dir = tempfile.mkdtemp(prefix="onnx-reduce-worker-")
        log_path = os.path.join(self._log_dir, "run.log")
        self._process = self._context.Process(
            target=_serve, args=(child, self.runner_spec, self.factory, log_path, self.env), daemon=True
        )
        self._process.start()
        child.close()
        self._conn = parent

    def run(self, model_path: Path, feeds: dict[str, Path], timeout: float, kind: str = "run", **extra) -> RunResult:
        self.start()  # no-op when warm; a restart after a crash, a hang or an idle death
        start = time.perf_counter()
        self._conn.send((kind, str(model_path), {k: str(v) for k, v in feeds.items()}, extra))
        try:
            ready = self._conn.poll(timeout)
            if ready:
                return self._conn.recv()
        except (EOFError, OSError):
            pass
        else:
            self._kill()
            return RunResult("timeout", error=f"no result after {timeout:g} s; the worker was killed",
                             seconds=time.perf_counter() - start)
        self._process.join(5)
        code = self._process.exitcode
        self._process = None
        reason = f"killed by {signal_name(-code)}" if code and code < 0 else f"exit code {code}"
        return RunResult("crash", error=f"the runner's process died: {reason}", seconds=time.perf_counter() - start)

    def _kill(self) -> None:
        if self._process is not None and self._process.pid is not None:  # pid None: never started
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self._process.kill()
            self._process.join(5)
        self._process = None

    def close(self) -> None:
        self._kill()  # nothing in a worker outlives its checks: no need to wait for a clean exit
        if self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None
