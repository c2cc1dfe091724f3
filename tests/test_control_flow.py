"""Reduction inside control flow: an If replaced by its taken branch, a Loop cut to one iteration, node
counts with bodies included, and every candidate the search tried valid for the checker and ONNX Runtime."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_bad_input import run_cli, write_model

from reducer import model as model_module
from reducer.model import load_model, subgraphs

STORAGE = ("--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "nan")


def _value(name: str, shape=(2, 3)) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _model(nodes, inputs, outputs, initializers) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "control_flow", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _chain(prefix: str, source: str, length: int, op: str = "Relu") -> tuple[list[onnx.NodeProto], str]:
    nodes, previous = [], source
    for index in range(length):
        nodes.append(helper.make_node(op, [previous], [f"{prefix}{index}"], name=f"{prefix}{index}"))
        previous = f"{prefix}{index}"
    return nodes, previous


def if_model(overflow_in_then: bool = True) -> onnx.ModelProto:
    """Relu chain -> If (x sums positive) -> Relu chain. The then-branch multiplies an outer tensor by an
    outer 1e5 (Inf in fp16 storage, finite in fp32) among a few harmless nodes; the else-branch negates."""
    before, a = _chain("pre", "x", 3, "Abs")
    positive = [helper.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
                helper.make_node("Greater", ["total", "zero"], ["cond"], name="positive")]
    scaled = [helper.make_node("Abs", [a], ["t_abs"], name="then_abs"),
              helper.make_node("Mul", ["t_abs", "big"], ["t_big"], name="then_scale"),
              helper.make_node("Relu", ["t_big"], ["t_out"], name="then_relu")]
    calm = [helper.make_node("Neg", [a], ["e_neg"], name="else_neg"),
            helper.make_node("Abs", ["e_neg"], ["e_out"], name="else_abs")]
    if not overflow_in_then:
        scaled, calm = calm, scaled
    then_out, else_out = scaled[-1].output[0], calm[-1].output[0]
    branch = helper.make_node(
        "If", ["cond"], ["branched"], name="choose",
        then_branch=helper.make_graph(scaled, "then", [], [_value(then_out)]),
        else_branch=helper.make_graph(calm, "else", [], [_value(else_out)]))
    after, last = _chain("post", "branched", 3)
    after.append(helper.make_node("Identity", [last], ["y"], name="out"))
    constants = [numpy_helper.from_array(np.array(1e5, np.float32), "big"),
                 numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    return _model([*before, *positive, branch, *after], [_value("x")], [_value("y")], constants)


def _loop_body(nodes: list[onnx.NodeProto], scanned: tuple[str, ...] = (), computed: bool = False) -> onnx.GraphProto:
    """A Loop body: the iteration number, the condition (passed on by an Identity, or `computed`: whether
    the iteration number is below an outer `last`) and one carried value v_in -> v_out, plus scan outputs."""
    keep_going = (helper.make_node("Less", ["iteration", "last"], ["cond_out"], name="keep_going") if computed
                  else helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"))
    return helper.make_graph(
        [keep_going, *nodes], "body",
        [helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), _value("v_in")],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _value("v_out"),
         *(_value(name) for name in scanned)])


def loop_model(trips: int = 3, computed: bool = False) -> onnx.ModelProto:
    """Relu chain -> Loop (M = trips) whose body multiplies the carried value by an outer 1e5 -> Relu chain.
    `computed`: the body computes its condition (the iteration count is not known without running it)."""
    before, a = _chain("pre", "x", 3)
    body = _loop_body([helper.make_node("Mul", ["v_in", "big"], ["v_out"], name="body_scale")], computed=computed)
    loop = helper.make_node("Loop", ["trips", "go", a], ["looped"], name="repeat", body=body)
    after, last = _chain("post", "looped", 3)
    after.append(helper.make_node("Identity", [last], ["y"], name="out"))
    constants = [numpy_helper.from_array(np.array(1e5, np.float32), "big"),
                 numpy_helper.from_array(np.array(trips, np.int64), "trips"),
                 numpy_helper.from_array(np.array(True), "go")]
    if computed:
        constants.append(numpy_helper.from_array(np.array(trips - 1, np.int64), "last"))
    return _model([*before, loop, *after], [_value("x")], [_value("y")], constants)


def loop_body_model(trips: int = 3) -> onnx.ModelProto:
    """Relu chain -> Loop (M = trips) whose body of 5 nodes multiplies an outer tensor by an outer 1e5 (the
    culprit) and adds it to the carried value, among harmless nodes: its condition passed on, an Abs, and a
    Neg giving a scan output -> Relu chain."""
    before, a = _chain("pre", "x", 3)
    body = _loop_body([helper.make_node("Abs", ["v_in"], ["b_abs"], name="body_abs"),
                       helper.make_node("Neg", ["b_abs"], ["b_neg"], name="body_neg"),
                       helper.make_node("Mul", [a, "big"], ["b_big"], name="body_scale"),
                       helper.make_node("Add", ["b_abs", "b_big"], ["v_out"], name="body_add")], scanned=("b_neg",))
    loop = helper.make_node("Loop", ["trips", "go", a], ["looped", "scanned"], name="repeat", body=body)
    after, last = _chain("post", "looped", 3)
    after.append(helper.make_node("Identity", [last], ["y"], name="out"))
    after.append(helper.make_node("ReduceSum", ["scanned"], ["z"], name="scanned_sum", keepdims=0))
    constants = [numpy_helper.from_array(np.array(1e5, np.float32), "big"),
                 numpy_helper.from_array(np.array(trips, np.int64), "trips"),
                 numpy_helper.from_array(np.array(True), "go")]
    return _model([*before, loop, *after], [_value("x")], [_value("y"), _value("z", ())], constants)


def scan_model() -> onnx.ModelProto:
    """Relu chain -> Scan over x's 2 rows whose body of 5 nodes multiplies an outer tensor by an outer 1e5
    (the culprit) into its state, among harmless nodes (an Abs of the row, a Neg giving the scan output, an
    Identity) -> Relu chain."""
    before, a = _chain("pre", "x", 3)
    row = lambda name: _value(name, (3,))  # noqa: E731
    body = helper.make_graph(
        [helper.make_node("Abs", ["row"], ["s_abs"], name="scan_abs"),
         helper.make_node("Neg", ["s_abs"], ["s_neg"], name="scan_neg"),
         helper.make_node("Identity", ["s_neg"], ["s_out"], name="scan_copy"),
         helper.make_node("Mul", ["shift", "big"], ["s_big"], name="scan_scale"),
         helper.make_node("Add", ["state_in", "s_big"], ["state_out"], name="scan_add")],
        "scan_body", [row("state_in"), row("row")], [row("state_out"), row("s_out")])
    scan = helper.make_node("Scan", ["start", a], ["final", "rows"], name="sweep", body=body, num_scan_inputs=1)
    after, last = _chain("post", "final", 3)
    after.append(helper.make_node("Identity", [last], ["y"], name="out"))
    after.append(helper.make_node("ReduceSum", ["rows"], ["z"], name="rows_sum", keepdims=0))
    constants = [numpy_helper.from_array(np.array(1e5, np.float32), "big"),
                 numpy_helper.from_array(np.linspace(0.5, 1.0, 3, dtype=np.float32), "shift"),
                 numpy_helper.from_array(np.zeros(3, np.float32), "start")]
    return _model([*before, scan, *after], [_value("x")], [_value("y", (3,)), _value("z", ())], constants)


def nested_model(trips: int = 2) -> onnx.ModelProto:
    """A Loop whose body holds an If (on an outer condition) next to harmless nodes; the If's then-branch
    multiplies an outer tensor by an outer 1e5 (the culprit) beside an Abs; its else-branch negates."""
    before, a = _chain("pre", "x", 3)
    positive = [helper.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
                helper.make_node("Greater", ["total", "zero"], ["cond"], name="positive")]
    then = helper.make_graph(
        [helper.make_node("Abs", [a], ["i_abs"], name="inner_abs"),
         helper.make_node("Mul", [a, "big"], ["i_big"], name="inner_scale"),
         helper.make_node("Add", ["i_abs", "i_big"], ["i_out"], name="inner_add")], "then", [], [_value("i_out")])
    other = helper.make_graph(
        [helper.make_node("Neg", [a], ["e_neg"], name="else_neg"),
         helper.make_node("Abs", ["e_neg"], ["e_out"], name="else_abs")], "else", [], [_value("e_out")])
    body = _loop_body([
        helper.make_node("Abs", ["v_in"], ["b_abs"], name="body_abs"),
        helper.make_node("If", ["cond"], ["b_if"], name="inner_if", then_branch=then, else_branch=other),
        helper.make_node("Add", ["b_abs", "b_if"], ["v_out"], name="body_add")])
    loop = helper.make_node("Loop", ["trips", "go", a], ["looped"], name="repeat", body=body)
    after, last = _chain("post", "looped", 3)
    after.append(helper.make_node("Identity", [last], ["y"], name="out"))
    constants = [numpy_helper.from_array(np.array(1e5, np.float32), "big"),
                 numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
                 numpy_helper.from_array(np.array(trips, np.int64), "trips"),
                 numpy_helper.from_array(np.array(True), "go")]
    return _model([*before, *positive, loop, *after], [_value("x")], [_value("y")], constants)


def _inputs(tmp_path: Path, sign: float = 1.0) -> Path:
    path = tmp_path / "inputs.npz"  # positive: the then-branch is taken; negative: the else-branch
    np.savez(path, x=sign * np.linspace(0.8, 1.0, 6, dtype=np.float32).reshape(2, 3))
    return path


def _reduce(tmp_path: Path, model: onnx.ModelProto, *args: str, sign: float = 1.0):
    path = write_model(tmp_path / "model.onnx", model)
    done = run_cli(tmp_path, "reduce", str(path), "-o", str(tmp_path / "out"), "--inputs",
                   str(_inputs(tmp_path, sign)), *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    return done, report, onnx.load(str(tmp_path / "out" / "minimal.onnx"))


def _ops(graph: onnx.GraphProto) -> list[str]:
    """Op types at every depth."""
    return [op for node in graph.node for op in [node.op_type, *(o for b in subgraphs(node) for o in _ops(b))]]


# --- counting --------------------------------------------------------------------------------------------
def test_count_nodes_includes_bodies_at_every_depth():
    assert model_module.count_nodes(if_model().graph) == 10 + 3 + 2
    assert model_module.count_nodes(loop_model().graph) == 8 + 2
    nested = if_model()
    branch = nested.graph.node[5].attribute[0].g  # the then-branch, given an If of its own
    inner = helper.make_node("If", ["cond"], ["inner_out"], name="inner", then_branch=if_model().graph.node[5]
                             .attribute[0].g, else_branch=if_model().graph.node[5].attribute[1].g)
    branch.node.append(inner)
    assert model_module.count_nodes(nested.graph) == 15 + 1 + 3 + 2


def test_loaded_model_counts_bodies(tmp_path):
    model = load_model(write_model(tmp_path / "model.onnx", if_model()))
    assert len(model.original_nodes) == 10
    assert model.total_nodes == 15


# --- an If replaced by its taken branch ------------------------------------------------------------------
@pytest.mark.parametrize("sign, overflow_in_then", [(1.0, True), (-1.0, False)], ids=["then", "else"])
def test_overflow_inside_taken_branch_reduces_to_the_branch_node(tmp_path, sign, overflow_in_then):
    done, report, minimal = _reduce(tmp_path, if_model(overflow_in_then), *STORAGE, sign=sign)
    assert report["status"] == "reduced"
    assert "If" not in _ops(minimal.graph)
    assert [n.name for n in minimal.graph.node] == ["then_scale"]
    assert (report["nodes_before"], report["nodes_after"]) == (15, 1)
    assert (report["top_level_nodes_before"], report["top_level_nodes_after"]) == (10, 1)
    assert "15 -> 1 nodes" in done.stdout + done.stderr
    onnx.checker.check_model(minimal, full_check=True)


def test_progress_log_counts_bodies(tmp_path):
    done, _, _ = _reduce(tmp_path, if_model(), *STORAGE)
    history = [json.loads(line) for line in (tmp_path / "out" / "history.jsonl").read_text().splitlines()]
    assert history[0] == {**history[0], "strategy": "branches", "nodes": 12}  # 15 - the If - its else (2)
    assert "nodes     15" in done.stdout + done.stderr


# --- a Loop unrolled, or cut to one iteration ------------------------------------------------------------
def test_overflow_inside_a_loop_body_reduces_to_one_node_of_the_unrolled_loop(tmp_path):
    """Its iteration count known (trip count 3, the condition passed on), the Loop is unrolled: its body
    three times as ordinary nodes, which give the Loop's values, so every strategy may drop them: the repro
    is the first iteration's Mul alone, no Loop left."""
    done, report, minimal = _reduce(tmp_path, loop_model(), *STORAGE)
    assert report["status"] == "reduced"
    assert [(n.op_type, n.name) for n in minimal.graph.node] == [("Mul", "body_scale__repeat_0")]
    assert (report["nodes_before"], report["nodes_after"]) == (10, 1)
    assert "1 Loop(s) unrolled (3 iterations)" in done.stdout + done.stderr
    onnx.checker.check_model(minimal, full_check=True)


