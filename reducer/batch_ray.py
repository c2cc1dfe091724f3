"""`onnx-reduce batch --executor ray`: the same per-model work as the local executor (batch.run_model), run as
Ray tasks on the nodes of a Ray cluster: a GPU model asks for one GPU (Ray sets CUDA_VISIBLE_DEVICES), a CPU
model for as many CPUs as its reduction's --jobs. This process only schedules and writes the summary.

The corpus, RUN_DIR and --cache must be on a filesystem every node mounts at the same path: a task first checks
that it sees this run's RUN_DIR (its .lock, as this process wrote it) and the model, and the batch stops with a
one-line error (exit 2) when it does not."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from pathlib import Path

from reducer.batch import (
    KILL_GRACE,
    RECORD_VERSION,
    Batch,
    ModelJob,
    ReductionWatch,
    _write_json,
    base_record,
    run_model,
    write_text,
)
from reducer.batch_corpus import Entry
from reducer.errors import ReducerError, UsageError

INSTALL_HINT = "pip install 'onnx-reducer[ray]'"
SHARED = "the corpus, RUN_DIR and --cache must be on a filesystem that every node mounts at the same path"
STOP_FILE = ".stop"  # in RUN_DIR: the batch is stopping; every task sees it on the shared filesystem
CANCEL_MARGIN = 5.0  # seconds beyond KILL_GRACE for a cancelled task to report before its worker is killed
CONNECT_TIMEOUT = 10.0  # seconds for the cluster's head to accept a connection
LOCAL_OBJECT_STORE = 256 * 1024**2  # tasks pass paths and records only: a small store starts faster


class WorkerCannotSeeError(ReducerError):
    """A node of the cluster does not see the shared files: exit 2, as any bad input."""


def require_ray():
    """The ray module, or a one-line error naming the install command."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def cannot_see(job: ModelJob, claim_text: str) -> str | None:
    """What of the batch's shared files this node does not see, or None. RUN_DIR's .lock must hold what the
    driver wrote in it: a folder of the same name on a node's own disk is not this run's."""
    try:
        lock_text = (job.run_dir / ".lock").read_text()
    except OSError:
        lock_text = None
    if lock_text != claim_text:
        return f"RUN_DIR {job.run_dir}"
    named = [job.argv[i + 1] for i, arg in enumerate(job.argv[:-1]) if arg == "--inputs"]
    for path in (job.entry.path, *map(Path, named)):
        if not path.exists():
            return f"the corpus file {path}"
    if job.cache is not None and not job.cache.is_dir():
        return f"--cache {job.cache}"
    return None


def reduce_on_node(job: ModelJob, claim_text: str) -> dict:
    """The Ray task: run_model on the node Ray chose. The batch stopping (RUN_DIR/.stop, written by the driver)
    is seen within half a second: the reduction gets SIGTERM, writes its report and ends, as with a local
    Ctrl-C, and the task returns no record. (Not ray.cancel without force: its KeyboardInterrupt races Ray's
    own bookkeeping of the task's end, which can abort the driver: "Tried to complete task that was not
    pending".)"""
    missing = cannot_see(job, claim_text)
    if missing:
        return {"cannot_see": missing, "host": socket.gethostname()}
    stop_file = job.run_dir / STOP_FILE
    if stop_file.exists():
        return {"record": None}  # started after the stop: nothing to do
    return {"record": run_model(job, ReductionWatch(), stop_file.exists)}


def connect(ray, address: str | None) -> bool:
    """Joins the cluster at `address` (else RAY_ADDRESS), or starts a fresh local Ray instance for this batch:
    address "local" never joins a cluster that `ray start` left running here. True when it started one."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        _refuse_unreachable(address)
    # ray.init replaces the SIGTERM handler: ours makes SIGTERM an interrupt (summary written, exit 143)
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                     object_store_memory=LOCAL_OBJECT_STORE)
    except ConnectionError as exc:
        raise UsageError(f"cannot join the Ray cluster at {address}: {exc}") from None
    finally:
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
    return not address


def _refuse_unreachable(address: str) -> None:
    """ray.init retries an address nobody answers at for minutes, in log lines: one line instead, at once."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return  # a Ray Client address, or "auto": Ray's own resolution
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise UsageError(f"no Ray cluster answers at {address} ({exc.strerror or type(exc).__name__}): "
                         "start one (`ray start --head`) or fix --address / RAY_ADDRESS") from None


