"""ONNX Runtime runner: `onnxruntime:cpu:fp32|fp16|fp16-storage[:O0|O1|O2|O3]`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from reducer.errors import UsageError

FP16_MAX = 65504.0
LEVELS = {"O0": "ORT_DISABLE_ALL", "O1": "ORT_ENABLE_BASIC", "O2": "ORT_ENABLE_EXTENDED", "O3": "ORT_ENABLE_ALL"}
PRECISIONS = ("fp32", "fp16", "fp16-storage")
DEVICES = ("cpu",)
CAPTURE_BUDGET_BYTES = 256 << 20


class OnnxRuntimeRunner:
    """fp16: the model converted by onnxconverter-common with fp32 inputs and outputs kept, as
    deployment engineers do. On the CPU, ONNX Runtime computes most fp16 ops in fp32 (it inserts casts
    around ops without fp16 kernels), so this finds fp16 weight and conversion bugs, not overflow.
    fp16-storage: every float tensor rounded to fp16 where it is produced, compute in fp32 — how a GPU
    engine's fp16 activations overflow (|x| > 65504 becomes Inf), emulated on the CPU.
    The default optimization level is ORT's own default (O3)."""

    def __init__(self, spec: str):
        parts = spec.split(":")
        device = parts[1] if len(parts) > 1 else "cpu"
        precision = parts[2] if len(parts) > 2 else "fp32"
        level = parts[3] if len(parts) > 3 else "O3"
        if device not in DEVICES or precision not in PRECISIONS or level not in LEVELS or len(parts) > 4:
            raise UsageError(
                f"unknown runner '{spec}': expected onnxruntime:{'|'.join(DEVICES)}:"
                f"{'|'.join(PRECISIONS)}[:{'|'.join(LEVELS)}]"
            )
        self.spec = f"onnxruntime:{device}:{precision}:{level}"
        self.device, self.precision, self.level = device, precision, level
        self.max_abs_value = FP16_MAX if precision.startswith("fp16") else None

    def describe(self) -> dict:
        from importlib.metadata import version  # not importing the runtime here: the workers do

        info = {"runner": self.spec, "onnxruntime": version("onnxruntime")}
        if self.precision == "fp16":
            info["onnxconverter_common"] = version("onnxconverter-common")
        return info

    def unavailable_reason(self) -> str | None:
        """Why this runner cannot run on this machine, or None when it can."""
        from importlib.util import find_spec

        if find_spec("onnxruntime") is None:
            return "onnxruntime is not installed"
        if self.precision == "fp16" and find_spec("onnxconverter_common") is None:
            return "onnxconverter-common (the fp16 converter) is not installed"
        return None

    def executed_model(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """The model as this runner executes it (converted to fp16, rounded through fp16, or as it is):
        what a standalone repro feeds to a plain ONNX Runtime session."""
        if self.precision == "fp16":
            return _to_fp16(model)
        if self.precision == "fp16-storage":
            return fp16_storage(model)
        return model

    def run(self, model_path: Path, feeds: dict[str, np.ndarray], external_dir: Path | None = None) -> dict:
        session = self._session(model_path, external_dir)
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, dict(feeds)), strict=True))

    def capture(self, model_path: Path, feeds: dict[str, np.ndarray], external_dir: Path | None = None,
                budget_bytes: int = CAPTURE_BUDGET_BYTES):
        """Yield (name, value) for every output, fetching a group at a time so that at most about
        `budget_bytes` of activations are held at once; the group size adapts to the sizes seen."""
        session = self._session(model_path, external_dir)
        names = [o.name for o in session.get_outputs()]
        position, group = 0, 64
        while position < len(names):
            wanted = names[position : position + group]
            values = session.run(wanted, dict(feeds))
            held = sum(v.nbytes for v in values if isinstance(v, np.ndarray)) or 1
            yield from zip(wanted, values, strict=True)
            del values
            position += len(wanted)
            group = max(1, min(4 * group, int(len(wanted) * budget_bytes / held)))

    def _session(self, model_path: Path, external_dir: Path | None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[self.level])
        options.log_severity_level = 3
        if self.precision != "fp32":
            source = self.executed_model(onnx.load(str(model_path))).SerializeToString()
        elif external_dir is not None:
            source = Path(model_path).read_bytes()
            # weights stay where the original model keeps them; ORT reads them from there
            options.add_session_config_entry(
                "session.model_external_initializers_file_folder_path", str(external_dir)
            )
        else:
            source = str(model_path)
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def _to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxconverter_common import float16

    return float16.convert_float_to_float16(model, keep_io_types=True, node_block_list=_casts_to_float(model.graph))


def _casts_to_float(graph: onnx.GraphProto) -> list[str]:
    """Cast(to=FLOAT) nodes, named if they were not. onnxconverter-common 1.16 leaves them fp32 but types
    their outputs fp16, which ONNX Runtime rejects; blocked by name, they get a Cast to fp16 after them
    instead. (Blocking the op type "Cast" makes the converter loop forever.)"""
    names = []
    for index, node in enumerate(graph.node):
        if node.op_type == "Cast" and any(a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in node.attribute):
            if not node.name:
                node.name = f"{graph.name}_cast_to_float_{index}"
            names.append(node.name)
        for body in [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH] + [
            g for a in node.attribute for g in a.graphs
        ]:
            names += _casts_to_float(body)
    return names


def fp16_storage(model: onnx.ModelProto) -> onnx.ModelProto:
    """Round every top-level float32 tensor (graph inputs and node outputs) through fp16."""
    typed = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    float32 = {
        info.name
        for info in [*typed.graph.value_info, *typed.graph.input, *typed.graph.output]
        if info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    }
    graph = model.graph
    nodes = []

    def casts(source: str, target: str) -> list[onnx.NodeProto]:
        half = f"{target}__fp16"
        return [
            onnx.helper.make_node("Cast", [source], [half], name=f"{half}_cast", to=onnx.TensorProto.FLOAT16),
            onnx.helper.make_node("Cast", [half], [target], name=f"{target}_cast", to=onnx.TensorProto.FLOAT),
        ]

    # graph inputs keep their names (callers feed them); their readers read a rounded copy
    rounded_inputs = {i.name: f"{i.name}__rounded" for i in graph.input if i.name in float32}
    for name, copy in rounded_inputs.items():
        nodes.extend(casts(name, copy))
    for original in graph.node:
        node = onnx.NodeProto()
        node.CopyFrom(original)
        for position, name in enumerate(node.input):
            if name in rounded_inputs:
                node.input[position] = rounded_inputs[name]
        after = []
        for position, name in enumerate(node.output):
            if name in float32:  # the producer writes a raw copy; the tensor itself is the rounded value
                node.output[position] = f"{name}__fp32"
                after.extend(casts(f"{name}__fp32", name))
        nodes.append(node)
        nodes.extend(after)
    del graph.node[:]
    graph.node.extend(nodes)
    return model
