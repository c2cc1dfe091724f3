"""Which minimal repros are the same bug: a signature of the failure and of the minimal graph's shape, free of
names, weights and exact sizes, hashed to a bug id that is the same from night to night and model to model."""

from __future__ import annotations

import hashlib
import json
import re

import onnx
from onnx import helper

FLOAT_DIGITS = 4  # attribute floats kept to 4 significant digits: 1e-5 and 1.00001e-5 are one epsilon
ERROR_KINDS = ("error", "crash", "command", "timeout")  # failures whose text says which bug it is
_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_PATH = re.compile(r"(?:[A-Za-z]:)?[/\\][^\s'\":,;()\[\]]+")


def bug_id(signature: dict) -> str:
    """`bug-` and 10 hex digits of the signature's hash: the same signature gives the same id, anywhere."""
    text = json.dumps(signature, sort_keys=True, separators=(",", ":"))
    return "bug-" + hashlib.sha256(text.encode()).hexdigest()[:10]


def repro_signature(model: onnx.ModelProto, failure: dict, reason: str = "") -> dict:
    """What makes two repros one bug: the failure's kind and detail (with an error's first line, its names and
    numbers masked) and the minimal graph's canonical form."""
    names = _names(model.graph)
    kind = str(failure.get("kind", "?"))
    found = {"kind": kind, "detail": _without_names(str(failure.get("detail", "")), names)}  # the oracle's words
    if failure.get("exception"):
        found["exception"] = str(failure["exception"])
    if kind in ERROR_KINDS and reason:
        found["text"] = mask(reason, names)
    return {"failure": found, "graph": canonical_graph(model.graph)}


def summary_line(signature: dict) -> str:
    """One line for a person: `nan: Relu -> Mul` (the ops in order, the first few)."""
    failure = signature["failure"]
    ops = [node["op"] for node in signature["graph"]["nodes"]]
    shown = " -> ".join(ops[:6]) + (f" (+{len(ops) - 6} nodes)" if len(ops) > 6 else "")
    detail = f" ({failure['detail']})" if failure.get("detail") else ""
    return f"{failure['kind']}{detail}: {shown or 'no nodes'}"


def mask(text: str, names: set[str]) -> str:
    """Names of the graph, paths, addresses and numbers replaced by placeholders: what differs between two
    models that hit one bug."""
    text = _without_names(text.strip().splitlines()[0][:500] if text.strip() else "", names)
    text = _PATH.sub("<path>", text)
    text = _HEX.sub("<hex>", text)
    return _NUMBER.sub("<n>", text)


def _without_names(text: str, names: set[str]) -> str:
    for name in sorted((n for n in names if len(n) > 1), key=len, reverse=True):
        text = text.replace(name, "<name>")
    return text


def canonical_graph(graph: onnx.GraphProto) -> dict:
    """Ops (domain, type, attributes) in a topological order that does not depend on names or on the order
    nodes were stored in, each input named by where it comes from; graph inputs and outputs by dtype and
    shape pattern; initializers by dtype and shape only."""
    initializers = {t.name: _tensor_type(t) for t in graph.initializer}
    inputs = [v for v in graph.input if v.name not in initializers]
    sources = {v.name: f"in:{_value_type(v)}" for v in inputs}
    sources.update({name: f"w:{kind}" for name, kind in initializers.items()})
    nodes = []
    for node in _canonical_order(graph, sources):
        reads = [sources.get(name, "outer") if name else "" for name in node.input]
        nodes.append({"op": node.op_type, "domain": node.domain or "ai.onnx", "inputs": reads,
                      "attributes": {a.name: _attribute(a) for a in sorted(node.attribute, key=lambda a: a.name)}})
        for slot, name in enumerate(node.output):
            if name:
                sources[name] = f"n{len(nodes) - 1}.{slot}"
    outputs = [f"{sources.get(v.name, 'in')}:{_value_type(v)}" for v in graph.output]
    return {"inputs": sorted(sources[v.name] for v in inputs), "nodes": nodes, "outputs": outputs}


def _canonical_order(graph: onnx.GraphProto, known: dict[str, str]) -> list[onnx.NodeProto]:
    """Kahn's order, ties broken by what a node is (not its name), so reordered storage gives one form."""
    available, remaining, ordered = set(known), list(graph.node), []
    while remaining:
        pending = {name for node in remaining for name in node.output}
        ready = [n for n in remaining if all(i in available or i not in pending for i in n.input if i)]
        if not ready:  # a cycle (not a valid model): keep the stored order
            ready = remaining[:1]
        chosen = min(ready, key=lambda n: (n.domain, n.op_type, len(n.input), _attributes_key(n)))
        remaining.remove(chosen)
        ordered.append(chosen)
        available.update(chosen.output)
    return ordered


def _attributes_key(node: onnx.NodeProto) -> str:
    return json.dumps({a.name: _attribute(a) for a in node.attribute}, sort_keys=True)


def _attribute(attribute: onnx.AttributeProto):
    value = helper.get_attribute_value(attribute)
    if attribute.type == onnx.AttributeProto.GRAPH:
        return canonical_graph(value)
    if attribute.type == onnx.AttributeProto.GRAPHS:
        return [canonical_graph(g) for g in value]
    if attribute.type == onnx.AttributeProto.TENSOR:
        return _tensor_type(value)
    if attribute.type == onnx.AttributeProto.TENSORS:
        return [_tensor_type(t) for t in value]
    if isinstance(value, float):
        return float(f"{value:.{FLOAT_DIGITS}g}")
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_attribute_item(v) for v in value]
    return value if isinstance(value, (int, str)) else repr(value)


def _attribute_item(value):
    if isinstance(value, float):
        return float(f"{value:.{FLOAT_DIGITS}g}")
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _tensor_type(tensor: onnx.TensorProto) -> str:
    return f"{onnx.TensorProto.DataType.Name(tensor.data_type).lower()}[{_dims_pattern(tensor.dims)}]"


def _dims_pattern(dims) -> str:
    """Each dim 1 (it broadcasts: part of the pattern) or n (any other size, or unknown)."""
    return ",".join("1" if d == 1 else "n" for d in dims)


def _value_type(value: onnx.ValueInfoProto) -> str:
    """dtype and the shape pattern (rank, and which dims are 1)."""
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        return value.type.WhichOneof("value") or "?"
    dtype = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
    if not tensor.HasField("shape"):
        return f"{dtype}[*]"
    return f"{dtype}[{_dims_pattern(d.dim_value if d.HasField('dim_value') else None for d in tensor.shape.dim)}]"


def _names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in [*graph.input, *graph.output, *graph.value_info]} | {t.name for t in graph.initializer}
    for node in graph.node:
        names.update([node.name, *node.input, *node.output])
    return {n for n in names if n}
