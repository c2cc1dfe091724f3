"""The GPU oracles' glue, on the CPU: runner specs, why a runner cannot run, doctor, flaky verdicts
(--repeat / --min-fails) with a runner in a real worker process, worker placement on GPUs, and the
TensorRT failure kinds. What needs a GPU is in test_gpu.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import standins

from oracles import make_runner
from oracles.base import CheckJob, RunResult, Signature
from oracles.checks import ErrorCheck, runner_failure
from oracles.gpu import visible_gpus
from oracles.repeat import RepeatedOracle
from oracles.tensorrt_runner import TensorRTBuildError, TensorRTInternalError, classify_build_failure
from oracles.worker import Worker
from reducer.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
SILERO = ROOT / "corpus" / "models" / "silero_vad_16k_op15.onnx"


@pytest.mark.parametrize(("spec", "canonical"), [
    ("onnxruntime:cuda:fp16", "onnxruntime:cuda:fp16:tf32:O3"),
    ("onnxruntime:cuda:fp32:notf32", "onnxruntime:cuda:fp32:notf32:O3"),
    ("onnxruntime:cuda:fp32:O1:tf32", "onnxruntime:cuda:fp32:tf32:O1"),
    ("onnxruntime:tensorrt:fp16", "onnxruntime:tensorrt:fp16:O3"),
    ("onnxruntime:cpu:fp16-storage:O0", "onnxruntime:cpu:fp16-storage:O0"),
    ("tensorrt:fp16", "tensorrt:fp16"),
    ("tensorrt:best", "tensorrt:best"),
])
def test_runner_specs_are_canonical(spec, canonical):
    assert make_runner(spec).spec == canonical


@pytest.mark.parametrize("spec", ["onnxruntime:cpu:fp32:tf32", "onnxruntime:cuda:fp16-storage",
                                  "onnxruntime:cuda:fp16:tf32:notf32", "onnxruntime:cuda:fp16:O1:O2",
                                  "tensorrt:fp64", "tensorrt:fp16:extra", "onnxruntime:rocm:fp32"])
def test_bad_runner_specs_are_refused(spec):
    with pytest.raises(UsageError):
        make_runner(spec)


def test_nodes_kept_in_fp32_are_trusted_only_where_fp32_cannot_be_tf32():
    """Where it may be TF32, the driver checks once that the whole model with every node kept passes (test_gpu.py)."""
    assert make_runner("onnxruntime:cpu:fp16").exact_on_trust
    assert not make_runner("onnxruntime:cuda:fp16").exact_on_trust
    assert make_runner("onnxruntime:cuda:fp16:notf32").exact_on_trust


def test_gpu_runners_are_fp16_bounded_only_in_fp16():
    assert make_runner("onnxruntime:cuda:fp16").max_abs_value == 65504
    assert make_runner("onnxruntime:cuda:fp32").max_abs_value is None
    assert make_runner("tensorrt:fp16").max_abs_value == 65504
    assert make_runner("tensorrt:tf32").max_abs_value is None


@pytest.mark.skipif(bool(visible_gpus()), reason="this machine has a GPU: the refusal is for machines without")
def test_a_gpu_runner_without_a_gpu_is_one_line_and_exit_2(tmp_path):
    for runner in ("onnxruntime:cuda:fp16", "tensorrt:fp16"):
        done = subprocess.run([sys.executable, "-m", "reducer", "reduce", str(SILERO), "--runner", runner,
                               "-o", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "cannot run here" in lines[0], done.stderr
        assert not (tmp_path / "out" / "report.json").exists()


def test_doctor_runs_a_real_model_and_says_why_not():
    done = subprocess.run([sys.executable, "-m", "reducer", "doctor", "--json"], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    status = {r["runner"]: r for r in report["runners"]}
    assert status["onnxruntime:cpu:fp32:O3"]["status"] == "usable"
    assert status["onnxruntime:cpu:fp16:O3"]["status"] == "usable"
    for entry in report["runners"]:
        assert entry["status"] in ("usable", "builds-only", "unusable", "unavailable")
        assert (entry["status"] == "usable") == (entry["why"] == ""), entry
    assert "onnx" in report["machine"]["packages"]
    if not visible_gpus():
        assert status["onnxruntime:cuda:fp16:tf32:O3"]["status"] == "unavailable"
        assert status["tensorrt:fp16"]["why"]


def test_doctor_text_lists_every_runner():
    done = subprocess.run([sys.executable, "-m", "reducer", "doctor", "--no-probe"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0
    for spec in ("onnxruntime:cpu:fp32:O3", "onnxruntime:cuda:fp16:tf32:O3", "tensorrt:fp32"):
        assert spec in done.stdout


class _WorkerOracle:
    """A stand-in runner in a real worker process behind an ErrorCheck: the glue under test is
    RepeatedOracle, and every run is a real round trip to another process."""

    names_failing_outputs = False
    max_abs_value = None
    description = "standin"
    fingerprint = "standin"

    def __init__(self, mode: str):
        self.worker = Worker(f"standin:{mode}", factory=standins.make)
        self.check = ErrorCheck()

    def judge(self, job: CheckJob):
        result = self.worker.run(job.workdir / "model.onnx", {}, 60)
        return self.check.judge(result, {})

    def close(self):
        self.worker.close()


def _job(tmp_path: Path) -> CheckJob:
    (tmp_path / "model.onnx").write_text("not a mode word")
    return CheckJob(None, {}, {}, tmp_path)


def test_repeat_calls_a_flaky_candidate_failing_only_with_min_fails(tmp_path):
    inner = _WorkerOracle("flaky")  # run 1 passes, run 2 fails, run 3 passes, ...
    try:
        strict = RepeatedOracle(inner, repeat=3, min_fails=2)
        verdict = strict.judge(_job(tmp_path))
        assert not verdict.failing and verdict.runs == (1, 3) and verdict.flaky
        assert "failed 1 of 3 runs" in verdict.reason and "flaky tactic" in verdict.reason
        assert strict.flakiness.disagreed == 1 and strict.flakiness.runs == 3

        lenient = RepeatedOracle(inner, repeat=3, min_fails=1)  # run 4 fails: settled at once
        verdict = lenient.judge(_job(tmp_path))
        assert verdict.failing and verdict.runs == (1, 1)
        assert verdict.signature == Signature("error", "RuntimeError")
        again = type(verdict).from_json(json.loads(json.dumps(verdict.to_json())))
        assert again.runs == (1, 1) and again.failing
    finally:
        inner.close()


def test_repeat_stops_as_soon_as_the_outcome_is_settled(tmp_path):
    inner = _WorkerOracle("raise")
    try:
        oracle = RepeatedOracle(inner, repeat=5, min_fails=2)
        verdict = oracle.judge(_job(tmp_path))
        assert verdict.failing and verdict.runs == (2, 2) and not verdict.flaky
        assert oracle.flakiness.disagreed == 0
    finally:
        inner.close()


@pytest.mark.parametrize(("repeat", "min_fails"), [(0, 1), (2, 3), (3, 0)])
def test_repeat_flags_are_validated(repeat, min_fails):
    with pytest.raises(UsageError):
        RepeatedOracle(_WorkerOracle.__new__(_WorkerOracle), repeat, min_fails)


def test_worker_environment_reaches_the_runner_before_it_starts():
    worker = Worker("standin:env", factory=standins.make, env={"CUDA_VISIBLE_DEVICES": "3"})
    try:
        result = worker.run(Path("/nonexistent"), {}, 60)
    finally:
        worker.close()
    assert result.status == "ok" and int(result.outputs["cuda_visible_devices"][0]) == 3


def test_gpu_workers_are_pinned_one_per_gpu(monkeypatch):
    from oracles import builtin, gpu

    fake = [gpu.Gpu("0", "H100", "9.0", "580", "80 GiB"), gpu.Gpu("1", "H100", "9.0", "580", "80 GiB")]
    monkeypatch.setattr(gpu, "visible_gpus", lambda: fake)
    assert builtin.worker_environments(True, None) == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in builtin.worker_environments(True, 3)] == ["0", "1", "0"]
    assert builtin.worker_environments(False, None) == [{}]


def test_a_runner_that_cannot_run_here_is_not_a_verdict():
    worker = Worker("standin:unavailable", factory=standins.make)
    try:
        result = worker.run(Path("/nonexistent"), {}, 60)
    finally:
        worker.close()
    assert result.status == "unavailable" and "no such provider" in result.error


def test_tensorrt_failure_kinds_are_distinct_signatures():
    parse = runner_failure(RunResult("error", error="TensorRTParseError: In node 3 (importIf): UNSUPPORTED_NODE"))
    build = runner_failure(RunResult("error", error="TensorRTBuildError: no implementation for layer X"))
    internal = runner_failure(RunResult("error", error="TensorRTInternalError: Assertion failed: a != b"))
    assert {parse.signature.detail, build.signature.detail, internal.signature.detail} == {
        "TensorRTParseError", "TensorRTBuildError", "TensorRTInternalError"}
    assert not parse.signature.same_failure(build.signature)
    assert classify_build_failure(["[graphOptimizer.cpp::x] Assertion failed: dims.nbDims > 0"]) is \
        TensorRTInternalError
    assert classify_build_failure(["Could not find any implementation for node X"]) is TensorRTBuildError


def test_check_candidate_script_matches_runner_errors(tmp_path):
    """The shared check command's --fail-on error: exit 1 only when the regex matches the error."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    # an IR version every ONNX Runtime here reads (a newer onnx writes one an older runtime refuses first)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.graph.node[0].op_type = "NoSuchOp"  # ONNX Runtime refuses it: a real runner error
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", x=np.ones(2, np.float32))
    script = [sys.executable, str(ROOT / "scripts" / "check_candidate.py"), str(tmp_path / "m.onnx"),
              str(tmp_path / "in.npz"), "--runner", "onnxruntime:cpu:fp32", "--fail-on", "error"]
    assert subprocess.run([*script, "--fail-regex", "NoSuchOp"], cwd=ROOT, capture_output=True).returncode == 1
    assert subprocess.run([*script, "--fail-regex", "elephant"], cwd=ROOT, capture_output=True).returncode == 3


