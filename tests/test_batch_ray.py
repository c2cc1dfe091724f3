"""`onnx-reduce batch --executor ray` with real Ray: one local Ray cluster for the module (started here, joined
by each batch with --address, as a team's batch joins its cluster), the same results as the local executor, a
fresh local instance without an address, SIGINT/SIGTERM cancelling the tasks, a killed Ray worker redone on
resume, a node that cannot see RUN_DIR, and Ray not installed."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_bad_input import CLI_TIMEOUT, assert_bad_input, write_model
from test_batch import (
    FP16_STORAGE,
    _command_corpus,
    _no_reductions_left,
    _reductions_running,
    _wait_for,
    chain,
    copy_silero,
    outcomes,
    summary,
    without_timings,
)

try:
    import ray
except ImportError:
    ray = None

# CI (ONNX_REDUCE_REQUIRE_CORPUS=1) installs the ray extra: there a missing Ray fails these tests, never skips them
needs_ray = pytest.mark.skipif(ray is None and os.environ.get("ONNX_REDUCE_REQUIRE_CORPUS") != "1",
                               reason="Ray is not installed (pip install -e '.[ray]')")


@pytest.fixture(scope="module")
def cluster() -> str:
    """A local Ray cluster, 2 CPUs, started once for the module: its address, for --address."""
    assert ray is not None, "Ray is not installed, and ONNX_REDUCE_REQUIRE_CORPUS=1 requires it"
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=128 * 1024**2)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _env(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ONNX_REDUCE_DEBUG", "RAY_ADDRESS")}
    env.update({k: v for k, v in changes.items() if v is not None})
    return env


def batch(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reducer", "batch", *args], cwd=cwd, env=env or _env(),
                          capture_output=True, text=True, timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL)


def _start(cwd: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "reducer", "batch", *args], cwd=cwd, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def _comparable(run_dir: Path) -> dict:
    """summary.json less what differs from run to run on one machine (timings, and how the run was started)."""
    data = without_timings(summary(run_dir))
    data.pop("run", None)
    return data


# --- the same results as the local executor ----------------------------------------------------------------
@needs_ray
def test_ray_tasks_give_the_same_results_as_the_local_executor(tmp_path, cluster):
    """A manifest of a real model (silero VAD, a tolerance bug in fp16), two models failing by one pattern, one
    passing and one malformed: outcomes, bug ids, nodes and checks as with local threads."""
    corpus = tmp_path / "corpus"
    write_model(corpus / "first.onnx", chain(["Relu", "Relu", "Mul", "Relu"], "first"))
    write_model(corpus / "second.onnx", chain(["Mul", "Relu"], "second", scale=2e5))
    write_model(corpus / "fine.onnx", chain(["Relu", "Relu"], "fine"))
    (corpus / "broken.onnx").write_text("not a protobuf\n")
    copy_silero(corpus)
    (corpus / "nightly.toml").write_text("""
[defaults]
runner = "onnxruntime:cpu:fp16-storage"
fail_on = "nan"

[[model]]
path = "first.onnx"
[[model]]
path = "second.onnx"
[[model]]
path = "fine.onnx"
[[model]]
path = "broken.onnx"

[[model]]
path = "silero.onnx"
inputs = "silero.npz"
runner = "onnxruntime:cpu:fp16"
fail_on = "tolerance"
atol = 0.01
rtol = 0.01
""")
    local = batch(tmp_path, "corpus/nightly.toml", "-o", "local", "--jobs", "2")
    assert local.returncode == 1, local.stderr
    on_ray = batch(tmp_path, "corpus/nightly.toml", "-o", "ray", "--executor", "ray", "--address", cluster)
    assert on_ray.returncode == 1, on_ray.stderr
    assert "joined the Ray cluster at" in on_ray.stderr
    assert outcomes(tmp_path / "ray") == {"first": "reduced", "second": "reduced", "fine": "passing",
                                          "broken": "error", "silero": "reduced"}
    assert _comparable(tmp_path / "ray") == _comparable(tmp_path / "local")
    assert len(summary(tmp_path / "ray")["bugs"]) == 2
    assert (tmp_path / "ray" / "junit.xml").read_text().count("<testcase") == 5
    again = batch(tmp_path, "corpus/nightly.toml", "-o", "ray", "--executor", "ray", "--address", cluster)
    assert "5 of 5 models finished in an earlier run: not redone" in again.stderr, again.stderr
    assert "joined the Ray cluster" not in again.stderr  # nothing left to run: no cluster joined


@needs_ray
def test_without_an_address_a_fresh_local_instance_runs_the_batch(tmp_path, cluster):
    """No --address and no RAY_ADDRESS: a Ray instance of its own, never the module's cluster running here."""
    write_model(tmp_path / "corpus" / "failing.onnx", chain(["Relu", "Mul"], "failing"))
    done = batch(tmp_path, "corpus", "-o", "out", "--executor", "ray", *FP16_STORAGE)
    assert done.returncode == 1, done.stderr
    assert "started a local Ray instance for this batch" in done.stderr and "joined" not in done.stderr
    assert outcomes(tmp_path / "out") == {"failing": "reduced"}
    assert ray.is_initialized() and ray.cluster_resources().get("CPU") == 2  # the module's cluster is untouched