def _run_cpu(proto: onnx.ModelProto) -> list[np.ndarray]:
    feeds = {"x": np.linspace(0.1, 0.9, 6, dtype=np.float32).reshape(2, 3)}
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_a_loop_unrolled_gives_the_loops_values_at_every_output(tmp_path):
    """Carried values, scan outputs stacked on a new first axis, an If in the body inlined a depth further:
    the unrolled model computes what the model with its Loops computes."""
    for build in (loop_model, loop_body_model, nested_model):
        path = write_model(tmp_path / "model.onnx", build())
        model = load_model(path)
        loops = {i: 0 for i, n in enumerate(model.nodes) if n.op_type == "Loop"}
        trips = {i: int(model.initializer_array(model.nodes[i].input[0])) for i in loops}
        unrolled = model_module.inline_taken_branches(model, {}, trips)
        flat = model_module.flat_proto(unrolled)
        assert "Loop" not in _ops(flat.graph)
        onnx.checker.check_model(flat, full_check=True)
        expected, got = _run_cpu(build()), _run_cpu(flat)
        for want, have in zip(expected, got, strict=True):
            np.testing.assert_allclose(have, want, rtol=1e-6)


def test_a_loop_and_the_if_in_its_body_are_taken_apart_to_the_culprit(tmp_path):
    """Nested control flow taken apart at every depth: the Loop unrolled, each iteration's If inlined as its
    taken branch at the next depth: the repro is the first iteration's Mul, with neither Loop nor If."""
    done, report, minimal = _reduce(tmp_path, nested_model(), *STORAGE)
    assert report["status"] == "reduced", done.stderr
    assert [n.op_type for n in minimal.graph.node] == ["Mul"]
    assert minimal.graph.node[0].name.startswith("inner_scale")
    assert (report["nodes_before"], report["nodes_after"]) == (19, 1)


