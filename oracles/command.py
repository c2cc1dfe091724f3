"""The command oracle: any external command decides, with `polygraphy debug reduce --check` semantics."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from oracles.base import (
    KILLED_FROM_OUTSIDE,
    LOG_TAIL_CHARS,
    CheckJob,
    Signature,
    Verdict,
    matched_lines,
    python_exception,
    signal_name,
)
from reducer import interrupts
from reducer.candidate import save_model
from reducer.errors import UsageError
from reducer.model import file_digest

POLYGRAPHY_ARTIFACT = "polygraphy_debug.onnx"  # what Polygraphy's --check commands expect to find
# A command that can keep named nodes in fp32 (trtexec --layerPrecisions, Polygraphy --layer-precisions,
# onnxconverter-common's node_block_list) says so by taking this file: the proof of cause then keeps the repro in
# fp32, which rules out error from above as feeding the reference cannot (reducer/counterfactual.py)
KEEP_FP32 = "{keep_fp32}"


# A check may print how many output elements fail (`failing_elements=N`, its last such line counting):
# then the proof of cause asks, as with the built-in checks, that the repro leave at most a tenth of them
# (reducer/counterfactual.py). scripts/check_candidate.py prints it.
FAILING_ELEMENTS = re.compile(r"\bfailing_elements=(\d+)\b")
# And how many of them are NaN/Inf where the reference's are finite (`nonfinite_elements=N`): a failure with N > 0 is
# a NaN/Inf failure, whose repro is its onset (the nodes that turn values the target holds into NaN/Inf), as the
# built-in `nan` check's; a candidate failing without them fails otherwise (Signature.same_failure).
NONFINITE_ELEMENTS = re.compile(r"\bnonfinite_elements=(\d+)\b")
# And which outputs fail (`failing_outputs=["name", ...]`, a JSON list on its own line): the search then drops a
# candidate's unconnected parts whose outputs all pass before proving it (Reduction.failing_parts).
FAILING_OUTPUTS = re.compile(r"^failing_outputs=(\[.*\])\s*$", re.MULTILINE)


def _failing_outputs(output: str) -> tuple[str, ...]:
    """The outputs a check named failing on its last `failing_outputs=[...]` line; none where it named none or the
    line is not a JSON list of names."""
    lines = FAILING_OUTPUTS.findall(output)
    try:
        named = json.loads(lines[-1]) if lines else []
    except json.JSONDecodeError:
        return ()
    return tuple(named) if isinstance(named, list) and all(isinstance(n, str) for n in named) else ()


class CommandOracle:
    """`{model}` and `{inputs}` in the command are replaced by the candidate's path and a Polygraphy
    `--load-inputs` JSON of its inputs; without `{model}` the candidate is `polygraphy_debug.onnx` in the
    check's own working directory, as Polygraphy does it. `{keep_fp32}` by a JSON file
    `{"nodes": [names], "tensors": [names]}`: the nodes to compute in fp32 (and the tensors they write, for
    unnamed ones), empty but for the proof's runs. Relative paths that exist where the user started are made
    absolute, since each check runs in a private directory."""

    needs_reference = False  # the command decides alone: the whole model can be checked before the reference ran

    def __init__(
        self,
        argv: list[str],
        timeout: float,
        fail_codes: list[int] | None = None,
        ignore_fail_codes: list[int] | None = None,
        fail_regexes: list[re.Pattern] | None = None,
        ignore_fail_regexes: list[re.Pattern] | None = None,
    ):
        self.argv = [_absolute_if_exists(arg) for arg in argv]
        self.max_abs_value: float | None = None  # a command's precision is unknown: --faithful-max tells
        self.names_failing_outputs = False
        # asked to keep nodes in fp32 only through {keep_fp32}; else the proof feeds the reference
        self.computes_exactly = any(KEEP_FP32 in arg for arg in self.argv)
        self.exact_on_trust = False  # a command's word for it: the driver checks it once (Reduction._show_fp32)
        if shutil.which(self.argv[0]) is None:  # say so now, not after the reference run
            raise UsageError(f"--check: cannot run '{argv[0]}': no such command")
        self.timeout = timeout
        self._running = RunningChecks()
        self.fail_codes = fail_codes or None
        self.ignore_fail_codes = ignore_fail_codes or None
        self.fail_regexes = fail_regexes or None
        self.ignore_fail_regexes = ignore_fail_regexes or None
        self.description = "command: " + " ".join(argv)
        self.environment = {"runner": "command", "command": argv}
        identity = {
            # what a verdict holds: 2 adds the check's own Python exception to its signature, 3 whether its outputs
            # held NaN/Inf (nonfinite_elements=N), 4 the outputs it named failing (failing_outputs=[...])
            "verdicts": 4,
            "argv": argv,
            "fail_codes": fail_codes,
            "ignore_fail_codes": ignore_fail_codes,
            "fail_regex": [r.pattern for r in fail_regexes or []],
            "ignore_fail_regex": [r.pattern for r in ignore_fail_regexes or []],
            # what the files it names hold (a check script, its reference data): a verdict cached by an earlier
            # run into the same folder no longer holds once the user changes them
            "files": _named_file_digests(self.argv),
        }
        self.fingerprint = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    def judge(self, job: CheckJob) -> Verdict:
        # absolute, whatever -o was: the check runs in its own folder, where a relative path names nothing
        workdir = job.workdir.absolute()
        uses_model = any("{model}" in arg for arg in self.argv)
        model_path = workdir / ("model.onnx" if uses_model else POLYGRAPHY_ARTIFACT)
        save_model(job.model, model_path, external_data=job.external_data)
        inputs_path = workdir / "inputs.json"
        if any("{inputs}" in arg for arg in self.argv):
            from polygraphy.json import save_json

            save_json([{name: np.load(path) for name, path in job.feeds.items()}], str(inputs_path))
        keep_path = workdir / "keep_fp32.json"
        if self.computes_exactly:
            keep_path.write_text(json.dumps({"nodes": list(job.keep_fp32_nodes),
                                             "tensors": list(job.keep_fp32_tensors)}))
        places = {"{model}": str(model_path), "{inputs}": str(inputs_path), KEEP_FP32: str(keep_path)}
        argv = [_replaced(arg, places) for arg in self.argv]
        code, output, seconds = _run(argv, workdir, self.timeout, self._running)
        if code is None:
            return Verdict(True, Signature("timeout"), f"no answer after {self.timeout:g} s; killed", output)
        verdict = self.decide(code, output)
        counted = FAILING_ELEMENTS.findall(output)
        if counted:  # the command says how many output elements fail: the proof of cause weighs them
            verdict.elements = int(counted[-1])
        non_finite = NONFINITE_ELEMENTS.findall(output)
        verdict.nonfinite_elements = int(non_finite[-1]) if non_finite else None
        named = _failing_outputs(output)
        if named and verdict.failing and verdict.signature:
            verdict.signature = replace(verdict.signature, outputs=named)
        signature = verdict.signature
        if non_finite and int(non_finite[-1]) and signature and signature.kind == "command" \
                and not signature.names_a_message:
            verdict.signature = replace(signature, non_finite=True)
            verdict.reason += "; its outputs hold NaN/Inf where the reference's are finite"
        return verdict

    def close(self) -> None:
        """A check still running (one in another thread when Ctrl-C came) is killed: it decides nothing now."""
        self._running.close()

    def decide(self, code: int, output: str) -> Verdict:
        """Polygraphy's rule (polygraphy/tools/debug/subtool/iterative_debug_args.py), plus ignore-regexes."""
        if self.ignore_fail_codes and code in self.ignore_fail_codes:
            return Verdict(False, None, f"exit code {code} is ignored", output)
        if self.ignore_fail_regexes and any(r.search(output) for r in self.ignore_fail_regexes):
            return Verdict(False, None, "output matches an --ignore-fail-regex", output)
        matched = [r.pattern for r in self.fail_regexes or [] if r.search(output)]
        if self.fail_codes is not None:
            failed = code in self.fail_codes and (self.fail_regexes is None or bool(matched))
        else:
            failed = code != 0 if self.fail_regexes is None else bool(matched)
        killed = code < 0 and signal_name(-code) in KILLED_FROM_OUTSIDE  # says nothing of the candidate
        if not failed:  # a command that stopped short says why on its last line: the user sees it
            said = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "") if code else ""
            return Verdict(False, None, f"exit code {code}" + (f" ({said[:200]})" if said else ""), output,
                           lasting=not killed)
        if code < 0:
            return Verdict(True, Signature("crash", signal_name(-code)), f"killed by {signal_name(-code)}", output,
                           lasting=not killed)
        detail = f"matched /{'/, /'.join(matched)}/" if matched else f"exit code {code}"
        exception = python_exception(output)  # a crash of the check itself is not the failure it checks for
        reason = detail + (f"; the check raised {exception}" if exception else "")
        return Verdict(True, Signature("command", detail, exception=exception), reason, output,
                       message=matched_lines(output, self.fail_regexes) if matched else "")


