"""Model handling: external data stays on disk until a kept node needs it, materialized candidates are
valid models that keep the original declarations, and inputs come from files or a seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from reducer.activations import ActivationStore, capture_model
from reducer.candidate import Candidate, materialize, save_model
from reducer.errors import BadInputsError
from reducer.inputs import load_inputs_file, prepare_inputs
from reducer.model import load_model
from reducer.options import parse_input_shapes

ROOT = Path(__file__).resolve().parent.parent


def chain_with_external_weights(folder: Path, layers: int = 4) -> Path:
    """x[N,16] -> (MatMul w_k -> Relu) * layers -> y; every weight in one external file."""
    nodes, initializers, previous = [], [], "x"
    rng = np.random.default_rng(0)
    for k in range(layers):
        initializers.append(numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), f"w{k}"))
        nodes.append(helper.make_node("MatMul", [previous, f"w{k}"], [f"m{k}"], name=f"matmul{k}"))
        nodes.append(helper.make_node("Relu", [f"m{k}"], [f"r{k}"], name=f"relu{k}"))
        previous = f"r{k}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, ["N", 16])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "chain.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    return path


def reference_store(model, feeds: dict, root: Path) -> ActivationStore:
    """The reference run, in process (the CLI does it in a worker), for unit tests of materialize."""
    import onnxruntime as ort

    proto = capture_model(model)
    options = ort.SessionOptions()
    options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(model.base_dir))
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, feeds)
    return ActivationStore.write(root, "test", [*feeds.items(), *zip(names, values, strict=True)])


def test_loading_reads_no_weights_and_a_candidate_reads_only_its_own(tmp_path, monkeypatch):
    path = chain_with_external_weights(tmp_path / "model")
    reads: list[str] = []
    original = external_data_helper.load_external_data_for_tensor

    def counting(tensor, base_dir):
        reads.append(tensor.name)
        return original(tensor, base_dir)

    monkeypatch.setattr(external_data_helper, "load_external_data_for_tensor", counting)
    model = load_model(path)
    assert reads == []  # validated and indexed without touching weights.bin's contents
    assert all(t.data_location == TensorProto.EXTERNAL for t in model.initializers.values())

    store = reference_store(model, {"x": np.ones((2, 16), np.float32)}, tmp_path / "store")
    keep = Candidate(frozenset({model.producer["m2"]}))  # matmul2 alone
    built = materialize(model, keep, store)
    assert reads == []  # a candidate keeps references to the weights: written, it reads what it keeps
    assert built.fed == ["r1"]
    out = tmp_path / "out" / "minimal.onnx"
    save_model(built.proto, out)
    assert reads == ["w2"]
    assert not (tmp_path / "out" / "weights.bin").exists()  # the kept weight is inline
    written = onnx.load(str(out))
    assert [t.name for t in written.graph.initializer] == ["w2"]


def test_a_candidate_joined_from_serialized_nodes_is_the_model_its_messages_make(tmp_path):
    """Candidates of a model without external data are joined from each node's and weight's bytes, serialized
    once, instead of copied message by message: the same model, byte for byte once parsed, that the message
    path makes (taken here by a model flagged as having external data), and onnx's checker and ONNX Runtime
    take it as it is written. A real model (PP-OCRv4 rec), whose cuts freeze small integer tensors too."""
    import dataclasses

    import onnxruntime as ort
    from corpus_files import CORPUS, corpus_model

    model = load_model(corpus_model("models/ch_PP-OCRv4_rec_infer.onnx"))
    assert not model.external_data
    feeds = dict(np.load(CORPUS / "inputs" / "ppocrv4_rec_textline_rawpixels.npz"))
    store = reference_store(model, feeds, tmp_path / "store")
    as_messages = dataclasses.replace(model, external_data=True)  # the same nodes and weights, the message path
    count = len(model)
    rng = np.random.default_rng(0)
    frozen = 0
    for nodes in (range(count), range(count // 3, 2 * count // 3), rng.choice(count, count // 2, replace=False),
                  [count - 1], range(count // 2)):
        candidate = Candidate(frozenset(int(i) for i in nodes))
        joined = materialize(model, candidate, store)
        expected = materialize(as_messages, candidate, store)
        assert joined.graph_fields and not expected.graph_fields
        assert (joined.fed, joined.frozen, joined.outputs) == (expected.fed, expected.frozen, expected.outputs)
        frozen += len(joined.frozen)
        data = joined.serialized()
        assert onnx.ModelProto.FromString(data).SerializeToString() == expected.proto.SerializeToString()
        path = tmp_path / "candidates" / f"{len(candidate)}.onnx"
        save_model(data, path, external_data=False)  # checked by onnx's checker as it is written
        if candidate.nodes == frozenset(range(count)):
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            outputs = session.run(None, {name: feeds[name] for name in joined.fed})
            for name, value in zip(joined.outputs, outputs, strict=True):
                np.testing.assert_allclose(value, store.load(name), rtol=1e-5, atol=1e-6)
        # the message, when asked for, is the same model too (parsed once from the joined bytes)
        assert joined.proto.SerializeToString() == expected.proto.SerializeToString()
        assert not joined.graph_fields
    assert frozen  # some cut froze a small integer tensor: its bytes sit among the weights, in order


def test_a_run_of_nodes_is_one_slice_and_reads_its_weights_in_one(tmp_path):
    """Nodes and weights are held serialized one after another (the weights in the order the nodes first read
    them, whatever order the file declares them in): a candidate that keeps a run of nodes is a slice of each,
    not one small byte string per node and per weight to join, and it is the model the message path makes."""
    import dataclasses

    steps = 30
    nodes = [helper.make_node("Mul", [f"t{i}", f"w{i}"], [f"t{i + 1}"], name=f"mul{i}") for i in range(steps)]
    weights = [numpy_helper.from_array(np.full(4, 1.0 + i / 100, np.float32), f"w{i}") for i in range(steps)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(f"t{steps}", TensorProto.FLOAT, [4])],
                              weights[::-1])  # declared last read first
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_model(path)
    middle = np.arange(10, 20)
    numbers = model.cut_by(middle).weights
    assert len(model.node_fields(middle)) == 1 and len(model.weight_fields(numbers)) == 1
    held = onnx.GraphProto.FromString(b"".join(model.weight_fields(numbers))).initializer
    assert [t.name for t in held] == [f"w{i}" for i in range(10, 20)]
    np.testing.assert_array_equal(numpy_helper.to_array(held[3]), np.full(4, 1.13, np.float32))
    scattered = np.array([2, 3, 7, 20, 21])
    assert len(model.node_fields(scattered)) == 3 == len(model.weight_fields(model.cut_by(scattered).weights))
    store = reference_store(model, {"t0": np.arange(4, dtype=np.float32)}, tmp_path / "store")
    for kept in (middle, scattered):
        candidate = Candidate(frozenset(kept.tolist()))
        joined = materialize(model, candidate, store)
        expected = materialize(dataclasses.replace(model, external_data=True), candidate, store)
        data = joined.serialized()
        assert onnx.ModelProto.FromString(data).SerializeToString() == expected.proto.SerializeToString()
        save_model(joined.model_bytes(), tmp_path / f"{len(kept)}.onnx", external_data=False)  # checked
        assert (tmp_path / f"{len(kept)}.onnx").read_bytes() == data


def test_a_piece_of_the_models_own_nodes_or_weights_is_named_by_where_it_lies(tmp_path):
    """Model.piece_place, what a candidate's content key names its nodes and weights by instead of reading them:
    a slice of the node block or of a weight block is (which, block, start, end), the same for the same slice cut
    again, other for another; bytes of any other making are None (the key reads them)."""
    steps = 12
    nodes = [helper.make_node("Mul", [f"t{i}", f"w{i}"], [f"t{i + 1}"], name=f"mul{i}") for i in range(steps)]
    weights = [numpy_helper.from_array(np.full(4, 1.0 + i / 100, np.float32), f"w{i}") for i in range(steps)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(f"t{steps}", TensorProto.FLOAT, [4])], weights)
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_model(path)
    (first,), (again,), (other,) = (model.node_fields(np.arange(a, b)) for a, b in ((2, 6), (2, 6), (3, 6)))
    place = model.piece_place(first)
    assert place[0] == "nodes" and place == model.piece_place(again) != model.piece_place(other)
    assert place[3] - place[2] == first.nbytes and bytes(first) == bytes(again)
    (weight,) = model.weight_fields(model.cut_by(np.arange(2, 6)).weights)
    assert model.piece_place(weight)[0] == "weights"
    assert model.piece_place(bytes(first)) is None and model.piece_place(memoryview(bytes(first))) is None


def _cut_by_name(model, kept: list[int]) -> tuple[list[str], list[str], set[str], list[str]]:
    """What Model.cut_by works out in arrays, walked name by name: weights read and other tensors read but not
    written (each once, in the order the model's tensors are numbered), tensors written, and those written that no
    kept node reads but another node does, or whose value (not only its shape: a Shape, a Size) no kept node reads
    but another node does."""
    produced = {name for i in kept for name in model.node_writes[i]}
    read = list(dict.fromkeys(name for i in kept for name in model.node_reads[i]))
    outside = sorted((name for name in read if name not in produced), key=model.tensors.number.__getitem__)
    read_anywhere = {name for reads in model.node_reads for name in reads}

    def values(nodes) -> set[str]:
        return {name for i in nodes if model.nodes[i].op_type not in ("Shape", "Size") for name in model.node_reads[i]}

    value_read, value_read_anywhere = values(kept), values(range(len(model)))
    unread = list(dict.fromkeys(name for i in kept for name in model.node_writes[i]
                                if (name not in set(read) and name in read_anywhere)
                                or (name not in value_read and name in value_read_anywhere)))
    return ([n for n in outside if n in model.initializers], [n for n in outside if n not in model.initializers],
            produced, unread)


@pytest.mark.parametrize("path", ["models/ch_PP-OCRv4_rec_infer.onnx", "models/silero_vad_16k_op15.onnx"])
def test_a_candidates_reads_and_writes_worked_out_in_arrays_are_those_a_walk_by_name_finds(path):
    """Model.cut_by (numbered tensors, numpy masks) against a plain walk over names, on real models (silero's Ifs
    read outer tensors from their bodies) and many node subsets: the same tensors in the same order."""
    from corpus_files import corpus_model

    model = load_model(corpus_model(path) if "PP-OCRv4" in path else ROOT / "corpus" / path)
    count = len(model)
    rng = np.random.default_rng(1)
    subsets = [range(count), range(count // 2), range(count // 3, count), [0], [count - 1]]
    subsets += [rng.choice(count, size, replace=False) for size in (2, count // 10, count // 2, count - 1)]
    for nodes in subsets:
        kept = sorted(int(i) for i in nodes)
        cut = model.cut_by(kept)
        weights, reads, produced, unread = _cut_by_name(model, kept)
        assert cut.weight_names() == weights
        assert cut.reads == reads
        assert cut.unread == unread
        every = {n for i in range(count) for n in (*model.node_writes[i], *model.node_reads[i])} | {"no such"}
        assert {n for n in every if cut.writes(n)} == produced


def test_weights_are_held_once_as_the_bytes_candidates_join(tmp_path):
    """A model without external data keeps its weights as serialized fields only, not also in its message: the
    message has none, the whole model with them is the file's model, and a weight asked for is the original."""
    from reducer.model import SerializedTensors

    path = ROOT / "corpus" / "models" / "silero_vad_16k_op15.onnx"
    original = onnx.load(str(path))
    model = load_model(path)
    assert isinstance(model.initializers, SerializedTensors)
    assert len(model.proto.graph.initializer) == 0 and len(model.initializers) == len(original.graph.initializer) > 10
    full = model.full_proto()
    assert [t.SerializeToString() for t in full.graph.initializer] == \
        [t.SerializeToString() for t in original.graph.initializer]
    for tensor in original.graph.initializer[:5]:
        np.testing.assert_array_equal(model.initializer_array(tensor.name), numpy_helper.to_array(tensor))
        assert model.initializers[tensor.name].SerializeToString() == tensor.SerializeToString()
    assert model.initializer_shapes == {t.name: tuple(t.dims) for t in original.graph.initializer}


def test_types_inferred_without_large_weights_values_are_those_inferred_with_them():
    """Shape inference gets large float weights by type and dims alone (the copies it makes of the whole model
    set the driver's peak): on a real model with large weights, every type it works out is the same."""
    from reducer.model import SHAPE_VALUES_MAX_ELEMENTS, _infer_types

    model = load_model(ROOT / "corpus" / "models" / "silero_vad_16k_op15.onnx")
    assert any(np.prod(model.initializers[n].dims) > SHAPE_VALUES_MAX_ELEMENTS for n in model.initializers)
    with_values = {k: v for k, v in _infer_types(model.full_proto()).items() if k not in model.initializers}
    assert model.value_types == with_values and len(with_values) > 100


def test_a_large_file_is_checked_and_typed_in_a_process_of_its_own(tmp_path, monkeypatch):
    """Over INSPECTED_APART_BYTES, onnx's checker and shape inference run in a process of their own (their C++
    copies of the whole model set the driver's peak): the types are those worked out in the driver, for a file
    in order and one whose nodes must be sorted first; the checker's rejection is still one line; a crash of
    theirs is a bad model, not the driver's end."""
    import reducer.model as model_module
    from reducer.errors import BadModelError

    silero = ROOT / "corpus" / "models" / "silero_vad_16k_op15.onnx"
    proto = onnx.load(str(silero))
    reversed_nodes = list(proto.graph.node)[::-1]
    del proto.graph.node[:]
    proto.graph.node.extend(reversed_nodes)
    unsorted = tmp_path / "unsorted.onnx"
    onnx.save(proto, str(unsorted))
    inside, unsorted_inside = load_model(silero).value_types, load_model(unsorted).value_types

    spawned = []
    run = model_module.subprocess.run
    monkeypatch.setattr(model_module.subprocess, "run", lambda *a, **k: spawned.append(a) or run(*a, **k))
    monkeypatch.setattr(model_module, "INSPECTED_APART_BYTES", 0)
    assert load_model(silero).value_types == inside and len(inside) > 100
    assert load_model(unsorted).value_types == unsorted_inside
    assert len(spawned) == 2

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    rejected = tmp_path / "relu_of_two.onnx"  # the checker's schema check: Relu takes one input
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x", "x"], ["y"])], "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), str(rejected))
    with pytest.raises(BadModelError, match="the ONNX checker rejects it") as info:
        load_model(rejected)
    assert "\n" not in str(info.value) and len(spawned) == 3

    monkeypatch.setattr(model_module, "_INSPECT_REQUEST", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(BadModelError, match=r"shape inference crashed on it \(SIGSEGV\)"):
        load_model(silero)


def test_the_reference_runs_model_written_in_pieces_is_the_message_capture_model_makes(tmp_path):
    """The reference run's model is written from the nodes' and weights' fields as they are (the whole model as
    one message, then serialized, set the driver's peak): byte for byte what capture_model's message holds."""
    from reducer.activations import write_capture_model

    for name in ("silero_vad_16k_op15.onnx", "ch_PP-OCRv4_rec_infer.onnx"):
        model = load_model(ROOT / "corpus" / "models" / name)
        write_capture_model(model, tmp_path / "capture.onnx")
        written, made = onnx.load(str(tmp_path / "capture.onnx")), capture_model(model)
        assert written.SerializeToString() == made.SerializeToString()
        assert len(written.graph.output) > len(model.graph_outputs) + 100


def test_only_candidates_made_of_the_originals_nodes_skip_onnx_checker(tmp_path, monkeypatch):
    """onnx's checker is spared where a candidate is the original's nodes and weights as they are (valid by
    construction: the original passed it at load); a candidate with an edit, a probe's added outputs and every
    file handed to a command are still checked."""
    from reducer.candidate import WeightFill

    model = load_model(ROOT / "corpus" / "models" / "silero_vad_16k_op15.onnx")
    feeds = dict(np.load(ROOT / "corpus" / "inputs" / "silero_vad_int16pcm.npz"))
    store = reference_store(model, feeds, tmp_path / "store")
    checked: list[str] = []
    original = onnx.checker.check_model
    monkeypatch.setattr(onnx.checker, "check_model", lambda m, *a, **k: (checked.append(str(m)), original(m, *a, **k)))
    half = Candidate(frozenset(range(len(model) // 2)))
    weight = next(n for i in half.nodes for n in model.node_reads[i] if n in model.initializers)
    cases = {"as the original": (materialize(model, half, store), False),
             "an edit": (materialize(model, half.with_edit(WeightFill(weight, 0.0)), store), True),
             "a probe": (materialize(model, half, store, mark_all=True), True)}
    for name, (built, expected) in cases.items():
        assert built.as_original is not expected, name
        checked.clear()
        save_model(built.serialized(), tmp_path / "c.onnx", external_data=False, checked=not built.as_original)
        assert bool(checked) is expected, name
        onnx.checker.check_model(str(tmp_path / "c.onnx"))  # valid all the same
    checked.clear()
    save_model(cases["as the original"][0].serialized(), tmp_path / "c.onnx", external_data=False)  # the default
    assert checked


def test_materialized_candidates_keep_declarations_and_type_every_output(tmp_path):
    path = chain_with_external_weights(tmp_path / "model")
    model = load_model(path)
    feeds = {"x": np.linspace(-1, 1, 48, dtype=np.float32).reshape(3, 16)}
    store = reference_store(model, feeds, tmp_path / "store")
    keep = Candidate(frozenset({model.producer["m0"], model.producer["r0"], model.producer["m2"]}))
    built = materialize(model, keep, store)
    graph = built.proto.graph
    inputs = {i.name: i for i in graph.input}
    # the original input keeps its dynamic batch dimension; a cut tensor gets its captured shape
    assert inputs["x"].type.tensor_type.shape.dim[0].dim_param == "N"
    assert [d.dim_value for d in inputs["r1"].type.tensor_type.shape.dim] == [3, 16]
    # outputs: what no kept node reads (r0 and m2), every one typed
    assert {o.name for o in graph.output} == {"r0", "m2"}
    assert all(o.type.tensor_type.elem_type == TensorProto.FLOAT for o in graph.output)
    written = tmp_path / "candidate" / "candidate.onnx"  # the weights it keeps, read from the model's folder
    save_model(built.proto, written)
    onnx.checker.check_model(str(written), full_check=True)

    import onnxruntime as ort

    session = ort.InferenceSession(str(written), providers=["CPUExecutionProvider"])
    values = dict(zip([o.name for o in session.get_outputs()],
                      session.run(None, {name: np.asarray(store.load(name)) for name in built.fed}), strict=True))
    np.testing.assert_allclose(values["m2"], store.load("m2"), rtol=1e-5, atol=1e-5)


def test_a_tensor_no_node_reads_is_no_output_of_the_whole_model_or_a_candidate(tmp_path):
    """The whole model's check sees the graph outputs alone, as the user's model shows them: a Split's second half
    (an LSTM's unused final state, as in ddddocr) that nothing reads is no output, where a cut tensor is one."""
    nodes = [helper.make_node("Split", ["x"], ["front", "back"], name="split", axis=0, num_outputs=2),
             helper.make_node("Relu", ["front"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["y"], name="neg")]
    graph = helper.make_graph(nodes, "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "split.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    model = load_model(path)
    store = reference_store(model, {"x": np.array([1, -2, 3, -4], np.float32)}, tmp_path / "store")
    whole = materialize(model, Candidate(model.original_nodes), store)
    assert [o.name for o in whole.proto.graph.output] == ["y"]
    front = materialize(model, Candidate(frozenset({model.producer["front"]})), store)
    assert [o.name for o in front.proto.graph.output] == ["front"]  # read by the relu it cuts; "back" by nothing


def test_control_flow_bodies_reading_outer_tensors_count_as_consumers(tmp_path):
    then_branch = helper.make_graph([helper.make_node("Neg", ["a"], ["t"], name="neg")], "then", [],
                                    [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_branch = helper.make_graph([helper.make_node("Abs", ["a"], ["e"], name="abs")], "else", [],
                                    [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"], name="greater"),
        helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch),
    ]
    graph = helper.make_graph(nodes, "branchy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    path = tmp_path / "branchy.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_model(path)
    relu, branch = model.producer["a"], model.producer["y"]
    assert "a" in model.node_reads[branch]
    assert model.dag.has_edge(relu, branch)
    store = reference_store(model, {"x": np.array([1, -2], np.float32)}, tmp_path / "store")
    built = materialize(model, Candidate(frozenset({relu, branch})), store)
    # 'a' is read inside the branches: it is no dangling output, and the If still finds it
    assert [o.name for o in built.proto.graph.output] == ["y"]
    assert "c" in built.frozen  # a small bool is frozen to a constant, as engines need conditions at build time
    onnx.checker.check_model(built.proto)


def test_unsorted_graph_is_sorted_and_names_are_kept(tmp_path):
    nodes = [helper.make_node("Exp", ["a"], ["y"], name="second"), helper.make_node("Relu", ["x"], ["a"], name="first")]
    graph = helper.make_graph(nodes, "unsorted", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "unsorted.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_model(path)
    assert [n.name for n in model.nodes] == ["first", "second"]


def test_inputs_from_npz_polygraphy_json_and_seed(tmp_path):
    from polygraphy.json import save_json

    path = chain_with_external_weights(tmp_path / "model")
    model = load_model(path)
    value = np.arange(32, dtype=np.float32).reshape(2, 16)
    np.savez(tmp_path / "in.npz", x=value)
    save_json([{"x": value}], str(tmp_path / "in.json"))
    for file in ("in.npz", "in.json"):
        feeds = prepare_inputs(model, load_inputs_file(tmp_path / file), {}, 0, (0, 1))
        np.testing.assert_array_equal(feeds["x"], value)
    generated = prepare_inputs(model, None, parse_input_shapes(["x:[5,16]"]), seed=3, input_range=(-2, 2))
    again = prepare_inputs(model, None, parse_input_shapes(["x:[5,16]"]), seed=3, input_range=(-2, 2))
    assert generated["x"].shape == (5, 16) and generated["x"].dtype == np.float32
    assert generated["x"].min() >= -2 and generated["x"].max() <= 2
    np.testing.assert_array_equal(generated["x"], again["x"])
    with pytest.raises(BadInputsError, match="declares"):
        prepare_inputs(model, None, parse_input_shapes(["x:[5,15]"]), 0, (0, 1))
    with pytest.raises(BadInputsError, match="GiB"):  # refused before anything is allocated
        prepare_inputs(model, None, parse_input_shapes(["x:[100000000000,16]"]), 0, (0, 1))


def test_dynamic_model_reduces_with_input_shapes(tmp_path):
    """A dynamic batch stays dynamic in the minimal model; --input-shapes picks the fed shape."""
    path = chain_with_external_weights(tmp_path / "model")
    out = tmp_path / "out"
    check = [sys.executable, "-c", "import onnx,sys; m=onnx.load(sys.argv[1]); "
             "sys.exit(1 if any(n.name == 'matmul2' for n in m.graph.node) else 0)", "{model}"]
    done = subprocess.run([sys.executable, "-m", "reducer.cli", "reduce", str(path), "--input-shapes", "x:[3,16]",
                           "--seed", "1", "-o", str(out), "--", *check], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["nodes_after"] == 1
    minimal = onnx.load(str(out / "minimal.onnx"))
    assert [n.name for n in minimal.graph.node] == ["matmul2"]
    with np.load(out / "minimal_inputs.npz") as fed:
        assert fed["r1"].shape == (3, 16)


def test_reference_capture_in_bounded_groups_yields_every_tensor_exactly(tmp_path):
    """With a tiny memory budget the capture shrinks its groups to one tensor a run, losing nothing."""
    from oracles.onnxruntime_runner import OnnxRuntimeRunner

    path = chain_with_external_weights(tmp_path / "model")
    model = load_model(path)
    proto_path = tmp_path / "capture.onnx"
    onnx.save(capture_model(model), str(proto_path))
    runner = OnnxRuntimeRunner("onnxruntime:cpu:fp32:O0")
    feeds = {"x": np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)}
    whole = runner.run(proto_path, feeds, model.base_dir)
    produced = dict(runner.capture(proto_path, feeds, model.base_dir, budget_bytes=1))
    assert produced.keys() == whole.keys() and len(produced) == 8
    for name, value in whole.items():
        np.testing.assert_array_equal(produced[name], value)


def test_fp16_conversion_of_a_layerwise_probe_matches_the_converters_own(tmp_path):
    """The fp16 runner converts with onnxconverter-common but casts the outputs back itself (the converter's
    own casts are quadratic in the outputs): a layerwise probe of a real model must compute bit for bit what
    the converter's own keep_io_types model computes."""
    import onnxruntime as ort
    from onnxconverter_common import float16

    from oracles.onnxruntime_runner import _casts_to_float, _to_fp16
    from reducer.driver import Progress
    from reducer.options import InputOptions
    from reducer.session import prepare

    inputs = InputOptions(inputs=str(ROOT / "corpus/inputs/silero_vad_int16pcm.npz"))
    model, store = prepare(str(ROOT / "corpus/models/silero_vad_16k_op15.onnx"), inputs, tmp_path, Progress())
    built = materialize(model, Candidate(model.original_nodes), store, mark_all=True)
    feeds = {name: np.load(store.path(name)) for name in built.fed}
    probe = built.proto
    theirs = onnx.ModelProto()
    theirs.CopyFrom(probe)
    theirs = float16.convert_float_to_float16(theirs, keep_io_types=True, node_block_list=_casts_to_float(theirs.graph))
    ours = _to_fp16(probe)

    def run(converted: onnx.ModelProto) -> dict:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(converted.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        wanted = {i.name for i in session.get_inputs()}
        return dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in wanted}), strict=True))

    expected, got = run(theirs), run(ours)
    assert len(expected) > 100 and expected.keys() == got.keys()
    for name, value in expected.items():
        assert got[name].dtype == value.dtype and np.array_equal(got[name], value, equal_nan=True), name


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose", "Gemm", "MatMul"])
def test_fewer_channels_cuts_weight_and_bias_and_the_model_still_runs(tmp_path, op):
    """A node keeping 2 of its 6 output channels: its weight (and bias) sliced on the right axis, the model
    valid and runnable, its output 2 channels wide and equal to the full model's first 2 channels."""
    import onnxruntime as ort

    from reducer.candidate import FewerChannels

    rng = np.random.default_rng(0)
    if op in ("Conv", "ConvTranspose"):
        x_shape, w_shape = [1, 3, 5, 5], ([6, 3, 3, 3] if op == "Conv" else [3, 6, 3, 3])
        inputs, y_shape = ["x", "w", "b"], ([1, 6, 3, 3] if op == "Conv" else [1, 6, 7, 7])
    elif op == "Gemm":
        x_shape, w_shape, inputs, y_shape = [2, 4], [6, 4], ["x", "w", "b"], [2, 6]
    else:
        x_shape, w_shape, inputs, y_shape = [2, 4], [4, 6], ["x", "w"], [2, 6]
    attributes = {"transB": 1} if op == "Gemm" else {}
    node = helper.make_node(op, inputs, ["y"], name="n", **attributes)
    weights = [numpy_helper.from_array(rng.standard_normal(w_shape).astype(np.float32), "w")]
    if "b" in inputs:
        weights.append(numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b"))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], weights)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    from reducer.driver import Progress
    from reducer.options import InputOptions
    from reducer.session import prepare

    np.savez(tmp_path / "x.npz", **feeds)
    model, store = prepare(str(path), InputOptions(inputs=str(tmp_path / "x.npz")), tmp_path / "out", Progress())
    whole = materialize(model, Candidate(frozenset({0})), store).proto
    cut = materialize(model, Candidate(frozenset({0}), (FewerChannels(0, 2),)), store).proto
    onnx.checker.check_model(cut, full_check=True)
    assert sum(t.ByteSize() for t in cut.graph.initializer) < sum(t.ByteSize() for t in whole.graph.initializer)

    def run(proto):
        return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]

    full, part = run(whole), run(cut)
    assert part.shape[1 if op in ("Conv", "ConvTranspose") else -1] == 2
    expected = full[:, :2] if op in ("Conv", "ConvTranspose") else full[..., :2]
    np.testing.assert_allclose(part, expected, rtol=1e-5, atol=1e-5)


def test_the_nodes_a_message_names_are_whole_names_not_op_types_or_numbers(tmp_path):
    """An engine's error names the node it failed on (ONNX Runtime's "Name:'...'" and "in node (...)", TensorRT's
    fused region "[first...last]"); a node inside an If's branch stands for the If. Not a name: a part of a longer
    token (a tensor "/a/Conv_output_0" is not the node "/a/Conv"), an op type ("running Resize node"), a number."""
    then = helper.make_graph([helper.make_node("Neg", ["r"], ["n"], name="/body/Neg"),
                              helper.make_node("Tanh", ["n"], ["b"], name="Tanh")], "then", [],
                             [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="/a/Conv"),
             helper.make_node("Resize", ["r", "", "scales"], ["s"], name="Resize"),
             helper.make_node("Abs", ["s"], ["c"], name="7"),
             helper.make_node("ReduceSum", ["c"], ["flag"], name="/b/Sum", keepdims=0),
             helper.make_node("Cast", ["flag"], ["cond"], name="/b/Cast", to=TensorProto.BOOL),
             helper.make_node("If", ["cond"], ["y"], name="/b/If", then_branch=then, else_branch=then)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              initializer=[numpy_helper.from_array(np.ones(1, np.float32), "scales")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_model(path)
    index = {node.name: i for i, node in enumerate(model.nodes)}
    assert model.named_in("running Relu node. Name:'/a/Conv' Status Message: bad") == (index["/a/Conv"],)
    assert model.named_in("Type Error: ... in node (/b/Cast).") == (index["/b/Cast"],)
    assert model.named_in("{ForeignNode[/b/Sum.../b/Cast]}: could not find any implementation") == (
        index["/b/Sum"], index["/b/Cast"])
    assert model.named_in("of node (/body/Neg) does not match") == (index["/b/If"],)
    assert model.named_in("Error Code 4: Internal Error (/b/Sum: reduction axes out of range)") == (index["/b/Sum"],)
    assert model.named_in("output '/a/Conv_output_0' while running Resize node 7 of 9, line 7") == ()
    assert model.named_in("built /a/Conv, built /b/Sum, built /b/Cast; failed") == ()  # a log, not a pointer
    assert model.named_in("while running Tanh node") == ()  # an op type only a body holds is no name either


def test_a_message_naming_no_node_points_at_the_one_tensor_it_names(tmp_path):
    """Where a message names no node, the tensor it names stands for the nodes that write and read it: by its own
    name, or as the stem of a node a converter added for it (onnxconverter-common names the Casts it adds after the
    tensor they cast: "two nodes with same node name (audio_cast_to_)"). Two tensors, or one read everywhere, point
    nowhere; so does a stem too short to be a name rather than a word's start."""
    nodes = [helper.make_node("Shape", ["audio"], ["n"]),
             helper.make_node("Pad", ["audio", "pads"], ["padded"]),
             helper.make_node("Relu", ["padded"], ["r"]),
             *(helper.make_node("Neg", ["r"], [f"n{i}"]) for i in range(5))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("n", TensorProto.INT64, [2]),
                               *(helper.make_tensor_value_info(f"n{i}", TensorProto.FLOAT, [1, 8]) for i in range(5))],
                              initializer=[numpy_helper.from_array(np.zeros(4, np.int64), "pads")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = load_model(path)
    op = {node.op_type: i for i, node in enumerate(model.nodes)}
    assert model.named_in("INVALID_GRAPH: two nodes with same node name (audio_cast_to_).") == (op["Shape"], op["Pad"])
    assert model.named_in("Type Error: Type (tensor(float16)) of output arg (padded) of node () does not match") == (
        op["Pad"], op["Relu"])
    assert model.named_in("a mismatch between padded and audio") == ()  # two tensors
    assert model.named_in("r is read everywhere: r_cast") == ()  # six readers; and "r" is too short a stem
    assert model.named_in("nothing here_cast_to_") == ()


def test_each_float_weights_largest_finite_magnitude_is_read_a_slice_at_a_time_wherever_it_lives(tmp_path,
                                                                                               monkeypatch):
    """A weight beyond fp16's range makes its reader where values leave it (Reduction.beyond_target): its largest
    finite magnitude is read in slices, from the proto (raw bytes or float_data) or from its external file,
    never whole; NaN and Inf are no magnitude; an fp16 weight holds only what fp16 holds and is not read."""
    import reducer.model as model_module
    from reducer.model import load_model

    monkeypatch.setattr(model_module, "MAX_ABS_SLICE", 3)
    raw = numpy_helper.from_array(np.array([1.0, -2.29e6, np.inf, 5.0, np.nan, 7.0, -8.0], np.float32), "raw")
    listed = helper.make_tensor("listed", TensorProto.FLOAT, [4], [0.5, -3.0, 2.0, 1.0])  # float_data
    big = numpy_helper.from_array(np.linspace(-7e4, 9e4, 4097, dtype=np.float32), "big")  # stored apart
    half = numpy_helper.from_array(np.array([6e4], np.float16), "half")
    nodes = [helper.make_node("ReduceMax", ["raw"], ["a"], keepdims=1), helper.make_node("ReduceMax", ["listed"], ["b"],
             keepdims=1), helper.make_node("Add", ["x", "a"], ["ab"]), helper.make_node("Add", ["ab", "b"], ["abc"]),
             helper.make_node("Mul", ["abc", "big"], ["c"]), helper.make_node("Cast", ["half"], ["h"], to=1),
             helper.make_node("Add", ["c", "h"], ["y"])]
    shape = [1]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4097])],
                              [raw, listed, big, half])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    external_data_helper.convert_model_to_external_data(model, all_tensors_to_one_file=True, location="w.bin",
                                                        size_threshold=1024)
    onnx.save(model, str(tmp_path / "m.onnx"))
    loaded = load_model(tmp_path / "m.onnx")
    assert external_data_helper.uses_external_data(loaded.initializers["big"])
    found = loaded.float_weight_max_abs
    assert set(found) == {"raw", "listed", "big"}
    assert found["raw"] == pytest.approx(2.29e6) and found["listed"] == 3.0 and found["big"] == pytest.approx(9e4)


def test_a_weight_whose_external_file_is_too_short_for_its_shape_is_refused_in_one_line(tmp_path):
    """The external data's own length may be left out: a file shorter than the weight's shape says is bad input,
    refused with a BadModelError (one line, exit 2), not read past its end."""
    from reducer.errors import BadModelError
    from reducer.model import load_model

    weight = numpy_helper.from_array(np.ones(4096, np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    external_data_helper.convert_model_to_external_data(model, location="w.bin", size_threshold=0)
    onnx.save(model, str(tmp_path / "m.onnx"))
    loaded = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    entries = loaded.graph.initializer[0].external_data
    kept = [(e.key, e.value) for e in entries if e.key != "length"]
    del entries[:]
    for key, value in kept:
        entries.add(key=key, value=value)
    onnx.save(loaded, str(tmp_path / "m.onnx"))
    with open(tmp_path / "w.bin", "r+b") as data:
        data.truncate(1000)
    model = load_model(tmp_path / "m.onnx")
    with pytest.raises(BadModelError, match="holds 250 of its 4096 values"):
        assert model.float_weight_max_abs is None


def test_a_model_holding_fp16_already_is_checked_in_fp16(tmp_path):
    """A model that casts to fp16 itself, or holds an fp16 weight (mk8dx-table-reader's digit reader has seven), is
    refused by onnxconverter-common ("already converted to float16") unless told otherwise: every check of it under
    onnxruntime:cpu:fp16 was that error. What is fp32 in it is converted; the check then judges the drift (here a
    cancellation fp16 rounds to 0)."""
    half = numpy_helper.from_array(np.array([0.5], np.float16), "half")
    nodes = [helper.make_node("Cast", ["half"], ["half32"], name="widen", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["x"], ["x16"], name="narrow", to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["x16"], ["x32"], name="back", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x32", "gain"], ["g"], name="gain"),
             helper.make_node("Sub", ["g", "x32"], ["tiny"], name="cancel"),
             helper.make_node("Mul", ["tiny", "half32"], ["y"], name="scale")]
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
                              [half, numpy_helper.from_array(np.array([1.0003], np.float32), "gain")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "mixed.onnx"
    onnx.save(model, str(path))
    np.savez(tmp_path / "mixed.npz", x=np.linspace(50, 100, 16, dtype=np.float32).reshape(1, 16))
    done = subprocess.run([sys.executable, "-m", "reducer", "check", str(path), "--inputs", str(tmp_path / "mixed.npz"),
                           "--runner", "onnxruntime:cpu:fp16", "--fail-on", "tolerance", "--atol", "1e-3",
                           "--rtol", "1e-3"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    out = done.stdout + done.stderr
    assert "FAIL: tolerance in y" in out and "already converted" not in out, out
