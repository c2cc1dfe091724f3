"""The search as a whole on real corpus models: the scheduler's turns and budgets, --max-checks and
--time-limit (the same result with --jobs 2: test_corpus_e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from corpus_files import corpus_model
from test_corpus_e2e import FAILING, ROOT, cli, oracle_flags, reduce_entry

from reducer.driver import StrategyStats, by_yield, turn_budget
from strategies import make_strategies

SILERO = next(e for e in FAILING if e["name"].startswith("silero"))
REC = next(e for e in FAILING if e["name"].startswith("ppocrv4_rec"))


def report_of(out) -> dict:
    return json.loads((out / "report.json").read_text())


def test_turn_budget_fits_a_bisection_of_both_ends():
    for nodes in (1, 7, 121, 672, 5000):
        assert turn_budget(nodes) >= 2 * max(1, nodes - 1).bit_length()
    assert turn_budget(672) < 672 // 10  # a costly strategy is cut short long before a linear sweep ends


def test_turns_respect_their_budget_and_the_closer_proves_minimality(tmp_path):
    """A linear sweep over 121 nodes is far beyond a turn's budget: it is cut short and resumed later;
    bisect, the closer here, runs unbudgeted until it removes nothing."""
    out = tmp_path / "out"
    done = reduce_entry(SILERO, out, "--strategy", "linear,bisect", "--minimal")
    assert done.returncode == 0, done.stderr
    report = report_of(out)
    assert report["status"] == "reduced"
    turns = report["turns"]
    linear_turns = [t for t in turns if t["strategy"] == "linear"]
    # a turn ends once its budget is spent, but a failing candidate's proof of cause (1 or 2 checks) ends first
    assert linear_turns and all(t["spent"] <= t["budget"] + 2 for t in linear_turns)
    assert any(not t["finished"] for t in linear_turns), turns  # cut short at least once
    assert report["strategies"]["linear"]["cut_short"] >= 1
    closing = [t for t in turns if t["strategy"] == "bisect"]
    assert all(t["budget"] is None for t in closing)
    assert closing[-1]["removed"] == 0 and closing[-1]["finished"]  # the search ends on a closer that found nothing
    assert report["nodes_after"] < report["nodes_before"]


def test_a_round_runs_new_strategies_first_then_the_best_yield():
    linear, bisect, ddmin, cone = make_strategies(["linear", "bisect", "ddmin", "cone"])
    stats = {"linear": StrategyStats(spent=40, nodes_removed=20, turns=1),  # 0.5 per check
             "bisect": StrategyStats(spent=10, nodes_removed=100, turns=1),  # 10 per check
             "ddmin": StrategyStats(spent=24, nodes_removed=0, turns=1)}
    assert [s.name for s in by_yield([linear, bisect, ddmin, cone], stats)] == ["cone", "bisect", "linear", "ddmin"]
    assert [s.name for s in by_yield([linear, bisect, ddmin, cone], {})] == ["linear", "bisect", "ddmin", "cone"]


NEEDS_A_STRETCH = """import sys, onnx
names = {node.name for node in onnx.load(sys.argv[1]).graph.node}
if {f"n{i}" for i in range(30, 40)} <= names:
    print("BUG: the stretch is all there")
    sys.exit(1)
