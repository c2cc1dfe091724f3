"""One reduction or one check, from a model path and options to files in the output directory."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np
import onnx

from oracles.base import Oracle, Verdict
from reducer import counterfactual, errors, interrupts, output_dir
from reducer.activations import REFERENCE_RUNNER, ActivationStore, store_key, write_capture_model
from reducer.candidate import describe_edit
from reducer.driver import MINIMAL, Limits, Progress, Reduction, SearchStopped
from reducer.errors import BadModelError
from reducer.inputs import defaulted_dims, load_inputs_file, prepare_inputs
from reducer.model import Model, load_model, refuse_over_two_gib
from reducer.options import DEFAULT_CHECK_TIMEOUT, InputOptions, OracleOptions, build_oracle


def prepare(
    model_path: str, input_options: InputOptions, out_dir: Path, progress: Progress, worker=None,
    while_capturing: Callable[[Model, ActivationStore], object] | None = None, runner_spec: str | None = None,
) -> tuple[Model, ActivationStore]:
    """Load and validate the model and inputs, then capture every tensor in one reference run.
    `while_capturing(model, inputs)` runs alongside the reference run, given a store of the inputs alone
    (not called where an earlier run's store is reused)."""
    model = load_model(model_path)
    refuse_over_two_gib(model.proto, model.path, runner_spec)  # before the reference run, not after it
    given = load_inputs_file(input_options.inputs) if input_options.inputs else None
    feeds = prepare_inputs(model, given, input_options.input_shapes, input_options.seed, input_options.input_range)
    defaulted = defaulted_dims(model, given, input_options.input_shapes)
    if defaulted:
        progress.message(f"note: {defaulted}")
    key = store_key(model, feeds)
    store_dir = out_dir / "activations"
    store = ActivationStore.open(store_dir, key)
    if store is not None:
        progress.message(f"reusing the reference activations in {store_dir}")
        return _with_taken_branches(model, store, out_dir, progress, worker)
    progress.message(f"reference run ({REFERENCE_RUNNER}), capturing every tensor of {model.total_nodes} nodes")
    from oracles.worker import Worker

    scratch = out_dir / "work" / "reference"
    inputs = ActivationStore.write(scratch / "inputs", key, feeds.items())
    capture_path = scratch / "capture.onnx"
    write_capture_model(model, capture_path)  # may keep external references: resolved below
    has_external = model.weights_in_files
    borrowed = worker is not None  # the oracle's warm worker: one process start less
    worker = worker or Worker(REFERENCE_RUNNER)
    alongside = ThreadPoolExecutor(max_workers=1)
    try:
        overlapped = alongside.submit(while_capturing, model, inputs) if while_capturing else None
        try:
            result = worker.run(
                capture_path, {name: inputs.path(name) for name in feeds}, DEFAULT_CHECK_TIMEOUT * 4,
                kind="capture", runner_spec=REFERENCE_RUNNER, store_dir=str(store_dir), key=key,
                external_dir=str(model.base_dir) if has_external else None,
            )
        finally:
            if not borrowed:
                worker.close()
        if overlapped is not None:
            overlapped.result()  # its error, if any, is the caller's
    finally:  # not waited for on an error or Ctrl-C: closing the oracle stops it
        alongside.shutdown(wait=False)
    _refuse_unwritable_store(result, store_dir)
    if result.status != "ok":
        hint = f" ({defaulted})" if defaulted else ""
        raise BadModelError(f"{model_path}: the reference run ({REFERENCE_RUNNER}) fails: {_first_line(result.error)}"
                            + hint)
    store = ActivationStore.open(store_dir, key)
    return _with_taken_branches(model, store, out_dir, progress, worker)


MAX_INLINED_DEPTH = 4  # If inside If inside If...: one more reference run per level


def _with_taken_branches(model: Model, store: ActivationStore, out_dir: Path, progress: Progress,
                         worker=None) -> tuple[Model, ActivationStore]:
    """Each If whose condition the reference holds gets its taken branch's nodes as candidates too, and each
    Loop whose iteration count it holds its body unrolled; the whole model with those inlined runs once more,
    so that their insides are captured too. An unrolled Loop must give the values the Loop gave, else it
    stays a Loop (an iteration count misread, a body whose values depend on running as a Loop)."""
    from reducer.model import conditions_known, inline_taken_branches, loop_bounds, loops_known

    refused: set[tuple[str, ...]] = set()  # Loops (by their outputs) whose unrolling did not hold
    depth = 0
    while depth < MAX_INLINED_DEPTH:
        taken = conditions_known(model, store)
        loops = {i: n for i, n in loops_known(model, store).items() if tuple(model.nodes[i].output) not in refused}
        if not taken and not loops:
            break
        depth += 1
        inlined_model = inline_taken_branches(model, taken, loops)
        digest = hashlib.sha256(repr((sorted(taken.items()), sorted(loops.items()))).encode()).hexdigest()[:12]
        key = f"{store.key}:inlined{depth}:{digest}"
        store_dir = out_dir / "activations" / f"inlined{depth}-{digest}"
        inlined = ActivationStore.open(store_dir, key)
        if inlined is None:
            progress.message(f"reference run of {_inlined_words(len(taken), loops)}")
            inlined = _capture_flat(inlined_model, store, key, store_dir, out_dir, worker)
        differ = [i for i in loops if inlined is None or not _same_values(store, inlined, model.nodes[i].output)]
        if differ:  # again without those Loops
            progress.message(f"note: {len(differ)} Loop(s) unrolled did not give the Loop's values; they stay Loops")
            refused.update(tuple(model.nodes[i].output) for i in differ)
            depth -= 1
            continue
        if inlined is None:  # the inlined model does not run: the Ifs stay whole
            progress.message("note: the Ifs' taken branches could not be run apart; they stay whole")
            break
        model, store = inlined_model, inlined
    bounds = loop_bounds(model, store)  # for cutting the Loops that stay to fewer iterations
    return (dataclasses.replace(model, iterations=bounds) if bounds else model), store


def _inlined_words(ifs: int, loops: dict[int, int]) -> str:
    parts = [f"{ifs} If(s) inlined as their taken branch"] if ifs else []
    if loops:
        parts.append(f"{len(loops)} Loop(s) unrolled ({sum(loops.values())} iterations)")
    return " and ".join(parts)


def _same_values(before: ActivationStore, after: ActivationStore, names) -> bool:
    """Whether the reference values of `names` agree (to float rounding: the unrolled ops may be other kernels)."""
    for name in names:
        if not name or name not in before:
            continue
        if name not in after:
            return False
        old, new = np.asarray(before.load(name)), np.asarray(after.load(name))
        if old.shape != new.shape:
            return False
        if old.dtype.kind in "fc":
            if not np.allclose(old, new, rtol=1e-4, atol=1e-6, equal_nan=True):
                return False
        elif not np.array_equal(old, new):
            return False
    return True


def _capture_flat(model: Model, store: ActivationStore, key: str, store_dir: Path, out_dir: Path,
                  worker=None) -> ActivationStore | None:
    from oracles.worker import Worker
    from reducer.model import flat_proto

    scratch = out_dir / "work" / "reference"
    scratch.mkdir(parents=True, exist_ok=True)
    capture = flat_proto(model)
    present = {o.name for o in capture.graph.output}
    for node in capture.graph.node:
        capture.graph.output.extend(onnx.ValueInfoProto(name=n) for n in node.output if n and n not in present)
        present.update(node.output)
    capture_path = scratch / "capture_branches.onnx"
    onnx.save(capture, str(capture_path))
    has_external = model.weights_in_files
    borrowed = worker is not None
    worker = worker or Worker(REFERENCE_RUNNER)
    try:
        result = worker.run(
            capture_path, {name: store.path(name) for name in model.graph_inputs}, DEFAULT_CHECK_TIMEOUT * 4,
            kind="capture", runner_spec=REFERENCE_RUNNER, store_dir=str(store_dir), key=key,
            external_dir=str(model.base_dir) if has_external else None,
        )
    finally:
        if not borrowed:
            worker.close()
    _refuse_unwritable_store(result, store_dir)
    return ActivationStore.open(store_dir, key) if result.status == "ok" else None


def _refuse_unwritable_store(result, store_dir: Path) -> None:
    """A reference run that could not write the store (a full disk, a read-only folder) is the machine's
    problem, not the model's: said as such."""
    unwritable = output_dir.environment_error_in(result.error, store_dir) if result.status != "ok" else None
    if unwritable is not None:
        raise unwritable


def _in_output_dir(run: Callable) -> Callable:
    """`run` (a reduction, a check) as the only run writing to its `out_dir` (output_dir.claim: a lock,
    no planted symbolic links, no debris), with a full disk or an unwritable folder said in one line
    (exit 2) rather than taken for a bug."""

    @functools.wraps(run)
    def claimed(*args, **kwargs):
        arguments = inspect.signature(run).bind(*args, **kwargs).arguments
        out_dir = arguments["out_dir"]
        with output_dir.environment_errors_said(out_dir):
            try:
                claim = output_dir.claim(out_dir)
            except BaseException:
                if arguments.get("oracle") is not None:
                    arguments["oracle"].close()  # built by the caller, its workers warming up
                raise
            try:
                return run(*args, **kwargs)
            finally:
                claim.release()

    return claimed


def _prepared_reduction(model_path: str, input_options: InputOptions, oracle_options: OracleOptions, out_dir: Path,
                        progress: Progress, oracle: Oracle | None = None,
                        **settings) -> tuple[Reduction, Verdict | None]:
    """The oracle first (or one already built), so that its warm worker boots while the model loads; then
    the reference run. An oracle that needs no reference outputs (a --check command) checks the whole model
    meanwhile, one check's wait less: that verdict comes back too, for Reduction.start."""
    oracle = oracle or build_oracle(oracle_options)
    early: dict = {}

    def check_whole_model(model: Model, inputs: ActivationStore) -> None:
        early["reduction"] = Reduction(model, inputs, oracle, out_dir, progress=progress, **settings)
        early["verdict"] = early["reduction"].judge(early["reduction"].best)  # None: it needs captured tensors

    alongside = None if getattr(oracle, "needs_reference", True) else check_whole_model
    try:
        model, store = prepare(model_path, input_options, out_dir, progress,
                               getattr(oracle, "reference_worker", None), alongside,
                               None if oracle_options.check_command else oracle_options.runner)
    except BaseException:
        oracle.close()  # first: it stops a check still running alongside, before it could write the cache
        if "reduction" in early:
            early["reduction"].cache.close()
        shutil.rmtree(out_dir / "work", ignore_errors=True)  # the inputs, the capture model, that check's folder
        raise
    reduction = early.get("reduction")
    if reduction is not None and reduction.model is not model:
        # the first check ran on the model as loaded; its Ifs have taken branches inlined since (other node
        # indices): the search goes on the inlined model, with that check's verdict and count
        reduction.cache.close()
        counters, reduction = reduction.counters, None
    if reduction is None:
        reduction = Reduction(model, store, oracle, out_dir, progress=progress, **settings)
        if "reduction" in early:
            reduction.counters = counters
    reduction.use_store(store)
    return reduction, early.get("verdict")


@_in_output_dir
def check_model(model_path: str, input_options: InputOptions, oracle_options: OracleOptions, out_dir: Path,
                progress: Progress) -> tuple[Verdict, int]:
    """Run the oracle once on the whole model: `onnx-reduce check`."""
    reduction, early = _prepared_reduction(model_path, input_options, oracle_options, out_dir, progress,
                                           strategies=[])
    try:
        verdict = reduction.start(early)
    finally:
        reduction.close()
    return verdict, reduction.model.total_nodes


def write_report(out_dir: Path, report: dict) -> None:
    tmp = out_dir / "report.json.tmp"
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, out_dir / "report.json")


