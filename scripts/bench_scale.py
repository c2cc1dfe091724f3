"""Scale: synthetic graphs of 1k, 10k and 100k nodes, each with one planted fp16 overflow at a known place,
reduced by onnx-reduce (built-in oracle, instrumented) and by `polygraphy debug reduce --mode=bisect` with
an equivalent check command (under a time limit). Writes the "## Scale" section of BENCHMARKS.md.

    python scripts/bench_scale.py                       # 1k, 10k, 100k; chains and transformer blocks
    python scripts/bench_scale.py --sizes 1000,10000 --kinds chain --polygraphy-limit 300
    python scripts/bench_scale.py --profile chain:10000 # cProfile of the reduction (the driver's process)

Graphs:
- chain: Add, Mul and Abs in turn on a [1, 16] tensor; node n*2/3 is a Mul by 1e5 (fp16 cannot hold it).
- transformer: blocks of MatMul attention (Q, K, V, Transpose, scaled scores, Softmax, output projection),
  residual Add, LayerNormalization, a Relu MLP, residual Add, LayerNormalization; hidden size 16, sequence 8,
  16 nodes a block. The block at 2/3 of the depth multiplies its MLP activation by 1e5.
The oracle: `--runner onnxruntime:cpu:fp16-storage --fail-on nan` (fp16 activations, emulated on the CPU).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_big_model import _high_water  # noqa: E402  (one reader of /proc's VmHWM for the benchmarks)
from evaluate import polygraphy_argv  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHECK_SCRIPT = ROOT / "scripts" / "check_candidate.py"
RUNNER = "onnxruntime:cpu:fp16-storage"
HIDDEN, SEQUENCE = 16, 8
BLOCK_NODES = 16
PLANTED = 1e5  # beyond fp16's 65504


def planted_index(nodes: int) -> int:
    """Where the planted overflow sits: two thirds of the way down."""
    return nodes * 2 // 3


def chain(nodes: int) -> onnx.ModelProto:
    """Add, Mul, Abs in turn; the node at planted_index multiplies by 1e5."""
    planted = planted_index(nodes)
    made, previous = [], "x"
    for index in range(nodes):
        output = f"t{index}"
        if index == planted:
            made.append(helper.make_node("Mul", [previous, "big"], [output], name=f"planted_{index}"))
        else:
            op, constant = [("Add", "c_add"), ("Mul", "c_mul"), ("Abs", None)][index % 3]
            inputs = [previous, constant] if constant else [previous]
            made.append(helper.make_node(op, inputs, [output], name=f"{op.lower()}_{index}"))
        previous = output
    initializers = [numpy_helper.from_array(np.array([value], np.float32), name)
                    for name, value in (("c_add", 0.001), ("c_mul", 0.9999), ("big", PLANTED))]
    graph = helper.make_graph(made, f"chain{nodes}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 16])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def transformer(nodes: int) -> onnx.ModelProto:
    """nodes // 16 blocks of 16 nodes, plus the planted Mul in the block two thirds down."""
    blocks = max(1, nodes // BLOCK_NODES)
    planted_block = planted_index(blocks)
    rng = np.random.default_rng(0)
    made, initializers = [], []

    def weight(name: str, shape, scale: float = 0.25) -> str:
        initializers.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    gamma = weight("gamma", [HIDDEN], 0.0)
    initializers[-1] = numpy_helper.from_array(np.ones(HIDDEN, np.float32), gamma)
    beta = weight("beta", [HIDDEN], 0.0)
    scale = weight("scale", [1], 0.0)
    initializers[-1] = numpy_helper.from_array(np.array([HIDDEN ** -0.5], np.float32), scale)
    initializers.append(numpy_helper.from_array(np.array([PLANTED], np.float32), "big"))
    x = "x"
    for b in range(blocks):
        p = f"b{b}_"

        def node(op: str, inputs: list[str], name: str, p: str = p, **attrs) -> str:
            made.append(helper.make_node(op, inputs, [p + name], name=p + name, **attrs))
            return p + name

        w = {k: weight(p + "W" + k, [HIDDEN, HIDDEN]) for k in ("q", "k", "v", "o", "1", "2")}
        q, k, v = (node("MatMul", [x, w[n]], n) for n in ("q", "k", "v"))
        kt = node("Transpose", [k], "kt", perm=[0, 2, 1])
        scores = node("Mul", [node("MatMul", [q, kt], "qk"), scale], "scaled")
        attention = node("MatMul", [node("Softmax", [scores], "softmax", axis=-1), v], "attention")
        residual = node("Add", [x, node("MatMul", [attention, w["o"]], "projection")], "residual1")
        normed = node("LayerNormalization", [residual, gamma, beta], "norm1", axis=-1)
        hidden = node("Relu", [node("MatMul", [normed, w["1"]], "up")], "relu")
        if b == planted_block:
            hidden = node("Mul", [hidden, "big"], "planted")
        down = node("MatMul", [hidden, w["2"]], "down")
        x = node("LayerNormalization", [node("Add", [normed, down], "residual2"), gamma, beta], "norm2", axis=-1)
    shape = [1, SEQUENCE, HIDDEN]
    graph = helper.make_graph(made, f"transformer{nodes}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


KINDS = {"chain": chain, "transformer": transformer}


def write_case(kind: str, nodes: int, folder: Path) -> tuple[Path, Path]:
    """The model and its inputs (.npz), in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    model = KINDS[kind](nodes)
    path, inputs = folder / f"{kind}{nodes}.onnx", folder / f"{kind}{nodes}_inputs.npz"
    onnx.save(model, str(path))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    np.savez(inputs, x=np.random.default_rng(1).uniform(0.5, 1.0, shape).astype(np.float32))
    return path, inputs


def reducer_argv(model: Path, inputs: Path, out: Path) -> list[str]:
    return ["reduce", str(model), "-o", str(out), "--inputs", str(inputs), "--runner", RUNNER, "--fail-on", "nan"]


# -- one instrumented reduction, in its own process (`--one`): its peak RSS is its own -------------------
def instrumented_run(argv: list[str], timings_path: Path) -> None:
    """Run the CLI in this process, timing what the driver spends waiting on the runner's worker (the check
    itself) apart from everything else (materialize, hash, cache, save, feeds, verdict): the overhead."""
    import atexit

    from oracles import worker as worker_module
    from reducer import driver

    waits = {"runner": 0.0, "runs": 0, "search": 0.0, "candidates": 0}
    run = worker_module.Worker.run

    def timed_run(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return run(self, *args, **kwargs)
        finally:
            if kwargs.get("kind", "run") == "run":
                waits["runner"] += time.perf_counter() - start
                waits["runs"] += 1
            else:
                waits["capture"] = waits.get("capture", 0.0) + time.perf_counter() - start

    search = driver.Reduction.search

    def timed_search(self):
        start, runner_before, runs_before = time.perf_counter(), waits["runner"], waits["runs"]
        try:
            return search(self)
        finally:
            waits["search"] += time.perf_counter() - start
            waits["search_runner"] = waits["runner"] - runner_before
            waits["search_runs"] = waits["runs"] - runs_before
            counters = self.counters
            waits["candidates"] = counters.checks + counters.cache_hits + counters.unfaithful + counters.unrunnable

    begin = driver.Reduction.start
    waits["peak_mb_after"] = {}

    def peak_mb(stage: str) -> None:
        """The driver's peak RSS so far (VmHWM), after each stage: where it was reached."""
        waits["peak_mb_after"][stage] = _high_water(os.getpid()) // 2**20

    def timed_start(self, judged=None):
        peak_mb("reference")
        started = time.perf_counter()
        try:
            return begin(self, judged)
        finally:
            waits["whole_check"] = time.perf_counter() - started
            peak_mb("whole-model check")

    reverify = driver.Reduction.reverify

    def measured_reverify(self):
        peak_mb("search")
        waits["overhead_by_size"] = candidate_overhead(self)
        try:
            return reverify(self)
        finally:
            peak_mb("final re-check")

    def dump():
        peak_mb("report and bundle")
        # the driver's own high-water mark (VmHWM): getrusage's carries its parent's over fork and exec
        usage = max(waits["peak_mb_after"].values()) * 1024
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        timings_path.write_text(json.dumps({**waits, "rss_self_kb": usage, "rss_children_kb": children}))

    worker_module.Worker.run = timed_run
    driver.Reduction.search = timed_search
    driver.Reduction.reverify = measured_reverify
    driver.Reduction.start = timed_start
    atexit.register(dump)
    from reducer.cli import main

    sys.argv = ["onnx-reduce", *argv]
    main()


def candidate_overhead(reduction, sizes=(1, 10, 100, 1000, 10000), repeat: int = 3) -> dict[int, float]:
    """Milliseconds the driver spends on a candidate of k nodes before the worker runs it (materialize, key,
    cache, faithfulness, feeds, reference; the model saved and checked as the oracle does): the median of
    `repeat` candidates of each size (and of n/2), nodes from the top of the graph (fed what the graph's first
    nodes compute: faithful). Also run on older checkouts by bench_overhead.py."""
    import inspect

    from reducer.candidate import Candidate, save_model

    total = len(reduction.model)
    checks, strategy = reduction.counters.checks, reduction._strategy
    reduction._strategy = "overhead"
    parameters = inspect.signature(save_model).parameters  # as the built-in oracle calls it (older: fewer)
    measured = {}
    for size in sorted({*sizes, total // 2}):
        if size + repeat > total:
            continue
        times = []
        for shift in range(repeat):
            start = time.perf_counter()
            pending = reduction._prepare(Candidate(frozenset(range(shift, shift + size))), True, False)
            pending.job.workdir.mkdir(parents=True, exist_ok=True)
            extra = {"external_data": pending.job.external_data} if "external_data" in parameters else {}
            if "checked" in parameters:
                extra["checked"] = pending.job.checked
            save_model(pending.job.model, pending.job.workdir / "candidate.onnx", **extra)
            times.append(time.perf_counter() - start)
            shutil.rmtree(pending.job.workdir)
        measured[size] = statistics.median(times) * 1000
    reduction.counters.checks, reduction._strategy = checks, strategy  # not checks of the reduction
    reduction.counters.per_strategy.pop("overhead", None)
    return measured


def run_ours(model: Path, inputs: Path, work: Path, limit: float) -> dict:
    out = work / "ours"
    shutil.rmtree(out, ignore_errors=True)
    timings = work / "timings.json"
    timings.unlink(missing_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "--one", str(timings), "--",
            *reducer_argv(model, inputs, out)]
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit, env=_env())
    except subprocess.TimeoutExpired:
        return {"finished": False, "seconds": limit}
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"onnx-reduce failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    report = json.loads((out / "report.json").read_text())
    measured = json.loads(timings.read_text())
    # per run of the worker in the search: a probe in pieces is one candidate but a run a piece
    overhead = (measured["search"] - measured["search_runner"]) / max(1, measured["search_runs"])
    return {"finished": True, "seconds": seconds, "checks": report["checks"], "nodes": report["nodes_after"],
            "kept": report["kept_nodes"], "overhead_ms": overhead * 1000, "candidates": measured["candidates"],
            "overhead_by_size": measured.get("overhead_by_size", {}), "runs": measured["runs"],
            "capture": measured.get("capture", 0.0), "whole_check": measured.get("whole_check", 0.0),
            "search": measured["search"], "peak_mb_after": measured["peak_mb_after"],
            "rss_mb": max(measured["rss_self_kb"], measured["rss_children_kb"]) / 1024,
            "rss_driver_mb": measured["rss_self_kb"] / 1024, "rss_workers_mb": measured["rss_children_kb"] / 1024}


# What the same model costs without any reducer, each in a fresh process (its VmHWM): onnx loading and checking it
# (what every candidate-checking ONNX tool pays; shape inference's copy included) and one run of it on the runner
# (what one check of the whole model pays, Polygraphy's as ours). The floors the driver's and the worker's peaks are
# set beside: a 100k-node graph of small weights is 38 bytes a node in its file, a kilobyte and more in any library.
FLOORS = {
    "onnx": "import onnx\nm = onnx.load(MODEL)\nonnx.checker.check_model(m, full_check=True)",
    "runner": "import numpy as np\nfrom oracles import make_runner\nwith np.load(INPUTS) as d:\n"
              "    feeds = {k: d[k] for k in d.files}\nmake_runner(RUNNER).run(MODEL, feeds, None)",
}


def floors(model: Path, inputs: Path) -> dict[str, float]:
    """Peak RSS, MB, of each of FLOORS alone."""
    measured = {}
    for name, body in FLOORS.items():
        code = (f"MODEL, INPUTS, RUNNER = {str(model)!r}, {str(inputs)!r}, {RUNNER!r}\n{body}\n"
                "print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT)
        if done.returncode != 0:
            raise SystemExit(f"measuring {name} failed:\n{done.stderr[-2000:]}")
        measured[name] = int(done.stdout.split()[-1]) / 1024
    return measured


def run_polygraphy(model: Path, inputs: Path, work: Path, limit: float) -> dict:
    cwd = work / "polygraphy"
    shutil.rmtree(cwd, ignore_errors=True)
    cwd.mkdir(parents=True)
    from polygraphy.json import save_json

    with np.load(inputs) as data:
        save_json([{name: data[name] for name in data.files}], str(cwd / "inputs.json"))
    layerwise = _layerwise_npz(model, inputs, cwd)
    check = [sys.executable, str(CHECK_SCRIPT), "polygraphy_debug.onnx", str(layerwise), "--runner", RUNNER,
             "--fail-on", "nan"]
    argv = [*polygraphy_argv(), "debug", "reduce", str(model), "-o", "reduced.onnx", "--mode=bisect",
            "--load-inputs", "inputs.json", "--fail-code", "1", "--check", *check]
    start = time.perf_counter()
    with open(cwd / "log.txt", "w") as log:
        process = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=_env(),
                                   start_new_session=True)
        # its own process's high-water mark, read while it runs (a run cut by the limit has no getrusage)
        peak, code = 0.0, None
        while code is None:
            peak = max(peak, _high_water(process.pid) / 2**20)
            try:
                code = process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                if time.perf_counter() - start > limit:
                    os.killpg(process.pid, 9)  # the process group it started in, and only that
                    process.wait()
                    return {"finished": False, "seconds": limit, "checks": _count_checks(cwd), "driver_mb": peak}
    seconds = time.perf_counter() - start
    if code != 0 or not (cwd / "reduced.onnx").exists():
        return {"finished": False, "seconds": seconds, "error": (cwd / "log.txt").read_text()[-2000:]}
    reduced = onnx.load(str(cwd / "reduced.onnx"), load_external_data=False)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"finished": True, "seconds": seconds, "checks": _count_checks(cwd), "nodes": len(reduced.graph.node),
            "rss_mb": usage, "driver_mb": peak}


def _count_checks(cwd: Path) -> int:
    return (cwd / "log.txt").read_text(errors="replace").count("Running check command")


def _layerwise_npz(model: Path, inputs: Path, folder: Path) -> Path:
    """Every tensor of an fp32 reference run, for the check command (as Polygraphy's debug-reduce example)."""
    import onnxruntime as ort

    proto = onnx.load(str(model))
    known = {o.name for o in proto.graph.output}
    for node in proto.graph.node:
        proto.graph.output.extend(onnx.ValueInfoProto(name=name) for name in node.output if name not in known)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    with np.load(inputs) as data:
        feeds = {name: data[name] for name in data.files}
    names = [o.name for o in session.get_outputs()]
    path = folder / "layerwise.npz"
    np.savez(path, **feeds, **dict(zip(names, session.run(names, feeds), strict=True)))
    return path


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def fitted_exponent(points: list[tuple[int, float]]) -> float | None:
    """The slope of log(seconds) against log(nodes), least squares."""
    if len(points) < 2:
        return None
    xs, ys = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(xs, ys, 1)[0])


