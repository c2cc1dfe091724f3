"""`onnx-reduce batch`, the real CLI in subprocesses on small real models: a folder corpus and a TOML manifest,
failures grouped into bugs (reducer/dedup.py), malformed and hanging models as their own records, resume after
SIGKILL, SIGTERM, --jobs, --baseline with the baseline bundle re-verified, junit.xml against Jenkins' schema."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_bad_input import CLI_TIMEOUT, _snapshot, assert_bad_input, run_cli, write_model

from reducer.dedup import bug_id, repro_signature

REPO = Path(__file__).resolve().parent.parent
FP16_STORAGE = ["--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "nan"]
TIMINGS = ("seconds", "time")


# --- models and checks built here ----------------------------------------------------------------------------
def chain(ops: list[str], prefix: str = "m", scale: float = 1e5, shape=(2, 3)) -> onnx.ModelProto:
    """Unary ops in a chain; `Mul` multiplies by `scale` (1e5: Inf in fp16 storage, finite in fp32)."""
    nodes, previous = [], "x"
    for index, op in enumerate(ops):
        reads = [previous, f"{prefix}_scale"] if op == "Mul" else [previous]
        nodes.append(helper.make_node(op, reads, [f"{prefix}_t{index}"], name=f"{prefix}_n{index}"))
        previous = f"{prefix}_t{index}"
    nodes.append(helper.make_node("Identity", [previous], ["y"], name=f"{prefix}_out"))
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in ("x", "y")]
    weight = numpy_helper.from_array(np.array(scale, np.float32), f"{prefix}_scale")
    graph = helper.make_graph(nodes, prefix, values[:1], values[1:], initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


# A check command: the model fails when it holds an op the "runtime" (a file listing broken ops) breaks; it
# first waits while a `slow` file next to it names the model, and kills the reduction that runs it (SIGKILL, as
# the OOM killer would) where a `crash` file names it. Op types are plain strings in the protobuf.
CHECK = """import os, signal, sys, time
model, runtime = sys.argv[1], sys.argv[2]
def names_this_model(marker):
    try:
        return open(os.path.join(os.path.dirname(runtime), marker)).read().strip() in model
    except OSError:
        return False
if names_this_model("crash"):
    os.kill(os.getppid(), signal.SIGKILL)
while names_this_model("slow"):
    time.sleep(0.05)
broken = open(runtime).read().split() if os.path.exists(runtime) else []
data = open(model, "rb").read()
sys.exit(1 if any(op.encode() in data for op in broken) else 0)
"""


def batch(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli(cwd, "batch", *args)


def copy_silero(corpus: Path, model: str = "silero.onnx") -> None:
    """The corpus's Silero VAD into a test corpus, with its int16 audio as `silero.npz`."""
    (corpus / model).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "corpus" / "models" / "silero_vad_16k_op15.onnx", corpus / model)
    shutil.copy(REPO / "corpus" / "inputs" / "silero_vad_int16pcm.npz", corpus / "silero.npz")


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def outcomes(run_dir: Path) -> dict[str, str]:
    return {m["name"]: m["outcome"] for m in summary(run_dir)["models"]}