"""


def test_the_default_search_ends_once_its_bisections_are_done(tmp_path):
    """The default search is its bisections: ddmin and the linear sweep, whose checks grow with the candidate's size,
    are --minimal's. A check that fails while ten nodes of a 40-node chain are all kept (glue: it reads the model's
    node names): the bisections find them, the search ends there (`stopped_by: bisected`) inside the budget that
    ddmin used to spend to its end, the probes of later turns within what passed presumed to pass; --minimal goes
    on and confirms them 1-minimal, checking every removal."""
    import sys

    from onnx import TensorProto, helper

    from reducer.driver import default_budget

    ops = ["Abs", "Neg", "Relu", "Sigmoid"]
    nodes = [helper.make_node(ops[i % 4], [f"t{i - 1}" if i else "x"], [f"t{i}"], name=f"n{i}") for i in range(40)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("t39", TensorProto.FLOAT, [4])])
    model = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    np.savez(tmp_path / "x.npz", x=np.array([0.5, -1.0, 2.0, 3.0], np.float32))
    check = tmp_path / "check.py"
    check.write_text(NEEDS_A_STRETCH)

    def reduce(out, *flags):
        return reduce_json(model, out, *flags, "--fail-regex", "BUG", "--check", sys.executable, str(check), "{model}")

    report = reduce(tmp_path / "out")
    kept = sorted(node.name for node in onnx.load(str(tmp_path / "out" / "minimal.onnx")).graph.node)
    assert kept == sorted(f"n{i}" for i in range(30, 40)) and report["final"]["failing"]
    assert report["stopped_by"] == "bisected" and not report["one_minimal"], report["turns"]
    assert report["checks"] < default_budget(40, numeric=False)
    assert not {"ddmin", "linear"} & {turn["strategy"] for turn in report["turns"]}
    # an error: what lies within a candidate that passed is presumed to pass (the later turns' probes), unchecked
    assert report["presumed_passing"] > 0
    assert "1-minimal: not sought: the default search ends once its bisections are done" in (
        tmp_path / "out" / "bundle" / "report.md").read_text()
    minimal = reduce(tmp_path / "minimal", "--minimal")
    assert minimal["one_minimal"] and minimal["nodes_after"] == 10 and minimal["checks"] > report["checks"]
    assert minimal["presumed_passing"] == 0  # 1-minimality checks every removal


def test_max_checks_stops_with_a_valid_failing_best(tmp_path):
    out = tmp_path / "out"
    done = reduce_entry(REC, out, "--max-checks", "10")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    report = report_of(out)
    assert report["status"] == "budget-exhausted"
    assert report["stopped_by"] == "max-checks"
    assert report["checks"] <= 10
    assert report["final"]["failing"]
    minimal = onnx.load(str(out / "minimal.onnx"))
    onnx.checker.check_model(minimal, full_check=True)
    assert len(minimal.graph.node) == report["nodes_after"] < report["nodes_before"]
    check = cli("check", str(out / "minimal.onnx"), "--inputs", str(out / "minimal_inputs.npz"), *oracle_flags(REC),
                cwd=tmp_path)
    assert check.returncode == 1, check.stdout + check.stderr


def test_time_limit_stops_with_a_valid_failing_best(tmp_path):
    out = tmp_path / "out"
    done = reduce_entry(SILERO, out, "--time-limit", "0.001")  # spent before the search's first check
    assert done.returncode == 0, done.stderr
    report = report_of(out)
    assert report["status"] == "budget-exhausted"
    assert report["stopped_by"] == "time-limit"
    assert report["final"]["failing"]
    assert report["checks"] == 2  # the whole model, then the re-check of the best so far (the same model)
    onnx.checker.check_model(str(out / "minimal.onnx"))


def test_root_is_the_repository():
    assert (ROOT / "corpus" / "manifest.json").exists()


def test_dimension_passes_keep_the_failure_and_give_a_valid_simpler_model(tmp_path):
    """Attributes back to their defaults and simpler weights, each kept only where the failure survives
    against a reference run of the edited candidate itself; node and tensor names stay the original's."""
    out = tmp_path / "out"
    done = reduce_entry(SILERO, out, "--strategy", "bisect,attributes,weights,linear", "--minimal")
    assert done.returncode == 0, done.stderr
    report = report_of(out)
    assert report["status"] == "reduced" and report["final"]["failing"]
    assert report["strategies"]["attributes"]["accepted"] >= 1
    # smaller weights: the STFT Conv keeps fewer of its 258 output channels, its weight cut to match
    assert any(edit.startswith("FewerChannels(") for edit in report["edits"]), report["edits"]
    assert (out / "minimal.onnx").stat().st_size < 20_000  # against 264 kB with every channel
    # the bundle tells the vendor what was changed, by node name
    described = report["edits_described"]
    assert len(described) == len(report["edits"]) and any("output channels kept" in d for d in described)
    report_md = (out / "bundle" / "report.md").read_text()
    assert "Changed from the original model" in report_md and "`/model/stft/Conv` (Conv)" in report_md
    original = onnx.load(str(ROOT / "corpus" / SILERO["model"]))
    minimal = onnx.load(str(out / "minimal.onnx"))
    onnx.checker.check_model(minimal, full_check=True)
    by_name = {node.name: node for node in original.graph.node}
    for node in minimal.graph.node:
        assert node.name in by_name and list(node.output) == list(by_name[node.name].output)
        assert len(node.attribute) <= len(by_name[node.name].attribute)
        assert not node.doc_string
    assert sum(len(n.attribute) for n in minimal.graph.node) < sum(
        len(by_name[n.name].attribute) for n in minimal.graph.node)
    assert not minimal.metadata_props and not minimal.graph.value_info
    read = {name for node in minimal.graph.node for name in node.input}
    assert {t.name for t in minimal.graph.initializer} <= read  # no unused initializer
    # the edited model fails on its own, judged by `check` against its own fresh reference run
    check = cli("check", str(out / "minimal.onnx"), "--inputs", str(out / "minimal_inputs.npz"),
                *oracle_flags(SILERO), cwd=tmp_path)
    assert check.returncode == 1, check.stdout + check.stderr