def median_run(runs: list[dict]) -> dict:
    finished = [r for r in runs if r.get("finished")]
    if not finished:
        return runs[0]
    chosen = dict(sorted(finished, key=lambda r: r["seconds"])[(len(finished) - 1) // 2])
    chosen["seconds"] = statistics.median(r["seconds"] for r in finished)
    chosen["overhead_ms"] = statistics.median(r["overhead_ms"] for r in finished) if "overhead_ms" in chosen else None
    return chosen


# -- profile ----------------------------------------------------------------------------------------
def profile(kind: str, nodes: int, work: Path) -> None:
    """cProfile of one reduction in this process (the driver), and the runner's share (its workers)."""
    import atexit
    import cProfile
    import pstats

    model, inputs = write_case(kind, nodes, work)
    timings = work / "timings.json"
    profiler = cProfile.Profile()

    def report() -> None:  # at exit: the CLI ends the process itself
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(25)
        print(timings.read_text())
        shutil.rmtree(work, ignore_errors=True)  # the CLI ends the process: main's own clean-up never runs

    atexit.register(report)  # registered first: runs after the timings are written
    profiler.enable()
    instrumented_run(reducer_argv(model, inputs, work / "out"), timings)


def render(rows: list[dict], note: str, repeat: int) -> str:
    import onnxruntime
    import polygraphy

    lines = [
        "## Scale",
        "",
        f"Written by `python scripts/bench_scale.py --repeat {repeat}`"
        f"{' (medians of ' + str(repeat) + ' runs of ours)' if repeat > 1 else ''}. "
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, no GPU; Python {platform.python_version()}, "
        f"ONNX Runtime {onnxruntime.__version__}, Polygraphy {polygraphy.__version__}.",
        *([note] if note else []),
        "",
        f"Synthetic graphs with one planted fp16 overflow (a Mul by 1e5) two thirds down; oracle `--runner {RUNNER} "
        "--fail-on nan`, the default search, from an empty output directory. Polygraphy: `polygraphy debug reduce "
        "--mode=bisect --check CMD` with CMD = `scripts/check_candidate.py` on the same runner and check, fed every "
        "tensor of an fp32 reference run (prepared before its clock starts).",
        "Overhead: the driver's own time (materialize, key, cache, faithfulness, feeds, reference, the model "
        "saved and checked) outside waiting on the runner's worker. *Per run*: over the search, divided by the "
        "worker's runs in it (a probe in pieces is one candidate, a run a piece). *Per candidate of k nodes*: "
        "measured on the reduction's own model and store before its final re-check, k nodes from the top of "
        "the graph, the median of three. Peak RSS: the largest process: the driver (its VmHWM), or a worker "
        "running ONNX Runtime (getrusage of the driver's children: an upper bound, since a spawned process "
        "starts from its parent's high-water mark).",
        "",
        "| graph | nodes | model MB | ours: s / checks / nodes left | overhead per run | overhead per candidate "
        "of 1 / 100 / 1000 / n/2 nodes, ms | peak RSS MB (driver, worker) | polygraphy: s / checks / nodes left |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        ours, theirs = row["ours"], row["polygraphy"]
        done = ours.get("finished")
        ours_cell = (f"{ours['seconds']:.1f} / {ours['checks']} / {ours['nodes']}" if done
                     else f"did not finish in {ours['seconds']:.0f} s")
        if theirs is None:
            theirs_cell = "not run"
        elif theirs.get("finished"):
            theirs_cell = f"{theirs['seconds']:.1f} / {theirs['checks']} / {theirs['nodes']}"
        elif "error" in theirs:
            theirs_cell = f"failed after {theirs['seconds']:.0f} s"
        else:
            theirs_cell = f"did not finish in {theirs['seconds']:.0f} s ({theirs['checks']} checks run)"
        by_size = {int(k): v for k, v in ours.get("overhead_by_size", {}).items()}
        sizes = [k for k in (1, 100, 1000) if k in by_size] + ([max(by_size)] if by_size else [])
        per_size = " / ".join(f"{by_size[k]:.1f}" for k in dict.fromkeys(sizes)) if by_size else "-"
        overhead = f"{ours['overhead_ms']:.1f} ms" if done else "-"
        driver_mb, workers_mb = _driver_mb(ours), ours.get("rss_workers_mb", 0)
        rss = f"{max(driver_mb, workers_mb):.0f} ({driver_mb:.0f}, {workers_mb:.0f})" if done else "-"
        lines.append(f"| {row['kind']} | {row['nodes']} | {row['model_mb']:.2f} | {ours_cell} | {overhead} "
                     f"| {per_size} | {rss} | {theirs_cell} |")
    lines += ["", "Where our seconds went: the reference capture (the worker), the whole model's check (its first "
              "check), the search (probe included), the rest (loading, the final re-check, report, bundle):", "",
              "| graph | nodes | capture | whole-model check | search | rest |", "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        ours = row["ours"]
        if ours.get("finished"):
            rest = ours["seconds"] - ours["capture"] - ours["whole_check"] - ours["search"]
            lines.append(f"| {row['kind']} | {row['nodes']} | {ours['capture']:.1f} | {ours['whole_check']:.1f} "
                         f"| {ours['search']:.1f} | {rest:.1f} |")
    lines += ["", "Memory, peak RSS in MB. Ours: the driver and its worker, as above. Beside them, the same model "
              "with no reducer, each alone in a fresh process: onnx loading it and checking it "
              "(`onnx.checker.check_model(full_check=True)`, which every candidate of a serious tool must pass), and "
              "one run of it on the runner (what one check of the whole model costs, by either tool). Polygraphy: its "
              "own process (VmHWM read twice a second; its check command runs in processes of its own, each about "
              "the run's figure):", "",
              "| graph | nodes | model MB | ours: driver | ours: worker | onnx load and check alone "
              "| one run on the runner alone | polygraphy's process |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        ours, theirs, alone = row["ours"], row["polygraphy"] or {}, row.get("floors", {})
        if ours.get("finished"):
            theirs_mb = f"{theirs['driver_mb']:.0f}" if theirs.get("driver_mb") else "-"
            lines.append(f"| {row['kind']} | {row['nodes']} | {row['model_mb']:.2f} | {_driver_mb(ours):.0f} "
                         f"| {ours.get('rss_workers_mb', 0):.0f} | {alone.get('onnx', 0):.0f} "
                         f"| {alone.get('runner', 0):.0f} | {theirs_mb} |")
    lines.append("")
    for kind in dict.fromkeys(r["kind"] for r in rows):
        points = [(r["nodes"], r["ours"]["seconds"]) for r in rows if r["kind"] == kind and r["ours"].get("finished")]
        exponent = fitted_exponent(points)
        if exponent is not None:
            ours_only = fitted_exponent([(r["nodes"], r["ours"]["seconds"] - r["ours"]["whole_check"]) for r in rows
                                         if r["kind"] == kind and r["ours"].get("finished")])
            last_two = fitted_exponent(points[-2:])
            lines.append(f"- {kind}: time to the minimal repro grows as nodes^{exponent:.2f} (least squares over "
                         f"{', '.join(str(n) for n, _ in points)} nodes; nodes^{last_two:.2f} between the two "
                         f"largest, where fixed costs weigh least); without the whole model's check, "
                         f"nodes^{ours_only:.2f}.")
    return "\n".join(lines) + "\n"


def _driver_mb(ours: dict) -> float:
    """The driver's peak: the highest after any stage (the instrumented run's VmHWM)."""
    return max(ours.get("peak_mb_after", {}).values(), default=ours.get("rss_driver_mb", 0))


# where this script's part of the "## Scale" section ends: what follows (notes written by hand) stays
END_OF_TABLES = "<!-- the tables above are written by scripts/bench_scale.py; what follows is kept when it runs -->"


def write_section(text: str, path: Path) -> None:
    """Replace the tables at the top of the "## Scale" section of BENCHMARKS.md, up to END_OF_TABLES (the whole
    section where that line is missing), or add the section at the end; the rest stays as it is."""
    text = text.rstrip("\n") + "\n\n" + END_OF_TABLES + "\n"
    old = path.read_text() if path.exists() else ""
    if "\n## Scale\n" in old:
        before, rest = old.split("\n## Scale\n", 1)
        if END_OF_TABLES in rest.split("\n## ", 1)[0]:
            after = rest.split(END_OF_TABLES, 1)[1].lstrip("\n")
            old = before + "\n" + text + "\n" + after
        else:
            after = rest.split("\n## ", 1)
            old = before + "\n" + text + (("\n## " + after[1]) if len(after) > 1 else "")
    else:
        old = old.rstrip("\n") + "\n\n" + text
    path.write_text(old)


def main() -> int:
    if "--one" in sys.argv:  # an instrumented reduction: --one TIMINGS -- ARGS
        position = sys.argv.index("--one")
        instrumented_run(sys.argv[position + 3:], Path(sys.argv[position + 1]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--kinds", default="chain,transformer")
    parser.add_argument("--repeat", type=int, default=1, help="runs of ours per graph (medians)")
    parser.add_argument("--limit", type=float, default=1800, help="seconds ours may take per run")
    parser.add_argument("--polygraphy-limit", type=float, default=600, help="seconds polygraphy may take")
    parser.add_argument("--no-polygraphy", action="store_true")
    parser.add_argument("--output", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--note", default="", help="a line about the conditions (e.g. other work running)")
    parser.add_argument("--profile", metavar="KIND:NODES", help="profile one reduction instead")
    args = parser.parse_args()
    if not args.no_polygraphy:
        polygraphy_argv()  # said before any run
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        if args.profile:
            kind, nodes = args.profile.split(":")
            profile(kind, int(nodes), work)
            return 0
        rows = []
        for kind in args.kinds.split(","):
            for nodes in map(int, args.sizes.split(",")):
                folder = work / f"{kind}{nodes}"
                model, inputs = write_case(kind, nodes, folder)
                ours = median_run([run_ours(model, inputs, folder, args.limit) for _ in range(args.repeat)])
                theirs = None if args.no_polygraphy else run_polygraphy(model, inputs, folder, args.polygraphy_limit)
                row = {"kind": kind, "nodes": len(onnx.load(str(model)).graph.node),
                       "model_mb": model.stat().st_size / 1e6, "ours": ours, "polygraphy": theirs,
                       "floors": floors(model, inputs)}
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items()}, default=str), flush=True)
                shutil.rmtree(folder, ignore_errors=True)
        write_section(render(rows, args.note, args.repeat), Path(args.output))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if math.isnan(float("nan")):  # plain script: no teardown tricks
        sys.exit(main())
