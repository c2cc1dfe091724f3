"""CommandOracle: Polygraphy's pass/fail rule for --check commands, and real commands run through judge()."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from polygraphy.tools.debug.subtool.iterative_debug_args import CheckCmdArgs

from oracles.base import CheckJob
from oracles.command import POLYGRAPHY_ARTIFACT, CommandOracle

# --- the rule, table-driven -------------------------------------------------------------------------------
# (fail_codes, ignore_fail_codes, fail_regexes, exit code, output) -> failing?
# Every row is also run through Polygraphy's own CheckCmdArgs.run_check with a real command, so the table
# is checked against the rule it claims to copy, not only against our reading of it.
RULE = [
    # nothing given: any non-zero exit fails
    (None, None, None, 0, "all good", False),
    (None, None, None, 1, "all good", True),
    (None, None, None, 7, "", True),
    # --fail-code: only those codes fail
    ([3], None, None, 3, "", True),
    ([3], None, None, 1, "", False),
    ([3], None, None, 0, "", False),
    ([3, 4], None, None, 4, "", True),
    # --fail-regex alone: a match fails even on exit 0; no match passes even on exit 1
    (None, None, ["boom"], 0, "a boom here", True),
    (None, None, ["boom"], 1, "quiet failure", False),
    (None, None, ["boom", "bang"], 0, "bang!", True),
    (None, None, ["^line2$"], 0, "line1\nline2\nline3", False),  # Python's re: ^ and $ are not per line
    (None, None, ["(?m)^line2$"], 0, "line1\nline2\nline3", True),
    # --fail-code and --fail-regex: both must hold
    ([3], None, ["boom"], 3, "boom", True),
    ([3], None, ["boom"], 3, "nothing", False),
    ([3], None, ["boom"], 1, "boom", False),
    # --ignore-fail-code: those codes pass; the rest as usual
    (None, [1], None, 1, "", False),
    (None, [1], None, 2, "", True),
    (None, [1], None, 0, "", False),
    (None, [1], ["boom"], 1, "boom", False),
    (None, [1], ["boom"], 0, "boom", True),
    (None, [1], ["boom"], 2, "nothing", False),
    # both code lists (Polygraphy's CLI forbids it; its rule lets ignore win)
    ([1], [1], None, 1, "", False),
]


def _oracle(fail_codes=None, ignore_fail_codes=None, fail_regexes=None, ignore_fail_regexes=None, argv=None,
            timeout=30.0) -> CommandOracle:
    return CommandOracle(
        argv or ["true"],
        timeout,
        fail_codes,
        ignore_fail_codes,
        [re.compile(r) for r in fail_regexes] if fail_regexes is not None else None,
        [re.compile(r) for r in ignore_fail_regexes] if ignore_fail_regexes is not None else None,
    )


def _polygraphy_says_failing(fail_codes, ignore_fail_codes, fail_regexes, code, output) -> bool:
    args = CheckCmdArgs()
    args.check = [sys.executable, "-c", "import sys; sys.stdout.write(sys.argv[1]); sys.exit(int(sys.argv[2]))",
                  output, str(code)]
    args.fail_codes = fail_codes
    args.ignore_fail_codes = ignore_fail_codes
    args.fail_regexes = [re.compile(r) for r in fail_regexes] if fail_regexes is not None else None
    args.show_output = False
    args.hide_fail_output = True
    return not args.run_check(None)


@pytest.mark.parametrize(("fail_codes", "ignore_fail_codes", "fail_regexes", "code", "output", "failing"), RULE)
def test_decide_follows_polygraphy(fail_codes, ignore_fail_codes, fail_regexes, code, output, failing):
    verdict = _oracle(fail_codes, ignore_fail_codes, fail_regexes).decide(code, output)
    assert verdict.failing is failing
    assert (verdict.signature is not None) is failing
    assert verdict.log == output


def test_the_table_is_polygraphys_rule():
    """One check for the whole table: Polygraphy's run_check on real processes agrees with every row."""
    disagree = [
        row for row in RULE if _polygraphy_says_failing(*row[:5]) is not row[5]
    ]
    assert disagree == []


