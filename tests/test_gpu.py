"""GPU runners on a real GPU (marked `gpu`; skipped with the reason on machines where the runner cannot
run, e.g. CI). Their figures on an H100 are in BENCHMARKS.md (scripts/gpu_proof.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from corpus_files import corpus_model

from oracles import make_runner
from reducer.doctor import run_probe

ROOT = Path(__file__).resolve().parent.parent
REC_INPUTS = ROOT / "corpus" / "inputs" / "ppocrv4_rec_textline_rawpixels.npz"
SILERO = ROOT / "corpus" / "models" / "silero_vad_16k_op15.onnx"
SILERO_INPUTS = ROOT / "corpus" / "inputs" / "silero_vad_int16pcm.npz"

pytestmark = pytest.mark.gpu


def _needs(spec: str) -> None:
    why = make_runner(spec).unavailable_reason()
    if why:
        pytest.skip(f"{spec} cannot run here: {why}")


@pytest.mark.parametrize("spec", ["onnxruntime:cuda:fp32:notf32", "onnxruntime:cuda:fp16"])
def test_cuda_runner_computes_on_the_gpu(spec):
    _needs(spec)
    result, expected = run_probe(make_runner(spec).spec, uses_gpu=True)
    assert result.status == "ok", result.error
    assert np.allclose(result.outputs["y"], expected, atol=0.05, rtol=0.05)


def test_tensorrt_builds_and_runs_or_says_exactly_why_not():
    _needs("tensorrt:fp32")
    result, expected = run_probe("tensorrt:fp32", uses_gpu=True)
    assert "[onnx-reduce] tensorrt:fp32 with tensorrt" in result.log  # the flavour, in every log
    assert "[TRT] [V]" in result.log  # the builder log, verbose
    if result.status == "ok":
        assert np.allclose(result.outputs["y"], expected, atol=1e-3)
    else:  # built, but the runtime cannot execute on this GPU (TensorRT-RTX on compute capability 9.0)
        assert result.error.startswith("TensorRTEngineError"), result.error


def test_cuda_fp16_nan_is_reduced_on_the_gpu(tmp_path):
    _needs("onnxruntime:cuda:fp16")
    rec = corpus_model("models/ch_PP-OCRv4_rec_infer.onnx")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "reducer", "reduce", str(rec), "--inputs", str(REC_INPUTS),
                           "--runner", "onnxruntime:cuda:fp16", "--fail-on", "nan", "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "reduced" and report["final"]["failing"]
    assert report["signature"]["kind"] == "nan"
    assert report["nodes_after"] <= 10 < report["nodes_before"]
    _bundle_reproduces(out)


def _bundle_reproduces(out: Path) -> None:
    """The bundle replays with `bundle verify` (exit 0) and its standalone repro.py reproduces (exit 1)."""
    import zipfile

    verify = subprocess.run([sys.executable, "-m", "reducer", "bundle", "verify", str(out / "bundle.zip")],
                            capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    unpacked = out.parent / "unpacked"
    with zipfile.ZipFile(out / "bundle.zip") as archive:
        archive.extractall(unpacked)
    repro = subprocess.run([sys.executable, "repro.py"], capture_output=True, text=True, cwd=unpacked / "bundle",
                           timeout=900)
    assert repro.returncode == 1, repro.stdout + repro.stderr


def test_tensorrt_internal_error_is_reduced_with_its_message(tmp_path):
    """Silero VAD's decoder conditional trips an internal assertion in TensorRT-RTX's builder (seen on
    H100, TensorRT-RTX 1.7.1): reduced with the assertion's text as --fail-regex, repeated builds."""
    _needs("tensorrt:fp32")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "reducer", "reduce", str(SILERO), "--inputs", str(SILERO_INPUTS),
                           "--runner", "tensorrt:fp32", "--fail-on", "error", "--fail-regex",
                           r"Internal Error \(Assertion tScope", "--repeat", "2", "--min-fails", "2",
                           "-o", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    if report.get("status") == "not-failing":
        pytest.skip(f"this TensorRT builds silero's conditional: {report['original']['reason']}")
    assert done.returncode == 0, done.stderr[-2000:]
    # the Cast feeding the If: 2 nodes at the top level; the If's branches (the nodes counted with bodies) are
    # not reduced while the If itself must stay for the failure
    assert report["status"] == "reduced" and report["top_level_nodes_after"] <= 3
    assert report["nodes_after"] < report["nodes_before"]
    flakiness = report["flakiness"]
    assert flakiness["repeat"] == 2 and flakiness["runs"] > flakiness["candidates"] >= 1
    _bundle_reproduces(out)


def _matmul_chain(path: Path) -> None:
    """x -> MatMul -> Tanh -> MatMul: 1024-long dot products, which fp16 and TF32 (a 10-bit mantissa both) round
    alike, beyond a 1e-4 tolerance."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    weights = [numpy_helper.from_array((rng.standard_normal((1024, 1024)) / 32).astype(np.float32), f"w{i}")
               for i in range(2)]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"], name="first"),
             helper.make_node("Tanh", ["h"], ["t"], name="squash"),
             helper.make_node("MatMul", ["t", "w1"], ["y"], name="second")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 1024])], weights)
    import onnx

    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    np.savez(path.with_suffix(".npz"), x=rng.standard_normal((8, 1024)).astype(np.float32))


@pytest.mark.parametrize("tf32", [True, False])
def test_nodes_kept_in_fp32_under_tf32_are_checked_before_a_proof_rests_on_them(tmp_path, tf32):
    """With TF32 on (ONNX Runtime's default on CUDA), a MatMul kept in fp32 rounds as fp16 does: the whole model
    with every node kept still fails at 1e-4, so a proof kept in fp32 would be vacuous. The driver checks it once
    and feeds the reference instead, saying why; with TF32 off, the nodes are kept in fp32 and nothing is said."""
    spec = "onnxruntime:cuda:fp16" + ("" if tf32 else ":notf32")
    _needs(spec)
    model = tmp_path / "chain.onnx"
    _matmul_chain(model)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "reducer", "reduce", str(model), "--inputs",
                           str(model.with_suffix(".npz")), "--runner", spec, "--fail-on", "tolerance", "--atol", "1e-4",
                           "--rtol", "1e-4", "-o", str(out), "--json"], capture_output=True, text=True, cwd=ROOT,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    cause = json.loads(done.stdout)["cause"]
    assert cause["method"] == ("reference" if tf32 else "fp32"), cause
    assert ("keep_fp32_refused" in cause) is tf32
