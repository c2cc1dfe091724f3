"""Stand-in runners for oracles.worker tests: they behave badly on purpose (raise, crash, hang).

`make(spec)` is the factory a Worker calls in its spawned process, so this module must be importable by
name there. The behaviour is the spec's last part ("standin:ok", "standin:segv", ...), unless the model
file holds one of the mode words: then that file decides, so one Worker can be sent different tasks.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

MODES = ("ok", "raise", "segv", "abort", "hang", "flaky", "env", "unavailable")

_made = 0  # how many runners this process built: a warm worker builds one


class StandinRunner:
    def __init__(self, spec: str):
        global _made
        _made += 1
        self.spec = spec
        self.mode = spec.rsplit(":", 1)[-1]
        self.max_abs_value = None
        self.runs = 0

    def _mode_for(self, model_path: Path) -> str:
        try:
            text = Path(model_path).read_text().strip()
        except (OSError, UnicodeDecodeError):
            text = ""
        return text if text in MODES else self.mode

    def run(self, model_path: Path, feeds: dict[str, np.ndarray], external_dir: Path | None) -> dict[str, np.ndarray]:
        self.runs += 1
        mode = self._mode_for(model_path)
        if mode == "ok":
            total = sum(float(np.sum(v)) for v in feeds.values())
            return {
                "pid": np.array([os.getpid()], dtype=np.int64),
                "made": np.array([_made], dtype=np.int64),
                "runs": np.array([self.runs], dtype=np.int64),
                "sum": np.array([total], dtype=np.float64),
            }
        if mode == "raise":
            print("python-level stderr: parsing the model", file=sys.stderr, flush=True)
            os.write(2, b"fd-level stderr: builder log line\n")
            ctypes.CDLL(None).perror(b"c-level stderr")  # libc writes straight to fd 2
            raise RuntimeError("boom: parse failed")
        if mode == "flaky":  # fails every other run, like a build that picks a bad tactic half the time
            if self.runs % 2 == 0:
                raise RuntimeError("boom: flaky tactic")
            return {"sum": np.array([1.0])}
        if mode == "env":
            return {"cuda_visible_devices": np.array([int(os.environ.get("CUDA_VISIBLE_DEVICES", "-1"))])}
        if mode == "unavailable":
            error = RuntimeError("no such provider here")
            error.unavailable = True
            raise error
        if mode == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "abort":
            os.abort()
        if mode == "hang":
            while True:
                time.sleep(3600)
        raise ValueError(f"standin: unknown mode '{mode}'")


def make(spec: str) -> StandinRunner:
    if spec.endswith(":noimport"):  # its runtime does not import in the worker
        raise ModuleNotFoundError("No module named 'standin_runtime'")
    if spec.endswith(":dies"):  # the worker dies before its runner is ready
        os._exit(3)
    return StandinRunner(spec)