@_in_output_dir
def reduce_model(
    model_path: str,
    input_options: InputOptions,
    oracle_options: OracleOptions,
    out_dir: Path,
    strategy_names: list[str],
    faithful: bool,
    progress: Progress,
    command_line: list[str] | None = None,
    limits: Limits | None = None,
    oracle: Oracle | None = None,
    cause_check: bool = True,
    bundle_options: dict | None = None,
) -> tuple[dict, int]:
    """The whole job; returns the report and the exit code. Ctrl-C keeps the best model so far, and so
    does reaching a limit (exit 0 all the same: the model is reduced and re-checked, if not minimal).
    Whenever a minimal model exists (reduced, interrupted, not reproduced), the bug-report bundle is written.
    `oracle`: one built from `oracle_options` already (its workers warming up); closed here, as one built here."""
    from strategies import make_strategies

    started = time.perf_counter()
    try:
        strategies = make_strategies(strategy_names)
        output_dir.move_previous_results(out_dir)  # a run that finds no failure must not leave an old result
    except BaseException:
        if oracle is not None:
            oracle.close()
        raise
    oracle = oracle or build_oracle(oracle_options)
    jobs = getattr(oracle, "jobs", None) or oracle_options.jobs or 1
    reduction, early = _prepared_reduction(
        model_path, input_options, oracle_options, out_dir, progress, oracle, strategies=strategies,
        faithful=faithful, jobs=jobs, started=started, limits=limits, cause_check=cause_check,
    )
    model = reduction.model
    report = {
        "status": "interrupted",
        "model": str(model_path),
        "oracle": oracle.description,
        "oracle_options": asdict(oracle_options),  # what `bundle verify` rebuilds the oracle from
        "environment": getattr(oracle, "environment", {}),
        "nodes_before": model.total_nodes,  # bodies' nodes counted too, as everywhere counts appear
        "nodes_after": model.total_nodes,
        "top_level_nodes_before": len(model.original_nodes),
        "command_line": command_line,
        "bundle_options": bundle_options or {},  # --ship/--exclude: what the bundle takes with a check command
    }
    code = errors.EXIT_INTERRUPTED
    try:
        original = reduction.start(early)
        report["original"] = {"failing": original.failing, "reason": original.reason}
        if not original.lasting:  # killed from outside, or nothing judged: it says nothing of the model
            report["status"], code = "no-verdict", errors.EXIT_INTERNAL
            return report, code
        if not original.failing or not _is_the_failure_asked_for(original, oracle_options):
            # a failure that shows in some runs only is reported as flaky, not dropped as a pass
            report["status"] = "flaky" if original.runs and original.runs[0] else "not-failing"
            code = errors.EXIT_NOT_FAILING
            return report, code
        reduction.write_best()
        stopped_by = None
        try:
            reduction.search()
        except SearchStopped as stop:
            stopped_by = stop.limit
            report["stopped_by"] = stopped_by
            progress.message(STOP_MESSAGES.get(stop.limit, "{limit} reached: keeping the best so far ({nodes} nodes)")
                             .format(limit=stop.limit, nodes=reduction.size(reduction.best)))
        report["one_minimal"] = stopped_by is None and getattr(strategies[-1], "proves_one_minimal", False)
        reduction.settle_parts()
        final = reduction.reverify()
        report["final"] = final.to_json() if final else None
        if reduction.interesting(final, reduction.best):
            # the default check budget is how the tool reduces, not a limit the user set
            report["status"] = "budget-exhausted" if stopped_by not in (None, *DEFAULT_STOPS) else "reduced"
            code = errors.EXIT_REDUCED
        elif final is not None and not final.lasting:
            report["status"], code = "no-verdict", errors.EXIT_INTERNAL
        else:
            report["status"], code = "not-reproduced", errors.EXIT_NOT_REPRODUCED
    except (KeyboardInterrupt, Exception) as exc:
        # an error after a Ctrl-C is what the interrupt broke on its way (a C extension turns it into its own error)
        if not isinstance(exc, KeyboardInterrupt) and not interrupts.received():
            report["status"] = "error"  # the report still says what was done, and that it stopped on an error
            report["error"] = f"{type(exc).__name__}: {exc}"
            raise
        kept = reduction.size(reduction.best)
        progress.message(f"interrupted: {out_dir / MINIMAL} holds the best so far ({kept} nodes)")
    finally:
        report.update(_figures(reduction, started))
        if hasattr(oracle, "flakiness"):
            report["flakiness"] = {"repeat": oracle.repeat, "min_fails": oracle.min_fails,
                                   **oracle.flakiness.to_json()}
        if report["status"] not in ("not-failing", "flaky") and (out_dir / MINIMAL).exists():
            report["minimal"] = MINIMAL
            report["minimal_inputs"] = reduction.write_best_inputs().name
            report["origin"] = origin(model, reduction.best.ordered())
        write_report(out_dir, report)
        try:
            bundled = ("reduced", "budget-exhausted", "interrupted", "not-reproduced")
            if report["status"] in bundled and "minimal" in report:
                # after Ctrl-C a worker may still owe the interrupted check's answer: a fresh oracle then
                warm = reduction.oracle if report["status"] != "interrupted" else None
                report["bundle"] = _bundle(out_dir, warm, progress, reduction.final_observation, reduction.store)
                write_report(out_dir, report)
                if report["bundle"].get("error") == "interrupted":  # a Ctrl-C is said by the exit code, always:
                    code = errors.EXIT_INTERRUPTED  # a script must not take the run for whole, bundle and all
        finally:
            reduction.close()
    return report, code


