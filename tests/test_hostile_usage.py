"""Hostile and mistaken usage of the real CLI, in a subprocess: bad flag values, output folders that cannot be
made, models and inputs that are not what they claim, hostile node and tensor names. Each ends with one error line
naming the cause (`onnx-reduce: error: ...`), a documented exit code, no traceback, and nothing written outside
the -o folder."""

from __future__ import annotations

import base64
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from corpus_files import corpus_model
from onnx import TensorProto, helper, numpy_helper
from test_bad_input import FP32, _model, _snapshot, _value, assert_bad_input, good_model, run_cli, write_model

from reducer import errors


@pytest.fixture
def work(tmp_path) -> Path:
    write_model(tmp_path / "models" / "good.onnx", good_model())
    return tmp_path


def reduce_args(*extra: str) -> tuple[str, ...]:
    return ("reduce", "models/good.onnx", "-o", "out", *FP32, *extra)


def assert_error_line(work: Path, *args: str, mentions: tuple[str, ...] = ()) -> str:
    """A failure found once the run has started (its progress lines come first): the last line is the one
    error line, exit 2, no traceback, nothing written outside out/."""
    before = _snapshot(work)
    done = run_cli(work, *args)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == errors.EXIT_BAD_INPUT, (done.returncode, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert [line for line in lines if "error" in line] == lines[-1:], done.stderr
    for word in mentions:
        assert word in lines[-1], f"{word!r} not in {lines[-1]!r}"
    assert _snapshot(work) == before, "files were written outside out/"
    return lines[-1]


# --- item 8: flags out of their range are usage errors (exit 2), not internal errors (exit 4) -----------------
@pytest.mark.parametrize("seed", ["-1", "-4294967296"])
def test_negative_seed(work, seed):
    assert_bad_input(work, *reduce_args("--seed", seed), mentions=("--seed", seed))


@pytest.mark.parametrize("value", ["0,inf", "-inf,0", "nan,1", "-1e308,1e308"])
def test_input_range_that_is_not_finite(work, value):
    assert_bad_input(work, *reduce_args("--input-range", value), mentions=("--input-range",))


@pytest.mark.parametrize("value", ["nan", "inf", "1e12", "0", "-5"])
def test_check_timeout_out_of_range(work, value):
    assert_bad_input(work, *reduce_args("--check-timeout", value), mentions=("--check-timeout", "604800"))


def test_check_timeout_of_a_week_is_accepted(work):
    done = run_cli(work, *reduce_args("--check-timeout", "604800", "--fail-on", "nan"))
    assert done.returncode == errors.EXIT_NOT_FAILING, done.stderr


def test_check_timeout_out_of_range_for_a_check_command(work):
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", "--check-timeout", "inf", "--check", "true",
                     mentions=("--check-timeout",))


def test_an_option_after_check_is_said_to_be_the_commands(work):
    """`--check` ends the options: `-o out` after it went to the check command, so -o is missing; the error says
    where it went, and says nothing of the kind where -o was left out altogether."""
    line = assert_bad_input(work, "reduce", "models/good.onnx", "--check", "true", "{model}", "-o", "out",
                            mentions=("--output", "'-o' is there, after --check", "put --check last"))
    assert "after --check" not in assert_bad_input(work, "reduce", "models/good.onnx", "--check", "true", "{model}",
                                                   mentions=("--output",)), line


def test_check_timeout_out_of_range_for_the_check_subcommand(work):
    assert_bad_input(work, "check", "models/good.onnx", *FP32, "--check-timeout", "nan", mentions=("--check-timeout",))


@pytest.mark.parametrize("flag, value", [("--atol", "nan"), ("--rtol", "nan"), ("--atol", "-1"), ("--rtol", "inf")])
def test_tolerance_that_is_not_a_finite_non_negative_number(work, flag, value):
    assert_bad_input(work, *reduce_args("--fail-on", "tolerance", flag, value), mentions=(flag, value))


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_faithful_max_that_is_not_finite(work, value):
    assert_bad_input(work, *reduce_args("--faithful-max", value), mentions=("--faithful-max",))