def test_overflow_inside_loop_body_reduces_to_a_one_iteration_loop(tmp_path):
    """Its condition computed in the body, the Loop's iteration count is not known without running it: it
    stays a Loop, cut to one iteration (its trip count a constant 1), the condition's node a constant too."""
    done, report, minimal = _reduce(tmp_path, loop_model(computed=True), *STORAGE)
    assert report["status"] == "reduced"
    assert [n.op_type for n in minimal.graph.node] == ["Loop"]
    trips = {t.name: numpy_helper.to_array(t) for t in minimal.graph.initializer}[minimal.graph.node[0].input[0]]
    assert int(trips) == 1
    assert [n.name for n in _body(minimal.graph.node[0]).node] == ["body_scale"]  # its condition a constant
    assert (report["nodes_before"], report["nodes_after"]) == (10, 2)
    assert any("at most 1 iteration" in line for line in report["edits_described"])
    onnx.checker.check_model(minimal, full_check=True)


def growing_loop_model(trips: int, step: float, op: str = "Add") -> onnx.ModelProto:
    """Relu chain -> Loop (M = trips, too many to unroll) whose body applies `op` to the carried value and an outer
    `step` (Add: beyond fp16's range only after enough iterations) -> Relu chain."""
    before, a = _chain("pre", "x", 3)
    body = _loop_body([helper.make_node(op, ["v_in", "step"], ["v_out"], name="body_step")])
    loop = helper.make_node("Loop", ["trips", "go", a], ["looped"], name="repeat", body=body)
    after, last = _chain("post", "looped", 3)
    after.append(helper.make_node("Identity", [last], ["y"], name="out"))
    constants = [numpy_helper.from_array(np.array(step, np.float32), "step"),
                 numpy_helper.from_array(np.array(trips, np.int64), "trips"),
                 numpy_helper.from_array(np.array(True), "go")]
    return _model([*before, loop, *after], [_value("x")], [_value("y")], constants)


