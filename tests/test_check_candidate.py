"""scripts/check_candidate.py, given what a user can give wrong: one line on stderr, exit 2 (nothing judged), no
traceback. Exit 2 is not the failure asked for (`--fail-code 1`), and onnx-reduce shows the command's last line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, save

from oracles.tensorrt_runner import installed_flavour

ROOT = Path(__file__).resolve().parent.parent
CHECK = [sys.executable, str(ROOT / "scripts" / "check_candidate.py")]


@pytest.fixture()
def relu(tmp_path: Path) -> tuple[Path, Path]:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = tmp_path / "relu.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=np.array([-1, 0, 1, 2], np.float32))
    return model, inputs


def _run(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CHECK, *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=120)


def _said_in_one_line(done: subprocess.CompletedProcess, words: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr


def test_a_passing_model_passes(relu):
    model, inputs = relu
    done = _run(model, inputs, "--runner", "onnxruntime:cpu:fp16", "--fail-on", "nan")
    assert done.returncode == 0 and done.stdout.startswith("PASS"), (done.stdout, done.stderr)


def test_the_same_infinity_in_both_runs_is_no_mismatch(tmp_path):
    """A cut exposes tensors that hold an infinity by design: T5's relative position buckets take the log of a zero
    position (-inf, then replaced by a Where). Both runs hold the same -inf there: no difference, as Polygraphy's
    --infinities-compare-equal says; before, the NaN of -inf - -inf made any candidate with it fail against itself
    (a 9-node "repro" of traceforge's encoder under O3). An infinity the reference does not hold still fails. The
    bundle's scripts judge alike."""
    from oracles.base import RunResult
    from oracles.checks import ToleranceCheck
    from reducer.repro_scripts import onnxruntime_repro, tensorrt_repro

    graph = helper.make_graph([helper.make_node("Log", ["x"], ["y"], name="log")], "log",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model, inputs = tmp_path / "log.onnx", tmp_path / "inputs.npz"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    np.savez(inputs, x=np.array([0, 1, 2, 3], np.float32))
    done = _run(model, inputs, "--runner", "onnxruntime:cpu:fp32:O3", "--fail-on", "tolerance", "--atol", "1e-5",
                "--rtol", "1e-5")
    assert done.returncode == 0 and done.stdout.startswith("PASS"), (done.stdout, done.stderr)
    ref = np.array([-np.inf, np.inf, 1.0, np.nan, np.nan, 2.0])
    target = np.array([-np.inf, 7.0, 1.0, np.nan, 3.0, np.nan])
    # the same -inf; an Inf the target lost; equal; NaN in both (caustic-nmr's by design); a NaN in one run only
    expected = [False, True, False, False, True, True]
    assert ToleranceCheck(1e-5, 1e-5).mismatches(target, ref)[0].tolist() == expected
    assert onnxruntime_repro.tolerance_mismatches(target, ref).tolist() == expected
    assert tensorrt_repro.mismatches(target, ref).tolist() == expected
    verdict = ToleranceCheck(1e-5, 1e-5).judge(RunResult("ok", {"y": np.array(-np.inf)}), {"y": np.array(-np.inf)})
    assert not verdict.failing  # a 0-d output too


def test_a_tolerance_failure_says_how_many_of_its_elements_are_nan_or_inf():
    """The largest difference is taken over finite ones: where the target holds NaN/Inf and the reference does not,
    the message says how many, as the bundle's script does. rivaGAN's decoder in fp16 on an H200 failed with
    "28 of 32 mismatched, max abs diff 0.01182", its repro the ReduceMean whose sum leaves fp16's range."""
    from oracles.base import RunResult
    from oracles.checks import ToleranceCheck
    from reducer.repro_scripts import onnxruntime_repro

    ref = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    target = np.array([1.0, np.inf, 3.05, np.nan], np.float32)
    verdict = ToleranceCheck(1e-2, 1e-2).judge(RunResult("ok", {"y": target}), {"y": ref})
    assert verdict.failing and verdict.elements == 3
    assert verdict.reason == "y: 3 of 4 mismatched (2 NaN/Inf where the reference is finite), max abs diff of the " \
                             "rest 0.05", verdict.reason
    finite = ToleranceCheck(1e-2, 1e-2).judge(RunResult("ok", {"y": np.array([1, 2, 3.05, 4], np.float32)}),
                                              {"y": ref})
    assert finite.reason == "y: 1 of 4 mismatched, max abs diff 0.05", finite.reason
    saved = onnxruntime_repro.CHECK, onnxruntime_repro.ATOL, onnxruntime_repro.RTOL
    onnxruntime_repro.CHECK, onnxruntime_repro.ATOL, onnxruntime_repro.RTOL = "tolerance", 1e-2, 1e-2
    try:
        said = onnxruntime_repro.judge({"y": target}, {"y": ref})
    finally:
        onnxruntime_repro.CHECK, onnxruntime_repro.ATOL, onnxruntime_repro.RTOL = saved
    assert said == ["y: 3 of 4 outside atol=0.01 and rtol=0.01 (2 NaN/Inf where the reference is finite)"], said


@pytest.mark.parametrize("which, words", [("model", "no-such.onnx: cannot load it"),
                                          ("inputs", "no-such.npz: no such file"),
                                          ("not-a-model", "cannot load it as an ONNX model")])
def test_missing_or_foreign_files(relu, tmp_path, which, words):
    model, inputs = relu
    if which == "model":
        model = tmp_path / "no-such.onnx"
    elif which == "inputs":
        inputs = tmp_path / "no-such.npz"
    else:
        model = tmp_path / "not.onnx"
        model.write_bytes(b"\xff\xfe definitely not protobuf" * 10)
    _said_in_one_line(_run(model, inputs, "--fail-on", "nan"), words)


def test_a_runner_that_is_not_one(relu):
    model, inputs = relu
    _said_in_one_line(_run(model, inputs, "--runner", "bogus:fp16"), "unknown runner 'bogus:fp16'")


@pytest.mark.parametrize("fail_on", ["tolerance", "error"])
def test_a_runner_this_machine_cannot_run(relu, fail_on):
    """TensorRT not installed: before, the tolerance check called the target anyway and said
    'TypeError: module name must be a string' as if the model had failed."""
    if installed_flavour() is not None:
        pytest.skip(f"{installed_flavour()} is installed here: the runner can run")
    model, inputs = relu
    _said_in_one_line(_run(model, inputs, "--runner", "tensorrt:fp16", "--fail-on", fail_on),
                      "cannot run tensorrt:fp16 here: neither tensorrt nor tensorrt_rtx is installed")
