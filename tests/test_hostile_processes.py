"""The real CLI against a hostile machine: relative paths handed to checks, checks that leave children behind,
SIGTERM and early Ctrl-C, stale temporary folders, --jobs beyond the machine, workers that cannot start."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_bad_input import CLI_TIMEOUT, FP32, good_model, run_cli, write_model

from reducer import errors

FP16_STORAGE = ["--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "nan"]
SCALE_AT = 20  # the one node of chain_model whose output fp16 cannot hold


def chain_model(length: int = 41) -> onnx.ModelProto:
    """Relu nodes in a chain with one Mul by 1e5 in the middle: Inf in fp16 storage, finite in fp32. With
    `--strategy linear --minimal` it takes one check per node: a reduction that lasts a while."""
    nodes, previous = [], "x"
    for index in range(length - 1):
        op = ("Mul", [previous, "big"]) if index == SCALE_AT else ("Relu", [previous])
        name = f"scale{index}" if index == SCALE_AT else f"relu{index}"
        nodes.append(helper.make_node(op[0], op[1], [f"t{index}"], name=name))
        previous = f"t{index}"
    nodes.append(helper.make_node("Identity", [previous], ["y"], name="out"))
    value = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("x", "y")]
    big = numpy_helper.from_array(np.array(1e5, np.float32), "big")
    graph = helper.make_graph(nodes, "chain", value[:1], value[1:], initializer=[big])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _all_dead(pids: list[int], within: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _start(cwd: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """The CLI as a terminal or `timeout` starts it: its own process group, SIGINT not ignored."""
    return subprocess.Popen([sys.executable, "-m", "reducer.cli", *args], cwd=cwd, env=env or _env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _env(**extra: str) -> dict:
    return {**{k: v for k, v in os.environ.items() if k != "ONNX_REDUCE_DEBUG"}, **extra}


def _wait_for(path: Path, process: subprocess.Popen, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not path.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    assert process.poll() is None, "finished before it could be interrupted"


def _assert_interrupted(process: subprocess.Popen, out: Path, code: int) -> str:
    _, stderr = process.communicate(timeout=CLI_TIMEOUT)
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr, stderr
    assert "interrupted" in stderr, stderr
    if (out / "report.json").exists():  # when it got that far
        assert json.loads((out / "report.json").read_text())["status"] == "interrupted"
    return stderr


@pytest.fixture
def work(tmp_path) -> Path:
    write_model(tmp_path / "m.onnx", good_model())
    write_model(tmp_path / "chain.onnx", chain_model())
    return tmp_path


# --- paths handed to a check ----------------------------------------------------------------------------------
@pytest.mark.parametrize("placeholders", [["{model}"], ["{model}", "{inputs}"]])
def test_a_relative_output_and_check_script_still_reduce(work, placeholders):
    """-o out and ./check.sh: the check runs in its own folder, so a relative {model} named nothing there and
    every check "passed": "not failing". Every path it is handed is absolute now."""
    _script(work / "check.sh", 'for p in "$@"; do test -f "$p" || exit 0; done\n'
            'grep -q relu2 "$1" && exit 1\nexit 0\n')
    done = run_cli(work, "reduce", "m.onnx", "-o", "out", "--no-cause-check", "--check", "./check.sh", *placeholders)
    assert done.returncode == errors.EXIT_REDUCED, done.stderr
    report = json.loads((work / "out" / "report.json").read_text())
    assert report["status"] == "reduced" and report["nodes_after"] == 1
    assert [n.name for n in onnx.load(str(work / "out" / "minimal.onnx")).graph.node] == ["relu2"]


# --- processes a check leaves behind ----------------------------------------------------------------------------
def test_a_checks_background_children_do_not_outlive_it(work):
    pids = work / "pids"
    _script(work / "check.sh", f'sleep 300 &\necho $! >> {pids}\ngrep -q relu2 "$1" && exit 1\nexit 0\n')
    done = run_cli(work, "reduce", "m.onnx", "-o", "out", "--no-cause-check", "--check", "./check.sh", "{model}")
    assert done.returncode == errors.EXIT_REDUCED, done.stderr
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) >= 2
    assert _all_dead(started) == []


# --- SIGTERM ----------------------------------------------------------------------------------------------------
def test_sigterm_keeps_the_best_so_far_and_leaves_no_check_behind(work):
    pids = work / "pids"
    _script(work / "check.sh", f'sleep 300 &\necho $! >> {pids}\nsleep 0.2\ngrep -q scale{SCALE_AT} "$1" && exit 1\n'
            'exit 0\n')
    out = work / "out"
    process = _start(work, "reduce", "chain.onnx", "-o", "out", "--no-cause-check", "--minimal", "--strategy",
                     "linear", "--check", "./check.sh", "{model}")
    _wait_for(out / "history.jsonl", process)
    os.killpg(process.pid, signal.SIGTERM)  # as `timeout` does: the whole group
    stderr = _assert_interrupted(process, out, errors.EXIT_TERMINATED)
    assert "holds the best so far" in stderr
    report = json.loads((out / "report.json").read_text())
    assert report["nodes_after"] < report["nodes_before"]
    onnx.checker.check_model(onnx.load(str(out / "minimal.onnx")))
    assert _all_dead([int(p) for p in pids.read_text().split()]) == []


def test_sigterm_to_the_driver_alone_closes_its_workers(work):
    """`docker stop` signals the main process only: its warm workers must not outlive it."""
    out = work / "out"
    process = _start(work, "reduce", "chain.onnx", "-o", "out", *FP16_STORAGE, "--minimal", "--strategy", "linear")
    _wait_for(out / "history.jsonl", process)
    workers = _descendants(process.pid)
    assert workers, "no worker process found"
    os.kill(process.pid, signal.SIGTERM)
    _assert_interrupted(process, out, errors.EXIT_TERMINATED)
    assert (out / "minimal.onnx").exists()
    assert _all_dead(workers) == []


# --- an interrupt as it starts ------------------------------------------------------------------------------
@pytest.mark.parametrize(("signal_number", "after"), [
    (signal.SIGINT, 0.1), (signal.SIGINT, 0.3), (signal.SIGINT, 0.6), (signal.SIGTERM, 0.15), (signal.SIGTERM, 0.4),
])
def test_an_early_interrupt_is_an_interrupt(work, signal_number, after):
    """While the runtime imports (a KeyboardInterrupt inside a C extension's import becomes an ImportError) and
    while the workers start (in the terminal's group until they have their own session): never a finished run,
    an abort, a worker's traceback or a model blamed."""
    write_model(work / "long.onnx", chain_model(401))  # seconds of checks: still running when the signal comes
    process = _start(work, "reduce", "long.onnx", "-o", "out", *FP16_STORAGE, "--minimal", "--strategy", "linear")
    time.sleep(after)
    os.killpg(process.pid, signal_number)  # a terminal's Ctrl-C reaches the whole foreground group
    code = errors.EXIT_TERMINATED if signal_number == signal.SIGTERM else errors.EXIT_INTERRUPTED
    _assert_interrupted(process, work / "out", code)


def test_an_interrupt_inside_an_import_waits_for_the_import_to_end(tmp_path):
    """A KeyboardInterrupt landing inside a C extension's initialisation (onnx's pybind11 enums) aborted or
    segfaulted the driver: one in 100 early Ctrl-Cs. Inside any import the signal is held until the import is
    over, then raised; outside one it is raised at once."""
    (tmp_path / "slow_module.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "deadline = time.monotonic() + 0.3\n"
        "while time.monotonic() < deadline:\n"
        "    pass\n"
        "FINISHED = True\n")
    program = (
        "import sys, time\n"
        "from reducer import interrupts\n"
        "interrupts.install()\n"
        "try:\n"
        "    import slow_module\n"
        "    time.sleep(5)\n"
        "    print('not interrupted')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after the import:', sys.modules['slow_module'].FINISHED)\n"
        "try:\n"
        "    import os, signal\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(5)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted at once')\n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT, env={**_env(), "PYTHONPATH": os.pathsep.join(
                              [str(tmp_path), str(Path(__file__).resolve().parents[1])])})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted after the import: True", "interrupted at once"], done.stdout
    assert time.monotonic() - started < 4  # raised within its retry period, not after the sleeps


