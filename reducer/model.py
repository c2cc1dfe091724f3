"""The original model: its graph as plain indexed data, weights left on disk until a candidate needs them."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import networkx as nx
import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

from reducer.errors import BadModelError


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The bodies of a control-flow node (If branches, Loop/Scan bodies)."""
    found = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            found.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            found.extend(attr.graphs)
    return found


def outer_reads(node: onnx.NodeProto) -> list[str]:
    """Tensors a node's bodies read from the enclosing scope: consumers too, though not listed as inputs."""
    reads: list[str] = []
    for body in subgraphs(node):
        defined = {i.name for i in body.input} | {t.name for t in body.initializer}
        for inner in body.node:
            defined.update(o for o in inner.output if o)
        for inner in body.node:
            for name in [*inner.input, *outer_reads(inner)]:
                if name and name not in defined and name not in reads:
                    reads.append(name)
    return reads


def _all_tensors(graph: onnx.GraphProto):
    """Every TensorProto in a graph and its bodies, where external data may hide."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == onnx.AttributeProto.TENSORS:
                yield from attr.tensors
        for body in subgraphs(node):
            yield from _all_tensors(body)


def _check_external_data(proto: onnx.ModelProto, base_dir: Path) -> list[Path]:
    """Refuse external data that is missing or lives outside the model's folder; return the files used."""
    root = base_dir.resolve()
    files: list[Path] = []
    for tensor in _all_tensors(proto.graph):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = external_data_helper.ExternalDataInfo(tensor)
        location = info.location or ""
        target = (root / location).resolve()
        if not location or os.path.isabs(location) or not target.is_relative_to(root):
            raise BadModelError(
                f"tensor '{tensor.name}' keeps its data at '{location}', outside the model's folder: refused"
            )
        if not target.is_file():
            raise BadModelError(f"tensor '{tensor.name}': external data file '{location}' is missing")
        end = (info.offset or 0) + (info.length or 0)
        if end > target.stat().st_size:
            raise BadModelError(
                f"tensor '{tensor.name}': external data file '{location}' is shorter than its offset+length"
            )
        if target not in files:
            files.append(target)
    return files


@dataclass
class Model:
    """A loaded model: top-level nodes in topological order, with who produces and reads each tensor."""

    path: Path
    proto: onnx.ModelProto  # external data not loaded
    nodes: list[onnx.NodeProto]  # topologically sorted
    node_reads: list[tuple[str, ...]]  # explicit inputs plus control-flow bodies' outer reads
    node_writes: list[tuple[str, ...]]
    producer: dict[str, int]
    initializers: dict[str, onnx.TensorProto]
    graph_inputs: dict[str, onnx.ValueInfoProto]  # inputs that are not initializers
    graph_outputs: list[str]
    fingerprint: str
    value_types: dict[str, onnx.TypeProto] = field(default_factory=dict)

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def dag(self) -> nx.DiGraph:
        """Node indices, an edge where one node's output is read by another."""
        graph = nx.DiGraph()
        graph.add_nodes_from(range(len(self.nodes)))
        for index, reads in enumerate(self.node_reads):
            for name in reads:
                if name in self.producer:
                    graph.add_edge(self.producer[name], index)
        return graph

    def node_label(self, index: int) -> str:
        node = self.nodes[index]
        return f"{node.name or '#' + str(index)} ({node.op_type})"

    def initializer_inline(self, name: str) -> onnx.TensorProto:
        """A copy of an initializer with its data in the proto (read from disk if it lives there)."""
        tensor = onnx.TensorProto()
        tensor.CopyFrom(self.initializers[name])
        if external_data_helper.uses_external_data(tensor):
            external_data_helper.load_external_data_for_tensor(tensor, str(self.base_dir))
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
        return tensor

    @cached_property
    def initializer_shapes(self) -> dict[str, tuple[int, ...]]:
        """From the declarations alone: no weights are read."""
        return {name: tuple(tensor.dims) for name, tensor in self.initializers.items()}

    def initializer_array(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self.initializer_inline(name))


