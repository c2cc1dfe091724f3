"""The output directory and the verdicts kept in it, tried as a hostile user and a flaky machine would:
checks killed from outside, weights edited in place, symbolic links planted in OUT, two runs at once,
stale results and debris, a full disk. The real CLI in a subprocess, on small real models."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper
from test_bad_input import CLI_TIMEOUT, _model, _snapshot, _value, assert_bad_input, good_model, run_cli, write_model

from reducer import errors

STORAGE = ["--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "nan"]  # |x| > 65504 becomes Inf


# --- models built here -----------------------------------------------------------------------------------
def overflow_nodes() -> tuple[list, list]:
    """x -> Relu -> *1e5 -> Relu -> Neg -> y: the product leaves fp16's range, so y is Inf where the fp32
    reference is finite; the minimal repro is the Mul alone."""
    big = numpy_helper.from_array(np.array(1e5, dtype=np.float32), "big")
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu0"),
             helper.make_node("Mul", ["a", "big"], ["b"], name="scale"),
             helper.make_node("Relu", ["b"], ["c"], name="relu1"),
             helper.make_node("Neg", ["c"], ["y"], name="neg")]
    return nodes, [big]


def failing_model() -> onnx.ModelProto:
    nodes, weights = overflow_nodes()
    return _model(nodes, [_value("x")], [_value("y")], weights)


def slow_failing_model(trips: int = 4000) -> onnx.ModelProto:
    """The failing model beside a Loop of `trips` 256x256 MatMuls: a whole-model check long enough to be
    killed in the middle of (about half a second); any cut without the Loop is quick."""
    nodes, weights = overflow_nodes()
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("MatMul", ["s_in", "eye"], ["s_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), _value("s_in", shape=(256, 256))],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _value("s_out", shape=(256, 256))])
    nodes.append(helper.make_node("Loop", ["trips", "", "s"], ["slow"], name="slow_loop", body=body))
    weights += [numpy_helper.from_array(np.eye(256, dtype=np.float32), "eye"),
                numpy_helper.from_array(np.array(trips, dtype=np.int64), "trips")]
    return _model(nodes, [_value("x"), _value("s", shape=(256, 256))], [_value("y"), _value("slow", shape=(256, 256))],
                  weights)


def tiled_model(rows: int) -> onnx.ModelProto:
    """x[64,256] tiled to [64*rows,256]: an activation `rows` times the input's size."""
    repeats = numpy_helper.from_array(np.array([rows, 1], dtype=np.int64), "repeats")
    nodes = [helper.make_node("Tile", ["x", "repeats"], ["t"], name="tile"),
             helper.make_node("Relu", ["t"], ["y"], name="relu")]
    return _model(nodes, [_value("x", shape=(64, 256))], [_value("y", shape=(64 * rows, 256))], [repeats])


def external_weight_model(location: str) -> onnx.ModelProto:
    """y = x + w, w (2x3 float32, 24 bytes) kept in the file `location` next to the model."""
    weight = numpy_helper.from_array(np.zeros((2, 3), dtype=np.float32), "w")
    external_data_helper.set_external_data(weight, location=location, offset=0, length=24)
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_value("x")], [_value("y")], [weight])


@pytest.fixture
def work(tmp_path) -> Path:
    write_model(tmp_path / "models" / "fail.onnx", failing_model())
    write_model(tmp_path / "models" / "good.onnx", good_model())
    return tmp_path