@pytest.mark.parametrize(
    ("ignore_fail_regexes", "fail_regexes", "code", "output", "failing"),
    [
        (["known issue"], None, 1, "a known issue, skip it", False),  # passes despite a failing exit code
        (["known issue"], None, 1, "something else", True),
        (["known issue"], ["boom"], 0, "boom: known issue", False),  # ignore wins over a fail-regex match
        (["known issue"], ["boom"], 0, "boom", True),
    ],
)
def test_ignore_fail_regex(ignore_fail_regexes, fail_regexes, code, output, failing):
    verdict = _oracle(fail_regexes=fail_regexes, ignore_fail_regexes=ignore_fail_regexes).decide(code, output)
    assert verdict.failing is failing


def test_signatures_tell_failures_apart():
    assert _oracle().decide(3, "").signature.detail == "exit code 3"
    assert _oracle().decide(3, "").signature.kind == "command"
    by_regex = _oracle(fail_regexes=["boom", "bang"]).decide(0, "boom")
    assert by_regex.signature.kind == "command"
    assert by_regex.signature.detail == "matched /boom/"
    other = _oracle(fail_regexes=["boom", "bang"]).decide(0, "bang")
    assert not by_regex.signature.same_failure(other.signature)
    assert _oracle().decide(-11, "").signature.kind == "crash"
    assert _oracle().decide(-11, "").signature.detail == "SIGSEGV"


def test_empty_lists_mean_not_given():
    """The CLI passes [] for options not given; that must not turn into 'no code fails'."""
    assert _oracle(fail_codes=[], ignore_fail_codes=[], fail_regexes=[]).decide(1, "").failing is True
    assert _oracle(fail_codes=[], ignore_fail_codes=[], fail_regexes=[]).decide(0, "").failing is False


# --- real commands through judge() --------------------------------------------------------------------------
def _tiny_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "tiny", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def job(tmp_path) -> CheckJob:
    feeds_dir = tmp_path / "store"
    feeds_dir.mkdir()
    np.save(feeds_dir / "x.npy", np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)
    workdir = tmp_path / "check"
    workdir.mkdir()
    return CheckJob(model=_tiny_model(), feeds={"x": feeds_dir / "x.npy"}, reference={}, workdir=workdir)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped (containers' init may never reap orphans)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def test_timeout_kills_the_command_and_its_children(job, tmp_path):
    pids = tmp_path / "pids"
    script = f'sleep 30 & echo $! > {pids}; echo $$ >> {pids}; sleep 30'
    oracle = _oracle(argv=["sh", "-c", script], timeout=1.0)
    start = time.perf_counter()
    verdict = oracle.judge(job)
    elapsed = time.perf_counter() - start
    assert verdict.failing
    assert verdict.signature.kind == "timeout"
    assert elapsed < 1.0 + 5
    numbers = [int(p) for p in pids.read_text().split()]
    assert len(numbers) == 2
    assert _alive(os.getpid())  # the probe itself sees a live process
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in numbers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in numbers if _alive(p)] == []


def test_closing_the_oracle_cancels_a_running_check_without_a_verdict(job, tmp_path):
    """A check still running when the reduction closes (one started alongside the reference run, when
    Ctrl-C came) is killed with its children, and gives no verdict: a kill is no failure to cache."""
    import threading

    from oracles.command import CheckCancelled

    pids = tmp_path / "pids"
    oracle = _oracle(argv=["sh", "-c", f"sleep 30 & echo $! > {pids}; echo $$ >> {pids}; wait"], timeout=60)
    outcome = {}

    def judge() -> None:
        try:
            outcome["verdict"] = oracle.judge(job)
        except CheckCancelled as exc:
            outcome["cancelled"] = exc

    thread = threading.Thread(target=judge)
    thread.start()
    deadline = time.monotonic() + 10
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    start = time.perf_counter()
    oracle.close()
    thread.join(10)
    assert not thread.is_alive() and time.perf_counter() - start < 5
    assert "cancelled" in outcome and "verdict" not in outcome
    numbers = [int(p) for p in pids.read_text().split()]
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in numbers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in numbers if _alive(p)] == []