class CheckCancelled(RuntimeError):
    """The oracle was closed while this check ran: no verdict (none is cached)."""


class RunningChecks:
    """The checks running now, each with its "cancelled" flag. Once closed, no check starts: the one alongside the
    reference run may still be saving its model when Ctrl-C closes the oracle, and must not run on, orphaned,
    after the reduction has ended."""

    def __init__(self):
        self._lock = threading.Lock()
        self._checks: dict[subprocess.Popen, threading.Event] = {}
        self._closed = False

    def start(self, spawn: Callable[[], subprocess.Popen]) -> tuple[subprocess.Popen, threading.Event]:
        """spawn() run and registered under the lock: close() waits for a check being started in another thread,
        and kills it, where the process could otherwise end between the spawn and the registration, leaving it
        running, orphaned (a Ray worker SIGKILLed while a check was being started alongside the reference run)."""
        with self._lock:
            if self._closed:
                raise CheckCancelled("the reduction is closing: no check starts")
            process = spawn()
            self._checks[process] = cancelled = threading.Event()
        return process, cancelled

    def remove(self, process: subprocess.Popen) -> None:
        with self._lock:
            self._checks.pop(process, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for process, cancelled in self._checks.items():
                _kill_group(process, cancelled)


def _run(argv: list[str], cwd: Path, timeout: float, running: RunningChecks) -> tuple[int | None, str, float]:
    start = time.perf_counter()
    log_path = cwd / "check.log"
    with open(log_path, "wb") as log:
        process, cancelled, expired, timer = None, None, threading.Event(), None
        try:
            # an interrupt between the spawn and the wait would leave the check running, orphaned: held back
            # until it is registered (raised then, and the check's group killed below)
            with interrupts.deferred():
                try:  # registered at once: close() may come before the timer starts
                    process, cancelled = running.start(lambda: subprocess.Popen(
                        argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        start_new_session=True))
                except OSError as exc:
                    raise UsageError(f"--check: cannot run '{argv[0]}': {exc.strerror}") from None
                # A blocking wait, with a timer to kill: Popen.wait(timeout) polls, adding up to 50 ms a check.
                timer = threading.Timer(timeout, _kill_group, (process, expired))
                timer.start()
            # waited for, not reaped: its pid stays its group's, so the group can be killed once it ended
            os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        except BaseException:  # Ctrl-C: in its own session the check never saw it, so it goes with us
            if process is not None:
                _kill_group(process, cancelled)
            raise
        finally:
            if timer is not None:
                timer.cancel()
            if process is not None:
                running.remove(process)
                _kill_group(process)  # what it left running in the background (`cmd &`) ends with it
                code = process.wait()
        if cancelled is not None and cancelled.is_set():
            raise CheckCancelled(f"'{argv[0]}' was stopped: the reduction is closing")
        code = None if expired.is_set() else code
    output = log_path.read_bytes()[-LOG_TAIL_CHARS:].decode(errors="replace")
    return code, output, time.perf_counter() - start


def _kill_group(process: subprocess.Popen, reason: threading.Event | None = None) -> None:
    if reason is not None:
        reason.set()  # timed out, or cancelled
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the whole group: a check's children hang too
    except (ProcessLookupError, PermissionError):  # all ended already; one that changed user is not ours to kill
        pass


def _named_file_digests(argv: list[str]) -> dict[str, str]:
    """The bytes of the files a command names, hashed (not the candidate it is handed: that changes every check)."""
    digests = {}
    for arg in argv:
        if os.path.isfile(arg) and os.path.basename(arg) != POLYGRAPHY_ARTIFACT:
            try:
                digests[arg] = file_digest(arg)
            except OSError as exc:  # unreadable: the check could not read it either
                raise UsageError(f"--check: cannot read {arg}: {exc.strerror or exc}") from None
    return digests


def _absolute_if_exists(arg: str) -> str:
    if arg.startswith("-") or "{" in arg or os.path.isabs(arg) or not os.path.exists(arg):
        return arg
    if os.path.basename(arg) == POLYGRAPHY_ARTIFACT:  # the candidate, not a stale file from an old run
        return arg
    return os.path.abspath(arg)


def _replaced(arg: str, places: dict[str, str]) -> str:
    for placeholder, value in places.items():
        arg = arg.replace(placeholder, value)
    return arg
