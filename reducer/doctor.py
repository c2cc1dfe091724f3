"""`onnx-reduce doctor`: which runners work on this machine, and why the others do not.

Each runner is asked first why it cannot run (cheap: a missing module, GPU or provider); the rest run
a small real model in an isolated worker, as a check would, and are compared with numpy: a runtime
that imports but cannot build or execute (TensorRT-RTX on a GPU it does not support, a CUDA provider
whose libraries do not load) shows up here, with its message, and not in the middle of a reduction.
"""

from __future__ import annotations

import platform
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PROBED_RUNNERS = (
    "onnxruntime:cpu:fp32",
    "onnxruntime:cpu:fp16",
    "onnxruntime:cpu:fp16-storage",
    "onnxruntime:cuda:fp32",
    "onnxruntime:cuda:fp16",
    "onnxruntime:tensorrt:fp16",
    "tensorrt:fp32",
    "tensorrt:fp16",
)
PACKAGES = ("onnx", "onnxruntime", "onnxruntime-gpu", "onnxconverter-common", "polygraphy", "onnx-graphsurgeon",
            "numpy", "tensorrt", "tensorrt-rtx", "cuda-python", "cuda-bindings")
PROBE_TIMEOUT = 180.0


def probe_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray]:
    """y = relu(x @ w + b): small, yet a real GEMM for a GPU runtime to build and run."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
         helper.make_node("Add", ["xw", "b"], ["xwb"], name="add"),
         helper.make_node("Relu", ["xwb"], ["y"], name="relu")],
        "doctor_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": x}, np.maximum(x @ w + b, 0)


def write_probe(folder: Path) -> tuple[Path, dict[str, Path], np.ndarray]:
    """The probe model and its input as files in `folder`, as a check sends them to a worker, and the
    expected output."""
    from oracles.worker import write_feeds

    model, feeds, expected = probe_model()
    model_path = folder / "probe.onnx"
    onnx.save(model, str(model_path))
    return model_path, write_feeds(feeds, folder), expected


def run_probe(spec: str, uses_gpu: bool, timeout: float = PROBE_TIMEOUT):
    """The probe run once by `spec` in a fresh worker (pinned to the first GPU for GPU runners):
    (RunResult, expected output)."""
    from oracles.builtin import worker_environments
    from oracles.worker import Worker

    with tempfile.TemporaryDirectory(prefix="onnx-reduce-doctor-") as scratch:
        model_path, feed_paths, expected = write_probe(Path(scratch))
        worker = Worker(spec, env=worker_environments(uses_gpu, 1)[0])
        try:
            return worker.run(model_path, feed_paths, timeout), expected
        finally:
            worker.close()


def packages() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    for dist in distributions():  # CUDA / cuDNN / TensorRT libraries installed from PyPI
        name = dist.metadata["Name"] or ""
        if name.lower().startswith(("nvidia-cuda-runtime", "nvidia-cudnn", "tensorrt-rtx", "tensorrt-cu")):
            found[name] = dist.version
    return dict(sorted(found.items()))


def machine() -> dict:
    from oracles.gpu import describe_gpus, driver_cuda_version, why_no_gpu

    info = {
        "python": sys.version.split()[0],
        "os": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "gpus": describe_gpus(),
        "driver_cuda": driver_cuda_version() or None,
        "packages": packages(),
    }
    if not info["gpus"]:
        info["no_gpu"] = why_no_gpu()
    try:
        from reducer.interrupts import deferred

        with deferred():  # a Ctrl-C meanwhile is raised, not taken for a missing onnxruntime
            import onnxruntime

        info["onnxruntime_providers"] = onnxruntime.get_available_providers()
    except ImportError:
        info["onnxruntime_providers"] = []
    return info


def diagnose_runner(spec: str, probe: bool = True, timeout: float = PROBE_TIMEOUT) -> dict:
    """{"runner", "status": usable | builds-only | unusable | unavailable | not-probed, "why"}."""
    from oracles import make_runner

    runner = make_runner(spec)
    entry = {"runner": runner.spec}
    why_not = runner.unavailable_reason()
    if why_not:
        return {**entry, "status": "unavailable", "why": why_not}
    if not probe:
        return {**entry, "status": "not-probed", "why": ""}
    result, expected = run_probe(runner.spec, getattr(runner, "uses_gpu", False), timeout)
    if result.status != "ok":
        first = (result.error.strip().splitlines() or [""])[0][:400]
        if first.startswith("TensorRTEngineError"):
            return {**entry, "status": "builds-only", "why": "builds engines but cannot execute them here: " + first}
        return {**entry, "status": "unusable", "why": first, "seconds": round(result.seconds, 2)}
    got = result.outputs.get("y")
    if got is None or got.shape != expected.shape or not np.allclose(got, expected, atol=0.05, rtol=0.05):
        return {**entry, "status": "unusable", "why": "ran, but a small GEMM gave wrong results"}
    return {**entry, "status": "usable", "why": "", "seconds": round(result.seconds, 2)}


def diagnose(specs: list[str] | None = None, probe: bool = True) -> dict:
    from oracles import runner_families

    return {
        "machine": machine(),
        "runner_families": sorted(runner_families()),
        "runners": [diagnose_runner(spec, probe) for spec in (specs or PROBED_RUNNERS)],
    }


def render(report: dict) -> str:
    facts = report["machine"]
    lines = [f"python {facts['python']} on {facts['os']} ({facts['cpu']})"]
    for gpu in facts["gpus"]:
        lines.append(f"GPU: {gpu['name']}, compute capability {gpu['compute_capability']}, driver {gpu['driver']}"
                     f", CUDA {facts['driver_cuda'] or '?'} (driver)")
    if not facts["gpus"]:
        lines.append(f"GPU: none ({facts.get('no_gpu', '')})")
    lines.append("packages: " + ", ".join(f"{k} {v}" for k, v in facts["packages"].items()))
    lines.append("onnxruntime providers: " + (", ".join(facts["onnxruntime_providers"]) or "none"))
    lines.append("runners:")
    width = max(len(r["runner"]) for r in report["runners"])
    for entry in report["runners"]:
        why = f"  {entry['why']}" if entry["why"] else ""
        lines.append(f"  {entry['runner']:<{width}}  {entry['status']}{why}")
    return "\n".join(lines)