def load_model(path: str | os.PathLike) -> Model:
    """Load and validate a model; every problem is a BadModelError with one clear line."""
    path = Path(path)
    if not path.exists():
        raise BadModelError(f"{path}: no such file")
    if not path.is_file():
        raise BadModelError(f"{path}: not a file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several types for truncated or foreign files
        raise BadModelError(f"{path}: not a valid ONNX model (cannot parse it: {_first_line(exc)})") from None
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.graph.node:
        raise BadModelError(f"{path}: not a valid ONNX model (no graph with nodes in it)")
    external_files = _check_external_data(proto, path.parent)

    graph = proto.graph
    initializers = {t.name: t for t in graph.initializer}
    graph_inputs = {i.name: i for i in graph.input if i.name not in initializers}
    producer: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        for name in node.output:
            if not name:
                continue
            if name in producer or name in graph_inputs or name in initializers:
                raise BadModelError(f"{path}: tensor '{name}' is defined twice (node '{node.name}')")
            producer[name] = index
    reads = [tuple(n for n in [*node.input, *outer_reads(node)] if n) for node in graph.node]
    for index, node in enumerate(graph.node):
        for name in reads[index]:
            if name not in producer and name not in graph_inputs and name not in initializers:
                raise BadModelError(
                    f"{path}: node '{node.name or index}' ({node.op_type}) reads tensor '{name}', "
                    "which no node, input or initializer defines"
                )
    for output in graph.output:
        if output.name not in producer and output.name not in graph_inputs and output.name not in initializers:
            raise BadModelError(f"{path}: graph output '{output.name}' is never produced")

    order = _topological_order(graph, reads, producer, path)
    nodes = [graph.node[i] for i in order]
    node_reads = [reads[i] for i in order]
    node_writes = [tuple(n for n in graph.node[i].output if n) for i in order]
    producer = {name: position for position, writes in enumerate(node_writes) for name in writes}

    if order != list(range(len(order))):  # keep the proto consistent with our order
        sorted_nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in nodes]
        del graph.node[:]
        graph.node.extend(sorted_nodes)
        nodes = list(graph.node)
    try:
        onnx.checker.check_model(_without_external_data(proto))
    except onnx.checker.ValidationError as exc:
        raise BadModelError(f"{path}: the ONNX checker rejects it: {_first_line(exc)}") from None

    model = Model(
        path=path,
        proto=proto,
        nodes=nodes,
        node_reads=node_reads,
        node_writes=node_writes,
        producer=producer,
        initializers=initializers,
        graph_inputs=graph_inputs,
        graph_outputs=[o.name for o in graph.output],
        fingerprint=_fingerprint(path, external_files),
    )
    model.value_types = _infer_types(proto)
    return model


def _topological_order(graph, reads, producer, path) -> list[int]:
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(graph.node)))
    for index, names in enumerate(reads):
        for name in names:
            if name in producer:
                dag.add_edge(producer[name], index)
    try:
        return list(nx.lexicographical_topological_sort(dag))
    except nx.NetworkXUnfeasible:
        cycle = nx.find_cycle(dag)
        names = " -> ".join(graph.node[a].name or f"#{a}" for a, _ in cycle)
        raise BadModelError(f"{path}: the graph has a cycle ({names})") from None


def _without_external_data(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A light copy for the checker: external tensors become empty inline ones of the right type."""
    if not any(external_data_helper.uses_external_data(t) for t in _all_tensors(proto.graph)):
        return proto
    light = onnx.ModelProto()
    light.CopyFrom(proto)
    for tensor in _all_tensors(light.graph):
        if external_data_helper.uses_external_data(tensor):
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
            # the checker wants data of the declared size: a one-element stand-in keeps this copy small
            del tensor.dims[:]
            np_type = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
            tensor.raw_data = bytes(np.dtype(np_type).itemsize)
    return light


def _infer_types(proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Types of every tensor ONNX shape inference can work out; used to type outputs of candidates."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False)
    except Exception:  # inference is a help, not a requirement
        inferred = proto
    graph = inferred.graph
    types = {}
    for info in [*graph.value_info, *graph.input, *graph.output]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
            types[info.name] = onnx.TypeProto()
            types[info.name].CopyFrom(info.type)  # a reference would keep the inferred copy (weights too) alive
    return types


def _fingerprint(path: Path, external_files: list[Path]) -> str:
    """The model's bytes and its external data's, every byte: weights edited in place keep their size and
    may keep their mtime, and a fingerprint blind to that reuses the old activations and verdicts. BLAKE2
    streams at about a GB/s, a small cost beside the reference run that reads the same bytes."""
    digest = hashlib.blake2b()
    _hash_file(digest, path)
    for extra in external_files:
        digest.update(f"\0{extra.name}\0{extra.stat().st_size}\0".encode())
        _hash_file(digest, extra)
    return digest.hexdigest()


def _hash_file(digest, path: Path) -> None:
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