@pytest.mark.parametrize("dtype, value", [(TensorProto.INT8, "0,1000"), (TensorProto.INT32, "0.2,0.7")])
def test_input_range_that_an_integer_input_cannot_hold(work, dtype, value):
    """numpy refused these (exit 4), or wrapped 1000 around to -24 in int8 without a word."""
    node = helper.make_node("Abs", ["x"], ["y"], name="abs")
    write_model(work / "models" / "ints.onnx", _model([node], [_value("x", dtype)], [_value("y", dtype)]))
    assert_bad_input(work, "reduce", "models/ints.onnx", "-o", "out", *FP32, "--input-range", value,
                     mentions=("'x'", value))


# --- item 8: an output folder that cannot be made or written ------------------------------------------------------
def test_output_under_a_regular_file(work):
    (work / "notes.txt").write_text("a file, not a folder")
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "notes.txt/out", *FP32,
                     mentions=("notes.txt/out", "cannot create"))


def test_output_that_is_a_regular_file(work):
    (work / "out").write_text("a file, not a folder")
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "out", *FP32, mentions=("'-o'", "is a file"))


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc here")
def test_output_under_proc(work):
    """mkdir fails under /proc even for root."""
    assert_bad_input(work, "reduce", "models/good.onnx", "-o", "/proc/onnx-reduce-out", *FP32,
                     mentions=("/proc/onnx-reduce-out", "cannot create"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a folder whatever its mode: chmod cannot stop it")
def test_output_in_a_folder_without_write_permission(work):
    locked = work / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert_bad_input(work, "reduce", "models/good.onnx", "-o", "locked/out", *FP32,
                         mentions=("locked/out", "cannot create"))
    finally:
        locked.chmod(0o755)


def test_check_subcommand_output_under_a_regular_file(work):
    (work / "notes.txt").write_text("a file, not a folder")
    assert_bad_input(work, "check", "models/good.onnx", "-o", "notes.txt/out", *FP32, mentions=("cannot create",))


# --- item 9: newcomer snags -------------------------------------------------------------------------------------------
def test_output_is_shown_as_required(work):
    done = run_cli(work, "reduce", "--help")
    option = done.stdout[done.stdout.index("-o, --output"):].split("\n  -")[0]
    assert "[required]" in option, option
    assert_bad_input(work, "reduce", "models/good.onnx", *FP32, mentions=("'-o'",))


def _reshape_model(work: Path, dim: str | None = "N") -> str:
    """y = reshape(x, [2, 3]) with x declared [N, 3]: N left to its default of 1 cannot be reshaped."""
    shape = numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "shape")
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")
    write_model(work / "models" / "dynamic.onnx", _model([node], [_value("x", shape=(dim, 3))], [_value("y")], [shape]))
    return "models/dynamic.onnx"


@pytest.mark.parametrize("dim, spelled", [("N", "x:[N,3]"), (None, "x:[?,3]")])
def test_defaulted_dims_are_named_when_the_reference_run_fails(work, dim, spelled):
    line = assert_error_line(work, "reduce", _reshape_model(work, dim), "-o", "out", *FP32,
                             mentions=("reference run", "dims defaulted to 1: x[0]", f"--input-shapes {spelled}"))
    assert "reshape" in line.lower()


def test_defaulted_dims_are_noted_and_input_shapes_sets_them(work):
    model = _reshape_model(work)
    done = run_cli(work, "reduce", model, "-o", "out", *FP32, "--input-shapes", "x:[2,3]")
    assert done.returncode == errors.EXIT_NOT_FAILING, done.stderr
    assert "defaulted" not in done.stderr
    done = run_cli(work, "check", model, *FP32)
    assert "note: dims defaulted to 1: x[0]" in done.stderr


def test_doctor_lists_fp16_storage(work):
    done = run_cli(work, "doctor", "--no-probe")
    assert done.returncode == 0, done.stderr
    assert "onnxruntime:cpu:fp16-storage:O3" in done.stdout


def test_a_corpus_model_that_cannot_be_fetched_skips_with_the_reason(monkeypatch):
    monkeypatch.delenv("ONNX_REDUCE_REQUIRE_CORPUS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="models/not-in-the-manifest.onnx missing"):
        corpus_model("models/not-in-the-manifest.onnx")


def test_a_corpus_model_that_cannot_be_fetched_fails_where_required(monkeypatch):
    monkeypatch.setenv("ONNX_REDUCE_REQUIRE_CORPUS", "1")
    with pytest.raises(pytest.fail.Exception, match="models/not-in-the-manifest-either.onnx missing"):
        corpus_model("models/not-in-the-manifest-either.onnx")


def test_a_corpus_model_that_is_here_is_not_fetched():
    assert corpus_model("models/silero_vad_16k_op15.onnx").is_file()


# --- models that are not what they claim -----------------------------------------------------------------------------
def test_a_directory_as_model(work):
    (work / "models" / "folder.onnx").mkdir()
    assert_bad_input(work, "reduce", "models/folder.onnx", "-o", "out", *FP32, mentions=("folder.onnx",))


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_a_model_that_links_to_dev_zero_does_not_hang(work):
    (work / "models" / "zero.onnx").symlink_to("/dev/zero")
    assert_bad_input(work, "reduce", "models/zero.onnx", "-o", "out", *FP32, mentions=("zero.onnx", "not a file"))


def test_a_model_that_is_a_fifo_does_not_hang(work):
    os.mkfifo(work / "models" / "pipe.onnx")  # opening it to read would wait for a writer forever
    assert_bad_input(work, "reduce", "models/pipe.onnx", "-o", "out", *FP32, mentions=("pipe.onnx", "not a file"))


def test_a_graph_without_nodes(work):
    write_model(work / "models" / "empty.onnx", _model([], [_value("x")], [_value("x")]))
    assert_bad_input(work, "reduce", "models/empty.onnx", "-o", "out", *FP32, mentions=("empty.onnx", "no graph"))


def _relu(work: Path, name: str, shape=(2, 3), opset: int = 17) -> str:
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_value("x", shape=shape)],
                   [_value("y", shape=shape)])
    model.opset_import[0].version = opset
    write_model(work / "models" / name, model)
    return f"models/{name}"


