"""scripts/evaluate.py's table: a Polygraphy run that stopped with an error is no comparison (its checks are not
a ratio, nor in the median), and its cell shows Polygraphy's own word."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "evaluate.py"


@pytest.fixture(scope="module")
def evaluate():
    spec = importlib.util.spec_from_file_location("evaluate_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# what polygraphy debug reduce printed when it could not cut at an LSTM's unnamed optional output (abridged)
POLYGRAPHY_OUTPUT = """[I]     RUNNING | Iteration 4 | Approximately 1 iteration(s) remaining
[E] FAILED | Runtime: 4.956s | Command: polygraphy debug reduce model.onnx -o reduced.onnx --mode=bisect
[!]             The following outputs were not found in the model: {''}.
                Note: outputs requested were: {''}, but all outputs are: {'/lstm/LSTM_output_1', 'probs'}
"""


def row(name: str, polygraphy: dict, ours: dict) -> dict:
    return {"name": name, "nodes_before": 45, "runner": "onnxruntime:cpu:fp16", "fail_on": "tolerance",
            "package": "pkg==1.0", "polygraphy": polygraphy, "command": ours}


def test_polygraphy_error_is_its_own_word(evaluate):
    said = evaluate.polygraphy_error(POLYGRAPHY_OUTPUT, 1)
    assert said == "[!] The following outputs were not found in the model: {''}."
    assert evaluate.polygraphy_error("", 3) == "exit 3"
    assert evaluate.polygraphy_error("last line\n  \n", 1) == "last line"


def test_an_errored_polygraphy_run_is_no_comparison(evaluate):
    ours = {"nodes": 7, "checks": 16, "seconds": 10.0, "status": "reduced"}
    errored = {"checks": 8, "seconds": 6.0, "exit": 1, "error": evaluate.polygraphy_error(POLYGRAPHY_OUTPUT, 1)}
    finished = {"nodes": 3, "checks": 10, "seconds": 5.0, "exit": 0}
    assert evaluate._ratio(ours, errored) is None
    assert evaluate._ratio(ours, finished) == pytest.approx(1.6)
    assert evaluate._ratio({**ours, "status": "not-failing"}, finished) is None
    table = evaluate.render([row("lstm", errored, ours), row("conv", finished, {**ours, "checks": 5})])
    lstm = next(line for line in table.splitlines() if line.startswith("| lstm "))
    assert "error ([!] The following outputs were not found in the model" in lstm
    assert lstm.split(" | ")[6] == "-"  # the ratio column
    assert "median 0.50, largest 0.50" in table  # the errored row is in neither


def test_where_the_checks_went(evaluate):
    """report.json's per-strategy checks, parted as the table shows them; only rows over Polygraphy's count."""
    report = {"strategies": {"initial": {"checks": 1}, "cause": {"checks": 8}, "origin": {"checks": 1},
                             "prefix": {"checks": 0}, "reverify": {"checks": 1}}}
    spent = evaluate.checks_by_part(report)
    assert spent == {"whole_and_recheck": 2, "proof": 8, "search": 1}
    assert sum(spent.values()) == 11
    finished = {"nodes": 2, "checks": 7, "seconds": 3.0, "exit": 0}
    ours = {"nodes": 4, "checks": 11, "seconds": 5.0, "status": "reduced", "spent": spent}
    table = evaluate.render([row("over", finished, ours), row("under", finished, {**ours, "checks": 6})])
    assert "| over | 11 | 2 | 8 | 1 | 7 |" in table
    assert not any(line.startswith("| under | 6 |") for line in table.splitlines())


def test_a_timed_out_tool_is_ended_with_what_it_started_and_its_output_kept(evaluate, tmp_path):
    """Past the timeout the tool's process group is ended (SIGTERM, then SIGKILL): a child it started that still
    holds its output does not keep the row waiting, and what it printed before is in the cell's output."""
    import sys
    import time

    marker = tmp_path / "child-alive"
    child = f"import pathlib, time\ntime.sleep(3)\npathlib.Path({str(marker)!r}).touch()\n"
    tool = tmp_path / "tool.py"
    tool.write_text(f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {child!r}])\n"
                    "print('started', flush=True)\ntime.sleep(60)\n")
    start = time.perf_counter()
    seconds, output, code = evaluate.timed([sys.executable, str(tool)], tmp_path, 1.0)
    assert code == -1 and output.startswith("timed out after 1 s") and "started" in output
    assert time.perf_counter() - start < 10
    time.sleep(4)
    assert not marker.exists()  # the child went with the tool
    assert evaluate.timed([sys.executable, "-c", "print('done')"], tmp_path, 10.0)[1:] == ("done\n", 0)


def test_a_polygraphy_result_that_carries_the_failure_one_way_is_no_bystander(evaluate):
    """Either way of computing a repro exactly is the counterfactual: Polygraphy's result that carries the failure
    kept in fp32, though not fed the reference, is a rival ours is larger than, said with where only ours holds."""
    fed = {"method": "reference", "holds": False, "failing_elements_before": 83, "failing_elements_after": 0,
           "still_failing": False, "downstream_failing_elements": 3}
    kept = {"method": "fp32", "holds": True, "failing_elements_before": 83, "failing_elements_after": 4}
    polygraphy = {"nodes": 3, "checks": 7, "cause": {**fed, "by_method": {"reference": fed, "fp32": kept}}}
    ours = {"nodes": 7, "checks": 14, "appraisal": {"by_method": {
        "reference": {"holds": True, "failing_elements_before": 83, "failing_elements_after": 0},
        "fp32": {"holds": True, "failing_elements_before": 83, "failing_elements_after": 2}}}}
    said = evaluate._ours_is_not_larger(ours, polygraphy)
    assert said.startswith("NO; but fed the reference, Polygraphy's does not carry the failure")
    assert "fed exact inputs, it fails in 3 of 83" in said and "ours does (0 left)" in said
    neither = {**polygraphy, "cause": {**fed, "by_method": {"reference": fed, "fp32": {**kept, "holds": False}}}}
    assert evaluate._ours_is_not_larger(ours, neither).endswith("(a bystander)")
    both = {**polygraphy, "cause": {**kept, "by_method": {"reference": {**fed, "holds": True}, "fp32": kept}}}
    assert evaluate._ours_is_not_larger(ours, both) == "NO"
    assert evaluate._ours_is_not_larger({**ours, "nodes": 3}, polygraphy) == "yes"


def test_a_result_that_writes_the_outputs_is_in_part_unless_a_core_of_it_was_shown(evaluate):
    """Fed the reference, a repro that writes every output passes by construction: the cell says "in part", unless
    fewer of its nodes were shown to carry the failure (report.json's cause.core), which the cell then names."""
    ours = {"cause_method": "reference", "cause_holds": True, "elements_before": 4, "elements_after": 0,
            "writes_every_output": True, "downstream_elements": 1, "spread": False}
    assert evaluate.cause_cell(ours).startswith("in part (it writes the outputs; fed exact inputs, it fails in 1 of 4)")
    core = {"nodes": ["Conv_16 (Conv)"], "node_count": 1, "failing_elements_after": 0}
    assert evaluate.cause_cell({**ours, "core": core}) == (
        "yes (reference, through 1 of its nodes: 0 of 4 left; it writes the outputs)")