def test_a_loop_whose_failure_needs_many_iterations_is_cut_to_the_fewest_that_keep_it(tmp_path):
    """x + 200 per iteration leaves fp16's range (65504) at the 328th iteration for x = 1.0: one iteration
    does not fail, so the trip count is bisected between 1 and the 600 the reference ran."""
    trips = model_module.MAX_UNROLLED_NODES // 2 + 100
    done, report, minimal = _reduce(tmp_path, growing_loop_model(trips, 200.0), *STORAGE)
    assert report["status"] == "reduced", done.stderr
    assert [n.op_type for n in minimal.graph.node] == ["Loop"]
    kept = {t.name: numpy_helper.to_array(t) for t in minimal.graph.initializer}[minimal.graph.node[0].input[0]]
    assert int(kept) == 328  # the fewest: (65520 - 1.0) / 200 rounded up
    assert any("at most 328 iterations" in line for line in report["edits_described"])
    onnx.checker.check_model(minimal, full_check=True)


# --- inside a Loop or Scan body -------------------------------------------------------------------------
def _body(node: onnx.NodeProto) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == "body")


LONG = model_module.MAX_UNROLLED_NODES  # iterations: a Loop too long to unroll stays a Loop


@pytest.mark.parametrize("build, kept", [(lambda: loop_body_model(LONG), ["body_scale", "body_add"]),
                                         (scan_model, ["scan_scale", "scan_add"])], ids=["loop", "scan"])
def test_overflow_inside_a_loop_or_scan_body_reduces_to_its_culprit(tmp_path, build, kept):
    """The Loop (too long to unroll; a Scan) must stay, for the failure is computed inside it: its body loses
    every node the culprit does not need (5 -> 2); what the rest read from a removed node, the condition and the
    scan output included, is a constant of the inferred type and shape, and the body's signature stays."""
    original = build()
    flow = next(n for n in original.graph.node if n.op_type in ("Loop", "Scan"))
    assert len(_body(flow).node) == 5
    done, report, minimal = _reduce(tmp_path, original, *STORAGE)
    assert report["status"] == "reduced", done.stderr
    assert [n.op_type for n in minimal.graph.node] == [flow.op_type]
    body = _body(minimal.graph.node[0])
    assert [n.name for n in body.node] == kept
    assert [(i.name, i.type) for i in body.input] == [(i.name, i.type) for i in _body(flow).input]
    assert [(o.name, o.type) for o in body.output] == [(o.name, o.type) for o in _body(flow).output]
    assert (report["nodes_before"], report["nodes_after"]) == (14, 3)
    assert any("3 of the 5 nodes of its body removed" in line for line in report["edits_described"])
    onnx.checker.check_model(minimal, full_check=True)
    ort.InferenceSession(minimal.SerializeToString(), providers=["CPUExecutionProvider"])