def _bundle(out_dir: Path, oracle: Oracle | None, progress: Progress, observed=None,
            store: ActivationStore | None = None) -> dict:
    """The bug-report bundle, with the reduction's warm oracle and store. A bundle that cannot be written is said,
    not fatal: the reduction's own results are already on disk."""
    from reducer.bundle import make_bundle

    try:
        result = make_bundle(out_dir, oracle, observed, store=store)
    except KeyboardInterrupt:
        progress.message("interrupted while writing the bundle: none written")
        return {"error": "interrupted"}
    except Exception as exc:
        progress.message(f"the bundle could not be written: {type(exc).__name__}: {_first_line(str(exc))}")
        return {"error": f"{type(exc).__name__}: {_first_line(str(exc))}"}
    if result.warning:
        progress.message(f"warning: {result.warning}")
    return result.to_json()


ORIGIN_PATH_ENDS = 8  # a longer chain in report.json keeps its first and last this many nodes


def origin(model: Model, kept: list[int]) -> dict:
    """Where the kept nodes sit in the original model: themselves, and one shortest chain of original nodes
    from a model input to the first of them and from the last of them to a model output (its ends, where it is
    long, and its length in `path_lengths`)."""
    import networkx as nx

    def describe(index: int) -> dict:
        return {"index": index, "name": model.nodes[index].name, "op_type": model.nodes[index].op_type}

    # shortest chains found from the nearest of several starts, in the model's own graph: a copy with a source and
    # a sink added cost 70 MB at 100k nodes
    reading_inputs = [i for i, reads in enumerate(model.node_reads)
                      if any(name in model.graph_inputs for name in reads)]
    writing_outputs = [model.producer[name] for name in model.graph_outputs if name in model.producer]
    result = {"kept": [describe(i) for i in kept], "path_from_input": [], "path_to_output": [], "path_lengths": {}}
    if not kept:
        return result
    for key, graph, starts, end in (("path_from_input", model.dag, reading_inputs, kept[0]),
                                    ("path_to_output", model.dag.reverse(copy=False), writing_outputs, kept[-1])):
        if not starts:
            continue
        try:
            _, path = nx.multi_source_dijkstra(graph, set(starts), target=end)
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            continue
        path = path if key == "path_from_input" else path[::-1]
        result["path_lengths"][key] = len(path)
        # its ends: a chain of 66k nodes (a 100k-node graph's) made report.json 9 MB, and its writing the run's peak
        shown = path if len(path) <= 2 * ORIGIN_PATH_ENDS else [*path[:ORIGIN_PATH_ENDS], *path[-ORIGIN_PATH_ENDS:]]
        result[key] = [describe(i) for i in shown]
    return result


