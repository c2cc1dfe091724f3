#!/usr/bin/env python3
"""Reproduces a TensorRT failure found by onnx-reduce.

    python repro.py            # exit 1: the failure reproduces; 0: it does not; 2: cannot run here

It parses and builds TARGET_MODEL with TensorRT's Python API (module `tensorrt`, else `tensorrt_rtx`) at
PRECISION, with an optimization profile fixed to the shapes in the inputs file, and the builder's log at
verbose level on stderr. A parse or build failure needs nothing else. For a numeric check (NaN/Inf,
tolerance) the engine is executed through Polygraphy's TrtRunner and compared with ONNX Runtime on the
CPU in fp32 with graph optimizations off (the reducer's reference), with the same rule.
Non-zero means reproduced, like a failing test.
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
CHECK = "error"  # nan | tolerance | error
ATOL = 1e-05  # tolerance: an element fails where |t-r| > ATOL and |t-r| > RTOL*|r| (Polygraphy's elemwise rule)
RTOL = 1e-05
FAIL_REGEX = []  # error: only an error whose text matches one of these counts
REFERENCE_MODEL = "minimal.onnx"
TARGET_MODEL = "minimal.onnx"
PRECISION = "fp32"  # fp32 | tf32 | fp16 | bf16 | int8 | fp8 | best
INPUTS = "inputs.npz"
# --- end of settings ---

HERE = Path(__file__).resolve().parent
FLAGS = {"tf32": ["TF32"], "fp16": ["FP16"], "bf16": ["BF16"], "int8": ["INT8"], "fp8": ["FP8"],
         "best": ["TF32", "FP16", "BF16", "INT8", "FP8"]}


def import_tensorrt():
    for name in ("tensorrt", "tensorrt_rtx"):
        try:
            return name, __import__(name)
        except ImportError:
            continue
    return None, None


def build(trt, flavour: str, feeds: dict, errors: list) -> bytes:
    class Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, msg):
            name = getattr(severity, "name", str(severity))
            if "ERROR" in name:
                errors.append(msg)
            sys.stderr.write(f"[TRT] [{name}] {msg}\n")

    logger = Logger()
    builder = trt.Builder(logger)
    strongly_typed = flavour == "tensorrt_rtx" and hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if strongly_typed
                                     else 0)
    parser = trt.OnnxParser(network, logger)
    path = HERE / TARGET_MODEL
    if not parser.parse(path.read_bytes(), str(path)):
        messages = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise RuntimeError("TensorRTParseError: " + "; ".join(messages))
    config = builder.create_builder_config()
    if flavour == "tensorrt":
        if PRECISION == "fp32" and hasattr(trt.BuilderFlag, "TF32"):
            config.clear_flag(trt.BuilderFlag.TF32)
        for flag in FLAGS.get(PRECISION, []):
            if hasattr(trt.BuilderFlag, flag):
                config.set_flag(getattr(trt.BuilderFlag, flag))
    profile = builder.create_optimization_profile()
    for index in range(network.num_inputs):
        tensor = network.get_input(index)
        if tensor.name in feeds and any(d < 0 for d in tensor.shape):
            shape = feeds[tensor.name].shape
            profile.set_shape(tensor.name, shape, shape, shape)
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRTBuildError: " + "; ".join(errors[-5:]))
    return bytes(serialized)


def mismatches(target, ref):
    target, ref = np.asarray(target, np.float64), np.asarray(ref, np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        same = (np.isinf(ref) & (target == ref)) | (np.isnan(ref) & np.isnan(target))  # the same infinity, NaN
        absdiff = np.where(same, 0.0, np.abs(target - ref))
        reldiff = absdiff / np.where(ref == 0, np.finfo(np.float64).eps, np.abs(ref))
    return ((absdiff > ATOL) | np.isnan(absdiff)) & ((reldiff > RTOL) | np.isnan(reldiff))


def main(argv: list) -> int:
    flavour, trt = import_tensorrt()
    if trt is None:
        print("cannot run here: neither tensorrt nor tensorrt_rtx is installed")
        return 2
    with np.load(HERE / INPUTS, allow_pickle=False) as data:
        feeds = {name: data[name] for name in data.files}
    print(f"{flavour} {trt.__version__}; target: {TARGET_MODEL} at {PRECISION}; check: {CHECK}")
    errors: list = []
    try:
        engine_bytes = build(trt, flavour, feeds, errors)
    except RuntimeError as exc:
        text = str(exc)
        if CHECK != "error":
            print(f"cannot run here: the engine does not build: {text[:300]}")
            return 2
        matched = not FAIL_REGEX or any(re.search(p, text + "\n" + "\n".join(errors)) for p in FAIL_REGEX)
        print(("REPRODUCED: " if matched else "another failure: ") + text[:500])
        return 1 if matched else 0
    if CHECK == "error":
        print("not reproduced: the engine built")
        return 0
    try:
        import onnxruntime as ort
        from polygraphy.backend.trt import TrtRunner
    except ImportError as exc:
        print(f"cannot run here: a numeric check needs onnxruntime and polygraphy ({exc})")
        return 2
    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(engine_bytes)
    if engine is None:
        print("cannot run here: the engine does not load on this GPU")
        return 2
    with TrtRunner(engine) as runner:
        target = {name: np.asarray(value) for name, value in runner.infer(feeds).items()}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(HERE / REFERENCE_MODEL), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    reference = dict(zip(names, session.run(names, feeds), strict=True))
    failing = []
    for name, value in target.items():
        ref = reference.get(name)
        if ref is None or value.dtype.kind not in "fc":
            continue
        if CHECK == "nan":
            bad = int((~np.isfinite(value) & np.isfinite(ref)).sum()) if value.shape == ref.shape else 0
        else:
            bad = int(mismatches(value, ref).sum()) if value.shape == ref.shape else value.size
        if bad:
            failing.append(f"{name}: {bad} of {value.size} elements")
    print(("REPRODUCED: " + "; ".join(failing)) if failing else "not reproduced: outputs agree")
    return 1 if failing else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as exc:  # never exit 1 (reproduced) because of a problem of our own
        print(f"cannot run here: {type(exc).__name__}: {exc}")
        sys.exit(2)