# --- temporary folders --------------------------------------------------------------------------------------------
def test_worker_folders_of_a_dead_run_are_removed_and_no_other(work):
    tmp = work / "tmp"
    tmp.mkdir()
    dead = subprocess.Popen(["true"])  # its pid is a dead one once reaped
    dead.wait()
    stale = tmp / f"onnx-reduce-worker-{dead.pid}-abcd1234"
    stale.mkdir()
    (stale / "run.log").write_text("left by a killed run")
    live = tmp / f"onnx-reduce-worker-{os.getpid()}-efgh5678"  # this test is alive
    live.mkdir()
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not ours")
    link = tmp / f"onnx-reduce-worker-{dead.pid}-link0000"
    link.symlink_to(elsewhere)
    unrelated = tmp / f"other-{dead.pid}-abcd1234"
    unrelated.mkdir()
    done = run_cli_env(work, _env(TMPDIR=str(tmp)), "check", "m.onnx", *FP32, "--fail-on", "nan")
    assert done.returncode == 0, done.stderr
    assert not stale.exists()
    assert live.is_dir() and link.is_symlink() and (elsewhere / "keep.txt").exists() and unrelated.is_dir()
    left = sorted(p.name for p in tmp.iterdir() if p.name.startswith("onnx-reduce-worker-"))
    assert left == sorted([live.name, link.name])  # its own folders went with its workers