def without_timings(value):
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def _start(cwd: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "ONNX_REDUCE_DEBUG"}
    return subprocess.Popen([sys.executable, "-m", "reducer", "batch", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def _wait_for(path: Path, process: subprocess.Popen, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not path.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    assert process.poll() is None and path.exists(), process.stderr.read() if process.poll() is not None else ""


def _reductions_described(run_dir: Path) -> dict[int, str]:
    """Live processes whose command line names this run's folder (a reduction of ours), each described as
    "pid (state, parent): command line"."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and fields[0] not in ("Z", "X") and any(str(run_dir).encode() in w for w in words):
            command = b" ".join(words).decode(errors="replace")
            found[int(entry.name)] = f"{entry.name} ({fields[0]}, parent {fields[1]}): {command}"
    return found


def _reductions_running(run_dir: Path) -> list[int]:
    return list(_reductions_described(run_dir))


def _no_reductions_left(run_dir: Path, within: float = 30) -> list[str]:
    """Those still running after `within` seconds, described, so that a failure says which process outlived the
    batch: alone it ends at once; one CI run on a loaded 2-core machine saw one still there after 10 s, and one run
    here beside two reductions after 30 s."""
    deadline = time.monotonic() + within
    while _reductions_running(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    return list(_reductions_described(run_dir).values())


# --- the signature of a repro (in-process: pure functions) ---------------------------------------------------
def test_one_pattern_in_two_differently_named_models_is_one_bug():
    failure = {"kind": "nan", "detail": "", "outputs": ["a_t0"]}
    first = repro_signature(chain(["Mul"], "a", 1e5, (2, 3)), failure)
    second = repro_signature(chain(["Mul"], "bb", 3e5, (4, 5)), {**failure, "outputs": ["bb_t0"]})
    assert bug_id(first) == bug_id(second)


@pytest.mark.parametrize("other", [
    (["Relu"], "nan"),  # another op
    (["Mul"], "tolerance"),  # another failure kind
    (["Mul", "Relu"], "nan"),  # another graph
])
def test_another_op_graph_or_failure_kind_is_another_bug(other):
    ops, kind = other
    assert bug_id(repro_signature(chain(["Mul"]), {"kind": "nan"})) != bug_id(
        repro_signature(chain(ops), {"kind": kind}))


def test_a_dim_of_one_is_part_of_the_pattern():
    """A broadcasting size-1 dim is a different shape pattern; other sizes are masked."""
    assert bug_id(repro_signature(chain(["Mul"], shape=(1, 3)), {"kind": "nan"})) != bug_id(
        repro_signature(chain(["Mul"], shape=(2, 3)), {"kind": "nan"}))


def test_bug_ids_are_stable_across_runs_and_machines():
    """No randomness, no paths, no names: the id is a fixed function of the pattern (the nightly key)."""
    assert bug_id(repro_signature(chain(["Relu", "Mul"], "any"), {"kind": "nan"})) == "bug-ad99aa8a3b"


def test_independent_branches_stored_in_another_order_give_one_bug():
    def branches(order):
        nodes = {"r": helper.make_node("Relu", ["x"], ["p"], name="r"),
                 "s": helper.make_node("Sigmoid", ["x"], ["q"], name="s"),
                 "a": helper.make_node("Add", ["p", "q"], ["y"], name="a")}
        values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("x", "y")]
        return helper.make_model(helper.make_graph([nodes[k] for k in order], "g", values[:1], values[1:]))

    assert bug_id(repro_signature(branches("rsa"), {"kind": "nan"})) == bug_id(
        repro_signature(branches("sra"), {"kind": "nan"}))


def test_an_errors_text_counts_with_its_names_and_numbers_masked():
    model_a, model_b = chain(["Relu"], "a"), chain(["Relu"], "b")
    failure = {"kind": "error", "detail": "RUNTIME_EXCEPTION"}
    one = repro_signature(model_a, failure, "Non-zero status code running a_n0 node; size 1234 at 0x7f3a")
    same = repro_signature(model_b, failure, "Non-zero status code running b_n0 node; size 88 at 0x55aa")
    other = repro_signature(model_b, failure, "Out of memory running b_n0 node")
    assert bug_id(one) == bug_id(same) != bug_id(other)


# --- a folder corpus -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    """2 models failing by one pattern (different names and lengths), 1 passing, 1 malformed, in sub-folders."""
    root = tmp_path_factory.mktemp("folder")
    write_model(root / "corpus" / "vision" / "first.onnx", chain(["Relu", "Relu", "Mul", "Relu"], "first"))
    write_model(root / "corpus" / "audio" / "second.onnx", chain(["Mul", "Relu"], "second", scale=2e5))
    write_model(root / "corpus" / "fine.onnx", chain(["Relu", "Relu"], "fine"))
    (root / "corpus" / "broken.onnx").write_text("not a protobuf\n")
    before = _snapshot(root)
    done = batch(root, "corpus", "-o", "out", *FP16_STORAGE)
    return root, done, before


def test_a_folder_corpus_gives_one_bug_with_two_models(folder_run):
    root, done, _ = folder_run
    assert done.returncode == 1, done.stderr  # new bugs
    found = summary(root / "out")
    assert outcomes(root / "out") == {"audio__second": "reduced", "broken": "error", "fine": "passing",
                                      "vision__first": "reduced"}
    (bug,) = found["bugs"]
    assert sorted(bug["models"]) == ["audio__second", "vision__first"]
    assert bug["status"] == "new" and bug["id"].startswith("bug-") and bug["signature"] == "nan: Mul"
    assert (root / "out" / bug["bundle"]).is_file()
    by_name = {m["name"]: m for m in found["models"]}
    assert by_name["vision__first"]["nodes_before"] == 5 and by_name["vision__first"]["nodes_after"] == 1
    assert by_name["vision__first"]["bug"] == by_name["audio__second"]["bug"] == bug["id"]


def test_a_malformed_model_is_its_own_error_record(folder_run):
    root, done, _ = folder_run
    record = {m["name"]: m for m in summary(root / "out")["models"]}["broken"]
    assert "not a valid ONNX model" in record["reason"] and record["bug"] is None
    assert "Traceback" not in done.stderr


def test_progress_is_one_line_per_model_with_an_eta(folder_run):
    _, done, _ = folder_run
    lines = [line for line in done.stderr.splitlines() if " done, " in line]
    assert len(lines) == 4, done.stderr
    assert "4/4 done, 2 failing, 2 reduced, 1 errors, ETA" in lines[-1]


def test_nothing_is_written_outside_the_run_folder(folder_run):
    root, _, before = folder_run
    assert _snapshot(root) == before


def test_junit_xml_is_valid_for_jenkins_schema(folder_run):
    import xml.etree.ElementTree as ET

    import xmlschema

    root, _, _ = folder_run
    xmlschema.XMLSchema(str(REPO / "tests" / "junit-10.xsd")).validate(str(root / "out" / "junit.xml"))
    cases = {c.get("name"): c for c in ET.parse(root / "out" / "junit.xml").getroot().iter("testcase")}
    assert len(cases) == 4
    bug = summary(root / "out")["bugs"][0]["id"]
    assert cases["vision__first"].find("failure").get("message").startswith(f"{bug}: nan: Mul")
    assert cases["broken"].find("error") is not None
    assert list(cases["fine"]) == []


def test_two_jobs_give_the_same_summary_as_one(folder_run):
    root, _, _ = folder_run
    done = batch(root, "corpus", "-o", "out2", "--jobs", "2", *FP16_STORAGE)
    assert done.returncode == 1, done.stderr
    one, two = without_timings(summary(root / "out")), without_timings(summary(root / "out2"))
    assert one["bugs"] == two["bugs"]
    assert [{k: v for k, v in m.items() if k != "output"} for m in one["models"]] == [
        {k: v for k, v in m.items() if k != "output"} for m in two["models"]]


def test_run_folders_inside_a_folder_corpus_are_not_models(tmp_path):
    write_model(tmp_path / "corpus" / "fine.onnx", chain(["Relu"], "fine"))
    write_model(tmp_path / "corpus" / "failing.onnx", chain(["Mul"], "failing"))
    assert batch(tmp_path, "corpus", "-o", "corpus/runs/1", *FP16_STORAGE).returncode == 1
    done = batch(tmp_path, "corpus", "-o", "corpus/runs/2", *FP16_STORAGE)
    assert done.returncode == 1, done.stderr
    assert outcomes(tmp_path / "corpus" / "runs" / "2") == {"failing": "reduced", "fine": "passing"}


# --- a manifest -------------------------------------------------------------------------------------------------
def test_a_manifest_gives_per_model_settings_and_tracks_a_known_bug(tmp_path):
    corpus = tmp_path / "corpus"
    write_model(corpus / "models" / "known.onnx", chain(["Relu", "Mul"], "known"))
    write_model(corpus / "models" / "same.onnx", chain(["Mul", "Relu", "Relu"], "same"))
    write_model(corpus / "models" / "fp32.onnx", chain(["Relu", "Mul"], "fp32"))
    copy_silero(corpus, "models/silero.onnx")
    (corpus / "nightly.toml").write_text("""
[defaults]
runner = "onnxruntime:cpu:fp16-storage"
fail_on = "nan"

[[model]]
path = "models/known.onnx"
expect = "fail"
bug = "ORT-1234"

[[model]]
path = "models/same.onnx"

[[model]]
path = "models/fp32.onnx"
name = "in fp32"
runner = "onnxruntime:cpu:fp32"

[[model]]
path = "models/silero.onnx"
name = "silero"
inputs = "silero.npz"
runner = "onnxruntime:cpu:fp16"
fail_on = "tolerance"
atol = 0.01
rtol = 0.01
""")
    done = batch(tmp_path, "corpus/nightly.toml", "-o", "out", "--runner", "onnxruntime:cpu:fp32")
    assert done.returncode == 1, done.stderr  # silero's bug is new; the Mul one is known
    assert outcomes(tmp_path / "out") == {"models__known": "expected-failure", "models__same": "reduced",
                                          "in_fp32": "passing", "silero": "reduced"}
    bugs = {b["id"]: b for b in summary(tmp_path / "out")["bugs"]}
    assert bugs["ORT-1234"]["status"] == "known" and sorted(bugs["ORT-1234"]["models"]) == [
        "models__known", "models__same"]
    (silero,) = [b for b in bugs.values() if b["models"] == ["silero"]]
    assert silero["status"] == "new" and silero["signature"] == "tolerance: Conv"


@pytest.mark.parametrize("entry, mentions", [
    ('path = "../outside.onnx"', ("outside the manifest's folder",)),
    ('path = "/etc/hostname"', ("absolute",)),
    ('path = "m.onnx"\ninputs = "../../secret.npz"', ("inputs", "outside")),
    ('path = "m.onnx"\ncolour = "red"', ("unknown key 'colour'",)),
    ('path = "m.onnx"\natol = -1', ("atol",)),
    ('path = "m.onnx"\nexpect = "maybe"', ("expect",)),
    ('path = "m.onnx"\nbug = "B-1"', ("bug id goes with expect",)),
    ('path = "m.onnx"\ncheck = "python check.py"', ("list of strings",)),
    ('path = "m.onnx"\nfail_on = "nans"', ("fail_on",)),
    ("path = ", ("not valid TOML",)),
])
def test_a_bad_manifest_is_refused_in_one_line(tmp_path, entry, mentions):
    write_model(tmp_path / "corpus" / "m.onnx", chain(["Relu"]))
    (tmp_path / "corpus" / "list.toml").write_text(f"[[model]]\n{entry}\n")
    assert_bad_input(tmp_path, "batch", "corpus/list.toml", "-o", "out", mentions=mentions)


def test_a_manifest_path_that_leaves_by_a_symbolic_link_is_refused(tmp_path):
    write_model(tmp_path / "elsewhere" / "m.onnx", chain(["Relu"]))
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "m.onnx").symlink_to(tmp_path / "elsewhere" / "m.onnx")
    (tmp_path / "corpus" / "list.toml").write_text('[[model]]\npath = "m.onnx"\n')
    assert_bad_input(tmp_path, "batch", "corpus/list.toml", "-o", "out", mentions=("outside the manifest's folder",))


@pytest.mark.parametrize("args, mentions", [
    (["corpus", "--jobs", "0"], ("--jobs",)),
    (["corpus", "--model-timeout", "0"], ("--model-timeout",)),
    (["corpus", "--atol", "nan"], ("--atol",)),
    (["corpus", "--baseline", "nowhere"], ("--baseline",)),
    (["empty"], ("no .onnx file",)),
    (["missing"], ("no such file",)),
])
def test_bad_batch_options_are_refused_in_one_line(tmp_path, args, mentions):
    write_model(tmp_path / "corpus" / "m.onnx", chain(["Relu"]))
    (tmp_path / "empty").mkdir()
    assert_bad_input(tmp_path, "batch", *args, "-o", "out", mentions=mentions)


# --- isolation, interrupts, resume --------------------------------------------------------------------------
def _command_corpus(root: Path, broken_ops: str, models: dict[str, list[str]], slow: str = "") -> list[str]:
    """Models in corpus/, judged by the CHECK command against runtime/broken (the ops that fail today); the
    checks of the model named `slow` wait until runtime/slow is removed."""
    (root / "runtime").mkdir(exist_ok=True)
    (root / "runtime" / "broken").write_text(broken_ops)
    if slow:
        (root / "runtime" / "slow").write_text(slow)
    (root / "check.py").write_text(CHECK)
    shutil.rmtree(root / "corpus", ignore_errors=True)
    for name, ops in models.items():
        write_model(root / "corpus" / f"{name}.onnx", chain(ops, name))
    return ["--no-cause-check", "--check", sys.executable, "check.py", "{model}", str(root / "runtime" / "broken")]


def test_a_hanging_model_times_out_and_the_batch_goes_on(tmp_path):
    check = _command_corpus(tmp_path, "Mul", {"a_hangs": ["Mul"], "b_fails": ["Relu", "Mul"]}, slow="a_hangs")
    # 10 s: room for the model that finishes on a machine busy with other work (at 3 s, a loaded 2-core machine
    # timed it out too, Python's and ONNX Runtime's start alone taking most of it)
    done = batch(tmp_path, "corpus", "-o", "out", "--model-timeout", "10", "--jobs", "2", *check)
    assert done.returncode == 1, done.stderr
    assert outcomes(tmp_path / "out") == {"a_hangs": "timeout", "b_fails": "reduced"}
    assert "no result after 10 s" in {m["name"]: m for m in summary(tmp_path / "out")["models"]}["a_hangs"]["reason"]
    assert _no_reductions_left(tmp_path / "out") == []


def test_a_crashing_reduction_is_an_error_record_and_is_redone_on_resume(tmp_path):
    check = _command_corpus(tmp_path, "Mul", {"a_crashes": ["Mul"], "b_fails": ["Relu", "Mul"]})
    (tmp_path / "runtime" / "crash").write_text("a_crashes")
    done = batch(tmp_path, "corpus", "-o", "out", *check)
    assert done.returncode == 1, done.stderr
    record = {m["name"]: m for m in summary(tmp_path / "out")["models"]}["a_crashes"]
    assert (record["outcome"], record["reason"]) == ("error", "killed by SIGKILL")
    assert outcomes(tmp_path / "out")["b_fails"] == "reduced"
    (tmp_path / "runtime" / "crash").unlink()
    again = batch(tmp_path, "corpus", "-o", "out", *check)
    assert "1 of 2 models finished in an earlier run: not redone" in again.stderr
    assert outcomes(tmp_path / "out") == {"a_crashes": "reduced", "b_fails": "reduced"}


def test_sigterm_stops_the_batch_writes_what_is_done_and_leaves_no_reduction(tmp_path):
    check = _command_corpus(tmp_path, "Mul", {"a_fast": ["Mul"], "b_slow": ["Relu", "Mul"]}, slow="b_slow")
    process = _start(tmp_path, "corpus", "-o", "out", *check)
    _wait_for(tmp_path / "out" / "records" / "a_fast.json", process)
    _wait_for(tmp_path / "out" / "models" / "b_slow" / "activations", process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=CLI_TIMEOUT)
    assert process.returncode == 143, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    found = summary(tmp_path / "out")
    assert found["interrupted"] is True
    assert outcomes(tmp_path / "out") == {"a_fast": "reduced", "b_slow": "not-run"}
    assert _no_reductions_left(tmp_path / "out") == []


def test_a_batch_killed_by_sigkill_resumes_without_redoing_finished_models(tmp_path):
    models = {"a_fast": ["Mul"], "b_fast": ["Mul", "Relu"], "c_slow": ["Relu", "Mul"]}
    check = _command_corpus(tmp_path, "Mul", models, slow="c_slow")
    process = _start(tmp_path, "corpus", "-o", "out", *check)
    _wait_for(tmp_path / "out" / "records" / "b_fast.json", process)
    _wait_for(tmp_path / "out" / "models" / "c_slow" / "activations", process)
    process.kill()
    process.communicate(timeout=CLI_TIMEOUT)
    assert _no_reductions_left(tmp_path / "out") == []  # the reduction did not outlive the batch
    finished = {n: (tmp_path / "out" / "models" / n / "report.json").stat().st_mtime_ns for n in ("a_fast", "b_fast")}
    (tmp_path / "runtime" / "slow").unlink()
    done = batch(tmp_path, "corpus", "-o", "out", *check)
    assert done.returncode == 1, done.stderr
    assert "2 of 3 models finished in an earlier run: not redone" in done.stderr
    assert outcomes(tmp_path / "out") == {"a_fast": "reduced", "b_fast": "reduced", "c_slow": "reduced"}
    assert {n: (tmp_path / "out" / "models" / n / "report.json").stat().st_mtime_ns for n in finished} == finished
    assert len(summary(tmp_path / "out")["bugs"]) == 1


# --- baseline ------------------------------------------------------------------------------------------------
def test_a_baseline_marks_bugs_new_still_failing_fixed_and_not_fixed(tmp_path):
    """Last night Mul, Sigmoid and Tanh were broken. Tonight the runtime fixed Mul (its models pass, its bundle no
    longer reproduces: fixed), the model with Sigmoid was changed (it passes, but the bundle still reproduces under
    tonight's runtime: not fixed), Tanh is still broken, and Exp is newly broken."""
    night = {"mul": ["Relu", "Mul"], "sig": ["Relu", "Sigmoid"], "tanh": ["Tanh", "Relu"]}
    check = _command_corpus(tmp_path, "Mul Sigmoid Tanh", night)
    first = batch(tmp_path, "corpus", "-o", "night1", "--jobs", "2", *check)
    assert first.returncode == 1, first.stderr
    assert len(summary(tmp_path / "night1")["bugs"]) == 3
    tonight = {**night, "sig": ["Relu", "Relu"], "exp": ["Exp"]}
    check = _command_corpus(tmp_path, "Sigmoid Tanh Exp", tonight)
    second = batch(tmp_path, "corpus", "-o", "night2", "--baseline", "night1", "--jobs", "2", *check)
    assert second.returncode == 1, second.stderr
    bugs = {tuple(b["models"]): b for b in summary(tmp_path / "night2")["bugs"]}
    assert {models: b["status"] for models, b in bugs.items()} == {
        ("exp",): "new", ("tanh",): "still-failing", ("mul",): "fixed", ("sig",): "not-fixed"}
    assert "the bundle still reproduces" in bugs[("sig",)]["reason"]
    third = batch(tmp_path, "corpus", "-o", "night3", "--baseline", "night2", "--jobs", "2", *check)
    assert third.returncode == 0, third.stderr  # nothing new: CI passes


def test_a_baseline_bundle_of_a_script_run_as_it_is_is_reverified(tmp_path):
    """`--check ./check.sh {model}`: the bundle records it as `sh {bundle}/check.sh {model}` (run by its #! line's
    interpreter). Tonight's same script is that command: the bug is fixed, not unverified for a word more."""
    check = _command_corpus(tmp_path, "Mul", {"mul": ["Relu", "Mul"]})
    script = tmp_path / "check.sh"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tmp_path / "check.py"}" "$@"\n')
    script.chmod(0o755)
    check = [*check[: check.index("--check") + 1], "./check.sh", *check[check.index("{model}"):]]
    assert batch(tmp_path, "corpus", "-o", "night1", *check).returncode == 1
    (tmp_path / "runtime" / "broken").write_text("")
    done = batch(tmp_path, "corpus", "-o", "night2", "--baseline", "night1", *check)
    assert done.returncode == 0, done.stderr
    (bug,) = summary(tmp_path / "night2")["bugs"]
    assert bug["status"] == "fixed", bug


def test_a_baseline_bundles_command_runs_only_when_it_is_tonights(tmp_path):
    """The baseline's bundle ships last night's check script: tonight's differs, so it is not run (a baseline is a
    file from elsewhere) and the bug is unverified, not fixed."""
    check = _command_corpus(tmp_path, "Mul", {"mul": ["Relu", "Mul"]})
    assert batch(tmp_path, "corpus", "-o", "night1", *check).returncode == 1
    (tmp_path / "runtime" / "broken").write_text("")
    (tmp_path / "check.py").write_text(CHECK + "# changed\n")
    done = batch(tmp_path, "corpus", "-o", "night2", "--baseline", "night1", *check)
    assert done.returncode == 0, done.stderr
    (bug,) = summary(tmp_path / "night2")["bugs"]
    assert bug["status"] == "unverified" and "refusing to run the bundle's check command" in bug["reason"]


def test_the_corpus_manifest_for_batch_holds_every_corpus_case():
    """corpus/batch.toml, README's example of a real nightly corpus: the cases of corpus/manifest.json, with
    the same model, inputs and oracle."""
    from corpus_files import CORPUS, corpus_model

    from reducer.batch_corpus import load_corpus

    cases = json.loads((CORPUS / "manifest.json").read_text())
    for case in cases:
        corpus_model(case["model"])
    entries = {entry.name: entry for entry in load_corpus(CORPUS / "batch.toml")}
    assert sorted(entries) == sorted(case["name"] for case in cases)
    for case in cases:
        entry = entries[case["name"]]
        assert entry.path == (CORPUS / case["model"]).resolve()
        assert Path(entry.settings["inputs"]) == (CORPUS / case["inputs"]).resolve()
        assert entry.settings.get("runner", "onnxruntime:cpu:fp16") == case["runner"]
        assert entry.settings["fail_on"] == case["fail_on"]
        assert entry.expect == "pass"  # the failing ones are reported as bugs, as a first night would


# --- results shared from night to night ----------------------------------------------------------------------
def test_an_unchanged_model_costs_no_check_on_the_next_night_and_a_changed_one_is_checked(tmp_path):
    write_model(tmp_path / "corpus" / "first.onnx", chain(["Relu", "Mul", "Relu"], "first"))
    write_model(tmp_path / "corpus" / "fine.onnx", chain(["Relu", "Relu"], "fine"))
    first = batch(tmp_path, "corpus", "-o", "night1", "--cache", "shared", *FP16_STORAGE)
    assert first.returncode == 1, first.stderr
    second = batch(tmp_path, "corpus", "-o", "night2", "--cache", "shared", *FP16_STORAGE)
    assert second.returncode == 1, second.stderr
    night1 = {m["name"]: m for m in summary(tmp_path / "night1")["models"]}
    night2 = {m["name"]: m for m in summary(tmp_path / "night2")["models"]}
    assert night1["first"]["checks"] > 0 and night1["fine"]["checks"] > 0
    assert all(m["checks"] == 0 and m.get("cached") for m in night2.values())  # no reduction ran
    assert night2["first"]["bug"] == night1["first"]["bug"] and night2["first"]["outcome"] == "reduced"
    assert (tmp_path / "night2" / night2["first"]["bundle"]).is_file()
    kept = [p.name for p in (tmp_path / "shared").rglob("*")]
    assert "minimal.onnx" in kept and "activations" not in kept and "work" not in kept  # results, not scratch
    # the weight changed in place (same size): that model is checked again; the other is not
    write_model(tmp_path / "corpus" / "first.onnx", chain(["Relu", "Mul", "Relu"], "first", scale=3e5))
    third = batch(tmp_path, "corpus", "-o", "night3", "--cache", "shared", *FP16_STORAGE)
    assert third.returncode == 1, third.stderr
    night3 = {m["name"]: m for m in summary(tmp_path / "night3")["models"]}
    assert night3["first"]["checks"] > 0 and not night3["first"].get("cached")
    assert night3["fine"]["checks"] == 0 and night3["fine"].get("cached")


def test_a_runtime_upgrade_changes_every_results_key(tmp_path):
    from reducer.batch_cache import result_key

    model = write_model(tmp_path / "m.onnx", chain(["Relu", "Mul"], "m"))
    argv = ["reduce", str(model), "--runner", "onnxruntime:cpu:fp16-storage"]
    today = result_key(model, argv, {"onnxruntime": "1.32.0"})
    assert today == result_key(model, argv, {"onnxruntime": "1.32.0"})
    assert today != result_key(model, argv, {"onnxruntime": "1.33.0"})
    assert today != result_key(model, [*argv, "--minimal"], {"onnxruntime": "1.32.0"})
    assert result_key(tmp_path / "missing.onnx", argv, {}) is None


def test_on_a_terminal_a_live_line_names_the_running_models_below_the_per_model_lines():
    import io

    from reducer.batch import BatchProgress

    stream = io.StringIO()
    progress = BatchProgress(stream, live=True)
    progress.start(3, 0)
    progress.begin("a_model")
    progress.begin("b_model")
    assert "0/3 done, 0 failing, 0 reduced, 0 errors, ETA ? | running (2): a_model, b_model" in progress.status()
    progress.done({"name": "a_model", "outcome": "reduced", "reason": "nan: Mul; 3 -> 1 nodes " + "x" * 100})
    status = progress.status()
    assert status.endswith("| running (1): b_model") and "1/3 done, 1 failing, 1 reduced" in status
    progress.stop()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and "1/3 done, 1 failing, 1 reduced, 0 errors, ETA " in lines[0]  # one line, unwrapped
    assert lines[0].endswith("a_model: reduced (nan: Mul; 3 -> 1 nodes " + "x" * 100 + ")")
