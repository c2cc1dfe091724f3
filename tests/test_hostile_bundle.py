"""Bundles are for public issue trackers: `bundle verify` treats one as data from a stranger (its check command
runs only when trusted, every report.json value is checked), and a bundle carries what the user means to
share (the check's script and --ship files, never the other files its command line names) and replays with
those copies; a check that crashes is not the failure it was meant to show."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_bad_input import _snapshot, assert_bad_input, external_model, good_model, run_cli, write_model

from reducer import errors

SECRET = "TOKEN=hunter2-do-not-leak"
# fails (exit 1, no traceback) when the model holds the op type its data file names; a missing data file
# makes it crash with FileNotFoundError, which exits 1 too
CHECK_PY = """import sys
import numpy as np
model = open(sys.argv[1], "rb").read()
wanted = str(np.load(sys.argv[2])["op"])
if wanted.encode() in model:
    print("FOUND " + wanted)
    sys.exit(1)
"""


# --- a bundle written here, for a built-in runner ---------------------------------------------------------------
def overflow_model() -> onnx.ModelProto:
    """y = x * 10000: beyond fp16's 65504 for x > 6.6, so fp16-storage (every tensor rounded through fp16) gives Inf."""
    scale = numpy_helper.from_array(np.full((2, 3), 10000.0, dtype=np.float32), "scale")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "scale"], ["y"], name="scale_up")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], initializer=[scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def builtin_report() -> dict:
    options = {"runner": "onnxruntime:cpu:fp16-storage", "fail_on": "nan", "atol": 1e-5, "rtol": 1e-5, "fail_regex": [],
               "ignore_fail_regex": [], "fail_code": [], "ignore_fail_code": [], "check_command": [],
               "check_timeout": 60.0, "faithful_max": None, "jobs": None, "repeat": 1, "min_fails": 1}
    return {"status": "reduced", "oracle_options": options,
            "signature": {"kind": "nan", "detail": "", "outputs": ["y"]}}


def write_bundle(folder: Path, report: dict | list | None = None, model: onnx.ModelProto | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_model(folder / "minimal.onnx", model or overflow_model())
    x = np.linspace(7.0, 8.0, 6, dtype=np.float32).reshape(2, 3)
    np.savez(folder / "inputs.npz", x=x)
    np.savez(folder / "reference_outputs.npz", y=x * np.float32(10000.0))
    (folder / "report.json").write_text(json.dumps(builtin_report() if report is None else report))
    return folder


def verify(cwd: Path, bundle: Path, *flags: str) -> subprocess.CompletedProcess:
    done = run_cli(cwd, "bundle", "verify", *flags, str(bundle))
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


def test_a_bundle_written_here_reproduces(tmp_path):
    """The bundle the hostile cases below start from is a sound one."""
    done = verify(tmp_path, write_bundle(tmp_path / "bundle"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("reproduced: nan")


def _with(key: str, value) -> dict:
    report = builtin_report()
    if key.startswith("oracle_options."):
        report["oracle_options"][key.split(".", 1)[1]] = value
    else:
        report[key] = value
    return report


HOSTILE_VALUES = [
    ("oracle_options.runner", 42),
    ("oracle_options.runner", ["onnxruntime:cpu:fp16"]),
    ("oracle_options.fail_on", "everything"),
    ("oracle_options.atol", "0.1"),
    ("oracle_options.atol", float("nan")),
    ("oracle_options.atol", True),
    ("oracle_options.rtol", -1),
    ("oracle_options.fail_regex", "x"),
    ("oracle_options.fail_regex", [1]),
    ("oracle_options.fail_regex", ["(a+)+$"]),  # catastrophic backtracking: verify would hang on a long log
    ("oracle_options.ignore_fail_regex", ["(.*)*x"]),
    ("oracle_options.fail_code", ["1"]),
    ("oracle_options.ignore_fail_code", [1.5]),
    ("oracle_options.check_command", "sh -c id"),
    ("oracle_options.check_command", [1, 2]),
    ("oracle_options.check_timeout", 0),
    ("oracle_options.check_timeout", float("inf")),
    ("oracle_options.faithful_max", "big"),
    ("oracle_options.repeat", 0),
    ("oracle_options.repeat", 1.5),
    ("oracle_options.min_fails", 10**9),
    ("oracle_options", ["runner", "onnxruntime:cpu:fp16"]),
    ("signature", "nan"),
    ("signature", {"kind": 3}),
    ("signature", {"kind": "nan", "outputs": "y"}),
    ("signature", {"kind": "command", "exception": 7}),
]


@pytest.mark.parametrize("key, value", HOSTILE_VALUES, ids=[f"{k}={v!r}"[:40] for k, v in HOSTILE_VALUES])
def test_a_hostile_report_value_is_refused_in_one_line(tmp_path, key, value):
    bundle = write_bundle(tmp_path / "bundle", _with(key, value))
    assert_bad_input(tmp_path, "bundle", "verify", str(bundle), mentions=(key.split(".")[-1], "report.json"))


def test_a_report_that_is_not_an_object_is_refused(tmp_path):
    bundle = write_bundle(tmp_path / "bundle", ["not", "a", "report"])
    assert_bad_input(tmp_path, "bundle", "verify", str(bundle), mentions=("report.json", "not a JSON object"))


# --- a bundle's code never runs unasked -------------------------------------------------------------------------
def command_bundle(folder: Path, command: list[str]) -> Path:
    report = _with("oracle_options.check_command", command)
    report["signature"] = {"kind": "command", "detail": "exit code 1", "outputs": []}
    return write_bundle(folder, report)


def rezip(folder: Path, target: Path) -> Path:
    with zipfile.ZipFile(target, "w") as archive:
        for path in sorted(folder.iterdir()):
            archive.write(path, f"bundle/{path.name}")
    return target


def test_a_recorded_check_command_runs_only_when_trusted(tmp_path):
    marker = tmp_path / "ran.txt"
    bundle = command_bundle(tmp_path / "bundle", ["sh", "-c", f"id > {marker}; exit 1"])
    done = verify(tmp_path, bundle)
    assert done.returncode == errors.EXIT_BAD_INPUT, done.stdout + done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith("refusing to run the bundle's check command") and "--trust-bundle-command" in line
    assert f"id > {marker}" in line  # the command, shown for the reader to judge
    assert not marker.exists()
    done = verify(tmp_path, bundle, "--trust-bundle-command")
    assert marker.exists()
    assert done.returncode == 0 and done.stdout.startswith("reproduced: command (exit code 1)"), done.stdout


def test_a_script_shipped_in_the_bundle_is_not_run(tmp_path):
    marker = tmp_path / "ran.txt"
    folder = command_bundle(tmp_path / "bundle", ["sh", "{bundle}/x.sh", "{model}"])
    (folder / "x.sh").write_text(f"touch {marker}\nexit 1\n")
    work = tmp_path / "work"
    work.mkdir()
    before = _snapshot(work)
    done = verify(work, rezip(folder, tmp_path / "bundle.zip"))
    assert done.returncode == errors.EXIT_BAD_INPUT and "{bundle}/x.sh" in done.stdout, done.stdout
    assert not marker.exists() and _snapshot(work) == before


def test_the_refusal_shows_a_hostile_command_on_one_line(tmp_path):
    # harmless even where it would run (an older onnx-reduce runs it): it only writes a marker in tmp_path
    marker = tmp_path / "ran.txt"
    bundle = command_bundle(tmp_path / "bundle", ["sh", "-c", f"true\ntouch {marker} \x1b[2J", "x" * 5000])
    done = verify(tmp_path, bundle)
    assert done.returncode == errors.EXIT_BAD_INPUT and not marker.exists()
    assert len(done.stdout.splitlines()) == 1 and "\x1b" not in done.stdout and len(done.stdout) < 1000
    assert "\\n" in done.stdout and "\\x1b" in done.stdout


def test_verify_never_runs_the_bundles_repro_py(tmp_path):
    marker = tmp_path / "ran.txt"
    bundle = write_bundle(tmp_path / "bundle")
    (bundle / "repro.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (bundle / "repro.sh").write_text(f"touch {marker}\n")
    done = verify(tmp_path, bundle)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("how", ["dotdot", "symlink"])
def test_external_data_from_outside_the_bundle_is_refused(tmp_path, how):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.full(6, 7.0, dtype=np.float32).tobytes())
    folder = tmp_path / "bundle"
    folder.mkdir()
    if how == "symlink":
        (folder / "w.bin").symlink_to(secret)
    bundle = write_bundle(folder, model=external_model("../secret.bin" if how == "dotdot" else "w.bin"))
    with np.load(bundle / "inputs.npz") as data:
        np.savez(bundle / "reference_outputs.npz", y=data["x"] + 1)  # what ones for w would give
    assert_bad_input(tmp_path, "bundle", "verify", str(bundle), mentions=("refused",))


def test_verify_help_names_the_trust(tmp_path):
    done = run_cli(tmp_path, "bundle", "verify", "--help")
    assert done.returncode == 0 and "--trust-bundle-command" in done.stdout
    assert "never run without" in " ".join(done.stdout.split())


# --- what travels with a check command -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The user's folder: a model, the check script, the data file it reads, and a credentials file."""
    root = tmp_path_factory.mktemp("project")
    write_model(root / "model.onnx", good_model())
    (root / "check.py").write_text(CHECK_PY)
    np.savez(root / "data.npz", op=np.array("Relu"))
    (root / "creds.txt").write_text(SECRET + "\n")
    return root


def reduce_with_check(project: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    done = run_cli(project, "reduce", "model.onnx", "-o", str(out), "--no-cause-check", *flags, "--check",
                   sys.executable, "check.py", "{model}", "data.npz", "creds.txt")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done


@pytest.fixture(scope="module")
def shipped(project, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("shipped") / "out"
    return out, reduce_with_check(project, out, "--ship", "data.npz", "--fail-regex", "FOUND")


@pytest.fixture(scope="module")
def unshipped(project, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("unshipped") / "out"
    return out, reduce_with_check(project, out)


def unzip(out: Path, dest: Path) -> Path:
    with zipfile.ZipFile(out / "bundle.zip") as archive:
        archive.extractall(dest)
    return dest / "bundle"


def zip_members(out: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(out / "bundle.zip") as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def elsewhere(tmp_path: Path) -> Path:
    """Another machine: none of the user's files where the bundle is replayed."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def test_a_credentials_file_on_the_check_line_is_not_shipped(unshipped):
    out, _ = unshipped
    members = zip_members(out)
    assert "bundle/check.py" in members and "bundle/creds.txt" not in members
    assert all(SECRET.encode() not in blob for blob in members.values())
    markdown = members["bundle/report.md"].decode()
    [line] = [line for line in markdown.splitlines() if "creds.txt" in line and "--ship" in line]
    assert "not shipped" in markdown.lower()
    report = json.loads(members["bundle/report.json"])
    assert {item["file"] for item in report["not_shipped"]} >= {"creds.txt", "data.npz"}
    assert "bundle_options" not in report


def test_shipped_files_are_listed_with_size_and_sha256_and_the_command_uses_the_copies(shipped, project):
    out, _ = shipped
    members = zip_members(out)
    data = (project / "data.npz").read_bytes()
    assert members["bundle/data.npz"] == data and members["bundle/check.py"] == CHECK_PY.encode()
    report = json.loads(members["bundle/report.json"])
    listed = {item["name"]: item for item in report["shipped"]}
    assert set(listed) == {"check.py", "data.npz"}
    assert listed["data.npz"]["bytes"] == len(data)
    assert listed["data.npz"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert listed["data.npz"]["sha256"] in members["bundle/report.md"].decode()
    command = report["oracle_options"]["check_command"]
    assert command[1:] == ["{bundle}/check.py", "{model}", "{bundle}/data.npz", "creds.txt"]
    assert '"$here"/data.npz' in members["bundle/repro.sh"].decode()


def test_a_shipped_data_file_makes_the_bundle_reproduce_elsewhere(shipped, tmp_path):
    out, _ = shipped
    there = elsewhere(tmp_path)
    done = verify(there, out / "bundle.zip", "--trust-bundle-command")
    assert done.returncode == 0 and done.stdout.startswith("reproduced: command (matched /FOUND/)"), done.stdout
    repro = subprocess.run([sys.executable, "repro.py"], cwd=unzip(out, there), capture_output=True, text=True)
    assert repro.returncode == 1 and "REPRODUCED" in repro.stdout, repro.stdout + repro.stderr


def test_a_crash_on_a_missing_data_file_is_not_a_reproduction(unshipped, tmp_path):
    out, _ = unshipped
    there = elsewhere(tmp_path)
    done = verify(there, out / "bundle.zip", "--trust-bundle-command")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("not reproduced: it fails differently") and "FileNotFoundError" in done.stdout
    repro = subprocess.run([sys.executable, "repro.py"], cwd=unzip(out, there), capture_output=True, text=True)
    assert repro.returncode == 0, repro.stdout + repro.stderr
    assert "NOT REPRODUCED: it fails differently (Python FileNotFoundError" in repro.stdout


def test_a_python_check_failing_on_exit_code_1_warns_once(shipped, unshipped):
    warnings = [line for line in unshipped[1].stderr.splitlines() if line.startswith("onnx-reduce: warning:")]
    assert len(warnings) == 1 and "--fail-regex" in warnings[0]
    assert "warning" not in shipped[1].stderr  # with --fail-regex a crash cannot pass for the failure


def test_a_candidate_that_crashes_the_check_is_not_the_failure(project, tmp_path):
    """The check fails (no traceback) while a Relu is left, and crashes on a model without the Add: a lone Relu
    crashes it, which is another failure, so the result keeps the Add."""
    check = tmp_path / "crashy.py"
    check.write_text("import sys\nmodel = open(sys.argv[1], 'rb').read()\n"
                     "if b'Add' not in model:\n    open('no-such-file.npz')\n"
                     "sys.exit(1 if b'Relu' in model else 0)\n")
    done = run_cli(project, "reduce", "model.onnx", "-o", str(tmp_path / "out"), "--no-cause-check", "--check",
                   sys.executable, str(check), "{model}")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["signature"]["exception"] == ""
    kept = {node.op_type for node in onnx.load(str(tmp_path / "out" / "minimal.onnx")).graph.node}
    assert kept == {"Add", "Relu"}, kept


def test_bundle_make_replays_a_check_command_and_exclude_leaves_out_even_the_script(shipped, project, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(shipped[0], out)
    done = run_cli(project, "bundle", "make", str(out), "--exclude", "check.py")
    assert done.returncode == 0 and "again: reproduced" in done.stdout, done.stdout + done.stderr
    members = zip_members(out)
    assert "bundle/check.py" not in members and "bundle/data.npz" in members  # --ship is remembered
    report = json.loads(members["bundle/report.json"])
    assert {"file": "check.py", "why": "excluded (--exclude)"} in report["not_shipped"]


@pytest.mark.parametrize("flags, words", [
    (["--ship", "nowhere.npz", "--check", "true"], ("--ship", "nowhere.npz", "no such file")),
    (["--exclude", "nowhere.py", "--check", "true"], ("--exclude", "nowhere.py")),
    (["--ship", "big.bin", "--check", "true"], ("--ship", "big.bin", "MB")),
    (["--ship", "creds.txt"], ("--check",)),
    (["--ship", "creds.txt", "--exclude", "creds.txt", "--check", "true"], ("--ship", "--exclude", "creds.txt")),
], ids=["missing", "exclude-missing", "over-the-cap", "without-check", "both"])
def test_bad_shipping_options(tmp_path, flags, words):
    write_model(tmp_path / "model.onnx", good_model())
    (tmp_path / "creds.txt").write_text(SECRET)
    with open(tmp_path / "big.bin", "wb") as big:
        big.truncate(9 << 20)  # sparse: no 9 MB written
    assert_bad_input(tmp_path, "reduce", "model.onnx", "-o", "out", *flags, mentions=words)
    assert not (tmp_path / "out").exists()
