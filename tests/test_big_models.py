"""Models whose weights live in external data, as those over 2 GiB must: candidates reference the weights and
are written with only the bytes they use, workers read them by path, the bundle ships what minimal.onnx uses.
The light tests use a ~50 MB transformer-like stack with the inline limit lowered (an internal knob), which
takes the same code path as a model over 2 GiB; the slow one reduces a 2.7 GB model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import external_data_helper, numpy_helper
from test_bad_input import run_cli
from test_model_handling import reference_store

from oracles.onnxruntime_runner import OnnxRuntimeRunner
from reducer import candidate as candidate_module
from reducer import errors
from reducer.candidate import Candidate, materialize, save_model
from reducer.model import load_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from bench_big_model import transformer_stack  # noqa: E402

FP16_STORAGE = ("--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "nan")


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Path:
    """4 blocks, hidden 1024, feed-forward 1536: 50 MB of fp32 weights in model/weights.bin; block 2's fc2
    overflows fp16 storage."""
    return transformer_stack(tmp_path_factory.mktemp("stack") / "model", hidden=1024, ff=1536, blocks=4,
                             overflow_block=2)


def _weights_of(path: Path) -> dict[str, np.ndarray]:
    model = onnx.load(str(path))  # every weight, for comparison
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_a_large_candidate_copies_just_its_weights_byte_ranges_beside_it(stack, tmp_path, monkeypatch):
    monkeypatch.setattr(candidate_module, "INLINE_WEIGHT_BYTES", 1 << 20)
    reads: list[str] = []
    original = external_data_helper.load_external_data_for_tensor
    monkeypatch.setattr(external_data_helper, "load_external_data_for_tensor",
                        lambda tensor, base: reads.append(tensor.name) or original(tensor, base))
    model = load_model(stack)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 8, 1024)).astype(np.float32)}
    store = reference_store(model, feeds, tmp_path / "store")
    kept = frozenset({model.producer["block1.h"], model.producer["block1.o"]})  # fc1 and fc2 of block 1
    built = materialize(model, Candidate(kept), store)
    path = tmp_path / "check" / "candidate.onnx"
    save_model(built.proto, path)
    assert reads == []  # byte ranges copied file to file: no weight went through this process's memory

    data = path.with_name("candidate.onnx.data")
    written = onnx.load(str(path), load_external_data=False)
    assert sorted(t.name for t in written.graph.initializer) == ["block1.w1", "block1.w2"]
    for tensor in written.graph.initializer:
        info = external_data_helper.ExternalDataInfo(tensor)
        assert info.location == data.name and not info.basepath  # relative, inside the candidate's folder
        assert info.offset % candidate_module.DATA_ALIGNMENT == 0
    used = 2 * 1024 * 1536 * 4
    assert used <= data.stat().st_size <= used + candidate_module.DATA_ALIGNMENT
    assert data.stat().st_size < (stack.parent / "weights.bin").stat().st_size / 3
    expected = _weights_of(stack)
    for name, value in _weights_of(path).items():
        np.testing.assert_array_equal(value, expected[name])
    onnx.checker.check_model(str(path))

    fed = {name: np.asarray(store.load(name)) for name in built.fed}
    for spec in ("onnxruntime:cpu:fp32:O0", "onnxruntime:cpu:fp16-storage", "onnxruntime:cpu:fp16"):
        outputs = OnnxRuntimeRunner(spec).run(path, fed)  # by path: ONNX Runtime reads the side file itself
        np.testing.assert_allclose(outputs["block1.o"], store.load("block1.o"), rtol=0.05, atol=0.05)


def test_a_check_reads_large_weights_in_place_and_a_candidate_can_be_written_again(stack, tmp_path, monkeypatch):
    """For a check (weights_in_place), nothing is copied: the candidate names the original file, and the runner
    is given its folder. The proto is left as it was, so a --repeat writes it again, either way."""
    monkeypatch.setattr(candidate_module, "INLINE_WEIGHT_BYTES", 1 << 20)
    model = load_model(stack)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 8, 1024)).astype(np.float32)}
    store = reference_store(model, feeds, tmp_path / "store")
    built = materialize(model, Candidate(frozenset({model.producer["block1.o"]})), store)
    before = built.proto.SerializeToString()
    path = tmp_path / "check" / "candidate.onnx"
    folder = save_model(built.proto, path, weights_in_place=True)
    assert folder == stack.parent.resolve()
    assert built.proto.SerializeToString() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["candidate.onnx"]  # no copy of any weight
    written = onnx.load(str(path), load_external_data=False)
    (weight,) = written.graph.initializer
    info = external_data_helper.ExternalDataInfo(weight)
    assert (info.location, info.basepath) == ("weights.bin", "")  # relative to the folder the runner is given
    fed = {name: np.asarray(store.load(name)) for name in built.fed}
    for spec in ("onnxruntime:cpu:fp32:O0", "onnxruntime:cpu:fp16-storage", "onnxruntime:cpu:fp16"):
        outputs = OnnxRuntimeRunner(spec).run(path, fed, folder)
        np.testing.assert_allclose(outputs["block1.o"], store.load("block1.o"), rtol=0.05, atol=0.05)

    again = tmp_path / "again" / "candidate.onnx"
    assert save_model(built.proto, again) is None  # now copied beside it, from the same unchanged proto
    assert built.proto.SerializeToString() == before
    np.testing.assert_array_equal(_weights_of(again)["block1.w2"], _weights_of(stack)["block1.w2"])


def test_a_small_candidate_is_one_self_contained_file(stack, tmp_path):
    model = load_model(stack)
    store = reference_store(model, {"x": np.ones((1, 8, 1024), np.float32)}, tmp_path / "store")
    built = materialize(model, Candidate(frozenset({model.producer["block0.hb"]})), store)  # the bias Add
    path = tmp_path / "minimal.onnx"
    stale = tmp_path / "minimal.onnx.data"
    stale.write_bytes(b"an earlier best's weights")
    save_model(built.proto, path)
    assert not stale.exists()  # nothing beside it: the next best's weights would not linger
    written = onnx.load(str(path), load_external_data=False)
    assert not any(external_data_helper.uses_external_data(t) for t in written.graph.initializer)
    assert path.stat().st_size < 16_384


def test_a_reference_with_no_known_folder_is_never_written(tmp_path):
    """A tensor saying only `location`, without where it is relative to, is refused rather than guessed."""
    weight = numpy_helper.from_array(np.ones(4, np.float32), "w")
    external_data_helper.set_external_data(weight, "w.bin", 0, 16)
    weight.ClearField("raw_data")
    graph = onnx.helper.make_graph([onnx.helper.make_node("Add", ["x", "w"], ["y"])], "g",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])], [weight])
    with pytest.raises(ValueError, match="basepath"):
        save_model(onnx.helper.make_model(graph), tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


def _bundle_members(out: Path) -> dict[str, int]:
    with zipfile.ZipFile(out / "bundle.zip") as archive:
        return {info.filename: info.file_size for info in archive.infolist()}


def test_reduce_with_side_files_end_to_end_and_a_bundle_that_replays(stack, tmp_path, monkeypatch):
    """The CLI with the inline limit lowered to 1 MB: every check's candidate, minimal.onnx and the bundle go
    through side files, as a model over 2 GiB does. The repro is small, and so is the bundle."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(stack.parent, work / "model")
    monkeypatch.setenv("ONNX_REDUCER_INLINE_WEIGHT_BYTES", str(1 << 20))  # the CLI's processes read it
    done = run_cli(work, "reduce", "model/model.onnx", "-o", "out", *FP16_STORAGE)
    assert done.returncode == errors.EXIT_REDUCED, done.stderr
    out = work / "out"
    minimal = onnx.load(str(out / "minimal.onnx"), load_external_data=False)
    assert [n.name for n in minimal.graph.node] == ["block2/fc2"]  # the overflowing MatMul alone
    assert [t.name for t in minimal.graph.initializer] == ["block2.w2"]
    weights = (work / "model" / "weights.bin").stat().st_size
    one_matrix = 1536 * 1024 * 4
    assert (out / "minimal.onnx.data").stat().st_size == one_matrix  # its one weight, nothing else
    members = _bundle_members(out)
    assert members["bundle/minimal.onnx.data"] == one_matrix
    assert (out / "bundle.zip").stat().st_size < weights / 4
    assert not (out / "work").exists()  # the checks' candidates and their side files are gone
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "reduced"

    replay = run_cli(work, "bundle", "verify", "out/bundle.zip")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "reproduced" in replay.stdout


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("ONNX_REDUCER_HEAVY_TESTS"),
                    reason="heavy (minutes, 7 GB of disk): set ONNX_REDUCER_HEAVY_TESTS=1 to run it")