def report_of(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def start_cli(cwd: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "ONNX_REDUCE_DEBUG"}
    return subprocess.Popen([sys.executable, "-m", "reducer.cli", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.002)


def workers_of(pid: int) -> list[int]:
    """The warm worker processes a CLI run spawned (its children running multiprocessing's spawn_main)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        parent = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(parent) == pid and "spawn_main" in command:
            found.append(int(entry.name))
    return found


# --- verdicts that outlive their cause ----------------------------------------------------------------
def test_a_worker_killed_during_the_first_check_is_not_cached(work):
    """The worker SIGKILLed from outside while it checks the whole model: that run cannot tell, but the
    next one checks again and reduces, instead of answering "not failing" from the cache forever."""
    write_model(work / "models" / "slow.onnx", slow_failing_model())
    args = ("reduce", "models/slow.onnx", "-o", "out", *STORAGE)
    first = start_cli(work, *args)
    wait_for(work / "out" / "work" / "check-000001" / "candidate.onnx", first)
    for worker in workers_of(first.pid):
        os.kill(worker, signal.SIGKILL)
    first.communicate(timeout=CLI_TIMEOUT)
    assert "SIGKILL" in report_of(work / "out")["original"]["reason"]  # killed mid-check, as meant
    # no verdict on the model, not "not failing"
    assert first.returncode == errors.EXIT_INTERNAL and report_of(work / "out")["status"] == "no-verdict"

    again = run_cli(work, *args)
    assert again.returncode == errors.EXIT_REDUCED, again.stderr
    report = report_of(work / "out")
    assert report["status"] == "reduced" and report["original"]["failing"]
    assert report["strategies"]["initial"]["checks"] == 1  # the whole model checked again, not read back


KILL_ON_FIRST_CHECK = ("import os, signal, pathlib, sys\n"
                       "marker = pathlib.Path(sys.argv[1])\n"
                       "if not marker.exists():\n"
                       "    marker.write_text('killed once')\n"
                       "    os.kill(os.getpid(), signal.SIGKILL)\n"
                       "print('BUG: overflow'); sys.exit(1)\n")


@pytest.mark.parametrize("flags, first_code", [
    (("--fail-regex", "BUG"), errors.EXIT_INTERNAL),  # the killed check printed no BUG: no verdict, not a pass
    ((), errors.EXIT_INTERNAL),  # the killed check "crashed": no verdict either, not the model's crash
], ids=["fail-regex", "any-exit-code"])
def test_a_check_command_killed_from_outside_is_not_cached(work, tmp_path_factory, flags, first_code):
    scratch = tmp_path_factory.mktemp("check")
    script = scratch / "check.py"
    script.write_text(KILL_ON_FIRST_CHECK)
    args = ("reduce", "models/fail.onnx", "-o", "out", "--no-cause-check", *flags, "--check", sys.executable,
            str(script), str(scratch / "killed"))
    first = run_cli(work, *args)
    assert first.returncode == first_code, first.stderr
    again = run_cli(work, *args)
    assert again.returncode == errors.EXIT_REDUCED, again.stderr
    assert report_of(work / "out")["original"]["failing"]


COUNT_AND_KILL_SECOND = ("import os, signal, pathlib, sys\n"
                         "count = pathlib.Path(sys.argv[1])\n"
                         "seen = int(count.read_text()) + 1 if count.exists() else 1\n"
                         "count.write_text(str(seen))\n"
                         "if seen == 2:\n"
                         "    os.kill(os.getpid(), signal.SIGKILL)\n"
                         "print('BUG: overflow'); sys.exit(1)\n")


def test_a_final_recheck_killed_from_outside_is_not_cached(work, tmp_path_factory):
    """--max-checks 2: the whole model, then the final re-check, which is killed. The run says it has no
    verdict (not "not reproduced"); an identical re-run checks the final model again and finds it reproduces."""
    scratch = tmp_path_factory.mktemp("check")
    script = scratch / "check.py"
    script.write_text(COUNT_AND_KILL_SECOND)
    args = ("reduce", "models/fail.onnx", "-o", "out", "--max-checks", "2", "--fail-regex", "BUG", "--check",
            sys.executable, str(script), str(scratch / "count"))
    first = run_cli(work, *args)
    assert first.returncode == errors.EXIT_INTERNAL, first.stderr
    assert report_of(work / "out")["status"] == "no-verdict"
    again = run_cli(work, *args)
    assert again.returncode == errors.EXIT_REDUCED, again.stderr
    report = report_of(work / "out")
    assert report["final"]["failing"] and report["strategies"]["reverify"]["checks"] == 1


def test_killed_verdicts_an_older_version_cached_are_not_read_back(work):
    """A cache file whose lines say "killed by SIGKILL" (what older versions kept) is no answer: checked again."""
    args = ("reduce", "models/fail.onnx", "-o", "out", *STORAGE)
    assert run_cli(work, *args).returncode == errors.EXIT_REDUCED
    cache = work / "out" / "cache.jsonl"
    killed = {"failing": True, "signature": {"kind": "crash", "detail": "SIGKILL", "outputs": []},
              "reason": "the runner's process died: killed by SIGKILL"}
    lines = [json.loads(line) for line in cache.read_text().splitlines()]
    cache.write_text("".join(json.dumps({**entry, "verdict": killed}) + "\n" for entry in lines))
    again = run_cli(work, *args)
    assert again.returncode == errors.EXIT_REDUCED, again.stderr
    report = report_of(work / "out")
    assert report["cache_hits"] == 0 and report["original"]["failing"]


def test_an_identical_rerun_checks_the_final_model_again(work):
    args = ("reduce", "models/fail.onnx", "-o", "out", *STORAGE)
    assert run_cli(work, *args).returncode == errors.EXIT_REDUCED
    again = run_cli(work, *args)
    assert again.returncode == errors.EXIT_REDUCED, again.stderr
    report = report_of(work / "out")
    assert report["checks"] == 1 and report["strategies"]["reverify"]["checks"] == 1
    assert report["cache_hits"] > 0 and report["final"]["failing"]


@pytest.mark.parametrize("before, after, code", [
    (1.0, 1e5, errors.EXIT_REDUCED),  # x + 1e5 leaves fp16's range: now it fails
    (1e5, 1.0, errors.EXIT_NOT_FAILING),  # and back: now it does not
], ids=["starts-failing", "stops-failing"])
def test_external_weights_edited_in_place_keeping_size_and_mtime(work, before, after, code):
    weights = work / "models" / "w.bin"
    weights.write_bytes(np.full(6, before, dtype=np.float32).tobytes())
    write_model(work / "models" / "ext.onnx", external_weight_model("w.bin"))
    args = ("reduce", "models/ext.onnx", "-o", "out", *STORAGE)
    assert run_cli(work, *args).returncode != code
    stat = weights.stat()
    with open(weights, "r+b") as handle:  # in place: same inode, same size
        handle.write(np.full(6, after, dtype=np.float32).tobytes())
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights.stat().st_mtime_ns == stat.st_mtime_ns and weights.stat().st_size == stat.st_size
    again = run_cli(work, *args)
    assert again.returncode == code, again.stderr
    assert report_of(work / "out")["checks"] >= 1


# --- the output folder --------------------------------------------------------------------------------
@pytest.mark.parametrize("name, kind", [
    ("activations", "dir"), ("work", "dir"), ("bundle", "dir"), ("previous", "dir"),
    ("cache.jsonl", "file"), ("minimal.onnx", "file"), ("report.json", "file"), ("history.jsonl", "file"),
    (".lock", "file"), ("activations/index.json", "file"), ("activations/000000.npy", "file"),
])
def test_a_symlink_planted_in_the_output_folder_is_refused(work, name, kind):
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / ("folder" if kind == "dir" else "file")
    if kind == "dir":
        target.mkdir()
    else:
        target.write_text("the user's own file\n")
    link = work / "out" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    line = assert_bad_input(work, "reduce", "models/fail.onnx", "-o", "out", *STORAGE,
                            mentions=(name, "symbolic link"))
    assert "refused" in line
    assert link.is_symlink()  # left as it was: the user decides


def test_a_check_into_a_folder_with_a_planted_symlink_is_refused(work):
    (work / "elsewhere").write_text("the user's own file\n")
    (work / "out").mkdir()
    (work / "out" / "cache.jsonl").symlink_to(work / "elsewhere")
    assert_bad_input(work, "check", "models/fail.onnx", "-o", "out", *STORAGE, mentions=("cache.jsonl", "symbolic"))


def test_the_output_folder_itself_may_be_a_symlink(work):
    (work / "real").mkdir()
    (work / "link").symlink_to(work / "real")
    done = run_cli(work, "reduce", "models/fail.onnx", "-o", "link", *STORAGE)
    assert done.returncode == errors.EXIT_REDUCED, done.stderr
    assert (work / "real" / "minimal.onnx").is_file()


def test_a_second_run_into_the_same_folder_is_refused_naming_the_holder(work, tmp_path_factory):
    """A check command that waits until the others have been refused keeps the first run busy (a fixed
    sleep lost the race on a loaded machine); the second gets one line naming the first's pid, and the
    first ends as if alone."""
    scratch = tmp_path_factory.mktemp("check")
    slow, release = scratch / "slow.py", scratch / "release"
    slow.write_text(f"import os, sys, time\ndeadline = time.monotonic() + 60\n"
                    f"while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:\n"
                    "    time.sleep(0.05)\nprint('BUG')\nsys.exit(1)\n")
    args = ("reduce", "models/fail.onnx", "-o", "out", "--no-cause-check", "--fail-regex", "BUG",
            "--check", sys.executable, str(slow))
    first = start_cli(work, *args)
    try:
        wait_for(work / "out" / "work", first)
        second = run_cli(work, *args)
        check = run_cli(work, "check", "models/fail.onnx", "-o", "out", *STORAGE)
        bundle = run_cli(work, "bundle", "make", "out")  # it would rewrite the bundle under the run
    finally:
        release.touch()
        out, err = first.communicate(timeout=CLI_TIMEOUT)
    for refused in (second, check, bundle):
        lines = [line for line in refused.stderr.splitlines() if line.strip()]
        assert refused.returncode == errors.EXIT_BAD_INPUT, refused.stderr
        assert len(lines) == 1 and lines[0].startswith("onnx-reduce: error:"), refused.stderr
        assert f"in use by pid {first.pid}" in lines[0]
    assert first.returncode == errors.EXIT_REDUCED, err
    assert report_of(work / "out")["status"] == "reduced"


def test_a_lock_left_by_a_dead_run_does_not_block(work):
    out = work / "out"
    out.mkdir()
    (out / ".lock").write_text("pid 999999999 on elsewhere (started 2020-01-01 00:00:00)\n")
    done = run_cli(work, "reduce", "models/fail.onnx", "-o", "out", *STORAGE)
    assert done.returncode == errors.EXIT_REDUCED, done.stderr


def test_a_run_that_finds_no_failure_leaves_no_earlier_result(work):
    assert run_cli(work, "reduce", "models/fail.onnx", "-o", "out", *STORAGE).returncode == errors.EXIT_REDUCED
    out = work / "out"
    assert (out / "minimal.onnx").is_file() and (out / "bundle.zip").is_file()
    done = run_cli(work, "reduce", "models/good.onnx", "-o", "out", *STORAGE)
    assert done.returncode == errors.EXIT_NOT_FAILING, done.stderr
    for name in ("minimal.onnx", "minimal_inputs.npz", "bundle", "bundle.zip", "history.jsonl"):
        assert not (out / name).exists(), name
    assert report_of(out)["status"] == "not-failing"
    previous = json.loads((out / "previous" / "report.json").read_text())  # moved aside, not lost
    assert previous["status"] == "reduced" and (out / "previous" / "minimal.onnx").is_file()


def test_debris_of_an_unfinished_write_is_cleared(work):
    out = work / "out"
    (out / "activations").mkdir(parents=True)
    (work / "elsewhere").write_text("the user's own file\n")
    debris = ["minimal.onnx.tmp", "report.json.tmp", "bundle.zip.tmp", "minimal_inputs.tmp.npz",
              "activations/index.json.tmp"]
    for name in debris:
        (out / name).write_bytes(b"half a write")
    (out / "bundle.tmp").mkdir()
    (out / "bundle.tmp" / "report.md").write_text("half a bundle")
    (out / "cache.jsonl.tmp").symlink_to(work / "elsewhere")
    before = _snapshot(work)
    done = run_cli(work, "reduce", "models/good.onnx", "-o", "out", *STORAGE)
    assert done.returncode == errors.EXIT_NOT_FAILING, done.stderr
    left = [name for name in [*debris, "bundle.tmp", "cache.jsonl.tmp"] if os.path.lexists(out / name)]
    assert not left
    assert _snapshot(work) == before  # the link's target untouched


def _limit_file_size(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("rows, limit", [
    (8, 200_000),  # the inputs fit; a 512 kB activation does not: the reference run's worker cannot write it
    (1, 30_000),  # not even the 64 kB input fits: this process cannot write the reference run's inputs
], ids=["activation-store", "inputs"])
def test_a_file_that_cannot_be_written_is_named_not_blamed_on_the_model(work, rows, limit):
    """A file size limit stands in for a full disk (the same OSError path; tests may run as root, where
    permissions stop nothing): one line naming the cause, exit 2, not "the reference run fails"."""
    write_model(work / "models" / "tiled.onnx", tiled_model(rows))
    env = {k: v for k, v in os.environ.items() if k != "ONNX_REDUCE_DEBUG"}
    done = subprocess.run([sys.executable, "-m", "reducer.cli", "reduce", "models/tiled.onnx", "-o", "out",
                           "--runner", "onnxruntime:cpu:fp32"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL, preexec_fn=_limit_file_size(limit))
    assert done.returncode == errors.EXIT_BAD_INPUT, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("onnx-reduce:")]
    assert len(lines) == 1 and done.stderr.rstrip().endswith(lines[0]), done.stderr
    assert lines[0].startswith("onnx-reduce: error: cannot write"), lines[0]
    assert "File too large" in lines[0] and "out" in lines[0]
    assert "reference run" not in lines[0] and "internal error" not in lines[0]
    assert not (work / "out" / "activations" / "000001.npy").exists()  # no half-written tensor left


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any permission bits")
def test_an_unwritable_activation_store_is_named(work):
    store = work / "out" / "activations"
    store.mkdir(parents=True)
    store.chmod(0o500)
    try:
        done = run_cli(work, "reduce", "models/fail.onnx", "-o", "out", *STORAGE)
    finally:
        store.chmod(0o700)
    assert done.returncode == errors.EXIT_BAD_INPUT, done.stderr
    assert "cannot access" in done.stderr and "Permission denied" in done.stderr
    assert "reference run" not in done.stderr
