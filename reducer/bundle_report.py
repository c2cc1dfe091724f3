"""report.md: the bundle for a person who has two minutes. What fails and by how much first, the picture,
how to reproduce it, then the model, the reduction and the environment."""

from __future__ import annotations

import shlex

from reducer.environment import TEMPLATE_FIELDS

STATUS_LINES = {
    "reduced": "minimal.onnx fails the same way as the original model (re-checked before it was called reduced).",
    "interrupted": "**The reduction was interrupted**: minimal.onnx is the smallest failing model found so far, "
                   "not necessarily minimal.",
    "not-reproduced": "**Not reproduced on re-check**: the final model did not fail again when checked once more "
                      "(a flaky oracle?). Treat this bundle with care.",
}
FILES = {
    "minimal.onnx": "the minimal failing model (onnx.checker-clean; opens in Netron)",
    "target.onnx": "minimal.onnx as the target runner executes it (see above)",
    "inputs.npz": "its inputs (numpy)",
    "inputs.json": "the same inputs for `polygraphy run --load-inputs`",
    "keep_fp32.json": "the check command's `{keep_fp32}`: no node kept in fp32 (the proof named the repro's)",
    "reference_outputs.npz": "reference outputs: ONNX Runtime, CPU, fp32, graph optimizations off",
    "reference_outputs.json": "the same as Polygraphy RunResults, for `polygraphy run --load-outputs`",
    "target_outputs.npz": "the target's outputs as observed",
    "report.json": "this report's facts, for machines",
    "env.json": "the environment (the TensorRT issue template's fields, versions, the exact flags)",
    "runner.log": "the runner's log of the failing check",
    "repro.log": "repro.py's output with the runtime's verbose log, from the machine that made the bundle",
    "repro.py": "standalone repro: numpy and the runtime only; exit 1 when the failure reproduces",
    "repro.sh": "the equivalent command line (polygraphy run, or the recorded check command)",
    "graph.png": "the minimal graph, failing tensors in red",
    "reduction.png": "nodes left against checks run",
    "history.jsonl": "each accepted reduction step",
}
KIND_WORDS = {
    "nan": "NaN/Inf in the target where the reference is finite",
    "tolerance": "target outside tolerance of the reference",
    "error": "the target raises an error",
    "crash": "the runner's process crashes",
    "timeout": "the runner hangs",
    "command": "the check command reports a failure",
}