def run_cli_env(cwd: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reducer.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL)


# --- --jobs beyond the machine --------------------------------------------------------------------------------------
def _cores() -> int:
    return len(os.sched_getaffinity(0))


def test_jobs_beyond_the_cores_are_capped_for_commands(work):
    running, peaks = work / "running", work / "peaks"
    running.mkdir()
    _script(work / "check.sh", f'touch {running}/$$\nls {running} | wc -l >> {peaks}\nsleep 0.2\n'
            f'rm {running}/$$\ngrep -q relu2 "$1" && exit 1\nexit 0\n')
    done = run_cli(work, "reduce", "m.onnx", "-o", "out", "--no-cause-check", "--jobs", "10000", "--check",
                   "./check.sh", "{model}")
    assert done.returncode == errors.EXIT_REDUCED, done.stderr
    notes = [line for line in done.stderr.splitlines() if line.startswith("onnx-reduce: note: --jobs 10000 capped")]
    assert len(notes) == 1, done.stderr
    capped = int(re.search(r"capped at (\d+) \(", notes[0]).group(1))
    assert 1 <= capped <= _cores()
    assert max(int(n) for n in peaks.read_text().split()) <= capped


def test_jobs_beyond_the_cores_are_capped_for_workers(work):
    done = run_cli(work, "reduce", "chain.onnx", "-o", "out", *FP16_STORAGE, "--jobs", "10000")
    assert done.returncode == errors.EXIT_REDUCED, done.stderr
    assert f"onnx-reduce: note: --jobs 10000 capped at {_cores()} ({_cores()} usable cores)" in done.stderr \
        or "GB of memory available" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_jobs_within_the_machine_say_nothing(work):
    done = run_cli(work, "reduce", "m.onnx", "-o", "out", "--no-cause-check", "--jobs", "1", "--check", "false")
    assert done.returncode == errors.EXIT_REDUCED, done.stderr
    assert "note:" not in done.stderr


def test_the_jobs_help_says_what_jobs_changes(work):
    done = run_cli(work, "reduce", "--help")
    text = " ".join(done.stdout.split())
    assert "the result is the same as with 1" not in text
    assert "capped at what this machine has" in text and "may end on another failing cut" in text


# --- workers that cannot start ---------------------------------------------------------------------------------
SPAWNED_ONLY = "import sys\nif '--multiprocessing-fork' in sys.orig_argv:\n"
BROKEN_CHILDREN = {
    # the runtime does not import in the worker, as where a library it loads is missing
    "no-runtime": (SPAWNED_ONLY + "    import importlib.abc\n"
                   "    class Refuse(importlib.abc.MetaPathFinder):\n"
                   "        def find_spec(self, name, path=None, target=None):\n"
                   "            if name == 'onnxruntime':\n"
                   "                raise ImportError('libonnxruntime.so: cannot open shared object file')\n"
                   "    sys.meta_path.insert(0, Refuse())\n",
                   errors.EXIT_BAD_INPUT, "cannot start in its worker process: ImportError: libonnxruntime.so"),
    # the worker dies before a word
    "dies": (SPAWNED_ONLY + "    import os\n    os._exit(3)\n", errors.EXIT_INTERNAL,
             "died as it started: exit code 3"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_CHILDREN))
@pytest.mark.parametrize("oracle", ["builtin", "command"])
def test_a_worker_that_cannot_start_is_named_not_blamed_on_the_model(work, case, oracle):
    site, code, words = BROKEN_CHILDREN[case]
    (work / "site").mkdir()
    (work / "site" / "sitecustomize.py").write_text(site)
    env = _env(PYTHONPATH=os.pathsep.join([str(work / "site"), os.environ.get("PYTHONPATH", "")]))
    flags = [*FP32, "--fail-on", "nan"] if oracle == "builtin" else ["--check", "false"]
    done = run_cli_env(work, env, "reduce", "m.onnx", "-o", "out", *flags)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("onnx-reduce:")]
    assert len(lines) == 1 and lines[0].startswith("onnx-reduce: error:") and words in lines[0], done.stderr
    assert "m.onnx" not in lines[0]  # the model is not the cause