def test_shapes_shrinks_the_fed_tensors_and_the_bundle_still_reproduces(tmp_path):
    """`shapes` on the rec NaN: the minimal model's fed tensors get smaller (halved last axes), the
    failure survives against a reference run of the shrunk inputs, and the bundle replays."""
    import subprocess
    import sys
    import zipfile

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "out"
    corpus = root / "corpus"
    model = corpus_model("models/ch_PP-OCRv4_rec_infer.onnx")
    done = subprocess.run([sys.executable, "-m", "reducer", "reduce", str(model),
                           "--inputs", str(corpus / "inputs/ppocrv4_rec_textline_rawpixels.npz"), "--runner",
                           "onnxruntime:cpu:fp16", "--fail-on", "nan", "--strategy",
                           "localize,cone,bisect,shapes,linear", "-o", str(out), "--json"],
                          capture_output=True, text=True, cwd=root, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["status"] == "reduced" and report["final"]["failing"]
    assert any("ShrinkAxis" in edit for edit in report["edits"])
    model = onnx.load(str(out / "minimal.onnx"))
    onnx.checker.check_model(model)
    records = json.loads((out / "activations" / "index.json").read_text())["tensors"]
    with np.load(out / "minimal_inputs.npz") as fed:
        shrunk = [name for name in fed.files if name in records
                  and int(np.prod(fed[name].shape)) < int(np.prod(records[name]["shape"]))]
        for name in fed.files:  # the declaration matches what is fed
            declared = next(i for i in model.graph.input if i.name == name)
            assert [d.dim_value for d in declared.type.tensor_type.shape.dim] == list(fed[name].shape)
    assert shrunk, "no fed tensor got smaller"
    verify = subprocess.run([sys.executable, "-m", "reducer", "bundle", "verify", str(out / "bundle.zip")],
                            capture_output=True, text=True, cwd=root, timeout=600)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    with zipfile.ZipFile(out / "bundle.zip") as archive:
        archive.extractall(tmp_path / "unpacked")
    repro = subprocess.run([sys.executable, "-I", "repro.py"], capture_output=True, text=True,
                           cwd=tmp_path / "unpacked" / "bundle", timeout=600)
    assert repro.returncode == 1, repro.stdout + repro.stderr


def converter_chain(folder: Path, named: bool) -> Path:
    """A 60-node chain whose tensor t40 is a graph output that n41's Add also reads: converted to fp16, the graph
    output stays fp32 and ONNX Runtime refuses n41, "in node (n41)" (CRAFT's bug, corpus/evaluation.json)."""
    from onnx import TensorProto, helper, numpy_helper

    ops = ["Abs", "Neg", "Relu", "Sigmoid"]
    nodes = [helper.make_node("Add" if i == 41 else ops[i % 4],
                              [f"t{i - 1}" if i else "x", *(["w"] if i == 41 else [])], [f"t{i}"],
                              name=f"n{i}" if named else "") for i in range(60)]
    info = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [4]) for name in ("x", "t59", "t40")]
    graph = helper.make_graph(nodes, "chain", info[:1], info[1:],
                              initializer=[numpy_helper.from_array(np.ones(4, np.float32), "w")])
    path = folder / f"chain_{named}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.savez(folder / "x.npz", x=np.array([0.5, -1.0, 2.0, 3.0], np.float32))
    return path


