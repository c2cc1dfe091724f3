"""The bug-report bundle, from real reductions of corpus models: its zip opens and holds what a vendor
needs, repro.py and repro.sh reproduce the failure in fresh processes without onnx-reduce, `bundle verify`
says reproduced / not reproduced / cannot run here, hostile zips are refused, nothing private leaks."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from corpus_files import corpus_model
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = {e["name"]: e for e in json.loads((ROOT / "corpus" / "manifest.json").read_text())}
SILERO = MANIFEST["silero_vad_int16pcm_fp16_tolerance"]
OCR_NAN = MANIFEST["ppocrv4_rec_rawpixels_fp16_nan"]
BIN = Path(sys.executable).parent


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reducer.cli", *args], cwd=cwd, capture_output=True, text=True)


def reduce_case(entry: dict, out: Path) -> Path:
    model = corpus_model(entry["model"])
    flags = ["--runner", entry["runner"], "--fail-on", entry["fail_on"]]
    if entry["fail_on"] == "tolerance":
        flags += ["--atol", str(entry["atol"]), "--rtol", str(entry["rtol"])]
    done = cli("reduce", str(model), "--inputs", str(ROOT / "corpus" / entry["inputs"]), *flags, "-o", str(out),
               cwd=out.parent)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return out


@pytest.fixture(scope="module")
def silero(tmp_path_factory) -> Path:
    return reduce_case(SILERO, tmp_path_factory.mktemp("silero") / "out")


@pytest.fixture(scope="module")
def ocr_nan(tmp_path_factory) -> Path:
    return reduce_case(OCR_NAN, tmp_path_factory.mktemp("ocr") / "out")


def unzip(out: Path, dest: Path) -> Path:
    """The zip as a vendor gets it, in a fresh folder."""
    with zipfile.ZipFile(out / "bundle.zip") as archive:
        names = archive.namelist()
        assert all(n.startswith("bundle/") and ".." not in n and not n.startswith("/") for n in names), names
        archive.extractall(dest)
    return dest / "bundle"


def fresh_env() -> dict:
    """A process that knows nothing of onnx-reducer: no PYTHONPATH, run from the bundle's folder."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ONNX_REDUCE_DEBUG")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_repro(bundle: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), cwd=bundle, capture_output=True, text=True, env=fresh_env(), timeout=300)


def test_bundle_holds_what_a_vendor_needs(silero, tmp_path):
    bundle = unzip(silero, tmp_path)
    for name in ("minimal.onnx", "target.onnx", "inputs.npz", "inputs.json", "reference_outputs.npz",
                 "reference_outputs.json", "target_outputs.npz", "report.md", "report.json", "env.json",
                 "runner.log", "repro.log", "repro.py", "repro.sh", "graph.png", "reduction.png", "history.jsonl"):
        assert (bundle / name).is_file(), name
    onnx.checker.check_model(onnx.load(str(bundle / "minimal.onnx")), full_check=True)
    # the target run shown is the reduction's own final re-check, not one more run
    assert "the reduction's final re-check): FAIL" in (bundle / "runner.log").read_text().splitlines()[0]
    onnx.checker.check_model(onnx.load(str(bundle / "target.onnx")))
    for picture in ("graph.png", "reduction.png"):
        with Image.open(bundle / picture) as image:
            image.verify()
            assert image.format == "PNG" and min(image.size) > 100

    report = json.loads((bundle / "report.json").read_text())
    # nodes counted with the nodes inside If branches (121 at the top level)
    assert report["status"] == "reduced" and report["nodes_after"] == 1 and report["nodes_before"] == 350
    assert report["observed"]["reproduced"] is True
    [row] = report["outputs"]
    assert row["failing"] and row["max_abs_error"] > 0.01 and row["outside_tolerance"] > 0
    assert row["target_nan"] == 0 and row["target_inf"] == 0
    assert [n["name"] for n in report["origin"]["kept"]] == ["/model/stft/Conv"]
    assert report["origin"]["path_from_input"][-1]["name"] == "/model/stft/Conv"
    assert report["repro_self_check"]["exit_code"] == 1
    # the numbers in the report are the arrays' own
    with np.load(bundle / "reference_outputs.npz") as ref, np.load(bundle / "target_outputs.npz") as target:
        diff = np.abs(ref[row["name"]].astype(np.float64) - target[row["name"]])
        assert diff.max() == pytest.approx(row["max_abs_error"])

    markdown = (bundle / "report.md").read_text()
    assert "Shown to be the cause" in markdown.split("**Reproduce**")[0]  # the proof, in its first lines
    for expected in ("/model/stft/Conv", "Conv", "350", f"{report['checks']} checks", "graph.png", "reduction.png",
                     "python repro.py", "TensorRT Version", "NVIDIA Driver Version", "CUDNN Version",
                     "Baremetal or Container"):
        assert expected in markdown, expected
    env = json.loads((bundle / "env.json").read_text())
    for field in ("tensorrt_version", "nvidia_gpu", "nvidia_driver_version", "cuda_version", "cudnn_version",
                  "operating_system", "python_version", "pytorch_version", "tensorflow_version",
                  "baremetal_or_container", "onnx_version", "onnxruntime_version", "polygraphy_version"):
        assert field in env, field
    assert env["onnxruntime_version"] and env["python_version"]
    assert "--fail-on" in env["command_line"] and "tolerance" in env["command_line"]
    history = [json.loads(line) for line in (bundle / "history.jsonl").read_text().splitlines()]
    assert history and history[-1]["nodes"] == 1

    outer = json.loads((silero / "report.json").read_text())
    assert outer["bundle"]["zip"] == "bundle.zip" and outer["bundle"]["zip_bytes"] < 2_000_000
    assert outer["bundle"]["warning"] is None