# --- interrupts, lost workers, resume ----------------------------------------------------------------------
@needs_ray
@pytest.mark.parametrize("number, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_cancels_the_tasks_writes_what_is_done_and_leaves_no_reduction(tmp_path, cluster, number, code):
    check = _command_corpus(tmp_path, "Mul", {"a_fast": ["Mul"], "b_slow": ["Relu", "Mul"]}, slow="b_slow")
    process = _start(tmp_path, "corpus", "-o", "out", "--executor", "ray", "--address", cluster, *check)
    _wait_for(tmp_path / "out" / "records" / "a_fast.json", process)
    _wait_for(tmp_path / "out" / "models" / "b_slow" / "activations", process)
    process.send_signal(number)
    _, stderr = process.communicate(timeout=CLI_TIMEOUT)
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    assert summary(tmp_path / "out")["interrupted"] is True
    assert outcomes(tmp_path / "out") == {"a_fast": "reduced", "b_slow": "not-run"}
    assert _no_reductions_left(tmp_path / "out") == []  # cancelled on the worker, process group and all


@needs_ray
def test_a_killed_ray_worker_is_an_error_record_redone_on_resume(tmp_path, cluster):
    """SIGKILL to the Ray worker running a model (the OOM killer, a lost node): that model's error record, not
    complete; its reduction does not outlive the worker; the next run redoes that model only."""
    check = _command_corpus(tmp_path, "Mul", {"a_fast": ["Mul"], "b_slow": ["Relu", "Mul"]}, slow="b_slow")
    process = _start(tmp_path, "corpus", "-o", "out", "--executor", "ray", "--address", cluster, *check)
    _wait_for(tmp_path / "out" / "records" / "a_fast.json", process)
    _wait_for(tmp_path / "out" / "models" / "b_slow" / "activations", process)
    (reduction,) = [pid for pid in _reductions_running(tmp_path / "out" / "models" / "b_slow")
                    if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:4] == [b"-m", b"reducer", b"reduce"]]
    worker = int(Path(f"/proc/{reduction}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert "ray" in Path(f"/proc/{worker}/cmdline").read_bytes().decode(errors="replace").lower()
    os.kill(worker, signal.SIGKILL)
    _, stderr = process.communicate(timeout=CLI_TIMEOUT)
    assert process.returncode == 1, stderr
    record = {m["name"]: m for m in summary(tmp_path / "out")["models"]}["b_slow"]
    assert record["outcome"] == "error" and "its Ray worker died" in record["reason"]
    assert _no_reductions_left(tmp_path / "out") == []
    (tmp_path / "runtime" / "slow").unlink()
    done = batch(tmp_path, "corpus", "-o", "out", "--executor", "ray", "--address", cluster, *check)
    assert done.returncode == 1, done.stderr
    assert "1 of 2 models finished in an earlier run: not redone" in done.stderr
    assert outcomes(tmp_path / "out") == {"a_fast": "reduced", "b_slow": "reduced"}


@needs_ray
def test_a_model_asks_for_its_reduce_jobs_in_cpus_and_waits_for_them_until_cancelled(tmp_path, cluster):
    """--reduce-jobs 3 on the 2-CPU cluster: Ray never starts the task (said once); SIGTERM cancels it queued."""
    write_model(tmp_path / "corpus" / "failing.onnx", chain(["Relu", "Mul"], "failing"))
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "reducer", "batch", "corpus", "-o", "out", "--executor",
                                    "ray", "--address", cluster, "--reduce-jobs", "3", *FP16_STORAGE],
                                   cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=stderr,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    note = "no node of the Ray cluster has the 3 CPU one model asks for"
    deadline = time.monotonic() + CLI_TIMEOUT
    while note not in (tmp_path / "stderr.txt").read_text() and process.poll() is None:
        assert time.monotonic() < deadline, (tmp_path / "stderr.txt").read_text()
        time.sleep(0.1)
    time.sleep(1)  # queued a while: never started
    assert not (tmp_path / "out" / "models" / "failing").exists()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=CLI_TIMEOUT) == 143, (tmp_path / "stderr.txt").read_text()
    assert outcomes(tmp_path / "out") == {"failing": "not-run"}


# --- a cluster that does not share the files --------------------------------------------------------------
def _can_hide_a_folder(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "none", str(probe)], capture_output=True)
    probe.rmdir()
    return done.returncode == 0