def reduce_json(model: Path, out: Path, *flags: str) -> dict:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "reducer", "reduce", str(model), "--inputs",
                           str(model.parent / "x.npz"), "-o", str(out), "--json", *flags],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_an_errors_prefix_ends_where_its_message_names_the_node(tmp_path):
    """ONNX Runtime names the node an error comes from ("in node (n41)"; real onnxconverter-common and ONNX
    Runtime). The same model with its nodes unnamed is searched by bisection alone; named, the prefix to n41 and
    the prefix without it settle the end. The same two nodes either way, in fewer checks where the message names
    the node."""
    runner = ["--runner", "onnxruntime:cpu:fp16", "--fail-on", "error"]
    named = reduce_json(converter_chain(tmp_path, True), tmp_path / "named", *runner)
    unnamed = reduce_json(converter_chain(tmp_path, False), tmp_path / "unnamed", *runner)
    assert "in node (n41)" in named["original"]["reason"] and "in node ()" in unnamed["original"]["reason"]
    assert named["kept_nodes"] == unnamed["kept_nodes"] == [40, 41]
    assert named["checks"] < unnamed["checks"], (named["checks"], unnamed["checks"])


CONVERT_AND_LOAD = """import sys, onnx, onnxruntime
from onnxconverter_common import float16
model = float16.convert_float_to_float16(onnx.load(sys.argv[1]), keep_io_types=True)
for node in model.graph.node:  # a verbose log: every node named
    print("converted", node.name)
onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
"""


def test_a_rerun_from_the_cache_knows_the_node_a_commands_error_named(tmp_path):
    """Through a command the node's name is in its output, not in the verdict's one-line reason, and a verbose
    output names every node: the line the --fail-regex matches names the one that failed (fewer checks than the
    same model unnamed). The cache keeps an error's output, so a re-run in the same folder searches as the first
    did and runs no check but the final re-check (it spent 4 more when only the reason was kept)."""
    import sys

    check = tmp_path / "check.py"
    check.write_text(CONVERT_AND_LOAD)
    model = converter_chain(tmp_path, True)
    flags = ["--fail-regex", "bound to different types", "--check", sys.executable, str(check), "{model}"]
    first = reduce_json(model, tmp_path / "out", *flags)
    unnamed = reduce_json(converter_chain(tmp_path, False), tmp_path / "unnamed", *flags)
    assert first["kept_nodes"] == unnamed["kept_nodes"] == [40, 41] and first["checks"] < unnamed["checks"]
    again = reduce_json(model, tmp_path / "out", *flags)
    assert again["kept_nodes"] == [40, 41] and first["cache_hits"] == 0
    assert again["checks"] == 1 and again["cache_hits"] == first["checks"] - 1, (first, again)