def test_an_if_inside_a_loop_body_is_reduced_inside_its_branches_too(tmp_path):
    """Nested control flow: the Loop's body is cut, then the branches of the If kept in it, at the next
    depth (the else-branch, which never runs, to nothing; the then-branch to the culprit and the Add that
    carries it out)."""
    model = nested_model(LONG)
    assert model_module.count_nodes(model.graph) == 10 + 4 + 3 + 2
    done, report, minimal = _reduce(tmp_path, model, *STORAGE)
    assert report["status"] == "reduced", done.stderr
    assert [n.op_type for n in minimal.graph.node] == ["Loop"]
    body = _body(minimal.graph.node[0])
    assert [n.name for n in body.node] == ["inner_if", "body_add"]
    branches = {a.name: a.g for a in body.node[0].attribute}
    assert [n.name for n in branches["then_branch"].node] == ["inner_scale", "inner_add"]
    assert not branches["else_branch"].node
    assert (report["nodes_before"], report["nodes_after"]) == (19, 5) == (19, model_module.count_nodes(minimal.graph))
    assert any("the else_branch of `inner_if` (If) in its body" in line for line in report["edits_described"])
    onnx.checker.check_model(minimal, full_check=True)
    ort.InferenceSession(minimal.SerializeToString(), providers=["CPUExecutionProvider"])


# --- every candidate valid -------------------------------------------------------------------------------
CHECK = """import shutil, sys
from pathlib import Path
seen = Path(sys.argv[2])
seen.mkdir(exist_ok=True)
shutil.copy(sys.argv[1], seen / f"{len(list(seen.iterdir())):04d}.onnx")
sys.exit(3 if sys.argv[3].encode() in Path(sys.argv[1]).read_bytes() else 0)
"""


@pytest.mark.parametrize("build, culprit", [(if_model, "then_scale"), (loop_model, "body_scale"),
                                            (loop_body_model, "body_scale"), (scan_model, "scan_scale"),
                                            (nested_model, "inner_scale")],
                         ids=["if", "loop", "loop-body", "scan-body", "if-in-loop"])
def test_every_candidate_tried_passes_the_full_checker_and_loads_in_onnxruntime(tmp_path, build, culprit):
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    seen = tmp_path / "seen"
    _, report, minimal = _reduce(tmp_path, build(), "--fail-code", "3", "--no-cause-check", "--check", "python",
                                 str(script), "{model}", str(seen), culprit)
    assert report["status"] == "reduced"
    tried = sorted(seen.iterdir())
    assert len(tried) >= 3
    for path in tried:
        candidate = onnx.load(str(path))
        onnx.checker.check_model(candidate, full_check=True)
        ort.InferenceSession(candidate.SerializeToString(), providers=["CPUExecutionProvider"])
    assert culprit.encode() in minimal.SerializeToString()


# --- a real model from a PyPI wheel: silero VAD, whose decoder sits behind Ifs ----------------------------
ROOT = Path(__file__).resolve().parent.parent
SILERO = ROOT / "corpus/models/silero_vad_16k_op15.onnx"
NORMALISED = ROOT / "corpus/inputs/silero_vad_normalised.npz"


@pytest.mark.skipif(not (SILERO.is_file() and NORMALISED.is_file()), reason="silero VAD not in corpus/")
def test_silero_decoder_failure_behind_its_ifs_is_reduced_inside_them(tmp_path):
    done = run_cli(tmp_path, "reduce", str(SILERO), "-o", str(tmp_path / "out"), "--inputs", str(NORMALISED),
                   "--runner", "onnxruntime:cpu:fp16", "--fail-on", "tolerance", "--atol", "0.001", "--rtol", "0.001")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    minimal = onnx.load(str(tmp_path / "out" / "minimal.onnx"))
    assert report["status"] == "reduced" and report["cause"]["holds"]
    assert report["nodes_before"] == 350 and report["top_level_nodes_before"] == 121
    assert "If" not in _ops(minimal.graph)
    assert report["nodes_after"] == model_module.count_nodes(minimal.graph) < 200  # Ifs left whole: 303
    assert report["strategies"]["branches"]["checks"] == 1  # its 3 Ifs (2 nested) inlined at once, in 1 check


