"""The onset of a NaN/Inf, on small built graphs and held-out models, with the real fp16 runners: where values
leave fp16's range (or underflow into a Log), the repro is the first nodes that turn in-range inputs into Inf or
NaN, and the overflow hint is tested, never assumed: fed the reference there, the whole model must pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from reductions import (
    FP16,
    ROOT,
    check_command,
    const,
    fp16_check_options,
    in_process,
    kept_names,
    reduce,
    reduce_a_set_model,
    save_x_to_y,
)

NAN_ONLY_CHECK = """import sys
import numpy as np, onnx, onnxruntime as ort
from polygraphy.json import load_json
sys.path.insert(0, sys.argv[3])
from oracles.onnxruntime_runner import fp16_storage
model = fp16_storage(onnx.load(sys.argv[1]))  # every tensor rounded to fp16: Inf where it cannot hold a value
options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
wanted = {i.name for i in session.get_inputs()}
outputs = session.run(None, {k: np.asarray(v) for k, v in load_json(sys.argv[2])[0].items() if k in wanted})
sys.exit(1 if any(np.isnan(o).any() for o in outputs) else 0)
"""


FUSED_CHAIN_CHECK = """import sys
import onnx
graph = onnx.load(sys.argv[1]).graph
writer = {output: node.name for node in graph.node for output in node.output}
feeds = {node.name: {writer.get(name) for name in node.input} for node in graph.node}
# a target whose fused kernel for this chain of three Muls drifts: it fails wherever it computes all three
sys.exit(1 if "overflow" in feeds.get("scale_down", ()) and "scale_up" in feeds.get("overflow", ()) else 0)
"""


def test_swift_f0s_underflow_is_reduced_to_one_branchs_onset_where_its_check_counts_the_nans(tmp_path):
    """The held-out set's swift-f0 (fetched from its wheel on first use) in fp16 storage, through a check command:
    each of its three STFT branches stores powers down to 1e-12 as 0, and a Log gives -Inf. The command says its
    outputs hold NaN/Inf (`nonfinite_elements=N`), so the failure is a NaN/Inf's, whose repro is its onset: one
    branch, found where its Log meets a sum fp16 rounds to 0 (before, taken for a tolerance failure, the three
    together: 46 nodes, proven, spread)."""
    report, kinds = reduce_a_set_model(tmp_path, "models/swift_f0_model.onnx", "heldout.json",
                                       "eval_swift_f0_utterance.npz", "--runner", "onnxruntime:cpu:fp16-storage",
                                       "--fail-on", "nan")
    assert kinds.count("Sqrt") <= 1 and report["nodes_after"] <= 9, (report["nodes_after"], kinds)
    assert report["cause"]["method"] == "onset" and not report["cause"]["assumed"]
    assert report["checks"] <= 15, report["checks"]  # Polygraphy: 7 nodes in 15


def test_a_nan_an_integer_output_hides_is_reduced_to_the_constant_fp16_cannot_hold(tmp_path):
    """The second held-out set's unidic-lite-imitator tagger (fetched from its wheel on first use) in fp16 storage,
    through a check command at 1e-2: its attention mask multiplies by -3.4e38, which fp16 makes -Inf, and 0 x -Inf
    is NaN; the ArgMax's int64 output hides the NaN, so the failure is tags changed, a tolerance failure. The values
    beyond fp16's range, fed the reference, carry it: the repro is the one Constant that holds -3.4e38 (Polygraphy:
    10 nodes in 10 checks, which leave all 23 failing tags)."""
    report, kinds = reduce_a_set_model(tmp_path, "models/unidic_lite_imitator.onnx", "heldout2.json",
                                       "eval_unidic_sentence.npz", "--runner", "onnxruntime:cpu:fp16-storage",
                                       "--fail-on", "tolerance", "--atol", "1e-2", "--rtol", "1e-2")
    assert kinds == ["Constant"], kinds
    cause = report["cause"]
    assert cause["method"] == "onset" and cause["overflow"]["carries"], cause
    assert cause["overflow"]["failing_elements_after"] == 0, cause
    assert report["checks"] <= 5, report["checks"]


def test_an_overflow_from_an_integer_accumulator_is_reduced_to_the_cast_that_leaves_fp16s_range(tmp_path):
    """The third held-out set's open-voicefilter-lite mask model (int8, dynamically quantized; fetched from its wheel
    on first use) in fp16 storage: a MatMulInteger's int32 accumulator reaches 3.9e5, which is held whole, and the
    Cast that makes it float is where fp16 gets Inf. fp16's range bounds floats only, so the Cast fed that int32
    tensor is faithful and is the onset alone (it was the two nodes; Polygraphy: 1 node in 12 checks)."""
    report, kinds = reduce_a_set_model(tmp_path, "models/open_voicefilter_lite_mask.int8.onnx", "heldout3.json",
                                       "eval_vfl_mask_mixture.npz", "--runner", "onnxruntime:cpu:fp16-storage",
                                       "--fail-on", "nan")
    assert kinds == ["Cast"], kinds
    cause = report["cause"]
    assert cause["method"] == "onset" and cause["overflow"]["carries"], cause
    assert cause["overflow"]["failing_elements_after"] == 0 < cause["overflow"]["failing_elements_before"], cause
    assert report["checks"] <= 4, report["checks"]


def test_a_nan_a_command_counts_is_reduced_to_one_onset_not_to_all_that_carry_it(tmp_path):
    """Two branches each store a tiny product as 0 in fp16, and a Log gives -Inf: two onsets, neither of which
    carries the whole model's failure alone. A command that prints `nonfinite_elements=N` (scripts/check_candidate.py)
    says the failure is a NaN/Inf: its repro is one onset, its report says so, not assumed. A command that does not
    leaves the failure's kind unknown, and the proof keeps both branches."""
    from reducer.driver import small_cause

    nodes = []
    for branch in "ab":
        nodes += [helper.make_node("Relu", ["x"], [f"{branch}r"], name=f"{branch}_relu"),
                  helper.make_node("Mul", [f"{branch}r", "tiny"], [f"{branch}t"], name=f"{branch}_tiny"),
                  helper.make_node("Log", [f"{branch}t"], [f"{branch}l"], name=f"{branch}_log"),
                  helper.make_node("Add", [f"{branch}l", "thirty"], [f"{branch}y"], name=f"{branch}_shift")]
    graph = helper.make_graph(nodes, "onsets", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info(f"{b}y", TensorProto.FLOAT, [1, 16]) for b in "ab"],
                              [const("tiny", [1e-9]), const("thirty", [30.0])])
    path = tmp_path / "onsets.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.savez(path.with_suffix(".npz"), x=np.random.default_rng(3).uniform(0.5, 1.0, (1, 16)).astype(np.float32))
    flags = ["--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "nan"]
    report = reduce(tmp_path, path, *check_command(*flags))
    kept = kept_names(tmp_path)
    assert report["final"]["failing"] and {"a_log", "b_log"} & set(kept) and len(kept) <= small_cause(8), kept
    assert report["cause"]["method"] == "onset" and not report["cause"]["assumed"], report["cause"]
    assert report["signature"]["non_finite"]
    md = (tmp_path / "out" / "bundle" / "report.md").read_text()
    assert "Onset of the NaN/Inf" in md.split("**Reproduce**")[0]
    repro = tmp_path / "out" / "bundle" / "repro.py"  # it reproduces only with NaN/Inf, as recorded
    assert "RECORDED_NON_FINITE = True" in repro.read_text() and "RECORDED_EXIT_CODE = 1" in repro.read_text()
    done = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "REPRODUCED" in done.stdout, done.stdout[-2000:]

    quiet = tmp_path / "quiet"  # the same check, its count of NaN/Inf filtered out of what it prints
    quiet.mkdir()
    script = quiet / "check.sh"
    script.write_text('out=$("$@"); code=$?; printf "%s\\n" "$out" | grep -v nonfinite_elements; exit $code\n')
    command = check_command(*flags)
    at = command.index("--check") + 1
    report = reduce(quiet, path, *command[:at], "bash", str(script), *command[at:])
    assert report["cause"]["method"] == "reference" and report["cause"]["holds"], report["cause"]
    assert {name[0] for name in kept_names(quiet)} == {"a", "b"}, kept_names(quiet)  # a part of each branch


def overflow_model(path: Path, padding: int = 24, harmless: bool = False) -> dict[str, str]:
    """x in 0.3..1 (1x16) through `padding` harmless Abs/Relu nodes, then two Muls by 1000: the second computes
    3e5..1e6, beyond fp16's 65504 (Inf there), and a Mul by 1e-3 brings it back in range in fp32 only (a Relu
last). With
    `harmless`, a Sigmoid reads the out-of-range value instead (1.0 from 1e6 and from Inf alike) and the
    failure is planted elsewhere: a Mul by 1.0003 (fp16: 1.0) then a Sub of x itself, which leaves 3e-4 * x
    in fp32 and 0 in fp16 (a cancellation, wrong in every element and in range everywhere)."""
    nodes, last = [], "x"
    for i in range(padding):
        op = "Abs" if i % 2 == 0 else "Relu"
        nodes.append(helper.make_node(op, [last], [f"p{i}"], name=f"pad_{i}_{op.lower()}"))
        last = f"p{i}"
    nodes += [helper.make_node("Mul", [last, "thousand"], ["k"], name="scale_up"),
              helper.make_node("Mul", ["k", "thousand"], ["big"], name="overflow")]
    if harmless:
        nodes += [helper.make_node("Sigmoid", ["big"], ["one"], name="saturate"),
                  helper.make_node("Mul", [last, "gain"], ["g"], name="gain"),
                  helper.make_node("Sub", ["g", last], ["tiny"], name="cancel"),
                  helper.make_node("Mul", ["tiny", "ten_k"], ["d"], name="magnify"),
                  helper.make_node("Add", ["one", "d"], ["y"], name="join")]
    else:
        nodes += [helper.make_node("Mul", ["big", "milli"], ["back"], name="scale_down"),
                  helper.make_node("Relu", ["back"], ["y"], name="last")]
    initializers = [const("thousand", [1000.0]), const("milli", [1e-3]), const("gain", [1.0003]),
                    const("ten_k", [1e4])]
    graph = helper.make_graph(nodes, "overflow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test_cause")
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    np.savez(path.with_suffix(".npz"), x=np.random.default_rng(7).uniform(0.3, 1.0, size=(1, 16)).astype(np.float32))
    return {"overflow": "overflow", "cause": "cancel"}


def fp16_command(fail_on: str = "tolerance") -> list[str]:
    """A --check command that rounds every tensor to fp16 without saying so: its precision is unknown here."""
    return check_command("--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", fail_on, "--atol", "0.01",
                         "--rtol", "0.01")


def test_an_overflow_shown_to_carry_a_commands_failure_is_reduced_to_its_onset_in_few_checks(tmp_path):
    """The reference leaves fp16's range, and the command's precision is unknown: one check tests the hint
    (the whole model with the out-of-range values fed from the reference passes), and the first node that
    computes one, fed values fp16 holds, is the repro. The checks do not grow with the model."""
    path = tmp_path / "overflow.onnx"
    names = overflow_model(path)
    report = reduce(tmp_path, path, *fp16_command())
    assert report["status"] == "reduced" and report["final"]["failing"]
    assert kept_names(tmp_path) == [names["overflow"]]
    cause = report["cause"]
    assert cause["method"] == "onset" and not cause["assumed"]
    overflow = cause["overflow"]
    assert overflow["carries"] and overflow["failing_elements_after"] == 0 < overflow["failing_elements_before"]
    # the whole model, the hint's test, the onset alone, the final re-check
    assert report["checks"] <= 4, report["checks"]
    md = (tmp_path / "out" / "bundle" / "report.md").read_text()
    assert "An fp16 overflow, shown" in md.split("**Reproduce**")[0]


def test_the_onset_of_an_overflow_whose_nan_shows_further_down_is_found_by_galloping(tmp_path):
    """The overflow's first node alone gives Inf, not the NaN a user's check looks for: that shows two nodes
    further down, at a subtraction that the reference feeds values in range (the Inf scaled back down), so no
    out-of-range value reaches it; 17 more nodes read them. Neither the onset nor the region fails, so the
    onset grows along what it reaches, 2, then 4 nodes, which hold the subtraction and its feed."""
    nodes, last = [], "x"
    for i in range(8):
        op = "Abs" if i % 2 == 0 else "Relu"
        nodes.append(helper.make_node(op, [last], [f"p{i}"], name=f"pad_{i}_{op.lower()}"))
        last = f"p{i}"
    nodes += [helper.make_node("Mul", [last, "thousand"], ["k"], name="scale_up"),
              helper.make_node("Mul", ["k", "thousand"], ["big"], name="overflow"),  # 3e5..1e6: Inf in fp16
              helper.make_node("Mul", ["big", "milli"], ["back"], name="scale_down"),  # in range; Inf in fp16
              helper.make_node("Sub", ["back", "back"], ["zero"], name="inf_minus_inf")]  # 0, and NaN in fp16
    last = "big"
    for i in range(16):  # more readers of out-of-range values, each Inf in fp16
        nodes.append(helper.make_node("Relu" if i % 2 else "Abs", [last], [f"s{i}"], name=f"spread_{i}"))
        last = f"s{i}"
    nodes += [helper.make_node("Mul", [last, "milli"], ["down"], name="scale_down_again"),
              helper.make_node("Add", ["down", "zero"], ["y"], name="join")]
    graph = helper.make_graph(nodes, "nan_below", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
                              [const("thousand", [1000.0]), const("milli", [1e-3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test_cause")
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "nan_below.onnx"
    onnx.save(model, str(path))
    np.savez(path.with_suffix(".npz"), x=np.random.default_rng(7).uniform(0.3, 1.0, size=(1, 16)).astype(np.float32))
    (tmp_path / "nan_only.py").write_text(NAN_ONLY_CHECK)
    report = reduce(tmp_path, path, "--fail-code", "1", "--check", sys.executable, str(tmp_path / "nan_only.py"),
                    "{model}", "{inputs}", str(ROOT))
    assert report["status"] == "reduced" and report["final"]["failing"]
    # the onset grown by 2, then 4 nodes: 4 are at most log2 of the model's 30, a small cause that ends the default
    # search once the bisection that found it is over, back at 3: the subtraction and its feed (it was the 4)
    kept = kept_names(tmp_path)
    assert kept == ["overflow", "scale_down", "inf_minus_inf"], kept
    assert report["stopped_by"] == "small" and not report["one_minimal"]
    assert report["cause"]["method"] == "onset" and report["cause"]["overflow"]["carries"]
    # the whole model, the hint's test, the onset, the onset with its readers and the region (all pass), the
    # onset with 1, 3 and 2 more nodes, the final re-check (14 checks when the generic strategies took over here)
    assert report["checks"] <= 9, report["checks"]


def test_an_overflow_hint_whose_onset_fails_nowhere_is_refuted_and_the_cause_proven(tmp_path):
    """As PP-OCR's server detector under O3: the reference leaves fp16's range, and with the values beyond it fed
    from the reference the whole model passes, but the target is no fp16 one: it fails on a chain of three nodes
    (here a stand-in target that miscomputes exactly that chain, scale_up -> overflow -> scale_down), of which the
    first computes no out-of-range value. Neither the onset, nor the out-of-range region, nor anything grown from
    the onset down fails alone: the hint is refuted, and the cause is sought and proven, not taken for an onset."""
    path = tmp_path / "overflow.onnx"
    overflow_model(path)
    (tmp_path / "fused_chain.py").write_text(FUSED_CHAIN_CHECK)
    report = reduce(tmp_path, path, "--fail-code", "1", "--check", sys.executable, str(tmp_path / "fused_chain.py"),
                    "{model}")
    assert report["status"] == "reduced" and report["final"]["failing"]
    kept = kept_names(tmp_path)  # the chain, and at most the Relu reading it: a small cause ends the search
    assert {"scale_up", "overflow", "scale_down"} <= set(kept) and len(kept) <= 4, kept
    cause = report["cause"]
    assert cause["method"] == "reference" and cause["holds"], cause
    assert cause["overflow"]["carries"] and cause["overflow"]["refuted"]
    md = (tmp_path / "out" / "bundle" / "report.md").read_text().split("**Reproduce**")[0]
    # the chain ends at the output: fed the reference, the model passes by construction, so that run shows nothing;
    # what does is one of its nodes, fed the reference alone: the whole model then passes, and so does the rest of
    # the chain fed exact inputs, where the chain fails (the search's own runs: no check more). Whether error from
    # above would make it fail too, a command cannot tell
    core = cause["core"]
    assert core["node_count"] == 1 and core["nodes"][0].split()[0] in {"scale_up", "overflow", "scale_down"}, core
    assert "Shown to be the cause, through 1 of its nodes" in md and "Cause shown in part" not in md
    assert "Not taken for an overflow" in md and "fp16 overflow, shown" not in md
    assert "is not tested this way" in md
    # the whole model, the hint's test, the onset and the region, the onset grown down (all pass), the end search
    # over the 30 nodes, the cause's check, the final re-check: 9
    assert report["checks"] <= 10, report["checks"]


def test_an_overflow_hint_is_refuted_at_once_where_the_check_counts_no_nan_and_the_region_passes(tmp_path):
    """As traceforge's int8 T5 encoder under O3 (fp32: its activations pass 65504): the same stand-in target, its
    check printing `nonfinite_elements=0` as scripts/check_candidate.py does. The whole model's outputs hold no
    NaN/Inf and the out-of-range region computed alone matches the reference: the target holds those values, so
    nothing overflows, and the hint is refuted there, without growing an onset down (which took whatever failed
    alone for the onset: 551 of the encoder's 985 nodes, not shown to carry the failure)."""
    path = tmp_path / "overflow.onnx"
    overflow_model(path)
    counted = FUSED_CHAIN_CHECK.replace("sys.exit(1 if", "failing = (").replace(' else 0)', ')') + (
        'print(f"failing_elements={16 if failing else 0}")\nprint("nonfinite_elements=0")\n'
        'sys.exit(1 if failing else 0)\n')
    for name, script in (("counted", counted), ("uncounted", FUSED_CHAIN_CHECK)):
        (tmp_path / f"{name}.py").write_text(script)
    reports = {name: reduce(tmp_path / name, path, "--fail-code", "1", "--check", sys.executable,
                            str(tmp_path / f"{name}.py"), "{model}") for name in ("counted", "uncounted")}
    for report in reports.values():
        assert report["cause"]["method"] == "reference" and report["cause"]["holds"], report["cause"]
        assert report["cause"]["overflow"]["carries"] and report["cause"]["overflow"]["refuted"]
    spent = {name: report["strategies"]["overflow"]["checks"] for name, report in reports.items()}
    assert spent["counted"] < spent["uncounted"], spent
    assert set(kept_names(tmp_path / "counted")) >= {"scale_up", "overflow", "scale_down"}


def test_a_harmless_overflow_is_only_a_hint_and_the_cause_is_proven(tmp_path):
    """Values beyond fp16's range that do no harm (a Sigmoid saturates on them): the hint's test refutes it,
    so the failure's cause is sought and proven as a tolerance failure's, not taken for the overflow's onset."""
    path = tmp_path / "harmless.onnx"
    names = overflow_model(path, harmless=True)
    report = reduce(tmp_path, path, *fp16_command())
    assert report["status"] == "reduced" and report["final"]["failing"]
    kept = kept_names(tmp_path)
    assert names["cause"] in kept and names["overflow"] not in kept, kept
    cause = report["cause"]
    assert cause["method"] == "reference" and cause["holds"]
    assert cause["overflow"]["carries"] is False
    md = (tmp_path / "out" / "bundle" / "report.md").read_text()
    assert "Not an overflow" in md.split("**Reproduce**")[0]


def test_a_nan_from_a_log_near_zero_is_looked_for_there_first(tmp_path):
    """No value leaves fp16's range, but a Log reads a sum of products that fp16 stores as 0 (swift-f0's filter bank
    of underflowing powers): the prefix search's first probe ends at that Log, and the next without it, as where an
    overflow starts. A Log of values well inside fp16's range is no hint. Through a command that counts its NaN/Inf
    the onset is found in at most 7 checks (bisecting the 44-node order instead: 10)."""
    from reducer.model import load_model

    nodes, last = [], "x"
    for i in range(20):  # a harmless stretch before, with a Log of values far from 0
        nodes.append(helper.make_node("Abs" if i != 10 else "Log", [last], [f"a{i}"], name=f"before_{i}"))
        last = f"a{i}"
    nodes += [helper.make_node("Mul", [last, "tiny"], ["t"], name="tiny"),
              helper.make_node("Mul", ["t", "tiny"], ["power"], name="power"),
              helper.make_node("Add", ["power", "eps"], ["sum"], name="sum"),
              helper.make_node("Log", ["sum"], ["log"], name="log")]
    last = "log"
    for i in range(20):
        nodes.append(helper.make_node("Neg" if i % 2 else "Abs", [last], [f"b{i}"], name=f"after_{i}"))
        last = f"b{i}"
    graph = helper.make_graph(nodes, "near_zero", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, 16])],
                              [const("tiny", [3e-5]), const("eps", [1e-8])])
    path = tmp_path / "near_zero.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.savez(path.with_suffix(".npz"), x=np.random.default_rng(5).uniform(1.5, 3.0, (1, 16)).astype(np.float32))
    options = fp16_check_options()
    options.check_command = [*options.check_command[:-len(FP16)], "--runner", "onnxruntime:cpu:fp16-storage",
                             "--fail-on", "nan"]
    _, reduction = in_process(path, tmp_path, options)
    try:
        assert reduction.start().failing and reduction.original.signature.non_finite
        index = {node.name: i for i, node in enumerate(load_model(path).nodes)}
        assert reduction.near_zero == (index["log"],)
    finally:
        reduction.close()
    report = reduce(tmp_path, path, *check_command("--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "nan"))
    assert report["final"]["failing"] and "log" in kept_names(tmp_path)
    assert report["cause"]["method"] == "onset" and report["checks"] <= 7, report["checks"]


def clamped_weight_model(path: Path, chain: int = 24) -> None:
    """As MEGnet under onnxruntime:cuda:fp16: a BatchNormalization whose variance, 2.29e6 in a weight, fp16 cannot
    hold (onnxconverter-common clamps it to 1e4, so its outputs come out 15 times too large, finite), then `chain`
    nodes that keep them finite (Muls by 0.5 and 2), then sqrt(2 - y^2): NaN only there, where y is 15 times too
    large. No node writes a value beyond fp16's range in the reference: the weight holds it."""
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "variance"], ["bn"],
                              name="clamped_bn")]
    last = "bn"
    for i in range(chain):
        nodes.append(helper.make_node("Mul", [last, "half" if i % 2 == 0 else "two"], [f"c{i}"], name=f"chain_{i}"))
        last = f"c{i}"
    nodes += [helper.make_node("Mul", [last, last], ["square"], name="square"),
              helper.make_node("Sub", ["two", "square"], ["rest"], name="rest"),
              helper.make_node("Sqrt", ["rest"], ["y"], name="root")]
    initializers = [const("scale", [1500.0] * 4), const("bias", [0.0] * 4), const("mean", [0.0] * 4),
                    const("variance", [2.29e6] * 4), const("half", [0.5]), const("two", [2.0])]
    save_x_to_y(path, nodes, "clamped", [1, 4, 8, 8], initializers)


def test_a_nan_from_a_weight_fp16_cannot_hold_is_reduced_to_the_node_that_reads_it(tmp_path):
    """MEGnet's regression on the GPU: the command's outputs hold NaN, so its repro is the onset, but no node
    writes a value beyond fp16's range; a weight holds it. Its reader counts as where values leave the range: the
    hint's test (fed the reference there, the whole model passes) shows it carries the NaN, and that node alone
    fails the same check with finite values, the NaN's onset. Before, the onset search kept the chain from it to
    the NaN (28 nodes)."""
    path = tmp_path / "clamped.onnx"
    clamped_weight_model(path)
    report = reduce(tmp_path, path, *check_command(*FP16))
    assert report["status"] == "reduced" and report["final"]["failing"]
    assert kept_names(tmp_path) == ["clamped_bn"]
    cause = report["cause"]
    assert cause["method"] == "onset" and cause["overflow"]["carries"], cause
    assert cause["overflow"]["failing_elements_after"] == 0 < cause["overflow"]["failing_elements_before"]
    assert any("`variance`" in note and "2.29e+06" in note for note in cause["range"]), cause["range"]
    assert cause["onset_finite"] and not report["signature"].get("non_finite")
    md = (tmp_path / "out" / "bundle" / "report.md").read_text().split("**Reproduce**")[0]
    assert "An fp16 overflow, shown" in md and "this repro's are finite" in md
    # the whole model, the hint's test, the onset alone, the final re-check
    assert report["checks"] <= 4, report["checks"]


def test_with_repeat_the_final_recheck_is_repeated_too(tmp_path):
    """--repeat N judges every check N times, the final re-check too (it ran the target once: a flaky failure's
    re-check was one roll of the dice); what it records is the runs' verdict."""
    path = tmp_path / "overflow.onnx"
    names = overflow_model(path)
    report = reduce(tmp_path, path, "--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "nan", "--repeat", "3",
                    "--min-fails", "2")
    assert report["status"] == "reduced" and kept_names(tmp_path) == [names["overflow"]]
    assert report["final"]["failing"] and report["final"]["runs"] == [2, 2], report["final"]


def test_an_onset_says_the_finite_part_of_a_mixed_failure_is_not_its_own(tmp_path):
    """One output overflows fp16 (Inf) and another drifts in range (a cancellation fp16 rounds to 0): the check
    counts both. The repro is the Inf's onset; report.json and report.md say how many failing elements are finite,
    which that onset does not explain (on an H200, LORE's heatmap Inf came with a drift in three other heads)."""
    path = tmp_path / "mixed.onnx"
    names = overflow_model(path)
    model = onnx.load(str(path))
    graph = model.graph
    graph.node.extend([helper.make_node("Mul", ["x", "gain"], ["g"], name="gain"),
                       helper.make_node("Sub", ["g", "x"], ["tiny"], name="cancel"),
                       helper.make_node("Mul", ["tiny", "ten_k"], ["drift"], name="magnify")])
    graph.output.append(helper.make_tensor_value_info("drift", TensorProto.FLOAT, [1, 16]))
    onnx.save(model, str(path))
    report = reduce(tmp_path, path, *fp16_command())
    assert report["status"] == "reduced" and kept_names(tmp_path) == [names["overflow"]]
    cause = report["cause"]
    assert cause["method"] == "onset"
    assert cause["nonfinite_elements"] == 16 and cause["finite_failing_elements"] == 16, cause
    md = (tmp_path / "out" / "bundle" / "report.md").read_text()
    assert "Only the NaN/Inf is this repro's" in md.split("**Reproduce**")[0]