def test_tensorrt_bundle_scripts_name_the_build_and_check(tmp_path):
    """A TensorRT bundle's repro.sh carries the trtexec and polygraphy lines with the precision and the
    fed shapes; its repro.py is valid Python that says plainly when TensorRT is missing (exit 2)."""
    from reducer.repro import ReproFacts, family_of

    options = {"fail_on": "error", "atol": 1e-5, "rtol": 1e-5, "fail_regex": ["Assertion tScope"]}
    facts = ReproFacts(options, "tensorrt:fp16", "minimal.onnx", {"kind": "error", "detail": "TensorRTInternalError"},
                       {"x": [1, 3, 48, 192]})
    family = family_of(facts)
    script = family.repro_sh(facts)
    assert "trtexec --onnx=minimal.onnx --verbose --fp16 --shapes=x:1x3x48x192" in script
    assert "--trt-opt-shapes 'x:[1, 3, 48, 192]'" in script and "--fp16" in script
    assert "Assertion tScope" in script
    (tmp_path / "repro.py").write_text(family.repro_py(facts))
    compile((tmp_path / "repro.py").read_text(), "repro.py", "exec")
    assert "FAIL_REGEX = ['Assertion tScope']" in (tmp_path / "repro.py").read_text()
    from oracles.tensorrt_runner import installed_flavour

    if installed_flavour() is None:
        np.savez(tmp_path / "inputs.npz", x=np.zeros((1, 3, 48, 192), np.float32))
        done = subprocess.run([sys.executable, "-I", str(tmp_path / "repro.py")], capture_output=True, text=True)
        assert done.returncode == 2 and "cannot run here" in done.stdout
