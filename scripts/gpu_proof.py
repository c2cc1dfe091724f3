"""The GPU oracles, shown on real models on a GPU machine, with figures for BENCHMARKS.md.

Stages (run them in one go, or one per command where a machine allows only so long a command):

  explore   `onnx-reduce doctor`, then one check of every model under every GPU runner: which fail, how
  overhead  per-check time of a warm worker against a fresh process per check
  reduce    every failing (model, runner) found by explore, reduced three ways side by side:
            polygraphy debug reduce --mode=bisect with a check command, onnx-reduce with the same
            command, onnx-reduce with its built-in oracle
  parallel  one reduction with one worker, then with one worker per visible GPU: same result, wall time

    python scripts/gpu_proof.py --out results/ --stage explore --stage overhead
    python scripts/gpu_proof.py --out results/ --stage reduce --deadline 540
    python scripts/gpu_proof.py --out results/ --stage reduce --cases corpus/gpu_cases.json --max-cases 2

`--cases` names the failures to reduce (corpus/gpu_cases.json: runner, check, regex) instead of the
explore stage's findings, so a machine that has been explored before needs no exploring again.

Models: the failing corpus entries, plus `--extra NAME=MODEL.onnx,INPUTS.npz` for more. Everything
lands in --out: doctor.json, explore.json, overhead.json, reduce.json and proof.md (a table per stage).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from evaluate import polygraphy_argv  # noqa: E402

CHECK_SCRIPT = ROOT / "scripts" / "check_candidate.py"

# runner, --fail-on, atol/rtol (None: the corpus entry's, else 1e-3)
EXPLORED = [
    ("tensorrt:fp32", "error", None),
    ("tensorrt:fp16", "error", None),
    ("onnxruntime:cuda:fp16", "nan", None),
    ("onnxruntime:cuda:fp16", "tolerance", None),
    ("onnxruntime:cuda:fp32:tf32", "tolerance", 1e-5),
    ("onnxruntime:cuda:fp32:notf32", "tolerance", 1e-5),
]
BUILD_FAILURES = ("TensorRTParseError", "TensorRTBuildError", "TensorRTInternalError")


def models(extra: list[str]) -> list[dict]:
    entries = []
    for entry in json.loads((ROOT / "corpus" / "manifest.json").read_text()):
        model = ROOT / "corpus" / entry["model"]
        if model.exists():
            entries.append({"name": entry["name"].split("_")[0] + "_" + Path(entry["model"]).stem, "model": model,
                            "inputs": ROOT / "corpus" / entry["inputs"], "atol": entry.get("atol"),
                            "rtol": entry.get("rtol")})
    unique = {e["model"]: e for e in entries}  # one entry per model file
    for item in extra:
        name, _, paths = item.partition("=")
        model, inputs = paths.split(",")
        unique[Path(model)] = {"name": name, "model": Path(model), "inputs": Path(inputs), "atol": None, "rtol": None}
    return list(unique.values())


def reducer(args: list[str], cwd: Path, timeout: float) -> tuple[float, str, int]:
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "reducer", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
        return time.perf_counter() - start, done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, "timed out", 124


def tolerances(entry: dict, fail_on: str, fixed: float | None) -> list[str]:
    if fail_on != "tolerance":
        return []
    atol = fixed or entry["atol"] or 1e-3
    rtol = fixed or entry["rtol"] or 1e-3
    return ["--atol", str(atol), "--rtol", str(rtol)]


def explore(entries: list[dict], out: Path, deadline: float, configs: list) -> list[dict]:
    rows = []
    for entry in entries:
        for runner, fail_on, fixed in configs:
            if time.perf_counter() > deadline:
                return rows
            work = out / "work" / entry["name"]  # one reference capture per model, reused by every runner
            flags = ["check", str(entry["model"]), "--inputs", str(entry["inputs"]), "--runner", runner,
                     "--fail-on", fail_on, *tolerances(entry, fail_on, fixed), "-o", str(work), "--json"]
            seconds, output, code = reducer(flags, ROOT, 600)
            row = {"model": entry["name"], "runner": runner, "fail_on": fail_on, "seconds": round(seconds, 1),
                   "exit": code}
            try:
                verdict = json.loads(output[output.index("{"):output.rindex("}") + 1])
                row.update(failing=verdict["failing"], signature=verdict.get("signature"),
                           reason=verdict.get("reason", "")[:400], nodes=verdict.get("nodes"))
            except ValueError:
                row.update(failing=None, reason=output.strip().splitlines()[-1][:400] if output.strip() else "")
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def failure_regex(reason: str) -> str:
    """A regex naming the failure without node indices (which change as the graph shrinks)."""
    text = reason.split(": ", 1)[-1]
    if "ERROR: " in text:
        text = text.split("ERROR: ", 1)[1]
    text = re.split(r"[\n;]", text)[0]
    words = re.sub(r"\d+", "#", text)[:80]
    return ".*".join(re.escape(part) for part in words.split("#") if part)


def reduce_cases(explored: list[dict], entries: dict) -> list[dict]:
    cases, seen = [], set()
    for row in explored:
        if not row.get("failing") or not row.get("signature"):
            continue
        kind, detail = row["signature"]["kind"], row["signature"].get("detail", "")
        key = (row["model"], row["runner"].split(":")[0], kind)
        if key in seen:
            continue
        if row["runner"].startswith("tensorrt") and not (kind == "crash" or detail in BUILD_FAILURES):
            continue  # an engine this GPU cannot execute is not a bug of the model
        if row["runner"].endswith(":tf32") and any(
            r["model"] == row["model"] and r["runner"].endswith(":notf32") and r.get("failing") for r in explored
        ):
            continue  # out of tolerance with TF32 off too: not TF32's doing
        seen.add(key)
        case = {**row, "entry": entries[row["model"]]}
        if row["fail_on"] == "error":
            case["regex"] = failure_regex(row["reason"])
        cases.append(case)
    # one of each kind first (a TensorRT build failure, a CUDA NaN, a tolerance case, ...), then the rest
    kinds: dict[tuple, list] = {}
    for case in cases:
        kinds.setdefault((case["runner"], case["fail_on"]), []).append(case)
    interleaved = []
    while any(kinds.values()):
        for queue in kinds.values():
            if queue:
                interleaved.append(queue.pop(0))
    return interleaved


def known_cases(path: Path) -> list[dict]:
    """The cases of a gpu_cases.json, as reduce_one takes them (those whose model is here)."""
    import onnx

    cases = []
    for known in json.loads(path.read_text()):
        model = ROOT / "corpus" / known["model"]
        if not model.exists():
            continue
        entry = {"name": known["name"], "model": model, "inputs": ROOT / "corpus" / known["inputs"],
                 "atol": known.get("atol"), "rtol": known.get("rtol")}
        cases.append({"model": known["name"], "runner": known["runner"], "fail_on": known["fail_on"],
                      "regex": known.get("fail_regex"), "entry": entry,
                      "nodes": len(onnx.load(str(model), load_external_data=False).graph.node)})
    return cases


def layerwise_inputs(entry: dict, work: Path) -> tuple[Path, Path]:
    from polygraphy.json import save_json

    from reducer.driver import Progress
    from reducer.options import InputOptions
    from reducer.session import prepare

    _, store = prepare(str(entry["model"]), InputOptions(inputs=str(entry["inputs"])), work / "ref", Progress())
    layerwise = work / "layerwise_inputs.json"
    save_json([{name: np.asarray(store.load(name)) for name in store.records}], str(layerwise))
    given = work / "model_inputs.json"
    with np.load(entry["inputs"]) as data:
        save_json([{name: data[name] for name in data.files}], str(given))
    return layerwise, given


def reduce_one(case: dict, out: Path, timeout: float) -> dict:
    entry = case["entry"]
    work = Path(tempfile.mkdtemp(prefix=f"{entry['name']}-", dir=out / "work"))
    layerwise, given = layerwise_inputs(entry, work)
    oracle = ["--runner", case["runner"], "--fail-on", case["fail_on"],
              *tolerances(entry, case["fail_on"], 1e-5 if "tf32" in case["runner"] else None)]
    command = [sys.executable, str(CHECK_SCRIPT), "polygraphy_debug.onnx", str(layerwise), *oracle]
    if case.get("regex"):
        command += ["--fail-regex", case["regex"]]
    faithful = ["--faithful-max", "65504"] if "fp16" in case["runner"] else []
    result = {"model": entry["name"], "runner": case["runner"], "fail_on": case["fail_on"],
              "regex": case.get("regex"), "nodes_before": case.get("nodes")}

    # A. polygraphy debug reduce, bisect, with the check command
    cwd = work / "polygraphy"
    cwd.mkdir()
    start = time.perf_counter()
    try:
        done = subprocess.run([*polygraphy_argv(), "debug", "reduce", str(entry["model"]), "-o", "reduced.onnx",
                               "--mode=bisect", "--load-inputs", str(given), "--fail-code", "1", "--check", *command],
                              cwd=cwd, capture_output=True, text=True, timeout=timeout)
        import onnx

        reduced = cwd / "reduced.onnx"
        result["polygraphy"] = {
            "seconds": round(time.perf_counter() - start, 1),
            "checks": len(re.findall(r"Running check command", done.stdout + done.stderr)),
            "nodes": len(onnx.load(str(reduced), load_external_data=False).graph.node) if reduced.exists() else None,
            "exit": done.returncode,
        }
    except subprocess.TimeoutExpired:
        result["polygraphy"] = {"seconds": timeout, "exit": "timeout"}

    # B. ours, the same command; C. ours, built-in
    regex = ["--fail-regex", case["regex"]] if case.get("regex") else []
    runs = {
        "command": ["--inputs", str(entry["inputs"]), *faithful, "--fail-code", "1", "--check", *command],
        "builtin": ["--inputs", str(entry["inputs"]), *oracle, *regex],
    }
    for tool, flags in runs.items():
        target = work / tool
        seconds, output, code = reducer(["reduce", str(entry["model"]), "-o", str(target), *flags], work, timeout)
        report_path = target / "report.json"
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        result[tool] = {"seconds": round(seconds, 1), "exit": code, "status": report.get("status"),
                        "nodes": report.get("nodes_after"), "checks": report.get("checks"),
                        "signature": report.get("signature"), "tail": output.strip().splitlines()[-1:]}
        if tool == "builtin" and (target / "minimal.onnx").exists():
            keep = out / f"minimal_{entry['name']}_{case['runner'].replace(':', '_')}.onnx"
            shutil.copy(target / "minimal.onnx", keep)
    print(json.dumps(result), flush=True)
    return result


def overhead(out: Path, runners: list[str], checks: int = 8) -> list[dict]:
    """Seconds per check: one warm worker serving every check, against a fresh worker process per check."""

    from oracles import make_runner
    from oracles.builtin import worker_environments
    from oracles.worker import Worker
    from reducer.doctor import write_probe

    path, feed_paths, _ = write_probe(Path(tempfile.mkdtemp(dir=out / "work")))
    rows = []
    for spec in runners:
        runner = make_runner(spec)
        if runner.unavailable_reason():
            rows.append({"runner": spec, "skipped": runner.unavailable_reason()})
            continue
        env = worker_environments(getattr(runner, "uses_gpu", False), 1)[0]
        warm, fresh, status = [], [], set()
        worker = Worker(runner.spec, env=env)
        try:
            worker.run(path, feed_paths, 300)  # the first check pays the import: not counted
            for _ in range(checks):
                start = time.perf_counter()
                status.add(worker.run(path, feed_paths, 300).status)
                warm.append(time.perf_counter() - start)
        finally:
            worker.close()
        for _ in range(checks):
            start = time.perf_counter()
            cold = Worker(runner.spec, env=env)
            try:
                status.add(cold.run(path, feed_paths, 300).status)
            finally:
                cold.close()
            fresh.append(time.perf_counter() - start)
        row = {"runner": runner.spec, "checks": checks, "status": sorted(status),
               "warm_median_s": round(statistics.median(warm), 3), "fresh_median_s": round(statistics.median(fresh), 3)}
        row["saved_per_check_s"] = round(row["fresh_median_s"] - row["warm_median_s"], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def parallel(entries: list[dict], out: Path, model: str = "rec", runner: str = "onnxruntime:cuda:fp16",
             fail_on: str = "nan") -> list[dict]:
    """ddmin (many independent candidates a round) with one worker, then one worker per GPU."""
    from oracles.gpu import visible_gpus

    entry = next(e for e in entries if model in e["name"])
    rows = []
    for jobs in sorted({1, max(1, len(visible_gpus()))}):
        target = out / "work" / f"parallel{jobs}"
        flags = ["reduce", str(entry["model"]), "--inputs", str(entry["inputs"]), "--runner",
                 runner, "--fail-on", fail_on, "--strategy", "ddmin,linear", "--jobs", str(jobs),
                 "-o", str(target)]
        seconds, output, code = reducer(flags, ROOT, 600)
        report = json.loads((target / "report.json").read_text()) if (target / "report.json").exists() else {}
        row = {"jobs": jobs, "gpus": len(visible_gpus()), "seconds": round(seconds, 1), "exit": code,
               "nodes": report.get("nodes_after"), "checks": report.get("checks"),
               "kept_nodes": report.get("kept_nodes")}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def render(out: Path) -> str:
    lines = []
    doctor = out / "doctor.json"
    if doctor.exists():
        facts = json.loads(doctor.read_text())
        gpus = ", ".join(f"{g['name']} (cc {g['compute_capability']}, driver {g['driver']})"
                         for g in facts["machine"]["gpus"]) or "none"
        lines += [f"GPU: {gpus}; CUDA {facts['machine']['driver_cuda']} (driver); packages: "
                  + ", ".join(f"{k} {v}" for k, v in facts["machine"]["packages"].items()), "",
                  "| runner | doctor says |", "|---|---|"]
        lines += [f"| {r['runner']} | {r['status']} {r['why']} |" for r in facts["runners"]]
    if (out / "explore.json").exists():
        lines += ["", "| model | runner | --fail-on | verdict | s |", "|---|---|---|---|---:|"]
        for r in json.loads((out / "explore.json").read_text()):
            verdict = "FAIL " + _signature(r.get("signature")) if r.get("failing") else "pass"
            reason = (r.get("reason") or "").replace("|", "/")[:160]
            lines.append(f"| {r['model']} | {r['runner']} | {r['fail_on']} | {verdict}: {reason} | {r['seconds']} |")
    if (out / "overhead.json").exists():
        lines += ["", "| runner | warm worker, s/check | fresh process, s/check | saved per check |",
                  "|---|---:|---:|---:|"]
        for r in json.loads((out / "overhead.json").read_text()):
            if "skipped" not in r:
                lines.append(f"| {r['runner']} | {r['warm_median_s']} | {r['fresh_median_s']} "
                             f"| {r['saved_per_check_s']} |")
    if (out / "reduce.json").exists():
        lines += ["", "| model | runner | failure | nodes | polygraphy: nodes / checks / s "
                  "| ours, same command | ours, built-in |", "|---|---|---|---:|---:|---:|---:|"]
        for r in json.loads((out / "reduce.json").read_text()):
            cells = [f"{r[t].get('nodes')} / {r[t].get('checks')} / {r[t].get('seconds')}"
                     for t in ("polygraphy", "command", "builtin") if t in r]
            failure = r["fail_on"] + (f" /{r['regex']}/" if r.get("regex") else "")
            lines.append(f"| {r['model']} | {r['runner']} | {failure} | {r.get('nodes_before')} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _signature(signature: dict | None) -> str:
    if not signature:
        return ""
    return signature["kind"] + (f" ({signature['detail']})" if signature.get("detail") else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--stage", action="append", choices=["explore", "overhead", "reduce", "parallel"],
                        required=True)
    parser.add_argument("--tool-timeout", type=float, default=None, help="seconds per tool and case")
    parser.add_argument("--only-model", default=None, help="reduce only the cases of this model")
    parser.add_argument("--parallel", default="rec/onnxruntime:cuda:fp16/nan", metavar="MODEL/RUNNER/FAIL_ON")
    parser.add_argument("--extra", action="append", default=[], metavar="NAME=MODEL,INPUTS")
    parser.add_argument("--deadline", type=float, default=560, help="seconds; later steps are skipped")
    parser.add_argument("--max-cases", type=int, default=4)
    parser.add_argument("--cases", default=None, metavar="GPU_CASES_JSON",
                        help="reduce these known failures instead of the explore stage's")
    parser.add_argument("--first-case", type=int, default=0, help="skip the cases before this one")
    parser.add_argument("--explore", action="append", default=[], metavar="RUNNER/FAIL_ON[/TOL]",
                        help="explore these instead of the GPU set (e.g. onnxruntime:cpu:fp16-storage/nan)")
    args = parser.parse_args()
    polygraphy_argv()  # said before any case runs
    out = Path(args.out)
    (out / "work").mkdir(parents=True, exist_ok=True)
    deadline = time.perf_counter() + args.deadline
    entries = models(args.extra)
    if "explore" in args.stage:
        seconds, output, code = reducer(["doctor", "--json"], ROOT, 300)
        (out / "doctor.json").write_text(output[output.index("{"):] if "{" in output else "{}")
        print(output, flush=True)
        configs = [(p[0], p[1], float(p[2]) if len(p) > 2 else None) for p in (e.split("/") for e in args.explore)]
        rows = explore(entries, out, deadline, configs or EXPLORED)
        (out / "explore.json").write_text(json.dumps(rows, indent=1))
    if "overhead" in args.stage:
        rows = overhead(out, ["onnxruntime:cpu:fp16", "onnxruntime:cuda:fp16", "tensorrt:fp32"])
        (out / "overhead.json").write_text(json.dumps(rows, indent=1))
    if "reduce" in args.stage:
        if args.cases:
            cases = known_cases(Path(args.cases))
        else:
            explored = json.loads((out / "explore.json").read_text())
            cases = reduce_cases(explored, {e["name"]: e for e in entries})
        done = out / "reduce.json"
        results = json.loads(done.read_text()) if done.exists() else []  # a later batch adds to the first
        cases = [c for c in cases if args.only_model in (None, c["model"])]
        for case in cases[args.first_case : args.first_case + args.max_cases]:
            left = deadline - time.perf_counter()
            if left < 60:
                break
            results.append(reduce_one(case, out, timeout=args.tool_timeout or left / 3))
            done.write_text(json.dumps(results, indent=1, default=str))
    if "parallel" in args.stage:
        model, runner, fail_on = args.parallel.split("/")
        (out / "parallel.json").write_text(json.dumps(parallel(entries, out, model, runner, fail_on), indent=1))
    (out / "proof.md").write_text(render(out))
    shutil.rmtree(out / "work", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