@needs_ray
def test_a_worker_that_cannot_see_run_dir_stops_the_batch_in_one_line(tmp_path, cluster):
    """RUN_DIR on a tmpfs mounted in the batch's own mount namespace: the cluster's workers (started outside it)
    see an empty folder there, as a node sees its own disk where a shared one was expected."""
    if shutil.which("unshare") is None or not _can_hide_a_folder(tmp_path):
        pytest.skip("needs `unshare -m` and mount rights (root) to hide RUN_DIR from the workers")
    write_model(tmp_path / "corpus" / "failing.onnx", chain(["Relu", "Mul"], "failing"))
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    command = (f"mount -t tmpfs none {hidden} && exec {sys.executable} -m reducer batch corpus -o {hidden / 'out'} "
               f"--executor ray --address {cluster} {' '.join(FP16_STORAGE)}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", command], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("onnx-reduce: error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"cannot see RUN_DIR {hidden / 'out'}" in errors[0] and "same path" in errors[0]
    assert list(hidden.iterdir()) == []  # nothing written on the workers' side of the folder


# --- usage -------------------------------------------------------------------------------------------------
def test_the_ray_executor_without_ray_installed_is_one_line_with_the_install_command(tmp_path):
    """A `ray` that fails to import, first on the path: as where Ray is not installed (no Ray needed)."""
    (tmp_path / "no_ray" / "ray").mkdir(parents=True)
    (tmp_path / "no_ray" / "ray" / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    write_model(tmp_path / "corpus" / "m.onnx", chain(["Relu"]))
    env = _env(PYTHONPATH=os.pathsep.join([str(tmp_path / "no_ray"), os.environ.get("PYTHONPATH", "")]))
    done = batch(tmp_path, "corpus", "-o", "out", "--executor", "ray", env=env)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "pip install 'onnx-reducer[ray]'" in done.stderr and not (tmp_path / "out").exists()


def test_an_address_without_the_ray_executor_is_refused(tmp_path):
    write_model(tmp_path / "corpus" / "m.onnx", chain(["Relu"]))
    assert_bad_input(tmp_path, "batch", "corpus", "-o", "out", "--address", "head:6379",
                     mentions=("--address goes with --executor ray",))


@needs_ray
def test_an_address_where_no_cluster_answers_is_one_line_at_once(tmp_path):
    """Ray itself would retry for minutes, in log lines (a closed port: refused at once)."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    write_model(tmp_path / "corpus" / "m.onnx", chain(["Relu"]))
    done = batch(tmp_path, "corpus", "-o", "out", "--executor", "ray", "--address", f"127.0.0.1:{port}",
                 *FP16_STORAGE)
    errors = [line for line in done.stderr.splitlines() if line.startswith("onnx-reduce: error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in errors[0] and "Traceback" not in done.stderr


# --- on a GPU: one GPU per model, through Ray's num_gpus=1 ------------------------------------------------
@needs_ray
@pytest.mark.gpu
def test_gpu_models_each_get_a_gpu_from_ray_and_the_same_results_as_local(tmp_path, cluster):
    """Runner onnxruntime:cuda:fp16: each model's task asks Ray for one GPU, which Ray names in the task's
    CUDA_VISIBLE_DEVICES; the reduction runs on it (recorded per model) and ends as with local threads."""
    from oracles import make_runner

    why = make_runner("onnxruntime:cuda:fp16").unavailable_reason()
    if why:
        pytest.skip(f"onnxruntime:cuda:fp16 cannot run here: {why}")
    if not ray.cluster_resources().get("GPU"):
        pytest.skip("the module's Ray cluster sees no GPU")
    corpus = tmp_path / "corpus"
    write_model(corpus / "overflow.onnx", chain(["Relu", "Mul", "Relu"], "overflow", scale=2e5))
    copy_silero(corpus)
    (corpus / "gpu.toml").write_text("""
[defaults]
runner = "onnxruntime:cuda:fp16"
fail_on = "nan"

[[model]]
path = "overflow.onnx"

[[model]]
path = "silero.onnx"
inputs = "silero.npz"
fail_on = "tolerance"
atol = 0.01
rtol = 0.01
""")
    local = batch(tmp_path, "corpus/gpu.toml", "-o", "local")
    on_ray = batch(tmp_path, "corpus/gpu.toml", "-o", "ray", "--executor", "ray", "--address", cluster)
    assert on_ray.returncode == local.returncode, (local.stderr[-2000:], on_ray.stderr[-2000:])
    assert outcomes(tmp_path / "ray") == outcomes(tmp_path / "local")
    assert "reduced" in outcomes(tmp_path / "ray").values(), outcomes(tmp_path / "ray")
    assert _comparable(tmp_path / "ray") == _comparable(tmp_path / "local")
    for record in summary(tmp_path / "ray")["models"]:
        assert record.get("gpu") not in (None, ""), record  # Ray's GPU for the task, as CUDA_VISIBLE_DEVICES