def test_a_model_over_two_gib_reduces_to_its_overflowing_matmul(tmp_path):
    """5 blocks of 4096x16384 and 16384x4096 fp32 matrices: 2.7 GB of weights, past protobuf's 2 GiB."""
    if shutil.disk_usage(tmp_path).free < 7 << 30:
        pytest.skip("needs about 7 GB of free disk (the model, and minimal.onnx while it is the whole model)")
    work = tmp_path / "work"
    path = transformer_stack(work / "model")
    assert (path.parent / "weights.bin").stat().st_size > 2**31
    done = subprocess.run([sys.executable, "-m", "reducer.cli", "reduce", "model/model.onnx", "-o", "out",
                           *FP16_STORAGE], cwd=work, capture_output=True, text=True, timeout=1800,
                          stdin=subprocess.DEVNULL)  # minutes: run_cli's limit is for small models
    assert done.returncode == errors.EXIT_REDUCED, done.stderr
    out = work / "out"
    minimal = onnx.load(str(out / "minimal.onnx"), load_external_data=False)
    assert [n.name for n in minimal.graph.node] == ["block3/fc2"]
    assert (out / "minimal.onnx.data").stat().st_size == 16384 * 4096 * 4  # 256 MiB: its one matrix
    assert _bundle_members(out)["bundle/minimal.onnx.data"] == 16384 * 4096 * 4
    assert (out / "bundle.zip").stat().st_size < 400 << 20