def _number(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _shape(shape) -> str:
    return "?" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _signature_text(signature: dict | None) -> str:
    if not signature:
        return "no failure recorded"
    details = [d for d in (signature.get("detail"), signature.get("exception") and f"Python {signature['exception']}")
               if d]
    detail = f" ({', '.join(details)})" if details else ""
    where = ", ".join(f"`{o}`" for o in signature.get("outputs", [])[:3])
    return f"{signature['kind']}{detail}" + (f" in {where}" if where else "")


def _check_text(options: dict) -> str:
    if options.get("check_command"):
        return f"`{shlex.join(options['check_command'])}`" + "".join(
            f", {flag} {values}" for flag, values in (("--fail-code", options.get("fail_code")),
                                                       ("--ignore-fail-code", options.get("ignore_fail_code")),
                                                       ("--fail-regex", options.get("fail_regex")),
                                                       ("--ignore-fail-regex", options.get("ignore_fail_regex")))
            if values)
    check = options.get("fail_on", "?")
    if check == "tolerance":
        return (f"`--fail-on tolerance`, atol={options['atol']:g}, rtol={options['rtol']:g} (Polygraphy's elementwise "
                "rule: an element fails where |t-r| > atol and |t-r| > rtol·|r|)")
    if check == "error":
        return "`--fail-on error`" + (f", matching {options['fail_regex']}" if options.get("fail_regex") else "")
    return f"`--fail-on {check}`"


def _path_text(origin: dict | None) -> list[str]:
    if not origin:
        return []
    def chain(nodes: list[dict], length: int | None) -> str:
        shown = [f"`{n['name'] or '#' + str(n['index'])}` ({n['op_type']})" for n in nodes]
        text = " → ".join(shown if len(shown) <= 8 else [*shown[:3], "…", *shown[-4:]])
        count = length or len(nodes)  # a report's chain keeps its ends only (session.origin)
        return text + (f" ({count} nodes)" if count > 8 else "")

    lines = ["", "**Where it sits in the original model** (node names and op types, topological index in brackets):"]
    kept, lengths = origin.get("kept", []), origin.get("path_lengths", {})
    lines.append("- kept: " + ", ".join(f"`{n['name']}` ({n['op_type']}) [{n['index']}]" for n in kept[:20])
                 + (f" and {len(kept) - 20} more" if len(kept) > 20 else ""))
    if origin.get("path_from_input"):
        lines.append("- from the model's inputs: " + chain(origin["path_from_input"], lengths.get("path_from_input")))
    if origin.get("path_to_output"):
        lines.append("- on to its outputs: " + chain(origin["path_to_output"], lengths.get("path_to_output")))
    return lines


# what a proof fed from the reference cannot show (reducer/counterfactual.py)
_FROM_ABOVE = ("Whether error from above would make the model fail as well is not tested this way: a runner that keeps "
               "nodes in fp32 (`--runner onnxruntime:cpu:fp16`, or a check command taking `{keep_fp32}`) tests it.")


def _cause_lines(cause: dict | None, one_minimal: bool | None, count: int | None = None,
                 stopped_by: str | None = None) -> list[str]:
    """The proof of cause in words (reducer/counterfactual.py): the first thing a vendor should trust."""
    lines = [""]
    if cause is None:
        lines.append("**Cause**: not checked (a build or runtime error is its own proof, or --no-cause-check).")
    elif cause.get("method") == "onset" and (cause.get("overflow") or {}).get("carries"):
        overflow = cause["overflow"]
        if overflow.get("reaches_every_output"):
            shown = (f"the values beyond fp16's range reach every output (through {overflow['exact_nodes']} "
                     "nodes): fp16 cannot compute them at all")
        else:
            count = overflow["exact_nodes"]
            nodes = "the node that computes or reads" if count == 1 else f"the {count} nodes that compute or read"
            shown = (f"the whole model, with {nodes} values beyond "
                     f"fp16's range fed from the reference, stops failing ({overflow['failing_elements_after']} of "
                     f"the {overflow['failing_elements_before']} failing elements left)")
        lines.append(f"**An fp16 overflow, shown**: {shown}; this repro is its onset, fed only values fp16 holds.")
        if cause.get("onset_finite"):
            lines.append("The whole model's outputs hold NaN/Inf; this repro's are finite but fail the same check: "
                         "the nodes below it turn its error into NaN/Inf.")
    elif cause.get("method") == "onset" and cause.get("assumed"):
        lines.append("**Taken for an fp16 overflow**: a command's precision is unknown, and the reference holds "
                     "values beyond fp16's range, so this repro is the onset, fed only values fp16 holds; its cause "
                     "was not proven (where the command does not run fp16, `--faithful-max` with its real bound "
                     "says so).")
    elif cause.get("method") == "onset":
        lines.append("**Onset of the NaN/Inf**: these nodes turn values the target holds into ones it cannot "
                     "(or into NaN); every input they are fed is within the target's range.")
    elif not cause.get("checked"):
        lines.append("**Cause: not shown.** The search stopped before the proof ran; treat this repro with care.")
    elif (cause.get("parts") or {}).get("shown") is False:
        parts = cause["parts"]
        if "failing_alone" in parts:
            lines.append(f"**Not shown to be the cause**: these nodes are {parts['count']} unconnected parts, each fed "
                         "from the reference. With all of them computed exactly the whole model stops failing, but "
                         f"the parts that fail alone ({', '.join(parts['failing_alone'][:3])}) do not carry the "
                         f"failure ({parts['in_words']}), and those that carry it do not fail alone. Treat this repro "
                         "with care.")
        else:
            lines.append(f"**Cause not shown**: these nodes are {parts['count']} unconnected parts, each fed from the "
                         "reference. With all of them computed exactly the whole model stops failing, but which part "
                         "fails alone is not known: the check does not name its failing outputs (a line "
                         "`failing_outputs=[...]`, as scripts/check_candidate.py prints), and the checks ran out "
                         "before each part was tried. Treat this repro with care.")
    elif cause.get("holds") and cause.get("writes_every_output") and cause.get("core"):
        core, before = cause["core"], cause.get("failing_elements_before")
        one = core["node_count"] == 1
        names = ", ".join(core["nodes"][:3]) + (" ..." if core["node_count"] > 3 else "")
        after, below = core.get("failing_elements_after"), cause.get("downstream_failing_elements")
        others = "" if count is None else f" {count - core['node_count']}"
        lines.append(f"**Shown to be the cause, through {core['node_count']} of its nodes** ({names}): the whole "
                     f"original model, with only {'that node' if one else 'those'} fed from the reference run and "
                     "nothing else changed, stops failing"
                     + (f" ({after} of the {before} failing elements left)" if None not in (after, before) else "")
                     + "; the repro, fed the reference at its inputs, fails as the whole model does"
                     + (f" ({below} of the {before} failing elements)" if None not in (below, before) else "")
                     + f", and with {'it' if one else 'them'} fed too, it passes. So the repro fails through "
                     f"{'it' if one else 'them'}: its other{others} nodes are what make {'its' if one else 'their'} "
                     "difference show at the outputs. All of the repro fed from the reference would show nothing, "
                     "as it writes the model's outputs. " + _FROM_ABOVE)
    elif cause.get("holds") and cause.get("writes_every_output"):
        lines.append("**Cause shown in part**: these nodes write the model's outputs, so the whole model with them "
                     "fed from the reference passes by construction, which shows nothing. What is shown: fed the "
                     "reference at their inputs, they fail as the whole model does "
                     f"({cause.get('downstream_failing_elements')} of the {cause.get('failing_elements_before')} "
                     "failing elements). " + _FROM_ABOVE)
    elif cause.get("holds"):
        how = ("kept in fp32" if cause["method"] == "fp32" else "fed from the reference run")
        if cause["method"] == "fp32" and cause.get("exact_constants"):  # fed, Constants are computed as in the model
            how = f"(and the {cause['exact_constants']} Constants they read) {how}"
        readers = (cause.get("exact_nodes") or 0) - (count or 0) - (cause.get("exact_constants") or 0)
        if readers > 0:
            how += f" (with the {readers} nodes below that read their values beyond the target's range)"
        before, after = cause.get("failing_elements_before"), cause.get("failing_elements_after")
        counted = f" ({after} of the {before} failing elements left)" if None not in (before, after) else ""
        lines.append(f"**Shown to be the cause**: the whole original model, with these nodes {how} and nothing "
                     f"else changed, {'stops failing' if not cause.get('still_failing') else 'fails far less'}"
                     f"{counted}.")
        allowed = cause.get("failing_elements_allowed")
        if cause.get("still_failing") and None not in (after, allowed) and after * 5 > allowed * 4:
            lines.append(f"That is close to the bar: at most {allowed} may be left (a tenth), {allowed - after} to "
                         "spare. Where the target's counts move from run to run (GPU kernels, tactics), a second "
                         "run may not repeat it: reducing again into a new output folder runs the proof again.")
        if cause.get("still_failing") and cause.get("after_in_words"):  # a tenth of all outputs' elements: say whose
            lines.append(f"What still fails then: {cause['after_in_words']} (before: {cause.get('before_in_words')}).")
        if cause["method"] == "reference":  # its limit, in words
            below = cause.get("downstream_failing_elements")
            after = "" if below is None else ("and all below them " if not cause.get("downstream_by_probes") else
                                              "and all that comes after them in the model's order (beside them too) ")
            lines.append("Fed from the reference, their values also stand in for any error that reached them from "
                         "above; what shows the error arising in them is that, fed the reference at their inputs, "
                         "they " + after + "fail as the whole model does"
                         + (f" ({below} failing elements)" if below is not None else "")
                         + (", and with them fed too, that passes" if cause.get("downstream_by_probes") else "") + ". "
                         + _FROM_ABOVE)
    else:
        lines.append(f"**Not shown to be the cause**: {cause.get('in_words', '')}. Treat this repro with care.")
    if cause and cause.get("finite_failing_elements"):  # a NaN/Inf and a drift in one failure: the onset is the first's
        lines.append(f"**Only the NaN/Inf is this repro's**: of the whole model's {cause['failing_elements']} failing "
                     f"elements, {cause['nonfinite_elements']} are NaN/Inf and {cause['finite_failing_elements']} are "
                     "finite but beyond the tolerance. This onset says nothing of those: they may be a drift of their "
                     "own, for a reduction of its own with a check that leaves NaN/Inf out.")
    if cause and cause.get("keep_fp32_refused"):
        lines.append(f"Not kept in fp32: {cause['keep_fp32_refused']} (so the proof fed the reference instead).")
    if cause and cause.get("bystanders"):
        first, count = cause["bystanders"][0], len(cause["bystanders"])
        size = first["node_count"]
        lines.append(f"{count} smaller candidate{'s' if count > 1 else ''} failed alone but did not carry the failure "
                     f"({'bystanders; the first' if count > 1 else 'a bystander'}, {size} "
                     f"node{'s' if size > 1 else ''}): {first['in_words']}.")
    if cause and cause.get("spread"):
        lines.append("No smaller subgraph was found that carries the failure: **the error is spread across these "
                     "nodes**.")
    overflow = (cause or {}).get("overflow") or {}
    if overflow and (overflow.get("refuted") or not overflow.get("carries") and cause.get("method") != "onset"):
        fed = (f"with the {overflow['exact_nodes']} nodes that compute or read those values fed from the reference the "
               f"whole model {'stops failing' if overflow.get('carries') else 'still fails'} "
               f"({overflow['failing_elements_after']} of {overflow['failing_elements_before']} failing elements left)")
        lines.append(f"Not taken for an overflow: the reference leaves fp16's range, and {fed}, but nothing from where "
                     "those values start fails alone, as an overflow would: the failure is something else they take "
                     "part in, so its cause was sought as a tolerance failure's." if overflow.get("refuted") else
                     f"Not an overflow: the reference leaves fp16's range, but {fed}, so the cause was sought as a "
                     "tolerance failure's.")
    for note in (cause or {}).get("range", []):
        lines.append(f"Values leave the target's range: {note}.")
    if one_minimal is not None:
        lines.append("1-minimal: " + ("yes, no single node can be removed." if one_minimal else
                                      "not proven: the default check budget was reached (`--minimal` goes on)."
                                      if stopped_by == "check-budget" else
                                      "not sought: no shorter stretch of the model carries the spread error, and a "
                                      "smaller scattered set takes many more checks (`--minimal` looks for one)."
                                      if stopped_by == "spread" else
                                      "not sought: a repro this small, proven or raising the error itself, ends the "
                                      "default search (`--minimal` tries removing each node)."
                                      if stopped_by == "small" else
                                      "not sought: the default search ends once its bisections are done; removing "
                                      "nodes one by one or in scattered sets costs about a check per node "
                                      "(`--minimal` does)."
                                      if stopped_by == "bisected" else
                                      "not proven (the search was stopped, or its last strategy does not prove it)."))
    return lines


def render_markdown(report: dict, env: dict) -> str:
    options = report.get("oracle_options") or {}
    observed = report.get("observed") or {}
    status = report.get("status", "unknown")
    runner = (report.get("environment") or {}).get("runner") or options.get("runner", "?")
    signature = report.get("signature")
    where = "a check command" if options.get("check_command") else runner
    lines = [f"# {_signature_text(signature)}, with {where}", ""]
    count = report.get("nodes_after", "?")
    lines.append(f"**{count} node{'' if count == 1 else 's'}** (from {report.get('nodes_before', '?')}), status "
                 f"**{status}**: {STATUS_LINES.get(status, '')}")
    lines += _cause_lines(report.get("cause"), report.get("one_minimal"), report.get("nodes_after"),
                          report.get("stopped_by"))
    if report.get("size_warning"):
        lines += ["", f"**Size**: {report['size_warning']}."]
    lines += ["", "**Reproduce** (non-zero exit = reproduced):", "",
              "```sh", "python repro.py      # numpy + the runtime only", "sh repro.sh          # the same with "
              "polygraphy run (or the recorded check command)",
              "onnx-reduce bundle verify bundle.zip   # with onnx-reduce: 0 reproduced, 1 not, 2 cannot run here",
              "```"]
    if options.get("check_command"):
        lines += ["", "The check command is code: `bundle verify` runs it only with `--trust-bundle-command`, "
                      "once you have read repro.sh and the shipped files below."]
    self_check = report.get("repro_self_check")
    if self_check:
        verb = "reproduced" if self_check.get("reproduced") else "did NOT reproduce"
        lines += ["", f"repro.py {verb} the failure on the machine that made this bundle "
                      f"(exit {self_check.get('exit_code')}): {self_check.get('summary', '')}"]
    lines += ["", "![the minimal graph, failing tensors in red](graph.png)", "", "## What fails", ""]
    how = "Check command" if options.get("check_command") else f"Runner `{runner}`, check"
    lines.append(f"{KIND_WORDS.get((signature or {}).get('kind', ''), 'failure')}. {how} {_check_text(options)}.")
    again = "the same failure" if observed.get("reproduced") else "**not the recorded failure**"
    lines.append(f"Run once more while bundling: {again} - {observed.get('reason', '')}")
    if report.get("target_model_note"):
        lines += ["", f"Target model: {report['target_model_note']}."]
    if report.get("reference_outputs_note"):
        lines += ["", f"Reference outputs: {report['reference_outputs_note']}."]
    outputs = report.get("outputs") or []
    if any("max_abs_error" in row for row in outputs):
        tolerance = options.get("fail_on") == "tolerance"
        header = ["output", "shape", "failing", "max abs err", "max rel err"] + (["outside atol/rtol"] * tolerance) + [
            "target NaN", "target Inf"]
        lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in outputs:
            cells = [f"`{_cell(row['name'])}`", f"{_shape(row['shape'])} {row['dtype']}",
                     "**yes**" if row["failing"] else "no", _number(row.get("max_abs_error")),
                     _number(row.get("max_rel_error"))]
            if tolerance:
                cells.append(f"{_number(row.get('outside_tolerance'))} of {_number(row.get('elements'))}")
            cells += [_number(row.get("target_nan")), _number(row.get("target_inf"))]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "Errors are over the elements finite in both; relative errors against |reference|."]
    elif options.get("check_command"):
        lines += ["", "A check command gives no outputs to compare: runner.log holds its output."]

    graph = report.get("minimal_graph") or []
    lines += ["", "## The minimal model", "", "| # | node | op type | inputs | outputs |", "|---|---|---|---|---|"]
    for number, node in enumerate(graph[:200]):
        ins = ", ".join(f"`{_cell(n)}` {_shape(s)}" for n, s in node["inputs"])
        outs = ", ".join(f"`{_cell(n)}` {_shape(s)}" for n, s in node["outputs"])
        lines.append(f"| {number} | `{_cell(node['name'])}` | {node['op_type']} | {ins} | {outs} |")
    if len(graph) > 200:
        lines.append(f"| … | {len(graph) - 200} more in report.json | | | |")
    op_types = sorted({node["op_type"] for node in graph})
    lines += ["", "Op types: " + ", ".join(op_types) + "."]
    if report.get("edits_described"):
        lines += ["", "Changed from the original model (each change kept only where the failure survived it, "
                  "judged against a reference run of the changed model):", ""]
        lines += [f"- {text}" for text in report["edits_described"]]
    lines += _path_text(report.get("origin"))

    lines += ["", "## How it was reduced", ""]
    lines.append(f"From {report.get('nodes_before', '?')} to {count} node{'' if count == 1 else 's'} in "
                 f"{report.get('checks', '?')} checks ({report.get('cache_hits', 0)} answered from the cache), "
                 f"{_number(report.get('seconds'))} s; {report.get('rejected_unfaithful', 0)} candidates rejected "
                 "unchecked as unfaithful (they would feed the target values it cannot hold).")
    used = [f"{name} ({stats['accepted']} accepted of {stats['checks']} checks)"
            for name, stats in (report.get("strategies") or {}).items() if stats.get("checks")]
    if used:
        lines.append("Checks by strategy: " + ", ".join(used) + ".")
    lines += ["", "![nodes left against checks run](reduction.png)"]

    lines += ["", "## Environment", "", "(the fields of NVIDIA's TensorRT issue template; env.json has more)", ""]
    for key, label in TEMPLATE_FIELDS.items():
        value = env.get(key)
        lines.append(f"**{label}**: {value if value is not None else 'n/a'}  ")
    extras = {"GPU compute capability": env.get("gpu_compute_capability"), "CPU": env.get("cpu"),
              "onnx": env.get("onnx_version"), "onnxruntime": env.get("onnxruntime_version"),
              "polygraphy": env.get("polygraphy_version")}
    lines.append("; ".join(f"{k}: {v}" for k, v in extras.items() if v is not None) + ".")
    if report.get("command_line"):
        lines += ["", "Command: `onnx-reduce " + shlex.join(report["command_line"]) + "`"]

    lines += ["", "## Files", ""]
    present = set(report.get("files") or [])
    lines += [f"- `{name}`: {text}" for name, text in FILES.items() if name in present]
    lines += _shipped_lines(report.get("shipped") or [], report.get("not_shipped") or [])
    return "\n".join(lines) + "\n"


def _shipped_lines(shipped: list[dict], not_shipped: list[dict]) -> list[str]:
    """The check command's files: those in the bundle (the command runs these copies), and those it names
    that were left out on purpose; a reader who cannot reproduce looks here first."""
    lines = []
    if shipped:
        lines += ["", "Shipped with the check command, which runs these copies (`{bundle}/NAME`):", ""]
        lines += [f"- `{_cell(item['name'])}`: {item['why']}, {item['bytes']} bytes, sha256 `{item['sha256']}`"
                  for item in shipped]
    if not_shipped:
        lines += ["", "**Not shipped** (the check command may need them to reproduce):", ""]
        lines += [f"- `{_cell(item['file'])}`: {item['why']}" for item in not_shipped]
    return lines