def test_a_huge_declared_dimension(work):
    model = _relu(work, "huge.onnx", shape=(10**12, 10**12))
    assert_bad_input(work, "reduce", model, "-o", "out", *FP32, mentions=("'x'", "GiB", "--input-shapes"))


def test_a_negative_declared_dimension(work):
    model = _relu(work, "negative.onnx", shape=(-5, 3))
    assert_bad_input(work, "reduce", model, "-o", "out", *FP32, mentions=("'x'", "negative dimension"))


def test_an_opset_onnx_runtime_does_not_know(work):
    """ONNX Runtime's message starts with its C++ source location; the line keeps what it says instead."""
    model = _relu(work, "future.onnx", opset=999)
    assert_error_line(work, "reduce", model, "-o", "out", *FP32, mentions=("reference run", "Opset 999"))


def test_an_op_of_an_unknown_custom_domain(work):
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example.unknown")
    model = _model([node], [_value("x")], [_value("y")])
    model.opset_import.append(helper.make_opsetid("com.example.unknown", 1))
    write_model(work / "models" / "custom.onnx", model)
    assert_error_line(work, "reduce", "models/custom.onnx", "-o", "out", *FP32,
                      mentions=("reference run", "com.example.unknown:Frobnicate"))


# --- inputs that are not what they claim -----------------------------------------------------------------------------
def test_pickled_objects_in_an_npz_are_refused(work):
    np.savez(work / "feeds.npz", x=np.array([{"payload": 1}], dtype=object))
    assert_bad_input(work, *reduce_args("--inputs", "feeds.npz"), mentions=("feeds.npz", "allow_pickle=False"))


def test_a_pickled_npy_is_refused(work):
    np.save(work / "feeds.npy", np.array([{"payload": 1}], dtype=object), allow_pickle=True)
    assert_bad_input(work, *reduce_args("--inputs", "feeds.npy"), mentions=("feeds.npy", ".npz"))


def test_pickled_objects_in_a_polygraphy_json_are_refused(work):
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"payload": 1}], dtype=object), allow_pickle=True)
    from polygraphy.json import save_json

    save_json([{"x": np.zeros((2, 3), np.float32)}], str(work / "feeds.json"))
    data = json.loads((work / "feeds.json").read_text())
    data[0]["x"]["array"] = base64.b64encode(buffer.getvalue()).decode()
    (work / "feeds.json").write_text(json.dumps(data))
    assert_bad_input(work, *reduce_args("--inputs", "feeds.json"), mentions=("feeds.json", "cannot read"))


def test_an_npz_with_an_extra_array_named_like_a_path(work):
    with zipfile.ZipFile(work / "feeds.npz", "w") as archive:
        for name, value in (("x", np.zeros((2, 3), np.float32)), ("../evil", np.ones(3, np.float32))):
            buffer = io.BytesIO()
            np.save(buffer, value)
            archive.writestr(f"{name}.npy", buffer.getvalue())
    assert_bad_input(work, *reduce_args("--inputs", "feeds.npz"), mentions=("../evil", "not an input"))
    assert not (work.parent / "evil.npy").exists()