def _is_the_failure_asked_for(verdict: Verdict, options: OracleOptions) -> bool:
    """With --fail-on nan, a model that crashes the runner is not the NaN bug the user asked about."""
    if options.check_command:
        return verdict.signature.kind in ("command", "crash")
    kind = verdict.signature.kind
    return kind == options.fail_on or (options.fail_on == "error" and kind == "crash")


def _figures(reduction: Reduction, started: float) -> dict:
    counters = reduction.counters
    signature = reduction.best_verdict.signature if reduction.best_verdict else None
    edits = reduction.best.edits_in_effect()
    return {
        "nodes_after": reduction.size(reduction.best),
        "top_level_nodes_after": len(reduction.best),  # the nodes of minimal.onnx's graph itself
        "kept_nodes": reduction.best.ordered(),  # indices in the original model's topological order
        "edits": [repr(edit) for edit in edits],  # attribute, weight and shape edits kept
        "edits_described": [describe_edit(edit, reduction.model) for edit in edits],
        "checks": counters.checks,
        "cache_hits": counters.cache_hits,
        "presumed_passing": counters.presumed_passing,
        "rejected_unfaithful": counters.unfaithful,
        "seconds": round(time.perf_counter() - started, 3),
        "signature": signature.to_json() if signature else None,
        "cause": cause_report(reduction),
        "strategies": {name: vars(stats) for name, stats in counters.per_strategy.items()},
        "turns": reduction.turns,
    }


