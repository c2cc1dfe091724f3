"""Warm, isolated worker processes: a runner is imported once and serves many checks; a crash or a hang
kills only the worker, and becomes a verdict."""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import os
import re
import shutil
import signal
import tempfile
import time
from contextlib import contextmanager
from multiprocessing import resource_tracker
from pathlib import Path

from oracles.base import LOG_TAIL_CHARS, RunResult, signal_name
from reducer import interrupts
from reducer.errors import EXIT_INTERNAL, ReducerError, RunnerUnavailableError

TERMINAL_SIGNALS = {signal.SIGINT, signal.SIGTERM}
STARTED = "started"  # a worker's first message: its runner is built and its runtime imported
CANNOT_START = "cannot-start"  # or this, with why
LOG_DIR_PREFIX = "onnx-reduce-worker-"  # + the driver's pid: a folder whose driver died is removed on the next start


class WorkerStartError(ReducerError):
    """A worker process died or hung before its runner was ready: not a verdict on any model."""

    exit_code = EXIT_INTERNAL


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
    # First of all, its own session: a terminal's Ctrl-C or a group's SIGTERM (`timeout`) reaches the driver
    # only, which closes the workers; and killing a hung worker kills what its runner started too. The
    # driver spawned it with those signals blocked, so none came before this.
    os.setsid()
    for number in TERMINAL_SIGNALS:
        signal.signal(number, signal.SIG_IGN)  # discards one sent to the old group meanwhile
    signal.pthread_sigmask(signal.SIG_UNBLOCK, TERMINAL_SIGNALS)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # Ctrl-C stays the driver's to handle
    try:
        import numpy as np

        os.environ.update(env)  # e.g. CUDA_VISIBLE_DEVICES: set before any runtime is imported
        if factory is None:
            from oracles import make_runner as factory
        runners = {runner_spec: factory(runner_spec)}  # imported once; a task may name another (the reference)
        # the runtime imports now, while the driver is still busy, not in the first check
        getattr(runners[runner_spec], "warm_up", lambda: None)()
    except Exception as exc:  # not a verdict on any model: the driver says so and stops
        unavailable = isinstance(exc, ImportError) or getattr(exc, "unavailable", False)
        _answer(conn, (CANNOT_START, unavailable, f"{type(exc).__name__}: {exc}"))
        return
    if not _answer(conn, STARTED):
        return
    log_path = Path(log_path)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):  # the driver is gone
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
        if not _answer(conn, result):
            return


def _answer(conn, message) -> bool:
    """Send to the driver; False when it is gone (it closed the pipe): nothing to say, no traceback."""
    try:
        conn.send(message)
    except OSError:
        return False
    return True


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


@contextmanager
def _terminal_signals_blocked():
    old = signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]


@functools.cache  # once per process
def remove_stale_log_dirs() -> None:
    """Log folders left by drivers that died without closing their workers (SIGKILL, a lost machine): ours
    only (our prefix, our user, a dead owner), never through a symbolic link."""
    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return
    for entry in entries:
        match = re.fullmatch(rf"{LOG_DIR_PREFIX}(\d+)-\w+", entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's process
        return True
    return True


def write_feeds(feeds: dict, folder: Path) -> dict[str, Path]:
    """Inputs as a worker loads them: one .npy file each in `folder` (numbered: a tensor's name may hold any
    character)."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for number, (name, value) in enumerate(feeds.items()):
        paths[name] = folder / f"input{number}.npy"
        np.save(paths[name], value, allow_pickle=False)
    return paths


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
        self._started = False  # its first message read (STARTED)
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
            remove_stale_log_dirs()
            self._log_dir = tempfile.mkdtemp(prefix=f"{LOG_DIR_PREFIX}{os.getpid()}-")
        log_path = os.path.join(self._log_dir, "run.log")
        self._process = self._context.Process(
            target=_serve, args=(child, self.runner_spec, self.factory, log_path, self.env), daemon=True
        )
        # the child inherits the blocked signals: none reaches it before it has its own session. The spawn's
        # resource tracker starts first: starting, it unblocks them in this thread. A signal another thread
        # takes is still raised here by Python: held back until the start is over (else the child, its
        # preparation data never sent, dies printing an EOFError), then raised with the child's pid known,
        # so that close() kills it.
        resource_tracker.ensure_running()
        with interrupts.deferred(), _terminal_signals_blocked():
            self._process.start()
        child.close()
        self._conn = parent
        self._started = False

    def run(self, model_path: Path, feeds: dict[str, Path], timeout: float, kind: str = "run", **extra) -> RunResult:
        self.start()  # no-op when warm; a restart after a crash, a hang or an idle death
        start = time.perf_counter()
        task = (kind, str(model_path), {k: str(v) for k, v in feeds.items()}, extra)
        try:
            self._conn.send(task)
        except OSError:  # gone since start() looked: an EPIPE let out would reach click, which exits 1 unsaid
            if not self._started:
                self._await_start(timeout)  # its last word: why it cannot start (raised), or that it had
            self._kill()  # an idle death, no verdict on this task: once more in a fresh worker
            self.start()
            self._conn.send(task)
        if not self._started:
            self._await_start(timeout)
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
        return RunResult("crash", error=f"the runner's process died: {self._reap()}",
                         seconds=time.perf_counter() - start)

    def _await_start(self, timeout: float) -> None:
        """The worker's first word: started, or why it cannot. Dying or hanging before it is no verdict on
        the model a check was asked about: the reduction stops, saying why."""
        try:
            message = self._conn.recv() if self._conn.poll(timeout) else None
            hung = message is None
        except (EOFError, OSError):
            message, hung = None, False
        if message == STARTED:
            self._started = True
            return
        if isinstance(message, tuple) and message[0] == CANNOT_START:
            self._kill()
            _, unavailable, why = message
            error = RunnerUnavailableError if unavailable else WorkerStartError
            raise error(f"runner {self.runner_spec} cannot start in its worker process: {_first_line(why)}")
        if hung:
            self._kill()
            raise WorkerStartError(f"runner {self.runner_spec}: its worker process did not start in {timeout:g} s")
        raise WorkerStartError(f"runner {self.runner_spec}: its worker process died as it started: {self._reap()}")

    def _reap(self) -> str:
        """How the (dead) worker ended, in words."""
        self._process.join(5)
        code = self._process.exitcode
        self._process = None
        return f"killed by {signal_name(-code)}" if code and code < 0 else f"exit code {code}"

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
