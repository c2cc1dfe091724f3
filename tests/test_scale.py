"""Large graphs: the layerwise probe and the reference capture run in pieces, with the results of a run in one
piece (the same failing tensors first, the same captured values). Real models (scripts/bench_scale.py's
chains and transformer blocks, an If reading an outer tensor), real ONNX Runtime; the CLI in a subprocess.
Speed targets live in BENCHMARKS.md ("## Scale"), not here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_bad_input import run_cli

from oracles import make_runner
from oracles import onnxruntime_runner as ort_runner
from oracles.builtin import BuiltinOracle
from oracles.checks import NanCheck
from reducer import driver
from reducer.activations import REFERENCE_RUNNER, ActivationStore, capture_model
from reducer.candidate import Candidate
from reducer.model import load_model
from strategies.localize import FirstDivergence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from bench_scale import KINDS, planted_index, write_case  # noqa: E402

FP16_STORAGE = ["--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "nan"]


def _reduce(tmp_path: Path, kind: str, nodes: int, *flags: str) -> dict:
    model, inputs = write_case(kind, nodes, tmp_path / "in")
    done = run_cli(tmp_path, "reduce", str(model), "-o", str(tmp_path / "out"), "--inputs", str(inputs),
                   *FP16_STORAGE, *flags)
    assert done.returncode == 0, done.stderr
    return json.loads((tmp_path / "out" / "report.json").read_text())


def _planted(kind: str, nodes: int) -> str:
    proto = KINDS[kind](nodes)
    return next(node.name for node in proto.graph.node if "planted" in node.name)


# -- the CLI, on models larger than a probe piece ------------------------------------------------------------
@pytest.mark.parametrize("kind, nodes, pieces", [("chain", 2500, 2), ("transformer", 2000, 2)])
def test_a_large_model_reduces_to_its_planted_overflow_with_the_probe_in_pieces(tmp_path, kind, nodes, pieces):
    """The probe stops at the piece where the first tensor fails (the planted Mul sits in the second)."""
    report = _reduce(tmp_path, kind, nodes)
    model = load_model(tmp_path / "in" / f"{kind}{nodes}.onnx")
    assert [model.nodes[i].name for i in report["kept_nodes"]] == [_planted(kind, nodes)]
    assert report["strategies"]["localize"]["probe_pieces"] == pieces
    assert report["checks"] <= 5  # the whole model, the probe, the planted node alone, the final re-check


def test_a_model_within_one_piece_is_probed_whole(tmp_path):
    report = _reduce(tmp_path, "chain", 300)
    assert report["nodes_after"] == 1
    assert report["strategies"]["localize"]["probe_pieces"] == 0  # one run, as before


def test_the_probe_in_pieces_is_one_check_and_cached(tmp_path):
    """A second run in the same folder asks the cache for the probe, as for any check: no piece runs again."""
    _reduce(tmp_path, "chain", 2500)
    again = _reduce(tmp_path, "chain", 2500)
    assert again["strategies"]["localize"]["probe_pieces"] == 0
    assert again["strategies"]["localize"]["cache_hits"] >= 1


# -- the probe in pieces against the probe in one run (the driver, a real oracle) -----------------------------
@pytest.fixture
def probing(tmp_path):
    """A Reduction on a generated model, with the real fp16-storage oracle; closed at the end."""
    made = []

    def build(kind: str, nodes: int) -> driver.Reduction:
        model_path, inputs = write_case(kind, nodes, tmp_path / f"{kind}{nodes}")
        model = load_model(model_path)
        reference = make_runner(REFERENCE_RUNNER)
        capture_path = tmp_path / f"{kind}{nodes}" / "capture.onnx"
        onnx.save(capture_model(model), str(capture_path))
        feeds = dict(np.load(inputs))
        store = ActivationStore.write(tmp_path / f"{kind}{nodes}" / "store", "key",
                                      list(reference.capture(capture_path, feeds)) + list(feeds.items()))
        oracle = BuiltinOracle("onnxruntime:cpu:fp16-storage", NanCheck(), 60, {})
        reduction = driver.Reduction(model, store, oracle, tmp_path / f"out-{len(made)}", strategies=[])
        reduction.work_dir.mkdir(parents=True)
        made.append(reduction)
        return reduction

    yield build
    for reduction in made:
        reduction.close()


def _earliest(reduction: driver.Reduction, verdict) -> list[int]:
    """The producers of the failing tensors, in topological order."""
    return sorted(reduction.model.producer[name] for name in verdict.signature.outputs)


@pytest.mark.parametrize("kind, nodes, piece", [("chain", 60, 7), ("chain", 60, 1), ("transformer", 49, 5),
                                                ("transformer", 49, 16)])
def test_a_probe_in_pieces_finds_the_first_failing_tensor_of_a_whole_probe(probing, monkeypatch, kind, nodes, piece):
    """Residual reads cross pieces (transformer); a piece of one node is a node alone."""
    reduction = probing(kind, nodes)
    everything = Candidate(frozenset(range(len(reduction.model))))
    whole = reduction.probe(everything)
    monkeypatch.setattr(driver, "PROBE_PIECE_NODES", piece)
    pieced = driver.Reduction(reduction.model, reduction.store, reduction.oracle, reduction.out_dir / "pieced",
                              strategies=[])
    pieced.work_dir.mkdir(parents=True)
    try:
        in_pieces = pieced.probe(everything)
        stats = pieced.counters.per_strategy["initial"]
    finally:
        pieced.cache.close()
    assert whole.failing and in_pieces.failing
    first = _earliest(reduction, whole)[0]
    assert reduction.model.nodes[first].name == _planted(kind, nodes)
    assert _earliest(pieced, in_pieces)[0] == first
    assert set(in_pieces.signature.outputs) <= set(whole.signature.outputs)
    assert stats.probe_pieces == first // piece + 1  # the pieces up to the one that fails, no further
    assert pieced.counters.checks == 1


def test_a_probe_in_pieces_of_a_candidate_with_a_cut_feeds_the_cut_from_the_reference(probing, monkeypatch):
    """Nodes removed before the overflow: their readers are fed the captured values, as in a whole probe."""
    reduction = probing("chain", 60)
    planted = planted_index(60)
    candidate = Candidate(frozenset(range(len(reduction.model))) - {3, 17, 18})
    whole = reduction.probe(candidate)
    monkeypatch.setattr(driver, "PROBE_PIECE_NODES", 6)
    in_pieces = reduction.probe(candidate.without({59}))  # another candidate: not the cached verdict
    assert _earliest(reduction, whole)[0] == _earliest(reduction, in_pieces)[0] == planted


def test_a_probe_in_pieces_of_a_passing_candidate_passes(probing, monkeypatch):
    reduction = probing("chain", 60)
    monkeypatch.setattr(driver, "PROBE_PIECE_NODES", 8)
    before = Candidate(frozenset(range(planted_index(60))))
    verdict = reduction.probe(before)
    assert not verdict.failing
    assert reduction.counters.per_strategy["initial"].probe_pieces == -(-planted_index(60) // 8)


@pytest.mark.parametrize("piece", [6, 1000])
def test_a_probe_of_a_candidate_fed_a_value_fp16_cannot_hold_is_not_run(probing, monkeypatch, piece):
    """The nodes below the overflow alone would be fed its 1e5: unfaithful, not checked, in pieces or whole."""
    reduction = probing("chain", 60)
    monkeypatch.setattr(driver, "PROBE_PIECE_NODES", piece)
    below = Candidate(frozenset(range(planted_index(60) + 1, 60)))
    assert reduction.probe(below) is None
    assert reduction.counters.checks == 0
    assert reduction.probe(below.keeping(range(planted_index(60), 60))) is not None  # the overflow kept: runs


def test_localize_keeps_the_planted_node_from_a_probe_in_pieces(probing, monkeypatch):
    """The strategy as the driver runs it: the probe's earliest failing tensor is the node tried alone."""
    reduction = probing("transformer", 49)
    monkeypatch.setattr(driver, "PROBE_PIECE_NODES", 10)
    reduction.strategies = [FirstDivergence(), FirstDivergence()]
    reduction.start()
    reduction.search()
    assert [reduction.model.nodes[i].name for i in reduction.best.ordered()] == [_planted("transformer", 49)]


