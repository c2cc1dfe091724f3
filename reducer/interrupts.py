"""Ctrl-C and SIGTERM (CI, `timeout`, `docker stop`) end a reduction the same way: a KeyboardInterrupt in
the main thread, so the best model so far and report.json are written; the exit code names the signal
(130 for SIGINT, 143 for SIGTERM). Light to import: the runners use `deferred()` around their imports."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from reducer.errors import EXIT_INTERRUPTED, EXIT_TERMINATED

STOPPING = (signal.SIGINT, signal.SIGTERM)

_received: list[int] = []  # the signals that came, in order
_deferring = 0  # inside deferred(): a signal is recorded and raised at its end
_holding = False  # held since the CLI's imports began (hold_while_importing)


def hold_while_importing() -> None:
    """When this process is the onnx-reduce program: from now on a signal is recorded, and raised once main()
    calls install(), so that one during the CLI's imports is an interrupt like any other."""
    global _deferring, _holding
    argv = sys.orig_argv
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None
    if os.path.basename(sys.argv[0]) == "onnx-reduce" or module in ("reducer", "reducer.cli"):
        _set_handlers()
        _deferring += 1
        _holding = True


def install() -> None:
    """The program's own handlers (main thread only); raises a signal held since the imports."""
    global _deferring, _holding
    _set_handlers()
    if _holding:
        _holding = False
        _deferring -= 1
    if _received and not _deferring:
        raise KeyboardInterrupt


def _set_handlers() -> None:
    """A signal inherited as ignored stays ignored: a shell's background job, `nohup`."""
    for number in STOPPING:
        if signal.getsignal(number) is not signal.SIG_IGN:
            signal.signal(number, _on_signal)
    signal.signal(signal.SIGALRM, _on_retry)


def _on_signal(number: int, frame) -> None:
    _received.append(number)
    _raise_unless_held(frame)


def _on_retry(number: int, frame) -> None:
    if _received and _deferring:  # deferred() raises only what came during it
        signal.setitimer(signal.ITIMER_REAL, RETRY_SECONDS)
    elif _received:
        _raise_unless_held(frame)


def _raise_unless_held(frame) -> None:
    """Held inside deferred() (raised at its end) and inside any import: a C extension whose initialisation calls
    back into Python (onnx's pybind11 enums, protobuf) aborts or segfaults when a KeyboardInterrupt lands there, and
    a pure-Python import's `except ImportError` can swallow it. An import is retried every 50 ms until it is over."""
    if _deferring:
        return
    if _inside_import(frame):
        signal.setitimer(signal.ITIMER_REAL, RETRY_SECONDS)
        return
    raise KeyboardInterrupt


RETRY_SECONDS = 0.05


def _inside_import(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def received() -> int | None:
    """The first stopping signal this process received, or None."""
    return _received[0] if _received else None


def exit_code() -> int:
    """The exit code of an interrupted run: the first signal's, as a shell reports a process it killed."""
    return EXIT_TERMINATED if received() == signal.SIGTERM else EXIT_INTERRUPTED


@contextmanager
def deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back while a C extension imports: pybind11 turns a KeyboardInterrupt raised
    inside a module's initialisation into an ImportError, which an `except ImportError` would swallow (the
    interrupt lost) or report as a broken install. The interrupt is raised once the import is over."""
    global _deferring
    in_main = threading.current_thread() is threading.main_thread()
    before = len(_received)
    if in_main:
        _deferring += 1
    try:
        yield
    finally:  # the interrupt wins over an ImportError it did not cause
        if in_main:
            _deferring -= 1
            if not _deferring and len(_received) > before:
                raise KeyboardInterrupt
