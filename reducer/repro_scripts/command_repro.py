#!/usr/bin/env python3
"""Reproduces a failure that onnx-reduce found with a check command, as `polygraphy debug reduce --check`
runs it: `{model}` in the command is minimal.onnx, `{inputs}` a Polygraphy --load-inputs JSON, `{bundle}`
this folder (files the command needs travel in it), `{keep_fp32}` a file naming no node to keep in fp32;
without `{model}`, the model is copied to polygraphy_debug.onnx in a scratch directory where the command runs.

    python repro.py   # exit 1: the failure reproduces; 0: it does not; 2: cannot run here

Non-zero means reproduced, like a failing test. Only the Python standard library is needed here; the
command needs whatever it needs.
"""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# --- settings (written by onnx-reduce) ---
COMMAND = ["polygraphy", "run", "polygraphy_debug.onnx", "--onnxrt"]
FAIL_CODES = []  # exit codes that count as failing (empty: any non-zero)
IGNORE_FAIL_CODES = []
FAIL_REGEX = []  # with them, only output matching one of these counts as failing
IGNORE_FAIL_REGEX = []
TIMEOUT = 300.0
RECORDED_EXIT_CODE = None  # the exit code the failure had: another failing code is another failure
RECORDED_EXCEPTION = None  # its last Python traceback's exception type ("": none): a crash is another failure
RECORDED_NON_FINITE = False  # its check counted NaN/Inf outputs (nonfinite_elements=N): a failure without is another
MODEL = "minimal.onnx"
INPUTS_JSON = "inputs.json"
# --- end of settings ---

HERE = Path(__file__).resolve().parent
TRACEBACK = "Traceback (most recent call last):"


def failed(code: int, output: str) -> bool:
    """Polygraphy's rule (debug reduce's --fail-code / --fail-regex), plus the ignore lists."""
    if code in IGNORE_FAIL_CODES or any(re.search(p, output) for p in IGNORE_FAIL_REGEX):
        return False
    matched = any(re.search(p, output) for p in FAIL_REGEX)
    if FAIL_CODES:
        return code in FAIL_CODES and (not FAIL_REGEX or matched)
    return code != 0 if not FAIL_REGEX else matched


def raised(output: str) -> str:
    """The exception type of the last Python traceback in the output, "" when there is none."""
    start = output.rfind(TRACEBACK)
    if start < 0:
        return ""
    for line in output[start + len(TRACEBACK):].splitlines():
        if line.strip() and not line[0].isspace():  # the frames are indented; the exception line is not
            match = re.match(r"([A-Za-z_][\w.]*)(?::|$)", line)
            return match.group(1) if match else "?"
    return "?"


def main() -> int:
    if shutil.which(COMMAND[0]) is None:
        print(f"cannot run here: no command '{COMMAND[0]}'")
        return 2
    with tempfile.TemporaryDirectory(prefix="repro-") as scratch:
        model = str(HERE / MODEL)
        if not any("{model}" in arg for arg in COMMAND):
            shutil.copy(model, Path(scratch) / "polygraphy_debug.onnx")
        places = {"{model}": model, "{inputs}": str(HERE / INPUTS_JSON), "{bundle}": str(HERE),
                  "{keep_fp32}": str(HERE / "keep_fp32.json")}
        argv = []
        for arg in COMMAND:
            for placeholder, value in places.items():
                arg = arg.replace(placeholder, value)
            argv.append(arg)
        print("running: " + " ".join(argv))
        try:
            done = subprocess.run(argv, cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"NOT REPRODUCED: no answer after {TIMEOUT:g} s (a hang is another failure)")
            return 0
    output = done.stdout.decode(errors="replace")
    print(output[-4000:])
    if failed(done.returncode, output):
        if RECORDED_EXIT_CODE is not None and done.returncode != RECORDED_EXIT_CODE:
            print(f"NOT REPRODUCED: it fails differently (exit code {done.returncode}, recorded {RECORDED_EXIT_CODE})")
            return 0
        exception = raised(output)
        if RECORDED_EXCEPTION is not None and exception != RECORDED_EXCEPTION:
            print(f"NOT REPRODUCED: it fails differently (Python {exception or 'no exception'}, recorded "
                  f"{RECORDED_EXCEPTION or 'no exception'}): a file the check needs may be missing from the bundle")
            return 0
        counted = re.findall(r"\bnonfinite_elements=(\d+)\b", output)
        if RECORDED_NON_FINITE and not (counted and int(counted[-1])):
            print("NOT REPRODUCED: it fails differently (no NaN/Inf in its outputs, recorded with them)")
            return 0
        print(f"REPRODUCED: exit code {done.returncode}")
        return 1
    print(f"NOT REPRODUCED: exit code {done.returncode}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # never exit 1 (reproduced) because of a problem of our own
        print(f"cannot run here: {type(exc).__name__}: {exc}")
        sys.exit(2)
