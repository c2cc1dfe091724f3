"""oracles.worker.Worker with stand-in runners (tests/standins.py) in real spawned processes: results,
errors with their logs, crashes and hangs become verdict data, and the worker comes back for the next task."""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest
import standins

from oracles.worker import Worker, WorkerStartError
from reducer.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, RunnerUnavailableError

HANG_TIMEOUT = 2.0
TASK_TIMEOUT = 60.0  # generous: a spawned worker imports numpy before it answers


@pytest.fixture
def feeds(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(6, dtype=np.float32).reshape(2, 3))
    return {"x": path}


@pytest.fixture
def task(tmp_path):
    """A model file for the stand-in: its text picks what the runner does with it."""

    def write(mode: str):
        path = tmp_path / f"{mode}.model"
        path.write_text(mode)
        return path

    return write


@pytest.fixture
def worker():
    made = []

    def start(spec: str = "standin:ok") -> Worker:
        made.append(Worker(spec, factory=standins.make))
        return made[-1]

    yield start
    for each in made:
        each.close()


def _pid(result) -> int:
    assert result.status == "ok", result
    return int(result.outputs["pid"][0])


def test_ok_returns_outputs(worker, task, feeds):
    result = worker().run(task("ok"), feeds, TASK_TIMEOUT)
    assert result.status == "ok", result
    assert float(result.outputs["sum"][0]) == 15.0  # the feed arrived: 0+1+...+5
    assert result.error == ""
    assert result.seconds > 0


def test_warm_worker_builds_its_runner_once(worker, task, feeds):
    w = worker()
    first = w.run(task("ok"), feeds, TASK_TIMEOUT)
    second = w.run(task("ok"), feeds, TASK_TIMEOUT)
    assert _pid(first) == _pid(second)
    assert int(second.outputs["made"][0]) == 1  # one runner built in that process
    assert [int(first.outputs["runs"][0]), int(second.outputs["runs"][0])] == [1, 2]
    assert w.restarts == 0


def test_runner_error_is_data_with_the_log(worker, task, feeds):
    w = worker()
    result = w.run(task("raise"), feeds, TASK_TIMEOUT)
    assert result.status == "error"
    assert "RuntimeError" in result.error and "boom: parse failed" in result.error
    assert "python-level stderr: parsing the model" in result.log
    assert "fd-level stderr: builder log line" in result.log
    assert "c-level stderr" in result.log
    assert "boom: parse failed" in result.text
    # an error is not a crash: the same process serves the next task
    pid = _pid(w.run(task("ok"), feeds, TASK_TIMEOUT))
    assert _pid(w.run(task("ok"), feeds, TASK_TIMEOUT)) == pid
    assert w.restarts == 0


def test_log_of_one_task_does_not_leak_into_the_next(worker, task, feeds):
    w = worker()
    assert w.run(task("raise"), feeds, TASK_TIMEOUT).status == "error"
    result = w.run(task("ok"), feeds, TASK_TIMEOUT)
    assert result.status == "ok"
    assert "boom" not in result.log and "stderr" not in result.log


@pytest.mark.parametrize(("mode", "signal_name"), [("segv", "SIGSEGV"), ("abort", "SIGABRT")])
def test_crash_is_reported_and_the_same_worker_restarts(worker, task, feeds, mode, signal_name):
    w = worker()
    before = _pid(w.run(task("ok"), feeds, TASK_TIMEOUT))
    result = w.run(task(mode), feeds, TASK_TIMEOUT)
    assert result.status == "crash"
    assert signal_name in result.error
    assert w.restarts == 0  # counted when the replacement starts
    after = w.run(task("ok"), feeds, TASK_TIMEOUT)
    assert _pid(after) != before
    assert int(after.outputs["runs"][0]) == 1  # a fresh runner in a fresh process
    assert w.restarts == 1


def test_crash_on_the_first_task(worker, task, feeds):
    w = worker("standin:segv")
    result = w.run(task("segv"), feeds, TASK_TIMEOUT)
    assert result.status == "crash" and "SIGSEGV" in result.error
    assert w.run(task("ok"), feeds, TASK_TIMEOUT).status == "ok"
    assert w.restarts == 1


def test_hang_times_out_and_the_worker_restarts(worker, task, feeds):
    w = worker()
    before = _pid(w.run(task("ok"), feeds, TASK_TIMEOUT))
    start = time.perf_counter()
    result = w.run(task("hang"), feeds, HANG_TIMEOUT)
    elapsed = time.perf_counter() - start
    assert result.status == "timeout", result
    assert HANG_TIMEOUT - 0.1 <= elapsed < HANG_TIMEOUT + 5
    after = w.run(task("ok"), feeds, TASK_TIMEOUT)
    assert _pid(after) != before
    assert w.restarts == 1