class RayBatch(Batch):
    """Every model not finished yet submitted as a Ray task at once; Ray runs as many side by side as the
    cluster's free CPUs and GPUs allow (--jobs does not apply)."""

    def _execute(self, todo: list[Entry]) -> None:
        if not todo:
            return  # every model finished in an earlier run: no cluster needed
        ray = require_ray()
        started_here = connect(ray, self.options.address)
        try:
            resources = ray.cluster_resources()
            where = ("started a local Ray instance for this batch" if started_here else
                     f"joined the Ray cluster at {ray.get_runtime_context().gcs_address}")
            self.progress.line(f"{where}: {len(ray.nodes())} node(s), {resources.get('CPU', 0):g} CPUs, "
                               f"{resources.get('GPU', 0):g} GPUs")
            self._run_tasks(ray, todo)
        finally:
            if started_here:
                ray.shutdown()  # the local instance goes with its batch

    def _run_tasks(self, ray, todo: list[Entry]) -> None:
        claim_text = (self.run_dir / ".lock").read_text()
        (self.run_dir / STOP_FILE).unlink(missing_ok=True)  # a stopped run's: we hold RUN_DIR now
        if self.options.cache:
            self.options.cache.mkdir(parents=True, exist_ok=True)  # a task checks that it sees this very folder
        # a task whose worker dies (a lost node, the OOM killer) is not retried: its error record, not complete,
        # makes the next run of the same command redo that model, as a killed reduction does locally
        task = ray.remote(max_retries=0)(reduce_on_node)
        entries, largest = {}, {"CPU": 0, "GPU": 0}
        pending: list = []
        try:
            for entry in todo:
                job = self._job(entry)
                cpus = int({**self.options.defaults, **entry.settings}.get("jobs") or 1)
                gpus = 1 if job.uses_gpu else 0
                largest = {"CPU": max(largest["CPU"], cpus), "GPU": max(largest["GPU"], gpus)}
                ref = task.options(num_cpus=cpus, num_gpus=gpus, name=f"onnx-reduce {entry.name}").remote(
                    job, claim_text)
                entries[ref] = entry
                pending.append(ref)
            self._note_unschedulable(ray, largest)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=1.0)
                for ref in ready:
                    self._done(self._result(ray, ref, entries[ref]))
        except BaseException:
            self._cancel(ray, pending)
            raise

    def _result(self, ray, ref, entry: Entry) -> dict | None:
        try:
            result = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return None
        except ray.exceptions.RayTaskError:
            raise  # an exception of ours in the task: as it would be in a local thread
        except ray.exceptions.RayError as exc:  # its worker or node died: an error record, redone on resume
            record = {**base_record(entry, None, 0.0), "outcome": "error",
                      "reason": f"its Ray worker died ({type(exc).__name__})", "version": RECORD_VERSION,
                      "argv": self._argv(entry), "complete": False}
            _write_json(self.run_dir / "records" / f"{entry.name}.json", record)
            return record
        if result.get("cannot_see"):
            raise WorkerCannotSeeError(f"a Ray worker on {result['host']} cannot see {result['cannot_see']}: "
                                       f"{SHARED}")
        return result["record"]

    def _cancel(self, ray, pending: list) -> None:
        """Each running task's reduction gets SIGTERM and writes its report (RUN_DIR/.stop); a task not ended
        after the grace, or still waiting for a node, is cancelled with force: its worker killed, and its
        reduction with it (SIGTERM as its parent dies)."""
        stop_file = self.run_dir / STOP_FILE
        write_text(stop_file, "stopping\n")
        try:
            if pending:
                _, left = ray.wait(pending, num_returns=len(pending), timeout=KILL_GRACE + CANCEL_MARGIN)
                for ref in left:
                    ray.cancel(ref, force=True)
        finally:
            stop_file.unlink(missing_ok=True)

    def _note_unschedulable(self, ray, largest: dict[str, int]) -> None:
        """A task asking for more than any node has waits, silently, until such a node joins: said once."""
        nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
        for resource, wanted in largest.items():
            if wanted and not any(node.get(resource, 0) >= wanted for node in nodes):
                print(f"onnx-reduce: note: no node of the Ray cluster has the {wanted} {resource} one model "
                      "asks for: those models wait until one joins", file=sys.stderr)
