#!/usr/bin/env python3
"""Reproduces an ONNX Runtime failure found by onnx-reduce, with nothing but numpy and onnxruntime.

    python repro.py            # exit 1: the failure reproduces; 0: it does not; 2: cannot run here
    python repro.py --verbose  # ONNX Runtime's verbose log too

The reference is ONNX Runtime on the CPU in fp32 with graph optimizations disabled; the target is run
exactly as the reducer ran it (TARGET_MODEL, providers and optimization level below), and the same check
is applied. Non-zero means reproduced, like a failing test.
"""

import re
import sys
from pathlib import Path

try:
    import numpy as np
except ImportError:  # a traceback would exit 1, which says "reproduced"
    print("cannot run here: numpy is not installed (pip install numpy)")
    sys.exit(2)

# --- settings (written by onnx-reduce) ---
CHECK = "tolerance"  # nan | tolerance | error
ATOL = 1e-05  # tolerance: an element fails where |t-r| > ATOL and |t-r| > RTOL*|r| (Polygraphy's elemwise rule)
RTOL = 1e-05
FAIL_REGEX = []  # error: only an error whose text matches one of these counts
REFERENCE_MODEL = "minimal.onnx"
TARGET_MODEL = "minimal.onnx"
TARGET_PROVIDERS = ["CPUExecutionProvider"]
TARGET_OPTIMIZATION = "ORT_ENABLE_ALL"
INPUTS = "inputs.npz"
# --- end of settings ---

HERE = Path(__file__).resolve().parent


def session(ort, model: str, level: str, providers: list, verbose: bool):
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.log_severity_level = 0 if verbose else 3
    providers = [p if isinstance(p, str) else tuple(p) for p in providers]
    return ort.InferenceSession(str(HERE / model), options, providers=providers)


def run(sess, feeds: dict) -> dict:
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))  # noqa: B905 (runs on Python < 3.10 too)


def tolerance_mismatches(target: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Polygraphy's elementwise rule: |t-r| > ATOL and |t-r|/|r| > RTOL (zeros of r nudged by float64
    epsilon); a NaN difference always mismatches, but the same infinity in both runs is equal, as is NaN in both."""
    target, expected = np.asarray(target, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        same = (np.isinf(expected) & (target == expected)) | (np.isnan(expected) & np.isnan(target))
        absdiff = np.where(same, 0.0, np.abs(target - expected))
        reldiff = absdiff / np.where(expected == 0, np.finfo(np.float64).eps, np.abs(expected))
    return ((absdiff > ATOL) | np.isnan(absdiff)) & ((reldiff > RTOL) | np.isnan(reldiff))


def describe(name: str, target: np.ndarray, ref: np.ndarray) -> str:
    both = np.isfinite(target) & np.isfinite(ref)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        absdiff = np.abs(target.astype(np.float64) - ref.astype(np.float64))
        reldiff = absdiff / np.maximum(np.abs(ref.astype(np.float64)), np.finfo(np.float64).eps)
    worst_abs = float(absdiff[both].max()) if both.any() else float("nan")
    worst_rel = float(reldiff[both].max()) if both.any() else float("nan")
    return (f"{name} {list(target.shape)}: max abs err {worst_abs:.4g}, max rel err {worst_rel:.4g}, "
            f"target NaN {int(np.isnan(target).sum())}, Inf {int(np.isinf(target).sum())}")


def non_finite(value: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Where the target holds NaN/Inf and the reference is finite (where their shapes differ: wherever it does)."""
    bad = ~np.isfinite(value) if value.dtype.kind in "fc" else np.zeros(value.shape, bool)
    return bad & np.isfinite(ref) if ref.shape == value.shape else bad


def judge(target: dict, reference: dict) -> list:
    """The outputs that fail the check, with a line each."""
    failing = []
    for name, value in target.items():
        ref = reference.get(name)
        value = np.asarray(value)
        if ref is None or value.dtype.kind not in "fciu":
            continue
        if CHECK == "nan":
            bad = non_finite(value, ref)
            if bad.any():
                failing.append(f"{name}: {int(bad.sum())} of {value.size} non-finite where the reference is finite")
        elif CHECK == "tolerance":
            if value.shape != ref.shape:
                failing.append(f"{name}: shape {list(value.shape)}, reference {list(ref.shape)}")
            elif value.size and (count := int(tolerance_mismatches(value, ref).sum())):
                lost = int(non_finite(value, ref).sum())
                held = f" ({lost} NaN/Inf where the reference is finite)" if lost else ""
                failing.append(f"{name}: {count} of {value.size} outside atol={ATOL:g} and rtol={RTOL:g}{held}")
    return failing


def main(argv: list) -> int:
    verbose = "--verbose" in argv or "-v" in argv
    try:
        import onnxruntime as ort
    except ImportError:
        print("cannot run here: onnxruntime is not installed (pip install onnxruntime)")
        return 2
    names = [p if isinstance(p, str) else p[0] for p in TARGET_PROVIDERS]  # [name, options] pairs too
    missing = [p for p in names if p not in ort.get_available_providers()]
    if missing:
        print(f"cannot run here: this onnxruntime lacks {', '.join(missing)}")
        return 2
    with np.load(HERE / INPUTS, allow_pickle=False) as data:
        feeds = {name: data[name] for name in data.files}
    print(f"onnxruntime {ort.__version__}; reference: {REFERENCE_MODEL} on CPU fp32, ORT_DISABLE_ALL; "
          f"target: {TARGET_MODEL} on {TARGET_PROVIDERS}, {TARGET_OPTIMIZATION}")
    try:
        reference = run(session(ort, REFERENCE_MODEL, "ORT_DISABLE_ALL", ["CPUExecutionProvider"], False), feeds)
    except Exception as exc:
        print(f"cannot run here: the fp32 reference fails: {str(exc).splitlines()[0][:300]}")
        return 2
    try:
        target = run(session(ort, TARGET_MODEL, TARGET_OPTIMIZATION, TARGET_PROVIDERS, verbose), feeds)
    except Exception as exc:  # a build or run error is what an error check looks for
        text = f"{type(exc).__name__}: {exc}"
        print(f"target raised: {text.splitlines()[0][:300]}")
        if CHECK != "error":
            print("NOT REPRODUCED: the target fails differently (it raised)")
            return 0
        if FAIL_REGEX and not any(re.search(pattern, text) for pattern in FAIL_REGEX):
            print(f"NOT REPRODUCED: the error matches none of {FAIL_REGEX}")
            return 0
        print("REPRODUCED: the target raised" + (f" (matching {FAIL_REGEX})" if FAIL_REGEX else ""))
        return 1
    if CHECK == "error":
        print("NOT REPRODUCED: the target ran without error")
        return 0
    for name, value in target.items():
        if name in reference and np.asarray(value).dtype.kind in "fc":
            print("  " + describe(name, np.asarray(value), np.asarray(reference[name])))
    failing = judge(target, reference)
    if failing:
        print(f"REPRODUCED ({CHECK}): " + "; ".join(failing[:3]))
        return 1
    print(f"NOT REPRODUCED: the target passes the {CHECK} check")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as exc:  # never exit 1 (reproduced) because of a problem of our own
        print(f"cannot run here: {type(exc).__name__}: {exc}")
        sys.exit(2)