def test_close_stops_the_process(worker, task, feeds):
    w = worker()
    assert w.run(task("ok"), feeds, TASK_TIMEOUT).status == "ok"
    process = w._process
    w.close()
    assert process is not None and not process.is_alive()


def test_a_runtime_that_does_not_import_in_the_worker_is_no_verdict(worker, task, feeds):
    """Not an error of the model checked (an "error" verdict, or "not failing"): the reduction stops, exit 2."""
    why = "cannot start in its worker process: ModuleNotFoundError"
    with pytest.raises(RunnerUnavailableError, match=why) as raised:
        worker("standin:noimport").run(task("ok"), feeds, TASK_TIMEOUT)
    assert raised.value.exit_code == EXIT_BAD_INPUT


def test_a_worker_that_dies_as_it_starts_is_no_crash_verdict(worker, task, feeds):
    with pytest.raises(WorkerStartError, match="died as it started: exit code 3") as raised:
        worker("standin:dies").run(task("ok"), feeds, TASK_TIMEOUT)
    assert raised.value.exit_code == EXIT_INTERNAL


def test_a_worker_gone_after_saying_it_cannot_start_is_still_named(worker, task, feeds):
    """The worker says it cannot start and exits between the driver's look (alive) and its task's send: the
    send's broken pipe (EPIPE) reached click, which takes it for a closed stdout and exits 1 without a word."""
    w = worker("standin:noimport")
    w.start()
    process = w._process
    process.join(TASK_TIMEOUT)  # it has said why and is gone
    assert process.exitcode == 0
    process.is_alive = lambda: True  # as the driver saw it a moment before
    with pytest.raises(RunnerUnavailableError, match="cannot start in its worker process: ModuleNotFoundError"):
        w.run(task("ok"), feeds, TASK_TIMEOUT)


def test_a_worker_gone_idle_before_its_task_is_started_again(worker, task, feeds):
    w = worker("standin:ok")
    first = _pid(w.run(task("ok"), feeds, TASK_TIMEOUT))
    process = w._process
    process.kill()
    process.join(TASK_TIMEOUT)
    process.is_alive = lambda: True  # dead between the driver's look and its task's send
    assert _pid(w.run(task("ok"), feeds, TASK_TIMEOUT)) != first


def test_a_broken_pipe_of_ours_is_said_not_taken_for_a_closed_stdout(monkeypatch, capsys, tmp_path):
    """click exits 1 without a word on any EPIPE, as if stdout were closed: ours is an internal error, said."""
    import reducer.session
    from reducer import cli

    def broken(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(reducer.session, "reduce_model", broken)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        cli.main(["reduce", "m.onnx", "-o", "out", "--check", "false"])
    assert exited.value.code == EXIT_INTERNAL
    assert "onnx-reduce: internal error: RuntimeError: a broken pipe: [Errno 32] Broken pipe" in capsys.readouterr().err


def test_an_interrupt_while_the_bundle_is_written_exits_as_an_interrupt(monkeypatch, capsys, tmp_path):
    """The reduction's results stay (report.json says the bundle was interrupted), but the exit code says
    Ctrl-C: a script that reads 0 as "all done" must not take the missing bundle for written."""
    import json

    from test_bad_input import good_model, write_model

    import reducer.bundle
    from reducer import cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    write_model(tmp_path / "m.onnx", good_model())
    monkeypatch.setattr(reducer.bundle, "make_bundle", interrupted)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        cli.main(["reduce", "m.onnx", "-o", "out", "--no-cause-check", "--check", "false"])
    assert exited.value.code == 130, capsys.readouterr().err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["status"] == "reduced" and report["bundle"] == {"error": "interrupted"}
    assert (tmp_path / "out" / "minimal.onnx").exists()


def test_an_interrupt_that_a_c_extension_turned_into_its_own_error_is_still_an_interrupt(monkeypatch, capsys,
                                                                                         tmp_path):
    """Ctrl-C can land inside a C extension, which raises its own error instead of KeyboardInterrupt. Mid-search,
    that is still the interrupt: the best model so far is kept and said to be kept, report.json says interrupted
    (not error), and the exit code is Ctrl-C's."""
    import json

    from test_bad_input import good_model, write_model

    from reducer import cli, interrupts
    from reducer.driver import Reduction

    def broken(self):
        interrupts._received.append(signal.SIGINT)
        raise RuntimeError("pybind11::error_already_set: KeyboardInterrupt")

    write_model(tmp_path / "m.onnx", good_model())
    monkeypatch.setattr(Reduction, "search", broken)
    monkeypatch.setattr(interrupts, "_received", [])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        cli.main(["reduce", "m.onnx", "-o", "out", "--no-cause-check", "--check", "false"])
    err = capsys.readouterr().err
    assert exited.value.code == 130, err
    assert "holds the best so far" in err
    assert json.loads((tmp_path / "out" / "report.json").read_text())["status"] == "interrupted"
    assert (tmp_path / "out" / "minimal.onnx").exists()