def test_repro_py_reproduces_in_a_fresh_process(silero, tmp_path):
    bundle = unzip(silero, tmp_path)
    done = run_repro(bundle, sys.executable, "-I", "repro.py")  # -I: isolated, onnx-reducer not importable
    assert done.returncode == 1, done.stdout + done.stderr
    assert "REPRODUCED (tolerance)" in done.stdout and "/model/stft/Conv_output_0" in done.stdout
    assert "import reducer" not in (bundle / "repro.py").read_text()

    # inputs under which the convolution is harmless: not reproduced, exit 0
    with np.load(bundle / "inputs.npz") as data:
        quiet = {name: np.zeros_like(data[name]) for name in data.files}
    np.savez(bundle / "inputs.npz", **quiet)
    done = run_repro(bundle, sys.executable, "-I", "repro.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "NOT REPRODUCED" in done.stdout


def test_repro_py_without_numpy_says_it_cannot_run_here_not_reproduced(silero, tmp_path):
    """A vendor's Python without numpy: exit 2 and one line, never a traceback's exit 1, which says reproduced."""
    bundle = unzip(silero, tmp_path)
    done = run_repro(bundle, sys.executable, "-I", "-S", "repro.py")  # -S: no site-packages, so no numpy
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.strip() == "cannot run here: numpy is not installed (pip install numpy)"
    assert "Traceback" not in done.stderr


def test_repro_sh_is_a_working_polygraphy_command(silero, tmp_path):
    bundle = unzip(silero, tmp_path)
    script = (bundle / "repro.sh").read_text()
    assert "polygraphy run target.onnx --onnxrt" in script and "--atol 0.01 --rtol 0.01" in script
    done = run_repro(bundle, "sh", "repro.sh")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "FAILED" in done.stdout + done.stderr and "Difference exceeds tolerance" in done.stdout + done.stderr


def test_verify_reproduces_on_the_zip_and_the_folder(silero, tmp_path):
    done = cli("bundle", "verify", str(silero / "bundle.zip"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("reproduced: tolerance")
    assert list(tmp_path.iterdir()) == []  # extracted into a temporary folder, removed again
    done = cli("bundle", "verify", str(unzip(silero, tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def rezip(folder: Path, target: Path) -> Path:
    with zipfile.ZipFile(target, "w") as archive:
        for path in sorted(folder.iterdir()):
            archive.write(path, f"bundle/{path.name}")
    return target


def test_verify_says_not_reproduced_when_the_failure_is_gone(silero, tmp_path):
    bundle = unzip(silero, tmp_path / "x")
    # inputs on which the convolution is harmless, with their (all-zero) reference: nothing left to see
    with np.load(bundle / "inputs.npz") as data:
        np.savez(bundle / "inputs.npz", **{name: np.zeros_like(data[name]) for name in data.files})
    with np.load(bundle / "reference_outputs.npz") as data:
        np.savez(bundle / "reference_outputs.npz", **{name: np.zeros_like(data[name]) for name in data.files})
    done = cli("bundle", "verify", str(rezip(bundle, tmp_path / "tampered.zip")), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("not reproduced:") and len(done.stdout.strip().splitlines()) == 1


def test_verify_says_cannot_run_here_for_an_unknown_runner(silero, tmp_path):
    bundle = unzip(silero, tmp_path)
    report = json.loads((bundle / "report.json").read_text())
    report["oracle_options"]["runner"] = "nosuchruntime:gpu:fp16"  # a family this machine does not know
    (bundle / "report.json").write_text(json.dumps(report))
    done = cli("bundle", "verify", str(bundle), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith("cannot run here:") and "nosuchruntime" in done.stdout
    assert "Traceback" not in done.stderr


def hostile_zip(path: Path, name: str, symlink: bool = False) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("bundle/report.json", "{}")
        info = zipfile.ZipInfo(name)
        if symlink:
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd" if symlink else "x")
    return path


@pytest.mark.parametrize("name, symlink, words", [
    ("/tmp/onnx-reduce-absolute-escape", False, "absolute"),
    ("../onnx-reduce-escape", False, "'..'"),
    ("bundle/../../onnx-reduce-escape", False, "'..'"),
    ("bundle/link", True, "symbolic link"),
], ids=["absolute", "dotdot", "nested-dotdot", "symlink"])
def test_verify_refuses_hostile_zips(tmp_path, name, symlink, words):
    work = tmp_path / "work"
    work.mkdir()
    archive = hostile_zip(tmp_path / "hostile.zip", name, symlink)
    before = set(tmp_path.rglob("*"))
    done = cli("bundle", "verify", str(archive), cwd=work)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused" in lines[0] and words in lines[0], done.stderr
    assert set(tmp_path.rglob("*")) == before
    assert not Path("/tmp/onnx-reduce-absolute-escape").exists()


def test_verify_refuses_a_zip_bomb_and_garbage(tmp_path):
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bundle/zeros.bin", b"\0" * (64 << 20))
    done = cli("bundle", "verify", str(bomb), cwd=tmp_path)
    assert done.returncode == 2 and "refused" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    garbage = tmp_path / "garbage.zip"
    garbage.write_bytes(b"not a zip at all")
    done = cli("bundle", "verify", str(garbage), cwd=tmp_path)
    assert done.returncode == 2 and "not a readable zip" in done.stderr and "Traceback" not in done.stderr


def test_nothing_private_in_the_bundle(silero):
    private = [str(silero.resolve()), str(silero.absolute()), str(Path.home()), str(ROOT)]
    blobs = [(p.name, p.read_bytes()) for p in (silero / "bundle").iterdir()]
    with zipfile.ZipFile(silero / "bundle.zip") as archive:
        blobs += [(name, archive.read(name)) for name in archive.namelist()]
    for name, blob in blobs:
        for path in private:
            assert path.encode() not in blob, f"{name} contains {path}"
    # no environment variables: env.json holds the documented fields only, and no variable's value
    env = json.loads((silero / "bundle" / "env.json").read_text())
    documented = {"tensorrt_version", "nvidia_gpu", "nvidia_driver_version", "cuda_version", "cudnn_version",
                  "operating_system", "python_version", "tensorflow_version", "pytorch_version",
                  "baremetal_or_container", "gpu_compute_capability", "cuda_driver_supports", "cpu", "cpu_count",
                  "onnx_version", "onnxruntime_version", "polygraphy_version", "onnxconverter_common_version",
                  "onnx_reducer_version", "numpy_version", "runner", "command_line", "onnxruntime_providers"}
    assert set(env) == documented
    for variable in ("PATH", "HOME", "USER", "VIRTUAL_ENV"):
        value = os.environ.get(variable, "")
        if len(value) > 4:
            assert all(value.encode() not in blob for _, blob in blobs), variable


def test_nan_bundle_counts_the_non_finite_values(ocr_nan, tmp_path):
    bundle = unzip(ocr_nan, tmp_path)
    report = json.loads((bundle / "report.json").read_text())
    [row] = [r for r in report["outputs"] if r["failing"]]
    assert row["target_nan"] + row["target_inf"] > 0 and row["reference_nan"] == row["reference_inf"] == 0
    assert {n["op_type"] for n in report["minimal_graph"]} == {"BatchNormalization", "Mul", "Reshape"}
    done = run_repro(bundle, sys.executable, "-I", "repro.py")
    assert done.returncode == 1 and "REPRODUCED (nan)" in done.stdout, done.stdout + done.stderr
    done = run_repro(bundle, "sh", "repro.sh")  # polygraphy run --validate
    assert done.returncode != 0 and "invalid values" in done.stdout + done.stderr
    with Image.open(bundle / "graph.png") as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    # the failing tensor is drawn in red, and so is its producer's frame
    red = sum(count for count, rgb in colours if rgb == (0xD6, 0x27, 0x28))
    assert red > 500, red


def test_a_large_bundle_is_flagged_with_its_largest_files(silero, monkeypatch):
    import reducer.bundle

    monkeypatch.setattr(reducer.bundle, "SIZE_WARNING_BYTES", 100_000)  # the Silero bundle is ~350 kB
    result = reducer.bundle.make_bundle(silero)
    assert result.warning and "minimal.onnx" in result.warning and "MB" in result.warning
    assert result.reproduced
    assert json.loads((silero / "bundle" / "report.json").read_text())["size_warning"] == result.warning
    assert "**Size**" in (silero / "bundle" / "report.md").read_text()
    with zipfile.ZipFile(silero / "bundle.zip") as archive:
        assert result.warning in archive.read("bundle/report.md").decode()


def test_bundle_make_rebuilds_and_refuses_a_directory_without_a_minimal_model(silero, tmp_path):
    first = (silero / "bundle" / "minimal.onnx").read_bytes()
    shutil.rmtree(silero / "bundle")
    (silero / "bundle.zip").unlink()
    done = cli("bundle", "make", str(silero), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "reproduced" in done.stdout and (silero / "bundle.zip").is_file()
    assert (silero / "bundle" / "minimal.onnx").read_bytes() == first
    assert "run again while bundling): FAIL" in (silero / "bundle" / "runner.log").read_text().splitlines()[0]
    empty = tmp_path / "empty"
    empty.mkdir()
    done = cli("bundle", "make", str(empty), cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "report.json" in done.stderr


def test_the_graph_picture_of_a_large_model_stays_within_bounds(tmp_path):
    """An interrupted reduction can bundle hundreds of nodes: the picture shrinks its labels to fit."""
    from reducer.pictures import MAX_SIDE, draw_graph

    model = onnx.load(str(corpus_model("models/ch_PP-OCRv4_det_infer.onnx")))  # 672 nodes
    draw_graph(model, [model.graph.output[0].name], {}, tmp_path / "graph.png")
    with Image.open(tmp_path / "graph.png") as image:
        image.verify()
        assert max(image.size) <= MAX_SIDE and min(image.size) > 100


ASSERTING_CHECK = """import sys
data = open(sys.argv[1], "rb").read()
if b"Mul" in data or b"ScopeOp" in data:
    print("[graphScope.cpp::812] Internal Error (Assertion newNodeOrder.size() == g.nodes.size() failed.)")
    sys.exit(1)
"""


@pytest.mark.parametrize("regex", [True, False], ids=["error", "numeric"])
def test_an_error_is_bundled_even_where_the_reference_run_of_its_repro_fails(tmp_path, regex):
    """SLANet's Loop, cut to one trip, trips TensorRT's assertion but fails ONNX Runtime's fp32 run, so its bundle
    had no reference outputs and was not written. An error (a --fail-regex names the message) is judged without
    them: the bundle is written and says why it has none. A failure that may be numeric still refuses, in one
    line: a tolerance repro without the values it is judged against is no repro."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "r"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "model.onnx"))
    (tmp_path / "check.py").write_text(ASSERTING_CHECK)
    out = tmp_path / "out"
    check = ["--fail-code", "1", *(["--fail-regex", "Internal Error"] if regex else []),
             "--check", sys.executable, str(tmp_path / "check.py"), "{model}"]
    done = cli("reduce", str(tmp_path / "model.onnx"), "-o", str(out), "--no-cause-check", *check, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # the repro as the Loop cut left it: an op ONNX Runtime cannot run (checker-clean: a domain of its own)
    scope = helper.make_node("ScopeOp", ["x"], ["scoped"], name="scope", domain="com.example")
    graph = helper.make_graph([scope], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("scoped", TensorProto.FLOAT, [2, 3])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(out / "minimal.onnx"))
    shutil.rmtree(out / "bundle")
    (out / "bundle.zip").unlink()
    done = cli("bundle", "make", str(out), cwd=tmp_path)
    if not regex:
        assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "the reference run of minimal.onnx fails" in done.stderr and not (out / "bundle.zip").exists()
        return
    assert done.returncode == 0, done.stderr
    assert "reproduced" in done.stdout and (out / "bundle.zip").is_file()
    report = json.loads((out / "bundle" / "report.json").read_text())
    assert report["observed"]["reproduced"] and report["outputs"] == []
    assert report["reference_outputs_note"].startswith("none: the reference run of minimal.onnx fails")
    md = (out / "bundle" / "report.md").read_text()
    assert "Reference outputs: none" in md and str(tmp_path) not in md + json.dumps(report)
    verified = cli("bundle", "verify", str(out / "bundle.zip"), "--trust-bundle-command", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_reports_chain_to_a_node_deep_in_a_long_graph_keeps_its_ends_and_its_length(tmp_path):
    """report.json's origin: the shortest chain from an input to the repro and on to an output, its ends only
    where it is long (a 100k-node chain's 66k made report.json 9 MB), with its length; report.md says it."""
    from onnx import TensorProto, helper

    from reducer.bundle_report import _path_text
    from reducer.model import load_model
    from reducer.session import ORIGIN_PATH_ENDS, origin

    # a 50-node chain with a shortcut: node 30 also reads node 2's output
    nodes = [helper.make_node("Relu", ["x"], ["t0"], name="n0")]
    for i in range(1, 50):
        reads = [f"t{i - 1}", "t2"] if i == 30 else [f"t{i - 1}"]
        nodes.append(helper.make_node("Sum" if len(reads) > 1 else "Relu", reads, [f"t{i}"], name=f"n{i}"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("t49", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    model = load_model(tmp_path / "m.onnx")
    found = origin(model, [30, 31])
    assert found["path_lengths"] == {"path_from_input": 4, "path_to_output": 19}  # n0 n1 n2 n30; n31 .. n49
    assert [n["name"] for n in found["path_from_input"]] == ["n0", "n1", "n2", "n30"]
    to_output = [n["name"] for n in found["path_to_output"]]
    assert len(to_output) == 2 * ORIGIN_PATH_ENDS and to_output[0] == "n31" and to_output[-1] == "n49"
    assert to_output[ORIGIN_PATH_ENDS - 1] == f"n{31 + ORIGIN_PATH_ENDS - 1}"
    assert to_output[ORIGIN_PATH_ENDS] == f"n{49 - ORIGIN_PATH_ENDS + 1}"
    text = "\n".join(_path_text(found))
    assert "(19 nodes)" in text and "`n0` (Relu) → `n1` (Relu) → `n2` (Relu) → `n30` (Sum)" in text