# -- the reference capture in pieces ------------------------------------------------------------------------
def _if_model() -> onnx.ModelProto:
    """An If whose branches read `a`, computed three nodes earlier, from the outer scope."""
    then = helper.make_graph([helper.make_node("Mul", ["a", "two"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])])
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Abs", ["x"], ["b"], name="abs"),
        helper.make_node("ReduceSum", ["b"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"], name="greater"),
        helper.make_node("If", ["c"], ["f"], name="if", then_branch=then, else_branch=other),
        helper.make_node("Add", ["f", "a"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              [numpy_helper.from_array(np.float32(0), "zero"),
                               numpy_helper.from_array(np.float32(2), "two")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("case, piece", [("transformer", 5), ("transformer", 1), ("chain", 4), ("if", 1), ("if", 2)])
def test_a_capture_in_pieces_holds_the_values_of_a_capture_in_one_run(tmp_path, monkeypatch, case, piece):
    if case == "if":
        path = tmp_path / "if.onnx"
        onnx.save(_if_model(), str(path))
        feeds = {"x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)}
    else:
        path, inputs = write_case(case, 40, tmp_path)
        feeds = dict(np.load(inputs))
    model = load_model(path)
    onnx.save(capture_model(model), str(tmp_path / "capture.onnx"))
    reference = make_runner(REFERENCE_RUNNER)
    whole = dict(reference.capture(tmp_path / "capture.onnx", feeds))
    monkeypatch.setattr(ort_runner, "CAPTURE_PIECE_NODES", piece)
    in_pieces = dict(reference.capture(tmp_path / "capture.onnx", feeds))
    assert list(in_pieces) == [name for writes in model.node_writes for name in writes]
    assert whole.keys() == in_pieces.keys()
    for name, value in whole.items():
        np.testing.assert_array_equal(in_pieces[name], value, err_msg=name)


def test_a_capture_in_pieces_fetches_within_the_byte_budget_too(tmp_path, monkeypatch):
    """A budget below one tensor's size: each piece is fetched a tensor at a time, every tensor still there."""
    path, inputs = write_case("transformer", 64, tmp_path)
    model = load_model(path)
    onnx.save(capture_model(model), str(tmp_path / "capture.onnx"))
    monkeypatch.setattr(ort_runner, "CAPTURE_PIECE_NODES", 20)
    reference = make_runner(REFERENCE_RUNNER)
    values = list(reference.capture(tmp_path / "capture.onnx", dict(np.load(inputs)), budget_bytes=64))
    assert [name for name, _ in values] == [name for writes in model.node_writes for name in writes]


# -- the store's small tensors -------------------------------------------------------------------------------
@pytest.mark.parametrize("array", [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.array(7, dtype=np.int64),
    np.asfortranarray(np.arange(15, dtype=np.float64).reshape(3, 5)),  # numpy's own reader
    np.zeros((0, 3), dtype=np.float16),
    np.array([True, False]),
    np.ones((600, 600), dtype=np.float32),  # large: mapped
], ids=["float32", "int64-scalar", "fortran", "empty", "bool", "mapped"])
def test_a_stored_tensor_loads_as_written_and_read_only(tmp_path, array):
    store = ActivationStore.write(tmp_path, "key", [("t", array)])
    loaded = ActivationStore.open(tmp_path, "key").load("t")
    assert loaded.dtype == array.dtype and loaded.shape == array.shape
    np.testing.assert_array_equal(loaded, array)
    assert not loaded.flags.writeable
    assert store.load("t").shape == array.shape


# -- fp16-storage: the Identity a probe shows every tensor through --------------------------------------------
def test_fp16_storage_gives_an_identity_of_a_rounded_value_the_rounded_value(tmp_path):
    nodes = [helper.make_node("Mul", ["x", "k"], ["m"], name="mul"),
             helper.make_node("Identity", ["m"], ["shown"], name="show"),
             helper.make_node("Identity", ["x"], ["x_shown"], name="show_input"),
             helper.make_node("Add", ["m", "k"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("y", "shown",
                                                                                              "x_shown")],
                              [numpy_helper.from_array(np.array([3.0], np.float32), "k")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = np.array([0.1, 3e4, 1.0001], np.float32)
    out = make_runner("onnxruntime:cpu:fp16-storage").run(path, {"x": x})
    rounded = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(out["x_shown"], rounded)
    with np.errstate(over="ignore"):  # 9e4 becomes Inf in fp16, as it should
        expected = (rounded * 3).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(out["shown"], expected)
    assert np.isinf(out["shown"][1])  # 9e4: fp16 cannot hold it, shown as the target holds it


@pytest.mark.parametrize("large", [False, True])
def test_a_converted_session_leaves_no_temporary_folder(tmp_path, monkeypatch, large):
    """A converted model goes to ONNX Runtime as bytes; one past protobuf's limit (here: any, the limit lowered) as a
    file in a temporary folder, removed once the session is built. None is made otherwise: a worker killed for its
    time limit leaves behind what it made."""
    import tempfile

    import oracles.onnxruntime_runner as ort_runner

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    if large:
        monkeypatch.setattr(ort_runner, "SERIALIZED_LIMIT", 0)
    graph = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"], name="mul")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                              [numpy_helper.from_array(np.array([3.0], np.float32), "k")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    made = []
    real = tempfile.TemporaryDirectory
    monkeypatch.setattr(tempfile, "TemporaryDirectory", lambda *a, **k: made.append(1) or real(*a, **k))
    out = make_runner("onnxruntime:cpu:fp16").run(path, {"x": np.array([1.0, 2.0, 3.0], np.float32)})
    np.testing.assert_allclose(out["y"], [3.0, 6.0, 9.0])
    assert len(made) == (1 if large else 0)
    assert list((tmp_path / "temp").iterdir()) == []


# -- memory: one copy of the model's weights ------------------------------------------------------------------
HOLDS = """
import sys
from reducer.model import load_model

def rss_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024

before = rss_mb()
model = load_model(sys.argv[1])
print(rss_mb() - before)
"""


def test_a_loaded_model_holds_its_weights_once(tmp_path):
    """The types shape inference worked out are kept, not the inferred copy of the model (weights and all)."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((2048, 4096)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"), helper.make_node("Relu", ["m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4096])], [weight])
    path = tmp_path / "weights.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    weights_mb = path.stat().st_size / 2**20  # 32 MB
    done = subprocess.run([sys.executable, "-c", HOLDS, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) < 1.5 * weights_mb  # one copy, not two


def test_a_loaded_models_names_and_graph_hold_nothing_twice(tmp_path):
    """Each tensor's name is one string, however many nodes read it, and its type is keyed by that string too; the
    networkx graph of the nodes shares one attribute dict, which takes none (an empty dict per node and per edge
    held 20 MB at 100k nodes), while algorithms and copies of it work as on any DiGraph."""
    import networkx as nx

    path, _ = write_case("transformer", 200, tmp_path)
    model = load_model(path)
    written = {name: name for names in model.node_writes for name in names}
    reads = [name for names in model.node_reads for name in names if name in written]
    assert reads and all(name is written[name] for name in reads)
    assert all(name is written[name] for name in model.value_types if name in written)
    assert model.writers(model.node_writes[3][0]) == (3,) and model.writers("no such tensor") == ()
    dag = model.dag
    last = len(model) - 1
    assert nx.ancestors(dag, last) and nx.has_path(dag, 0, last)
    with pytest.raises(TypeError):
        dag.add_edge(0, last, weight=2.0)
    with pytest.raises(TypeError):
        dag.nodes[0]["label"] = "x"
    copy = dag.subgraph(range(10)).copy()  # a copy is a graph of its own, attributes and all
    copy.nodes[0]["label"] = "x"
    assert dag.nodes[1] == {} and copy.nodes[0] == {"label": "x"}


def test_the_scale_benchmark_rewrites_its_tables_and_keeps_the_notes_written_below_them(tmp_path):
    """bench_scale.py replaces only the tables it writes at the top of "## Scale" (up to its end line): the notes
    written by hand below them, and the other sections, stay as they are."""
    from bench_scale import END_OF_TABLES, write_section

    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## Before\n\nkept\n")
    write_section("## Scale\n\n| old table |\n", path)  # the first run adds the section, its end line after it
    text = path.read_text()
    assert "## Before\n\nkept" in text and "| old table |" in text and text.rstrip().endswith(END_OF_TABLES)
    path.write_text(text + "\nA note written by hand.\n\n## After\n\nalso kept\n")
    write_section("## Scale\n\n| new table |\n", path)
    text = path.read_text()
    assert "| old table |" not in text and "| new table |" in text
    assert text.count(END_OF_TABLES) == 1 and text.count("## Scale") == 1
    assert text.index("| new table |") < text.index(END_OF_TABLES) < text.index("A note written by hand.")
    assert "## Before\n\nkept" in text and "## After\n\nalso kept" in text