# where the default search ends by design (not a limit the user set): the result is "reduced"
DEFAULT_STOPS = ("check-budget", "spread", "small", "bisected")
STOP_MESSAGES = {"small": "a proven cause of {nodes} nodes: the default search ends here (--minimal tries removing "
                          "each of them)",
                 "bisected": "the bisections are done ({nodes} nodes): the default search ends here (--minimal goes "
                             "on to remove nodes one by one and in scattered sets, about a check per node)",
                 "spread": "the error is spread over the shortest stretch that carries it, or over parallel parts "
                           "of it ({nodes} nodes): the default search ends here (--minimal looks for a smaller "
                           "scattered set, at many checks)"}


def cause_report(reduction: Reduction) -> dict | None:
    """The proof of cause of the result, in report.json: method, failing elements before and after, the
    bystanders met (candidates that failed alone but did not carry the failure), and whether the error
    is spread over a region larger than a vendor would call a repro."""
    signature = reduction.original.signature if reduction.original else None
    if not reduction.proves_cause:
        if signature is None or signature.kind not in ("nan", "command") or not reduction.cause_check:
            return None  # a build or runtime error is its own proof
        if signature.names_a_message:
            return None  # an error, its own proof
        data = {"method": "onset", "checked": False,  # a NaN/Inf: the repro is where values leave the range
                # a command's failure taken for an overflow: a hint, unless its test showed it
                "assumed": (signature.kind == "command" and not signature.non_finite
                            and reduction.overflow_carries is not True),
                "range": counterfactual.range_notes(reduction.model, reduction.store, reduction.best,
                                                    reduction.oracle.max_abs_value)}
        if reduction.overflow_check is not None:
            data["overflow"] = _overflow_report(reduction)
        best = reduction.best_verdict.signature if reduction.best_verdict else None
        # the whole model's NaN/Inf, and an overflow's onset whose own outputs are finite (Reduction.interesting)
        data["onset_finite"] = bool(signature.non_finite and best is not None and not best.non_finite)
        # a check that counts both: the elements beyond the tolerance that are finite, which an onset does not explain
        counted, nonfinite = reduction.original.elements or 0, reduction.original.nonfinite_elements or 0
        if signature.non_finite and 0 < nonfinite < counted:
            data.update(failing_elements=counted, nonfinite_elements=nonfinite,
                        finite_failing_elements=counted - nonfinite)
        return data
    proof = reduction.proofs.get(reduction.best.nodes)
    if proof is None and reduction.best.nodes == reduction.model.original_nodes:
        proof = reduction.proof(reduction.best)  # nothing removed: the whole model carries it, no check
    data = {"checked": proof is not None}
    if reduction.fp32_refused:
        data["keep_fp32_refused"] = reduction.fp32_refused
    if reduction.overflow_check is not None:  # the overflow hint tested, and refuted: see overflow_carries
        data["overflow"] = _overflow_report(reduction)
    if proof is not None:
        data.update(proof.to_json(reduction.original))
        data["in_words"] = counterfactual.one_line(proof, reduction.original, reduction.model)
        core = reduction.core(reduction.best) if proof.holds and proof.writes_every_output else None
        if core is not None:  # what of it carries the failure, by a run that was not passing by construction
            nodes, verdict = core
            inside = sorted(nodes & reduction.best.nodes)
            data["core"] = {"nodes": [reduction.model.node_label(i) for i in inside[:10]], "node_count": len(inside),
                            "failing_elements_after": verdict.elements if verdict.failing else 0}
    data["bystanders"] = [
        {"nodes": [reduction.model.node_label(i) for i in sorted(p.nodes)[:10]], "node_count": len(p.nodes),
         "in_words": counterfactual.one_line(p, reduction.original, reduction.model)}
        for p in reduction.bystanders
    ]
    if reduction.parts is not None:  # unconnected parts, where the check does not name its failing outputs
        data["parts"] = reduction.parts
        if not reduction.parts["shown"]:
            data["holds"] = False  # not shown that what fails alone is what carries the failure
    # no smaller subgraph found to carry it, and more nodes than a repro a vendor can read (a small core carries it:
    # the error is its, and the rest of the repro only carries it to where it shows)
    carriers = data.get("core", {}).get("node_count", len(reduction.best))
    data["spread"] = bool(data.get("holds")) and min(carriers, len(reduction.best)) > counterfactual.SPREAD_NODES
    data["range"] = counterfactual.range_notes(reduction.model, reduction.store, reduction.best,
                                               reduction.oracle.max_abs_value)
    return data


def _overflow_report(reduction: Reduction) -> dict:
    """What the test of a command's overflow hint showed (Reduction.overflow_carries)."""
    check = reduction.overflow_check
    verdict = check.verdict
    return {"carries": reduction.overflow_carries, "exact_nodes": len(check.region),
            "failing_elements_before": reduction.original.elements,
            # None: not run, or nothing left to run (the values out of range reach every output)
            "failing_elements_after": None if verdict is None else verdict.elements if verdict.failing else 0,
            "reaches_every_output": check.reaches_every_output,
            # they carry it, but nothing from where they start fails alone: no overflow (strategies/overflow.py)
            "refuted": reduction.overflow_refuted}


def _first_line(text: str) -> str:
    # ONNX Runtime puts its C++ source location and function signature before the message: keep the message
    text = re.sub(r"/onnxruntime_src/\S+ [^(]*\([^)]*\)\s*", "", text)
    return (text.strip().splitlines() or [""])[0][:300]