def test_a_check_that_starts_after_the_oracle_closed_is_cancelled_at_once(job, tmp_path):
    """Ctrl-C (or SIGTERM from a dying batch worker) can close the oracle while the check alongside the reference
    run is still saving its model: the check it then starts must not run on, orphaned, after the reduction."""
    from oracles.command import CheckCancelled

    started = tmp_path / "started"
    # Written then renamed, so a file that exists holds the whole pid: the kill can land between the shell
    # opening the file and writing it.
    script = f"echo $$ > {started}.part && mv {started}.part {started}; sleep 30"
    oracle = _oracle(argv=["sh", "-c", script], timeout=60)
    oracle.close()
    start = time.perf_counter()
    with pytest.raises(CheckCancelled):
        oracle.judge(job)
    assert time.perf_counter() - start < 5
    assert not started.exists()  # not started at all


def test_a_process_that_ends_while_a_check_is_being_started_leaves_no_check_running(tmp_path):
    """The process ends (os._exit) right after closing the oracle, while another thread is between spawning its
    check and registering it (a Ray worker SIGKILLed, its reduction told by SIGTERM): close() waits for that
    check to be registered and kills it; it must not run on, orphaned. The window is widened to a second."""
    pid_file = tmp_path / "pid"
    script = textwrap.dedent(f"""
        import os, subprocess, sys, threading, time
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
        from oracles import command
        spawn = subprocess.Popen

        def slow_to_return(*args, **kwargs):
            process = spawn(*args, **kwargs)
            Path({str(pid_file)!r}).write_text(str(process.pid))
            time.sleep(1.0)
            return process

        subprocess.Popen = slow_to_return
        running = command.RunningChecks()
        threading.Thread(target=command._run, args=(["sleep", "30"], Path({str(tmp_path)!r}), 60, running),
                         daemon=True).start()
        while not Path({str(pid_file)!r}).exists():
            time.sleep(0.01)
        running.close()
        os._exit(0)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(pid)
    if alive:
        os.kill(pid, 9)
    assert not alive


def test_a_command_that_segfaults_is_a_crash(job):
    argv = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    verdict = _oracle(argv=argv).judge(job)
    assert verdict.failing
    assert verdict.signature.kind == "crash"
    assert verdict.signature.detail == "SIGSEGV"


def test_output_is_captured_and_matched(job):
    argv = [sys.executable, "-c", "import sys; print('to stdout'); print('Assertion `x` failed', file=sys.stderr)"]
    verdict = _oracle(argv=argv, fail_regexes=[r"Assertion .* failed"]).judge(job)
    assert verdict.failing
    assert verdict.signature.detail == "matched /Assertion .* failed/"
    assert "to stdout" in verdict.log and "Assertion `x` failed" in verdict.log


INSPECT = textwrap.dedent(
    """
    import json, os, sys
    import onnx
    from polygraphy.json import load_json
    model_path, inputs_path, report = sys.argv[1], sys.argv[2], sys.argv[3]
    model = onnx.load(model_path)
    onnx.checker.check_model(model)
    loaded = load_json(inputs_path)
    feeds = loaded[0]
    json.dump({
        "cwd": os.getcwd(),
        "model_path": os.path.abspath(model_path),
        "nodes": [n.op_type for n in model.graph.node],
        "inputs_type": type(loaded).__name__,
        "feeds": {k: {"dtype": str(v.dtype), "shape": list(v.shape), "values": v.ravel().tolist()}
                  for k, v in feeds.items()},
    }, open(report, "w"))
    sys.exit(5)
    """
)


def test_model_and_inputs_placeholders(job, tmp_path):
    report = tmp_path / "report.json"
    argv = [sys.executable, "-c", INSPECT, "{model}", "{inputs}", str(report)]
    verdict = _oracle(argv=argv).judge(job)
    assert verdict.failing and verdict.signature.detail == "exit code 5", verdict.log
    seen = json.loads(report.read_text())
    assert seen["nodes"] == ["Relu"]
    assert seen["inputs_type"] == "list"  # Polygraphy's --load-inputs format: a list of feed dicts
    expected = np.load(job.feeds["x"])
    assert seen["feeds"] == {"x": {"dtype": "float32", "shape": [2, 3], "values": expected.ravel().tolist()}}
    assert Path(seen["cwd"]).resolve() == job.workdir.resolve()
    assert Path(seen["model_path"]).name != POLYGRAPHY_ARTIFACT


def test_without_model_placeholder_the_candidate_is_polygraphy_debug_onnx_in_cwd(job, tmp_path):
    report = tmp_path / "seen.json"
    code = (
        "import json, os, sys, onnx; m = onnx.load('polygraphy_debug.onnx'); "
        "json.dump({'cwd': os.getcwd(), 'nodes': [n.op_type for n in m.graph.node]}, open(sys.argv[1], 'w'))"
    )
    verdict = _oracle(argv=[sys.executable, "-c", code, str(report)]).judge(job)
    assert not verdict.failing, verdict.log
    seen = json.loads(report.read_text())
    assert Path(seen["cwd"]).resolve() == job.workdir.resolve()
    assert seen["nodes"] == ["Relu"]
    assert (job.workdir / POLYGRAPHY_ARTIFACT).is_file()
    assert not (job.workdir / "inputs.json").exists()  # only written when {inputs} asks for it


def test_relative_paths_to_existing_files_become_absolute(job, tmp_path, monkeypatch):
    """Each check runs in a private directory: a helper script named relative to where the user started
    must still be found."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "helper.py").write_text("import sys; sys.exit(9)\n")
    monkeypatch.chdir(home)
    oracle = _oracle(argv=[sys.executable, "helper.py"])
    assert oracle.argv[1] == os.path.join(str(home), "helper.py")
    verdict = oracle.judge(job)
    assert verdict.failing and verdict.signature.detail == "exit code 9", verdict.log


def test_a_command_may_say_how_many_elements_fail(job):
    """`failing_elements=N` (the last such line) becomes the verdict's count, which the proof of cause weighs;
    without it the count is unknown (None), never 0."""
    says = "print('failing_elements=3'); print('FAIL (tolerance)'); print('failing_elements=7'); raise SystemExit(1)"
    verdict = _oracle(argv=[sys.executable, "-c", says]).judge(job)
    assert verdict.failing and verdict.elements == 7
    passing = _oracle(argv=[sys.executable, "-c", "print('failing_elements=0')"]).judge(job)
    assert not passing.failing and passing.elements == 0
    silent = _oracle(argv=[sys.executable, "-c", "raise SystemExit(1)"]).judge(job)
    assert silent.failing and silent.elements is None


def test_a_command_may_name_the_outputs_that_fail(job):
    """`failing_outputs=[...]` (a JSON list, its last such line) names a failing verdict's outputs, by which the
    search drops a candidate's parts that pass; a line that is not a list of names, or a passing verdict, names none."""
    says = ("print('failing_outputs=[\"a\"]'); print('failing_outputs=[\"y\", \"z w\"]'); "
            "raise SystemExit(1)")
    assert _oracle(argv=[sys.executable, "-c", says]).judge(job).signature.outputs == ("y", "z w")
    garbled = "print('failing_outputs=[y]'); raise SystemExit(1)"
    assert _oracle(argv=[sys.executable, "-c", garbled]).judge(job).signature.outputs == ()
    passing = _oracle(argv=[sys.executable, "-c", "print('failing_outputs=[\"y\"]')"]).judge(job)
    assert not passing.failing


def test_a_relative_workdir_still_hands_the_check_absolute_paths(job, tmp_path, monkeypatch):
    """-o out makes every check's folder relative to where onnx-reduce started; the check runs in that folder,
    where such a path names nothing."""
    monkeypatch.chdir(tmp_path)
    relative = CheckJob(model=job.model, feeds=job.feeds, reference={}, workdir=Path("check"))
    says = 'for p in "$@"; do case $p in /*) test -s "$p" || exit 3;; *) exit 4;; esac; done; exit 1'
    verdict = _oracle(argv=["sh", "-c", says, "sh", "{model}", "{inputs}"]).judge(relative)
    assert verdict.failing and verdict.signature.detail == "exit code 1", verdict.reason


def test_a_checks_background_children_end_with_it(job, tmp_path):
    pids = tmp_path / "pids"
    verdict = _oracle(argv=["sh", "-c", f"sleep 300 & echo $! > {pids}; exit 1"]).judge(job)
    assert verdict.failing
    child = int(pids.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_a_check_that_does_not_compile_is_its_own_failure(job, tmp_path):
    """A script with a syntax error exits 1 as a failing check may, but prints no traceback header: its
    exception still marks the failure, so a candidate (or a bundle replay) that hits it is not the bug."""
    script = tmp_path / "check.py"
    script.write_text("import sys\nif True:\n    print('BUG')\n  sys.exit(1\n")
    broken = _oracle(argv=[sys.executable, str(script)]).judge(job)
    script.write_text("import sys\nprint('BUG')\nsys.exit(1)\n")
    meant = _oracle(argv=[sys.executable, str(script)]).judge(job)
    assert broken.failing and broken.signature.exception in ("SyntaxError", "IndentationError"), broken.reason
    assert meant.failing and meant.signature.exception == ""
    assert not broken.signature.same_failure(meant.signature)


def test_a_cached_verdict_does_not_outlive_the_files_the_command_names(tmp_path):
    """The verdict cache holds what a verdict depends on, and a command's verdict depends on the files it names (its
    script, its reference data): run again into the same output folder after one of them changed, the whole model is
    checked again, not answered from the first run's cache (which said it failed: reduced, then not reproduced at
    the final re-check)."""
    import subprocess

    model = tmp_path / "tiny.onnx"
    onnx.save(_tiny_model(), str(model))
    np.savez(tmp_path / "tiny.npz", x=np.arange(6, dtype=np.float32).reshape(2, 3))
    (tmp_path / "check.py").write_text("import sys; sys.exit(int(open(sys.argv[1]).read()))\n")
    verdict = tmp_path / "verdict.txt"

    def reduce() -> dict:
        done = subprocess.run([sys.executable, "-m", "reducer", "reduce", str(model), "--inputs",
                               str(tmp_path / "tiny.npz"), "-o", str(tmp_path / "out"), "--json", "--fail-code", "1",
                               "--check", sys.executable, str(tmp_path / "check.py"), str(verdict)],
                              capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, timeout=300)
        return json.loads(done.stdout)

    verdict.write_text("1")
    assert reduce()["status"] == "reduced"
    verdict.write_text("0")
    second = reduce()
    assert second["status"] == "not-failing" and second["cache_hits"] == 0, second


def test_a_file_the_command_names_that_cannot_be_read_is_a_usage_error(tmp_path, monkeypatch):
    """Its bytes key the cache: one that cannot be read is said in one line, as a usage error, not a traceback."""
    import oracles.command as command
    from reducer.errors import UsageError

    data = tmp_path / "data.npz"
    data.write_bytes(b"x")

    readable = command.file_digest

    def unreadable(path):  # as a file without read permission is to a user other than root
        if path == str(data):
            raise PermissionError(13, "Permission denied", str(path))
        return readable(path)

    monkeypatch.setattr(command, "file_digest", unreadable)
    with pytest.raises(UsageError, match=r"^--check: cannot read .*data\.npz: Permission denied$"):
        _oracle(argv=[sys.executable, "-c", "pass", str(data)])


def test_a_passing_exit_code_says_the_commands_last_line():
    """A command that stopped short (a runner it cannot run) says why; the whole model's 'not failing' shows it."""
    verdict = _oracle(fail_codes=[1]).decide(2, "reference ran\ncannot run tensorrt:fp16 here: not installed\n\n")
    assert not verdict.failing
    assert verdict.reason == "exit code 2 (cannot run tensorrt:fp16 here: not installed)"
    assert _oracle(fail_codes=[1]).decide(0, "PASS: all close").reason == "exit code 0"
