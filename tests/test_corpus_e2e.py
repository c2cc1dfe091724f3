"""End to end on the real corpus models: the CLI reduces each failing model to a model that still fails
the same way, is 1-minimal (proved here by checking every single-node removal), and is faithful."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from corpus_files import corpus_model

from reducer.activations import ActivationStore
from reducer.candidate import Candidate
from reducer.driver import Reduction
from reducer.model import load_model
from reducer.options import OracleOptions, build_oracle

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = json.loads((ROOT / "corpus" / "manifest.json").read_text())
FAILING = [e for e in MANIFEST if e["expect"] == "fail"]
PASSING = [e for e in MANIFEST if e["expect"] == "pass"]


def oracle_flags(entry: dict) -> list[str]:
    flags = ["--runner", entry["runner"], "--fail-on", entry["fail_on"]]
    if entry["fail_on"] == "tolerance":
        flags += ["--atol", str(entry["atol"]), "--rtol", str(entry["rtol"])]
    return flags


def oracle_options(entry: dict) -> OracleOptions:
    return OracleOptions(runner=entry["runner"], fail_on=entry["fail_on"], atol=entry.get("atol", 1e-5),
                         rtol=entry.get("rtol", 1e-5))


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reducer.cli", *args], cwd=cwd, capture_output=True, text=True)


def reduce_entry(entry: dict, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return cli("reduce", str(corpus_model(entry["model"])), "--inputs", str(ROOT / "corpus" / entry["inputs"]),
               *oracle_flags(entry), "-o", str(out), *extra, cwd=out.parent)


def assert_one_minimal(entry: dict, out: Path, report: dict) -> None:
    """Every candidate with one node fewer passes, fails differently, or cannot be checked faithfully; or,
    where the search met bystanders and so accepted only candidates that carry the failure, no longer
    carries it (the proof of cause)."""
    model = load_model(corpus_model(entry["model"]))
    store_dir = out / "activations"
    store = ActivationStore.open(store_dir, json.loads((store_dir / "index.json").read_text())["key"])
    reduction = Reduction(model, store, build_oracle(oracle_options(entry)), out / "proof", [])
    try:
        original = reduction.start()
        assert original.failing
        best = Candidate(frozenset(report["kept_nodes"]))
        assert reduction.interesting(reduction.judge(best, use_cache=False))
        strict = bool((report.get("cause") or {}).get("bystanders"))
        for node in best.nodes:
            smaller = best.without([node])
            verdict = reduction.judge(smaller, use_cache=False)
            removable = reduction.interesting(verdict) and (not strict or reduction.proof(smaller).holds)
            assert not removable, f"{entry['name']}: node {node} could still be removed"
    finally:
        reduction.close()


@pytest.mark.slow
@pytest.mark.parametrize("entry", FAILING, ids=[e["name"] for e in FAILING])
def test_reduces_real_model_to_faithful_one_minimal_repro(entry, tmp_path):
    out = tmp_path / "out"
    done = reduce_entry(entry, out, "--minimal")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "reduced" and report["one_minimal"]
    assert report["top_level_nodes_before"] == entry["node_count"]  # nodes_before counts bodies too
    assert 0 < report["nodes_after"] < report["nodes_before"]
    assert report["checks"] > 0
    assert report["signature"]["kind"] == entry["fail_on"]
    minimal = onnx.load(str(out / "minimal.onnx"))
    onnx.checker.check_model(minimal)
    assert len(minimal.graph.node) == report["nodes_after"]
    # node names survive, so a vendor can map the repro back to the full model
    original_names = {n.name for n in onnx.load(str(corpus_model(entry["model"]))).graph.node}
    assert {n.name for n in minimal.graph.node} <= original_names
    # faithful: what feeds the minimal model is representable by the target precision
    with np.load(out / "minimal_inputs.npz") as fed:
        for name in fed.files:
            value = fed[name]
            if value.dtype.kind == "f":
                assert np.isfinite(value).all(), name
                if "fp16" in entry["runner"]:
                    assert np.abs(value).max() <= 65504, name
    assert_one_minimal(entry, out, report)

    # an identical second run repeats no check but the final re-check, which never comes from the cache
    again = reduce_entry(entry, out, "--minimal")
    assert again.returncode == 0, again.stderr
    second = json.loads((out / "report.json").read_text())
    assert second["checks"] == 1 and second["strategies"]["reverify"]["checks"] == 1
    assert second["final"]["failing"]
    assert second["cache_hits"] > 0
    assert second["kept_nodes"] == report["kept_nodes"]


@pytest.mark.parametrize("entry", PASSING, ids=[e["name"] for e in PASSING])
def test_control_model_is_reported_not_failing(entry, tmp_path):
    out = tmp_path / "out"
    done = reduce_entry(entry, out)
    assert done.returncode == 1, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "not-failing"
    assert not (out / "minimal.onnx").exists()


def smallest_failing() -> dict:
    return min(FAILING, key=lambda e: e["node_count"])


@pytest.mark.slow
def test_command_oracle_reduces_with_a_polygraphy_style_check(tmp_path):
    """The drop-in for `polygraphy debug reduce --check`: the candidate appears as polygraphy_debug.onnx,
    its inputs come through `{inputs}` as Polygraphy JSON, exit code 1 means failing the way asked
    (`--fail-code 1`: the runner raising, exit 3, is another failure)."""
    entry = smallest_failing()
    out = tmp_path / "out"
    calls = tmp_path / "calls.txt"  # one line per run of the command: what it costs the user
    check = ["sh", "-c", f'echo run >> "{calls}" && exec "$@"', "check", sys.executable,
             str(ROOT / "scripts" / "check_candidate.py"), "polygraphy_debug.onnx", "{inputs}", *oracle_flags(entry)]
    done = cli("reduce", str(corpus_model(entry["model"])), "--inputs", str(ROOT / "corpus" / entry["inputs"]),
               "-o", str(out), "--faithful-max", "65504", "--fail-code", "1", "--check", *check, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "reduced"
    # every run is a counted check: the bundle shows the final re-check instead of running the command again
    assert len(calls.read_text().splitlines()) == report["checks"]
    assert report["signature"]["kind"] == "command"
    assert report["nodes_after"] < report["nodes_before"]
    # the built-in oracle agrees that the command oracle's result fails the same way and is 1-minimal
    assert_one_minimal(entry, out, report)
    # its bundle carries the check script: repro.py replays the command elsewhere, with the recorded exit code
    unpacked = tmp_path / "elsewhere"
    with zipfile.ZipFile(out / "bundle.zip") as archive:
        archive.extractall(unpacked)
    assert (unpacked / "bundle" / "check_candidate.py").is_file()
    repro = subprocess.run([sys.executable, "repro.py"], cwd=unpacked / "bundle", capture_output=True, text=True)
    assert repro.returncode == 1 and "REPRODUCED: exit code 1" in repro.stdout, repro.stdout + repro.stderr


@pytest.mark.slow
def test_ctrl_c_keeps_the_best_model_so_far(tmp_path):
    entry = max(FAILING, key=lambda e: e["node_count"])
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "reducer.cli", "reduce", str(corpus_model(entry["model"])),
            "--inputs", str(ROOT / "corpus" / entry["inputs"]), *oracle_flags(entry), "-o", str(out)]
    # a shell's background job inherits SIGINT ignored, and Python keeps it so: give the child the default back
    process = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while not (out / "history.jsonl").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert process.poll() is None, "finished before it could be interrupted"
    os.kill(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "holds the best so far" in stderr
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "interrupted"
    assert report["nodes_after"] < report["nodes_before"]
    onnx.checker.check_model(str(out / "minimal.onnx"))
    # the bundle says plainly that it holds the best so far, not a minimal model
    assert report["bundle"]["zip"] == "bundle.zip", report.get("bundle")
    assert "The reduction was interrupted" in (out / "bundle" / "report.md").read_text()
    # the best-so-far model still fails, checked on its own saved inputs
    check = cli("check", str(out / "minimal.onnx"), "--inputs", str(out / "minimal_inputs.npz"), *oracle_flags(entry),
                cwd=tmp_path)
    assert check.returncode == 1, check.stdout + check.stderr


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddmin", "chunks,linear"])
def test_parallel_checks_give_the_same_result(tmp_path, strategy):
    """--jobs 2 checks a window of candidates at once; the first failing one in order still wins, and
    turns cut short by their budget end at the same candidate: the schedule is the same, turn for turn."""
    entry = next(e for e in FAILING if e["name"].startswith("ppocrv4_rec"))
    reports = []
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        done = reduce_entry(entry, out, "--strategy", strategy, "--jobs", jobs)
        assert done.returncode == 0, done.stderr
        reports.append(json.loads((out / "report.json").read_text()))
    assert reports[0]["kept_nodes"] == reports[1]["kept_nodes"]
    assert reports[0]["turns"] == reports[1]["turns"]
    if strategy == "chunks,linear":
        assert any(not turn["finished"] for turn in reports[0]["turns"])  # budgets were in play
    assert reports[1]["checks"] >= reports[0]["checks"]  # speculation may spend checks, never skip one
