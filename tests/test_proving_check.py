"""scripts/proving_check.py, the check scripts/evaluate_proving.py hands Polygraphy so that its result is proven as
ours is: on the planted graph (tests/test_cause.py), the bystander Conv fails alone but is no failure to it, the
BatchNormalization that carries the whole model's failure is one, and every run it makes is logged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from test_cause import FP16, planted_model

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "proving_check.py"
CHECK = ROOT / "scripts" / "check_candidate.py"


def candidate_of(model: onnx.ModelProto, name: str, path: Path) -> Path:
    """The one node named, its inputs graph inputs, as Polygraphy cuts a candidate."""
    extracted = onnx.utils.Extractor(model).extract_model(
        [i for i in next(n for n in model.graph.node if n.name == name).input
         if i not in {t.name for t in model.graph.initializer}],
        list(next(n for n in model.graph.node if n.name == name).output))
    onnx.save(extracted, str(path))
    return path


def test_a_bystander_fails_alone_but_not_this_check_and_the_cause_does(tmp_path):
    from reducer.driver import Progress
    from reducer.options import InputOptions
    from reducer.session import prepare

    path = tmp_path / "planted.onnx"
    names = planted_model(path)
    _, store = prepare(str(path), InputOptions(inputs=str(path.with_suffix(".npz"))), tmp_path / "ref", Progress())
    tensors = tmp_path / "tensors.npz"
    np.savez(tensors, **{name: np.asarray(store.load(name)) for name in store.records})
    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    log = tmp_path / "proof" / "runs.jsonl"
    log.parent.mkdir()

    def verdict(node: str) -> tuple[int, int]:
        candidate = candidate_of(model, names[node], tmp_path / f"{node}.onnx")
        alone = subprocess.run([sys.executable, str(CHECK), str(candidate), str(tensors), *FP16],
                               capture_output=True, text=True, cwd=ROOT).returncode
        proving = subprocess.run([sys.executable, str(SCRIPT), str(candidate), str(tensors), str(path),
                                  str(tmp_path / "ref" / "activations"), str(log), *FP16],
                                 capture_output=True, text=True, cwd=ROOT)
        assert proving.returncode in (0, 1), proving.stderr[-2000:]
        return alone, proving.returncode

    assert verdict("bystander") == (1, 0)  # fails alone; the whole model fails as before with it exact
    assert verdict("cause") == (1, 1)
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["kind"] for r in runs] == ["candidate", "proof", "candidate", "proof"]
    assert [r.get("holds") for r in runs if r["kind"] == "proof"] == [False, True]
    # the first proof: the whole model's run and the bystander's `without` run (the model still fails: nothing
    # more to ask); the second: the cause's `without` and `downstream` runs, the whole model's verdict cached
    assert [r["runs"] for r in runs if r["kind"] == "proof"] == [2, 2]

    # an original onnx cannot parse, given with a candidate that fails: read only then, and said in one line, exit 2
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07not a model")
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "cause.onnx"), str(tensors), str(corrupt),
                           str(tmp_path / "ref" / "activations"), str(log), *FP16],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stderr.strip().splitlines()[-1].startswith("proving_check: ")
    assert [json.loads(line)["kind"] for line in log.read_text().splitlines()][len(runs):] == ["candidate"]


def test_a_missing_file_is_one_line_and_exit_2(tmp_path):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07not a model")
    tensors = tmp_path / "tensors.npz"
    np.savez(tensors, x=np.zeros(1, np.float32))
    store = tmp_path / "activations"
    store.mkdir()
    (store / "index.json").write_text(json.dumps({"key": "k"}))
    for given in ([str(tmp_path / "absent.onnx"), str(tensors), str(corrupt), str(store)],
                  [str(corrupt), str(tensors), str(corrupt), str(tmp_path / "no-store")]):
        done = subprocess.run([sys.executable, str(SCRIPT), *given, str(tmp_path / "runs.jsonl"), *FP16],
                              capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "no such file" in done.stderr
    assert not (tmp_path / "runs.jsonl").exists()  # nothing ran, so nothing is logged