# --- inside an If that must stay ------------------------------------------------------------------------
MULTIPLYING_IF = '''import sys
import onnx
graph = onnx.load(sys.argv[1]).graph
for node in graph.node:
    if node.op_type == "If":
        then = next(a.g for a in node.attribute if a.name == "then_branch")
        if any(inner.op_type == "Mul" for inner in then.node):
            print("BUG: an If whose then_branch multiplies")
            sys.exit(1)
'''


def test_an_if_that_must_stay_is_reduced_inside_its_branches(tmp_path):
    """A failure of the If itself (as a builder's internal assertion on a conditional is): the If stays, and
    its branches lose every node the failure does not need; what the kept ones read from a removed node is
    a constant inside the branch. Through a --check command, whose first check runs before the branches are
    inlined: the search still gets the inlined model."""
    check = tmp_path / "check.py"
    check.write_text(MULTIPLYING_IF)
    # --minimal: by default an error's repro of a few nodes (here the If and 3 of its branch's) ends the search
    done, report, minimal = _reduce(tmp_path, if_model(), "--no-cause-check", "--fail-regex", "BUG", "--minimal",
                                    "--check", sys.executable, str(check), "{model}")
    assert [n.op_type for n in minimal.graph.node] == ["If"], done.stderr
    branches = {a.name: a.g for a in minimal.graph.node[0].attribute}
    assert [n.op_type for n in branches["then_branch"].node] == ["Mul"]
    assert not branches["else_branch"].node  # never run: its output is a constant
    assert report["nodes_before"] == 15 and report["nodes_after"] == 2
    assert report["strategies"]["branches"]["checks"] >= 1  # the inlined model reached the search
    onnx.checker.check_model(minimal, full_check=True)
    ort.InferenceSession(minimal.SerializeToString(), providers=["CPUExecutionProvider"])


def test_an_errors_small_repro_ends_the_default_search(tmp_path):
    """An error's repro is shown by its own check (raising the message): one of at most max(3, bit_length(nodes))
    nodes ends the default search, as a proven cause does, where confirming 1-minimality costs about a check per
    node; --minimal goes on (the test above)."""
    from reducer.driver import small_cause

    check = tmp_path / "check.py"
    check.write_text(MULTIPLYING_IF)
    done, report, minimal = _reduce(tmp_path, if_model(), "--no-cause-check", "--fail-regex", "BUG", "--check",
                                    sys.executable, str(check), "{model}")
    assert report["final"]["failing"] and "Mul" in _ops(minimal.graph)
    assert report["stopped_by"] == "small" and not report["one_minimal"]
    assert 1 < report["nodes_after"] <= small_cause(report["nodes_before"])
    assert "1-minimal: not sought: a repro this small" in (tmp_path / "out" / "bundle" / "report.md").read_text()
    default_checks = report["checks"]
    done, report, minimal = _reduce(tmp_path / "minimal", if_model(), "--no-cause-check", "--fail-regex", "BUG",
                                    "--minimal", "--check", sys.executable, str(check), "{model}")
    assert report["one_minimal"] and report["checks"] > default_checks


ABS_IN_THE_OTHER_BRANCH = MULTIPLYING_IF.replace('a.name == "then_branch"', 'a.name == "else_branch"').replace(
    'inner.op_type == "Mul"', 'inner.op_type == "Abs"')


def test_the_branch_that_never_ran_is_cut_with_values_shape_inference_gives(tmp_path):
    """The reference took the then-branch, so nothing in the else-branch was captured: a node there that
    others read is replaced by zeros of the type and shape inference works out from the fed shapes."""
    check = tmp_path / "check.py"
    check.write_text(ABS_IN_THE_OTHER_BRANCH)
    done, report, minimal = _reduce(tmp_path, if_model(), "--no-cause-check", "--fail-regex", "BUG", "--check",
                                    sys.executable, str(check), "{model}")
    branches = {a.name: a.g for a in minimal.graph.node[0].attribute}
    assert [n.op_type for n in minimal.graph.node] == ["If"], done.stderr
    assert [n.op_type for n in branches["else_branch"].node] == ["Abs"]  # its Neg given as zeros
    assert not branches["then_branch"].node
    assert report["nodes_after"] == 2
    onnx.checker.check_model(minimal, full_check=True)


MULTIPLYING_DEEP_IN_AN_IF = '''import sys
import onnx
def ops(graph):
    return [op for n in graph.node for op in [n.op_type, *(o for a in n.attribute if a.g.node for o in ops(a.g))]]
for node in onnx.load(sys.argv[1]).graph.node:
    if node.op_type == "If" and "Mul" in ops(next(a.g for a in node.attribute if a.name == "then_branch")):
        print("BUG: an If whose then_branch multiplies, at some depth")
        sys.exit(1)
'''