def test_a_folder_as_the_inputs_file(work):
    (work / "feeds.npz").mkdir()
    assert_bad_input(work, *reduce_args("--inputs", "feeds.npz"), mentions=("--inputs", "feeds.npz"))


@pytest.mark.parametrize("how", ["inputs", "shapes"])
def test_a_zero_size_input_is_run_not_refused(work, how):
    model = _relu(work, "dynamic.onnx", shape=("N", 3))
    np.savez(work / "feeds.npz", x=np.zeros((0, 3), np.float32))
    given = ("--inputs", "feeds.npz") if how == "inputs" else ("--input-shapes", "x:[0,3]")
    before = _snapshot(work)
    done = run_cli(work, "reduce", model, "-o", "out", *FP32, *given)
    assert "Traceback" not in done.stderr
    assert done.returncode == errors.EXIT_NOT_FAILING, done.stderr
    assert json.loads((work / "out" / "report.json").read_text())["status"] == "not-failing"
    assert _snapshot(work) == before


# --- hostile names: every file written stays in out/ ----------------------------------------------------------------
HOSTILE_NAMES = ["../../escape", "/abs/path", "a/b/c", "minimal.onnx", "report.json", "ünïcødé_名前", "n" * 3000, ".."]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=lambda n: n if len(n) < 20 else f"{len(n)}-chars")
def test_hostile_names_never_escape_the_output(work, name):
    """The failing node, its output and its weight all carry the name: x * 1e5 overflows fp16 storage
    (Inf), then Inf - Inf is NaN. The reduction keeps them, writes its files and bundle, all inside out/."""
    weight = numpy_helper.from_array(np.full((2, 3), 1e5, np.float32), name + ".w")
    nodes = [helper.make_node("Mul", ["x", weight.name], [name], name=name),
             helper.make_node("Sub", [name, name], ["y"], name="sub")]
    write_model(work / "models" / "hostile.onnx", _model(nodes, [_value("x")], [_value("y")], [weight]))
    before = _snapshot(work)
    done = run_cli(work, "reduce", "models/hostile.onnx", "-o", "out", "--runner", "onnxruntime:cpu:fp16-storage")
    assert "Traceback" not in done.stderr
    assert done.returncode == errors.EXIT_REDUCED, done.stderr
    assert _snapshot(work) == before, "files were written outside out/"
    out = (work / "out").resolve()
    for path in out.rglob("*"):
        assert path.resolve().is_relative_to(out), path
    minimal = onnx.load(str(out / "minimal.onnx"))
    assert name in {node.name for node in minimal.graph.node}
    with zipfile.ZipFile(out / "bundle.zip") as archive:
        for member in archive.namelist():
            assert member.startswith("bundle/") and ".." not in Path(member).parts, member


def test_a_model_over_two_gib_is_refused_only_by_runners_that_need_it_in_one_message(tmp_path):
    """Its weights in an external file (declared only: the check reads no weight). ONNX Runtime's runners read
    candidates' weights from files, so they take it; a runner that takes each candidate as one protobuf message
    (which cannot pass 2 GiB) is refused in one line, before the reference run, not after minutes."""
    from reducer.errors import BadModelError
    from reducer.model import refuse_over_two_gib

    weight = numpy_helper.from_array(np.zeros(1, np.float32), "w")
    weight.ClearField("raw_data")
    weight.dims[:] = [600_000_000]  # 2.2 GiB of float32
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(600_000_000 * 4))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    nodes = [helper.make_node("ReduceSum", ["w"], ["s"], name="sum", keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"], name="add")]
    model = _model(nodes, [_value("x")], [_value("y")], [weight])
    path = tmp_path / "big.onnx"
    for runner in ("onnxruntime:cpu:fp32", "onnxruntime:cpu:fp16-storage", "onnxruntime:cpu:fp16", None):
        refuse_over_two_gib(model, path, runner)
    with pytest.raises(BadModelError) as refused:
        refuse_over_two_gib(model, path, "tensorrt:fp16")
    message = str(refused.value)
    assert "\n" not in message and "2.2 GiB" in message and "tensorrt:fp16" in message and "not support" in message
