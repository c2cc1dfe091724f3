"""Hostile and mistaken input to the real CLI, in a subprocess: one clear line, exit code 2, no traceback, and
nothing written outside the -o directory. Plus the two ordinary endings: not failing (1) and reduced (0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from reducer import errors

CLI_TIMEOUT = 120
FP32 = ["--runner", "onnxruntime:cpu:fp32"]


# --- models built here -----------------------------------------------------------------------------------
def _value(name: str, dtype=TensorProto.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, dtype, list(shape))


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def good_model() -> onnx.ModelProto:
    """x + w -> Relu -> Relu -> y, with a weight big enough that half the file cuts through it."""
    weight = numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), "w")
    nodes = [
        helper.make_node("Add", ["x", "w"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"], name="relu1"),
        helper.make_node("Relu", ["r"], ["y"], name="relu2"),
    ]
    return _model(nodes, [_value("x")], [_value("y")], [weight])


def external_model(location: str) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.ones((2, 3), dtype=np.float32), "w")
    external_data_helper.set_external_data(weight, location=location, offset=0, length=24)
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    return _model(nodes, [_value("x")], [_value("y")], [weight])


def write_model(path: Path, model: onnx.ModelProto) -> Path:
    """Raw bytes, no checks and no external-data handling: what a hostile file would be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


# --- running the CLI -------------------------------------------------------------------------------------
def _snapshot(root: Path) -> dict[str, tuple]:
    """Every path under root except out/, with what would show a write."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here == root:
            dirnames[:] = [d for d in dirnames if d != "out"]
        for name in [*dirnames, *filenames]:
            path = here / name
            info = path.lstat()
            seen[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return seen


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ONNX_REDUCE_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "reducer.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL,
    )


def assert_bad_input(cwd: Path, *args: str, mentions: tuple[str, ...] = ()) -> str:
    before = _snapshot(cwd)
    done = run_cli(cwd, *args)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == errors.EXIT_BAD_INPUT, (done.returncode, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("onnx-reduce: error:"), line
    assert line.strip() != "onnx-reduce: error:", line
    for word in mentions:
        assert word in line, f"{word!r} not in {line!r}"
    assert _snapshot(cwd) == before, "files were written outside out/"
    return line


@pytest.fixture
def work(tmp_path) -> Path:
    """cwd for the CLI; models live in models/, their own folder, which must not change."""
    write_model(tmp_path / "models" / "good.onnx", good_model())
    return tmp_path


# --- bad models --------------------------------------------------------------------------------------------
def test_not_an_onnx_file(work):
    (work / "models" / "notes.onnx").write_text("this is a text file, not a protobuf\n" * 20)
    assert_bad_input(work, "reduce", "models/notes.onnx", "-o", "out", mentions=("notes.onnx", "not a valid ONNX"))


def test_truncated_protobuf(work):
    data = (work / "models" / "good.onnx").read_bytes()
    (work / "models" / "half.onnx").write_bytes(data[: len(data) // 2])
    assert_bad_input(work, "reduce", "models/half.onnx", "-o", "out", mentions=("half.onnx", "not a valid ONNX"))


def test_missing_model_file(work):
    assert_bad_input(work, "reduce", "models/absent.onnx", "-o", "out", mentions=("absent.onnx",))


def test_graph_with_a_cycle(work):
    nodes = [
        helper.make_node("Relu", ["b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Add", ["x", "b"], ["y"], name="out"),
    ]
    write_model(work / "models" / "cycle.onnx", _model(nodes, [_value("x")], [_value("y")]))
    line = assert_bad_input(work, "reduce", "models/cycle.onnx", "-o", "out", mentions=("cycle",))
    assert "first" in line and "second" in line


def test_node_reads_an_undefined_tensor(work):
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    write_model(work / "models" / "ghost.onnx", _model(nodes, [_value("x")], [_value("y")]))
    assert_bad_input(work, "reduce", "models/ghost.onnx", "-o", "out", mentions=("ghost", "adder"))


def test_missing_external_data_file(work):
    write_model(work / "models" / "ext.onnx", external_model("weights.bin"))
    assert_bad_input(work, "reduce", "models/ext.onnx", "-o", "out", mentions=("weights.bin", "missing"))


@pytest.fixture
def secret(work) -> Path:
    """A file next to the model's folder that external data must never reach."""
    path = work / "secret.bin"
    path.write_bytes(np.full(6, 7.0, dtype=np.float32).tobytes())
    return path


def test_external_data_escaping_with_dotdot(work, secret):
    write_model(work / "models" / "escape.onnx", external_model("../secret.bin"))
    assert_bad_input(work, "reduce", "models/escape.onnx", "-o", "out", mentions=("../secret.bin", "refused"))


def test_external_data_at_an_absolute_path(work, secret):
    write_model(work / "models" / "absolute.onnx", external_model(str(secret)))
    assert_bad_input(work, "reduce", "models/absolute.onnx", "-o", "out", mentions=(str(secret), "refused"))


def test_external_data_through_a_symlink_out_of_the_folder(work, secret):
    (work / "models" / "link.bin").symlink_to(secret)
    write_model(work / "models" / "linked.onnx", external_model("link.bin"))
    assert_bad_input(work, "reduce", "models/linked.onnx", "-o", "out", mentions=("link.bin", "refused"))