def test_a_loop_inside_an_if_that_must_stay_is_reduced_inside_its_body(tmp_path):
    """The If stays (its failure is its own), its then-branch is cut to the Loop, and the Loop's body, a
    depth further, to the Mul: what the Loop's body read from removed nodes is zeros, its condition too."""
    model = if_model()
    then = next(a.g for a in model.graph.node[5].attribute if a.name == "then_branch")
    loop = loop_body_model().graph.node[3]
    loop.input[:] = ["trips", "go", "t_abs"]
    _body(loop).node[3].input[0] = "t_abs"
    then.node[1].op_type = "Add"  # the only Mul left is the Loop's
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in [then.node[0], loop, *then.node[1:]]]
    del then.node[:]
    then.node.extend(nodes)  # the Loop after the Abs whose output it reads
    model.graph.initializer.extend(t for t in loop_body_model().graph.initializer if t.name in ("trips", "go"))
    onnx.checker.check_model(model, full_check=True)
    check = tmp_path / "check.py"
    check.write_text(MULTIPLYING_DEEP_IN_AN_IF)
    done, report, minimal = _reduce(tmp_path, model, "--no-cause-check", "--fail-regex", "BUG", "--minimal",
                                    "--check", sys.executable, str(check), "{model}")
    assert [n.op_type for n in minimal.graph.node] == ["If"], done.stderr
    branches = {a.name: a.g for a in minimal.graph.node[0].attribute}
    assert [n.op_type for n in branches["then_branch"].node] == ["Loop"]
    assert not branches["else_branch"].node
    assert [(n.name, n.op_type) for n in _body(branches["then_branch"].node[0]).node] == [("body_scale", "Mul")]
    assert (report["nodes_before"], report["nodes_after"]) == (21, 3)
    onnx.checker.check_model(minimal, full_check=True)
    ort.InferenceSession(minimal.SerializeToString(), providers=["CPUExecutionProvider"])


def test_a_loop_whose_unrolling_gives_other_values_stays_a_loop(tmp_path, monkeypatch):
    """Unrolling is trusted only where the unrolled nodes give the Loop's own values in the reference run: an
    iteration count misread (here one too many, planted) leaves the Loop a Loop."""
    from reducer.driver import Progress
    from reducer.options import InputOptions
    from reducer.session import prepare

    counted = model_module.loops_known
    monkeypatch.setattr(model_module, "loops_known",
                        lambda model, store: {i: n + 1 for i, n in counted(model, store).items()})
    path = write_model(tmp_path / "model.onnx", loop_body_model())
    messages = []
    progress = Progress()
    progress.message = messages.append
    model, _ = prepare(str(path), InputOptions(inputs=str(_inputs(tmp_path))), tmp_path / "out", progress)
    assert not model.inlined and [n.op_type for n in model.nodes].count("Loop") == 1
    assert any("did not give the Loop's values; they stay Loops" in m for m in messages), messages
    monkeypatch.setattr(model_module, "loops_known", counted)
    model, _ = prepare(str(path), InputOptions(inputs=str(_inputs(tmp_path))), tmp_path / "again", Progress())
    assert len(model.inlined) == 1
    assert len(model.nodes) == 9 + 3 * 5 + 1 + 3 + 1  # 3 iterations, an Identity, 3 Unsqueezes, a Concat


NO_TRIP_COUNT = '''import sys
import onnx
for node in onnx.load(sys.argv[1]).graph.node:
    if node.op_type == "Loop" and not node.input[0] and len(node.output) > len(node.input) - 2:
        print("cannot infer the shape of scan output since no trip count")
        sys.exit(1)
'''


def _two_loops_without_trip_count(trips: int = LONG, scale: float = 1e-3) -> onnx.ModelProto:
    """Two Loops in a row, each with a scan output and no trip count (a condition computed in the body),
    as tf2onnx writes a Keras LSTM: the parser's complaint about either is the whole model's. LONG trips:
    too long to unroll, as nakdimon's are; `scale` 1e-3 keeps every value in fp16's range (a proof runs)."""
    model = loop_body_model(trips)
    model.graph.initializer.append(numpy_helper.from_array(np.array(trips - 1, np.int64), "last"))
    big = next(t for t in model.graph.initializer if t.name == "big")
    big.CopyFrom(numpy_helper.from_array(np.array(scale, np.float32), "big"))
    first = model.graph.node[3]
    first.input[0] = ""
    body = _body(first)
    body.node[0].CopyFrom(helper.make_node("Less", ["iteration", "last"], ["cond_out"], name="keep_going"))
    second = onnx.NodeProto()
    second.CopyFrom(first)
    second.name, second.input[2] = "again", "looped"
    second.output[:] = ["looped_again", "scanned_again"]
    model.graph.node.insert(4, second)
    model.graph.node[5].input[0] = "looped_again"  # the Relu chain after the Loops
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_message_named_by_fail_regex_is_an_error_each_instance_of_which_is_the_bug(tmp_path):
    """A --check command's failure could be numeric, so the result must carry the whole model's failure, and
    one Loop of two, both raising the message, does not (the other still raises it). Where --fail-regex names
    the message, the failure is an error as a builder's is: either Loop alone is the repro (nakdimon under
    TensorRT-RTX: 252 nodes without the regex, 24 with it)."""
    check = tmp_path / "check.py"
    check.write_text(NO_TRIP_COUNT)
    command = ["--fail-code", "1", "--check", sys.executable, str(check), "{model}"]
    done, report, minimal = _reduce(tmp_path, _two_loops_without_trip_count(), "--fail-regex", "no trip count",
                                    *command)
    assert report["status"] == "reduced", done.stderr
    assert [n.op_type for n in minimal.graph.node] == ["Loop"]
    assert report["signature"]["detail"] == "matched /no trip count/" and report.get("cause") is None
    kept = {n.name for n in minimal.graph.node}  # no edit of the Loop that was removed is reported
    assert all(re.match(r"`([^`]*)`", line).group(1) in kept for line in report["edits_described"]), report
    done, unnamed, both = _reduce(tmp_path / "unnamed", _two_loops_without_trip_count(), *command)
    # without the regex, one Loop alone leaves the other failing: it does not carry the failure, both do
    assert [n.op_type for n in both.graph.node] == ["Loop", "Loop"] and unnamed["cause"]["holds"], unnamed["cause"]