def test_external_data_shorter_than_declared(work):
    (work / "models" / "short.bin").write_bytes(b"\0" * 10)
    write_model(work / "models" / "short.onnx", external_model("short.bin"))
    assert_bad_input(work, "reduce", "models/short.onnx", "-o", "out", mentions=("short.bin",))


# --- bad options ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("runner", ["tensorrt:fp99", "foo:bar", "onnxruntime:cpu:fp99"])
def test_unknown_runner(work, runner):
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--runner", runner,
                     mentions=("unknown runner", runner))


def test_unknown_strategy(work):
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--strategy", "nope",
                     mentions=("strategy", "nope"))


@pytest.mark.parametrize("flag, value", [("--max-checks", "1"), ("--time-limit", "0"), ("--max-checks", "many")])
def test_bad_limits(work, flag, value):
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", flag, value, mentions=(flag,))


def test_missing_output_option(work):
    assert_bad_input(work, "reduce", "models/good.onnx", *FP32, mentions=("-o",))
    assert not (work / "out").exists()


def test_input_shapes_garbage(work):
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--input-shapes", "x:[1,a,3",
                     mentions=("--input-shapes",))


def test_input_range_garbage(work):
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--input-range", "high",
                     mentions=("--input-range",))


def test_check_without_a_command(work):
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--check", mentions=("--check",))


def test_check_command_that_does_not_exist(work):
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--check", "/nonexistent/tool",
                     mentions=("/nonexistent/tool",))


def test_bad_fail_regex(work):
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--fail-regex", "(unclosed",
                     "--check", "true", mentions=("--fail-regex", "(unclosed"))


# --- bad --inputs -------------------------------------------------------------------------------------------
def _npz(work: Path, **arrays) -> str:
    np.savez(work / "feeds.npz", **arrays)
    return "feeds.npz"


def test_inputs_file_missing(work):
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--inputs", "nowhere.npz",
                     mentions=("--inputs", "nowhere.npz"))


def test_inputs_with_an_unknown_name(work):
    feeds = _npz(work, x=np.zeros((2, 3), np.float32), zzz=np.zeros((2, 3), np.float32))
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--inputs", feeds, mentions=("zzz",))


def test_inputs_with_a_wrong_shape(work):
    feeds = _npz(work, x=np.zeros((5, 5), np.float32))
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--inputs", feeds,
                     mentions=("'x'", "[5, 5]"))


def test_inputs_with_a_wrong_dtype(work):
    feeds = _npz(work, x=np.zeros((2, 3), np.float64))
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--inputs", feeds,
                     mentions=("'x'", "float64", "float32"))


def test_inputs_file_that_is_not_an_archive(work):
    (work / "feeds.npz").write_text("not a zip file")
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--inputs", "feeds.npz",
                     mentions=("feeds.npz",))


# --- ordinary endings ------------------------------------------------------------------------------------------
def test_a_model_that_does_not_fail_exits_1(work):
    before = _snapshot(work)
    done = run_cli(work, "reduce", "models/good.onnx", "-o", "out", *FP32, "--fail-on", "nan")
    assert "Traceback" not in done.stdout + done.stderr
    assert done.returncode == errors.EXIT_NOT_FAILING, done.stderr
    report = json.loads((work / "out" / "report.json").read_text())
    assert report["status"] == "not-failing"
    assert report["nodes_before"] == report["nodes_after"] == 3
    assert not (work / "out" / "minimal.onnx").exists()
    assert _snapshot(work) == before


def test_a_failing_check_command_is_reduced(work):
    before = _snapshot(work)
    # every model fails this check, so no part of the model carries the failure (the whole model without
    # any node still fails): the proof of cause would keep all of it; without the proof, one node is left
    done = run_cli(work, "reduce", "models/good.onnx", "-o", "out", "--no-cause-check", "--check",
                   sys.executable, "-c", "import sys; sys.exit(1)")
    assert "Traceback" not in done.stdout + done.stderr
    assert done.returncode == errors.EXIT_REDUCED, done.stderr
    out = work / "out"
    report = json.loads((out / "report.json").read_text())
    for key in ("status", "nodes_before", "nodes_after", "checks", "cache_hits", "seconds", "signature"):
        assert key in report, key
    assert report["status"] == "reduced"
    assert report["nodes_before"] == 3
    assert report["nodes_after"] == 1  # every model fails this check: one node is as small as it gets
    assert report["checks"] >= 2
    assert report["signature"]["kind"] == "command"
    assert report["signature"]["detail"] == "exit code 1"
    minimal = onnx.load(str(out / "minimal.onnx"))
    onnx.checker.check_model(minimal)
    assert len(minimal.graph.node) == 1
    assert _snapshot(work) == before


def test_a_check_command_checks_the_whole_model_while_the_reference_runs(work, tmp_path_factory):
    """A command needs no reference outputs, so its first check (the whole model) starts before the
    reference run has written the activation store, and counts as the first check all the same."""
    starts = tmp_path_factory.mktemp("starts") / "starts.txt"
    record = f"import time; open({str(starts)!r}, 'a').write(repr(time.time()) + '\\n'); raise SystemExit(1)"
    done = run_cli(work, "reduce", "models/good.onnx", "-o", "out", "--check", sys.executable, "-c", record)
    assert done.returncode == errors.EXIT_REDUCED, done.stderr
    report = json.loads((work / "out" / "report.json").read_text())
    started = [float(line) for line in starts.read_text().split()]
    assert report["checks"] == len(started) and report["original"]["failing"]
    assert started[0] < (work / "out" / "activations" / "index.json").stat().st_mtime