def test_a_proof_never_runs_a_loop_beside_its_unrolled_nodes(tmp_path):
    """The proof's downstream run (the repro and all below it) took both a Loop and its unrolled nodes, which
    write the same outputs: a model ONNX refuses (an internal error). One of the two now, never both."""
    check = tmp_path / "check.py"
    check.write_text(NO_TRIP_COUNT)
    done, report, _ = _reduce(tmp_path, _two_loops_without_trip_count(3, 2.0), "--fail-code", "1", "--check",
                              sys.executable, str(check), "{model}")
    assert report["status"] == "reduced" and report["cause"]["holds"], done.stderr


DRIFT = ("--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "tolerance", "--atol", "1e-3", "--rtol", "1e-3")


def test_a_drifts_loops_keep_their_trip_counts_and_bodies_in_the_default_search(tmp_path):
    """A drift over a Loop's iterations: the body multiplies the carried value by 1 + 1e-4, which fp16 storage
    rounds back to the value it started from (below fp16's step at 1), 6% off after 600 iterations, 1e-4 after one.
    Its cause is proven, and the default search does not bisect the Loop's trip count (about log2(600) checks for no
    node less) nor cut its body (a node cut there is given zeros each iteration: another computation than the one
    that drifted); --minimal does, down to the fewest iterations that still drift past 1e-3."""
    model = growing_loop_model(LONG // 2 + 100, 1.0001, "Mul")
    done, report, minimal = _reduce(tmp_path / "default", model, *DRIFT)
    assert report["status"] == "reduced", done.stderr
    assert report["strategies"]["branches"]["checks"] == 0
    assert report["strategies"].get("bodies", {}).get("checks", 0) == 0, report["strategies"]
    assert not any("iteration" in line for line in report["edits_described"])
    assert "Loop" in [n.op_type for n in minimal.graph.node]
    done, report, minimal = _reduce(tmp_path / "minimal", model, *DRIFT, "--minimal")
    assert report["status"] == "reduced", done.stderr
    assert report["strategies"]["branches"]["checks"] > 2
    assert report["strategies"]["bodies"]["checks"] > 0
    assert any("iterations" in line for line in report["edits_described"])


def test_a_loop_body_reading_a_graph_input_that_no_other_node_reads_runs_in_fp16(tmp_path):
    """A cut feeds a tensor that only a Loop body reads (by name, from the enclosing scope): chars2vec's LSTM with its
    input fed and that input's other readers cut away. The fp16 converter casts a graph input only for the top-level
    nodes that read it, so the converted body, computing in fp16, read it in fp32, and ONNX Runtime refused the model
    ("Graph attribute inferencing failed"); the proof took such a refused run for the model passing."""
    from oracles import make_runner

    body = _loop_body([helper.make_node("Add", ["v_in", "x"], ["v_out"], name="add_outer")])
    loop = helper.make_node("Loop", ["trips", "go", "start"], ["y"], name="repeat", body=body)
    constants = [numpy_helper.from_array(np.array(3, np.int64), "trips"), numpy_helper.from_array(np.array(True), "go"),
                 numpy_helper.from_array(np.zeros((2, 3), np.float32), "start")]
    path = tmp_path / "outer.onnx"
    onnx.save(_model([loop], [_value("x")], [_value("y")], constants), str(path))
    x = np.linspace(0.5, 1.5, 6, dtype=np.float32).reshape(2, 3)
    outputs = make_runner("onnxruntime:cpu:fp16").run(path, {"x": x})
    np.testing.assert_allclose(outputs["y"], 3 * x, rtol=1e-2)
