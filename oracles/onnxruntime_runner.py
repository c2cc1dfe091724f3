"""ONNX Runtime runner: `onnxruntime:DEVICE:PRECISION[:OPTION...]`.

DEVICE cpu | cuda | tensorrt (ONNX Runtime's TensorRT execution provider); PRECISION fp32 | fp16 |
fp16-storage (cpu only); OPTIONs: O0..O3 (graph optimization level, default O3, ORT's own default) and,
on cuda, tf32 | notf32 (TF32 matmuls and convolutions; on by default, as in ONNX Runtime).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from reducer.errors import UsageError
from reducer.interrupts import deferred

if TYPE_CHECKING:  # imported where used: validating a spec needs neither
    import numpy as np
    import onnx

FP16_MAX = 65504.0
# Model metadata naming tensors whose producers are computed in fp32 while the rest runs at the target's
# precision: the counterfactual that asks whether those nodes carry a failure (reducer/counterfactual.py).
EXACT_OUTPUTS_KEY = "onnx_reducer.exact_outputs"
LEVELS = {"O0": "ORT_DISABLE_ALL", "O1": "ORT_ENABLE_BASIC", "O2": "ORT_ENABLE_EXTENDED", "O3": "ORT_ENABLE_ALL"}
PRECISIONS = {"cpu": ("fp32", "fp16", "fp16-storage"), "cuda": ("fp32", "fp16"), "tensorrt": ("fp32", "fp16")}
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}
CAPTURE_BUDGET_BYTES = 256 << 20
# The reference capture of a larger model runs in pieces of this many nodes: a session whose every tensor is
# an output costs ONNX Runtime more than linearly in their number (see reducer/driver.py, PROBE_PIECE_NODES).
CAPTURE_PIECE_NODES = 1000
SERIALIZED_LIMIT = 1_800_000_000  # a model proto larger than this goes to ONNX Runtime as a file (2 GiB limit)


class RunnerUnavailableError(RuntimeError):
    """The runtime cannot run this spec here at all (a provider that does not load): not a verdict."""

    unavailable = True


def ort_version() -> str | None:
    """The version of the onnxruntime that imports (onnxruntime or onnxruntime-gpu, whichever is first on
    the path: both install the same module, so distribution metadata can name the wrong one)."""
    try:
        with deferred():  # a Ctrl-C meanwhile is raised, not taken for a missing onnxruntime
            import onnxruntime
    except ImportError:
        return None
    return onnxruntime.__version__


class OnnxRuntimeRunner:
    """fp16: the model converted by onnxconverter-common with fp32 inputs and outputs kept, as
    deployment engineers do. On the CPU, ONNX Runtime computes most fp16 ops in fp32 (it inserts casts
    around ops without fp16 kernels), so this finds fp16 weight and conversion bugs, not overflow; on
    cuda the fp16 kernels run for real. fp16-storage: every float tensor rounded to fp16 where it is
    produced, compute in fp32 — how a GPU engine's fp16 activations overflow (|x| > 65504 becomes Inf),
    emulated on the CPU."""

    uses_gpu = False

    def __init__(self, spec: str):
        parts = spec.split(":")
        device = parts[1] if len(parts) > 1 else "cpu"
        precision = parts[2] if len(parts) > 2 else "fp32"
        options = parts[3:]
        levels = [o for o in options if o in LEVELS]
        tf32 = [o for o in options if o in ("tf32", "notf32")]
        valid = (
            device in PRECISIONS
            and precision in PRECISIONS[device]
            and len(levels) <= 1
            and len(tf32) <= (1 if device == "cuda" else 0)
            and len(levels) + len(tf32) == len(options)
        )
        if not valid:
            raise UsageError(
                f"unknown runner '{spec}': expected onnxruntime:cpu:fp32|fp16|fp16-storage[:O0-O3], "
                "onnxruntime:cuda:fp32|fp16[:tf32|notf32][:O0-O3] or onnxruntime:tensorrt:fp32|fp16[:O0-O3]"
            )
        self.device, self.precision = device, precision
        self.level = levels[0] if levels else "O3"
        self.tf32 = (tf32 or ["tf32"])[0] == "tf32" if device == "cuda" else None
        flavour = [] if self.tf32 is None else ["tf32" if self.tf32 else "notf32"]
        self.spec = ":".join(["onnxruntime", device, precision, *flavour, self.level])
        self.uses_gpu = device != "cpu"
        # the model is rewritten before it runs, except for TensorRT's EP, which takes fp32 and its fp16 flag
        self.converts = precision == "fp16-storage" or (precision == "fp16" and device != "tensorrt")
        self.max_abs_value = FP16_MAX if precision.startswith("fp16") else None
        self.computes_exactly = self.converts  # it can keep marked nodes in fp32 (EXACT_OUTPUTS_KEY)
        # kept in fp32 is the reference's arithmetic on the CPU; with TF32 on, a kept Conv or MatMul is not, so the
        # driver checks it once (nudenet on an H200: every node kept, the whole model still failed)
        self.exact_on_trust = self.tf32 is not True

    def describe(self) -> dict:
        info = {"runner": self.spec, "onnxruntime": ort_version()}
        if self.precision == "fp16":
            from importlib.metadata import version  # not importing the runtime here: the workers do

            info["onnxconverter_common"] = version("onnxconverter-common")
            # what _to_fp16 does around the converter: 2 casts inputs only bodies read, 3 converts a model that
            # holds fp16 already (a weight, a Cast to fp16), which the converter refuses unless told
            info["conversion"] = 3
        if self.uses_gpu:
            from oracles.gpu import describe_gpus

            info["gpus"] = describe_gpus()
        return info

    def unavailable_reason(self) -> str | None:
        """Why this runner cannot run on this machine, or None when it can."""
        from importlib.util import find_spec

        if find_spec("onnxruntime") is None:
            return "onnxruntime is not installed"
        if self.precision == "fp16" and find_spec("onnxconverter_common") is None:
            return "onnxconverter-common (the fp16 converter) is not installed"
        if not self.uses_gpu:
            return None
        from oracles.gpu import why_no_gpu

        if why_no_gpu():
            return why_no_gpu()
        with deferred():
            import onnxruntime as ort

        if PROVIDERS[self.device] not in ort.get_available_providers():
            return (f"this onnxruntime ({ort_version()}) has no {PROVIDERS[self.device]} "
                    f"(it has {', '.join(ort.get_available_providers())}); install onnxruntime-gpu")
        return None

    def warm_up(self) -> None:
        """Import the runtime (and the converter) before the first check asks for them."""
        import onnxruntime  # noqa: F401

        if self.converts and self.precision != "fp16-storage":
            from onnxconverter_common import float16  # noqa: F401

    def executed_model(self, model: onnx.ModelProto, weights_dir: Path | None = None) -> onnx.ModelProto:
        """The model as this runner executes it (converted to fp16, rounded through fp16, or as it is):
        what a standalone repro feeds to a plain ONNX Runtime session. External weights stay references,
        except where the fp16 converter needs their values: read from `weights_dir` then, after shape
        inference on the weight-free graph (inference cannot take a model over 2 GiB)."""
        if not self.converts:
            return model
        return fp16_storage(model) if self.precision == "fp16-storage" else _to_fp16(model, weights_dir)

    def run(self, model_path: Path, feeds: dict[str, np.ndarray], external_dir: Path | None = None) -> dict:
        session = self._session(model_path, external_dir)
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, dict(feeds)), strict=True))

    def capture(self, model_path: Path, feeds: dict[str, np.ndarray], external_dir: Path | None = None,
                budget_bytes: int = CAPTURE_BUDGET_BYTES):
        """Yield (name, value) for every output, fetching a group at a time so that at most about
        `budget_bytes` of activations are held at once; the group size adapts to the sizes seen. A model of
        more than CAPTURE_PIECE_NODES nodes runs in pieces of that many (see capture_pieces)."""
        import onnx

        model = onnx.load(str(model_path), load_external_data=False)
        if len(model.graph.node) <= CAPTURE_PIECE_NODES or not _tensors_only(model.graph):
            yield from _fetch(self._session(model_path, external_dir), dict(feeds), budget_bytes)
            return
        yield from capture_pieces(model, feeds, lambda piece: self._session(model_path, external_dir, piece),
                                  budget_bytes)

    def _session(self, model_path: Path, external_dir: Path | None, model: onnx.ModelProto | None = None):
        """A session for the model at `model_path`, or for `model` (a piece of it, whose external data lives
        where the model's does)."""
        from contextlib import ExitStack

        with ExitStack() as scratch:  # a folder made only where needed, kept while ORT reads it as it builds
            return self._build_session(model_path, external_dir, model, scratch)

    def _build_session(self, model_path: Path, external_dir: Path | None, model: onnx.ModelProto | None,
                       scratch):
        import onnx
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[self.level])
        options.log_severity_level = 2 if self.uses_gpu else 3  # a GPU provider's load failure is a warning
        if self.converts:
            # weights are not read here: they stay on disk unless the fp16 converter needs their values
            folder = Path(external_dir or Path(model_path).parent)
            proto = model if model is not None else onnx.load(str(model_path), load_external_data=False)
            source = _session_source(self.executed_model(proto, folder), folder, options, scratch)
        elif external_dir is not None or model is not None:
            source = model.SerializeToString() if model is not None else Path(model_path).read_bytes()
            external_dir = external_dir or Path(model_path).parent
            # weights stay where the original model keeps them; ORT reads them from there
            options.add_session_config_entry(
                "session.model_external_initializers_file_folder_path", str(external_dir)
            )
        else:
            source = str(model_path)
        if not self.uses_gpu:
            return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        if hasattr(ort, "preload_dlls"):  # finds the CUDA/cuDNN libraries pip or the system installed
            ort.preload_dlls()
        cuda = ("CUDAExecutionProvider", {"device_id": 0, "use_tf32": "1" if self.tf32 is not False else "0"})
        providers = [cuda, "CPUExecutionProvider"]  # CPU for the ops CUDA has no kernel for, as users run it
        if self.device == "tensorrt":
            trt = {"device_id": 0, "trt_fp16_enable": self.precision == "fp16", "trt_engine_cache_enable": False}
            providers.insert(0, ("TensorrtExecutionProvider", trt))
        session = ort.InferenceSession(source, options, providers=providers)
        if PROVIDERS[self.device] not in session.get_providers():  # ORT falls back to the CPU silently
            raise RunnerUnavailableError(
                f"{PROVIDERS[self.device]} did not load (ONNX Runtime fell back to {session.get_providers()}); "
                "see the log for the library it could not find"
            )
        return session


def _session_source(executed: onnx.ModelProto, folder: Path, options, scratch):
    """What ONNX Runtime builds a session from: the serialized model, its external weights read from `folder`
    (where the candidate's are); or, for a converted model that itself passes protobuf's 2 GiB limit, a copy
    saved with its weights beside it in a temporary folder that `scratch` (an ExitStack) removes. Made only then:
    a worker killed for its time limit would leave it behind."""
    import tempfile

    import onnx
    from onnx import external_data_helper

    from reducer.model import all_tensors

    if any(external_data_helper.uses_external_data(t) for t in all_tensors(executed.graph)):
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
        return executed.SerializeToString()
    if executed.ByteSize() > SERIALIZED_LIMIT:
        path = Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="onnx-reduce-session-"))) / "executed.onnx"
        onnx.save_model(executed, str(path), save_as_external_data=True, location="executed.onnx.data")
        return str(path)
    return executed.SerializeToString()


def _fetch(session, feeds: dict, budget_bytes: int):
    """Every output of a session, a group at a time (about `budget_bytes` held at once)."""
    import numpy as np

    names = [o.name for o in session.get_outputs()]
    position, group = 0, 64
    while position < len(names):
        wanted = names[position : position + group]
        values = session.run(wanted, feeds)
        held = sum(v.nbytes for v in values if isinstance(v, np.ndarray)) or 1
        yield from zip(wanted, values, strict=True)
        del values
        position += len(wanted)
        group = max(1, min(4 * group, int(len(wanted) * budget_bytes / held)))


def _tensors_only(graph: onnx.GraphProto) -> bool:
    """No sequence or optional values at the top level: every value a piece hands on can be a typed input."""
    return not any("Sequence" in node.op_type or "Optional" in node.op_type for node in graph.node)


def capture_pieces(model: onnx.ModelProto, feeds: dict[str, np.ndarray], session_for, budget_bytes: int):
    """Every tensor of `model` (nodes in topological order), CAPTURE_PIECE_NODES nodes at a time: each piece a
    model of its own, fed the graph inputs and what the pieces before it computed (held until the last piece
    that reads them). At the reference's level (no graph optimizations) the values are the whole model's."""
    import onnx

    from reducer.model import outer_reads

    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    nodes = list(graph.node)
    reads = [[n for n in [*node.input, *outer_reads(node)] if n] for node in nodes]
    last_read: dict[str, int] = {}  # tensor -> the last piece that reads it
    for index, names in enumerate(reads):
        for name in names:
            last_read[name] = index // CAPTURE_PIECE_NODES
    held: dict[str, np.ndarray] = dict(feeds)
    for number, start in enumerate(range(0, len(nodes), CAPTURE_PIECE_NODES)):
        piece = nodes[start : start + CAPTURE_PIECE_NODES]
        produced = {name for node in piece for name in node.output if name}
        needed = dict.fromkeys(n for names in reads[start : start + CAPTURE_PIECE_NODES] for n in names
                               if n not in produced)
        part = onnx.helper.make_graph(
            piece, f"{graph.name}_piece{number}",
            [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(held[n].dtype), held[n].shape)
             for n in needed if n not in initializers],
            [onnx.ValueInfoProto(name=n) for node in piece for n in node.output if n],
            [initializers[n] for n in needed if n in initializers])
        proto = onnx.helper.make_model(part, opset_imports=list(model.opset_import), ir_version=model.ir_version)
        proto.functions.extend(model.functions)
        session = session_for(proto)
        for name, value in _fetch(session, {n: held[n] for n in needed if n not in initializers}, budget_bytes):
            if last_read.get(name, -1) > number:
                held[name] = value
            yield name, value
        del session
        for name in [n for n in held if last_read.get(n, -1) <= number]:
            del held[name]


def _rounded_to_fp16(tensor: onnx.TensorProto, name: str) -> onnx.TensorProto:
    """A float32 weight's values through fp16 and back (Inf where fp16 cannot hold one), as a Cast pair computes."""
    import numpy as np
    from onnx import numpy_helper

    with np.errstate(over="ignore"):
        values = numpy_helper.to_array(tensor).astype(np.float16).astype(np.float32)
    return numpy_helper.from_array(values, name)


def exact_outputs(model: onnx.ModelProto) -> set[str]:
    """The tensors whose producers are to be computed in fp32 (EXACT_OUTPUTS_KEY), or none."""
    import json

    for prop in model.metadata_props:
        if prop.key == EXACT_OUTPUTS_KEY:
            return set(json.loads(prop.value))
    return set()


def _exact_nodes(graph: onnx.GraphProto, exact: set[str]) -> list[str]:
    """The names of the nodes writing `exact` tensors, naming those that had none."""
    names = []
    for index, node in enumerate(graph.node):
        if exact.intersection(node.output):
            if not node.name:
                node.name = f"{graph.name}_exact_{index}"
            names.append(node.name)
    return names


def _to_fp16(model: onnx.ModelProto, weights_dir: Path | None = None) -> onnx.ModelProto:
    """onnxconverter-common with keep_io_types; nodes marked exact (EXACT_OUTPUTS_KEY) stay fp32. A model that
    holds fp16 already (a weight, a Cast to fp16: mk8dx-table-reader's digit reader) is converted all the same: the
    converter refuses it unless told, though what is fp32 in it still computes in fp32 until converted. Its casts
    of the outputs back to fp32 find each output's producer by scanning every node, which is quadratic in a
    layerwise probe's hundreds of outputs (1 s of a 1.5 s conversion on a 672-node model): the outputs are
    taken off for the conversion and given the same casts here, with one lookup each."""
    import onnx
    from onnxconverter_common import float16

    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    del bare.graph.output[:]
    exact = _exact_nodes(bare.graph, exact_outputs(model))
    blocked = _casts_to_float(bare.graph) + exact
    _split_shared_weights(bare.graph, set(blocked))
    from onnx import external_data_helper

    from reducer.model import all_tensors

    if any(external_data_helper.uses_external_data(t) for t in all_tensors(bare.graph)):
        # the converter infers shapes first, which cannot take a proto over 2 GiB: inferred here on the graph
        # without weights, whose values are then read (tensor by tensor) for the converter to round
        bare = onnx.shape_inference.infer_shapes(bare, strict_mode=False)
        external_data_helper.load_external_data_for_model(bare, str(weights_dir or "."))
        converted = float16.convert_float_to_float16(bare, keep_io_types=True, node_block_list=blocked,
                                                     disable_shape_infer=True, check_fp16_ready=False)
    else:
        converted = float16.convert_float_to_float16(bare, keep_io_types=True, node_block_list=blocked,
                                                     check_fp16_ready=False)
    _skip_round_trips(converted.graph, set(exact))
    _cast_inputs_only_bodies_read(converted.graph)
    producers = {name: node for node in converted.graph.node for name in node.output}
    exact_writes = {name for node in converted.graph.node if node.name in exact for name in node.output}
    for info in model.graph.output:
        node = producers.get(info.name)
        if node is not None and info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            # an exact node's output went through the converter's Cast to fp16 (for fp16 readers, or seeing none):
            # its readers keep that, the output is the exact value itself
            exact_source = node.input[0] if (cast_target(node) == onnx.TensorProto.FLOAT16
                                             and node.input[0] in exact_writes) else None
            inner = f"{node.name}_cast_to_{info.name}"  # the converter's own names
            node.output[list(node.output).index(info.name)] = inner
            if exact_source is not None:
                for reader in converted.graph.node:
                    if info.name in reader.input:
                        reader.input[:] = [inner if name == info.name else name for name in reader.input]
            converted.graph.node.append(onnx.helper.make_node("Cast", [exact_source or inner], [info.name], inner,
                                                              to=onnx.TensorProto.FLOAT))
        converted.graph.output.append(info)
    return converted


def _cast_inputs_only_bodies_read(graph: onnx.GraphProto) -> None:
    """The converter casts an fp32 graph input to fp16 for the top-level nodes that read it, and renames it in the
    bodies of If, Loop and Scan only then: an input that only a body reads (by name, from the enclosing scope)
    stays fp32 where the converted body computes in fp16, which ONNX Runtime refuses ("Graph attribute inferencing
    failed"). A cut makes such inputs: chars2vec's LSTM Loop with the tensor it reads fed, its other readers gone."""
    import onnx

    from reducer.model import subgraphs

    bodies, pending = [], [g for node in graph.node for g in subgraphs(node)]
    while pending:
        body = pending.pop()
        bodies.append(body)
        pending.extend(g for node in body.node for g in subgraphs(node))
    read_at_top = {name for node in graph.node for name in node.input}
    for info in graph.input:
        if info.type.tensor_type.elem_type != onnx.TensorProto.FLOAT or info.name in read_at_top:
            continue
        readers = [node for body in bodies for node in body.node if info.name in node.input]
        if not readers:
            continue
        cast = f"{info.name}_cast_to_fp16_for_bodies"
        graph.node.insert(0, onnx.helper.make_node("Cast", [info.name], [cast], cast, to=onnx.TensorProto.FLOAT16))
        for node in readers:
            node.input[:] = [cast if name == info.name else name for name in node.input]


def _skip_round_trips(graph: onnx.GraphProto, exact: set[str]) -> None:
    """The converter hands an fp32 node's output to fp32 readers through fp16 and back whenever some reader is
    fp16: an exact node's 1.9e5 would reach its exact readers as Inf. They read the fp32 value itself."""
    import onnx

    exact_writes = {name for node in graph.node if node.name in exact for name in node.output}
    narrowed = {node.output[0]: node.input[0] for node in graph.node
                if cast_target(node) == onnx.TensorProto.FLOAT16 and node.input[0] in exact_writes}
    widened = {node.output[0]: narrowed[node.input[0]] for node in graph.node
               if cast_target(node) == onnx.TensorProto.FLOAT and node.input[0] in narrowed}
    for node in graph.node:
        for position, name in enumerate(node.input):
            if name in widened:
                node.input[position] = widened[name]


def _split_shared_weights(graph: onnx.GraphProto, blocked: set[str]) -> None:
    """A float weight that nodes kept in fp32 (`blocked`) and converted nodes both read gets a copy for the kept
    ones: onnxconverter-common keeps such a weight fp32 for all its readers, and ONNX Runtime then rejects the
    converted readers' mixed types (a model with a shared scale, one of its readers computed exactly)."""
    import onnx

    kept_reads = {name for node in graph.node if node.name in blocked for name in node.input}
    converted_reads = {name for node in graph.node if node.name not in blocked for name in node.input}
    copies = {}
    for tensor in graph.initializer:
        if tensor.name in kept_reads and tensor.name in converted_reads and tensor.data_type == onnx.TensorProto.FLOAT:
            copy = onnx.TensorProto()
            copy.CopyFrom(tensor)
            copy.name = f"{tensor.name}__kept_fp32"
            copies[tensor.name] = copy
    if not copies:
        return
    graph.initializer.extend(copies.values())
    for node in graph.node:
        if node.name in blocked:
            node.input[:] = [copies[name].name if name in copies else name for name in node.input]


def cast_target(node: onnx.NodeProto) -> int | None:
    """The type a Cast casts to (None for any other node)."""
    return next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None


def _casts_to_float(graph: onnx.GraphProto) -> list[str]:
    """Cast(to=FLOAT) nodes, named if they were not. onnxconverter-common 1.16 leaves them fp32 but types
    their outputs fp16, which ONNX Runtime rejects; blocked by name, they get a Cast to fp16 after them
    instead. (Blocking the op type "Cast" makes the converter loop forever.)"""
    import onnx

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
    """Round every top-level float32 tensor (graph inputs, weights held in the model and node outputs) through
    fp16, except the outputs of nodes marked exact (EXACT_OUTPUTS_KEY) and the weights as those nodes read them.
    Weights are rounded as a Constant node's output is, as an fp16 engine holds them: a model is the same model
    whether its exporter wrote its weights as initializers or as Constant nodes (and a candidate that cuts a
    Constant holds its value as an initializer). External weights are left as they are: ONNX Runtime would fold
    their rounded copies into memory, a second copy of a model over 2 GiB."""
    import onnx
    from onnx import external_data_helper

    typed = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    exact = exact_outputs(model)
    float32 = {
        info.name
        for info in [*typed.graph.value_info, *typed.graph.input, *typed.graph.output]
        if info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    } - exact
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
    # weights rounded in their values, as an fp16 engine holds them and as ONNX Runtime folds a Constant's Casts; not
    # by Casts of their own: it folds each pair at load, and the 100k-node transformer's 56k weights made its session
    # build take twice as long. Where an exact node reads one, the others read a rounded copy; external data is
    # never read here.
    inputs = {i.name for i in graph.input}
    is_exact = [any(name in exact for name in node.output) for node in graph.node]
    read_exactly = {name for node, kept in zip(graph.node, is_exact, strict=True) if kept for name in node.input}
    rounded_weights, copies = {}, []  # a weight an exact node reads -> its rounded copy
    rounded_copies = set(rounded_inputs.values())  # what holds a rounded value, by name
    for tensor in graph.initializer:
        if (tensor.data_type != onnx.TensorProto.FLOAT or tensor.name in inputs
                or external_data_helper.uses_external_data(tensor)):
            continue
        if tensor.name in read_exactly:
            rounded = _rounded_to_fp16(tensor, f"{tensor.name}__rounded")
            rounded_weights[tensor.name] = rounded.name
            copies.append(rounded)
        else:
            rounded = _rounded_to_fp16(tensor, tensor.name)
            tensor.CopyFrom(rounded)
        rounded_copies.add(rounded.name)
    graph.initializer.extend(copies)
    for name, copy in rounded_inputs.items():
        nodes.extend(casts(name, copy))
    for original, kept in zip(graph.node, is_exact, strict=True):
        node = onnx.NodeProto()
        node.CopyFrom(original)
        for position, name in enumerate(node.input):
            if name in rounded_inputs:
                node.input[position] = rounded_inputs[name]
            elif name in rounded_weights and not kept:
                node.input[position] = rounded_weights[name]
        after = []
        # an Identity of a rounded value (a layerwise probe shows every tensor through one) is rounded already
        copies_rounded = node.op_type == "Identity" and (node.input[0] in float32 or node.input[0] in rounded_copies)
        for position, name in enumerate(node.output):
            if name in float32 and not copies_rounded:  # the producer writes a raw copy; the tensor: rounded
                node.output[position] = f"{name}__fp32"
                after.extend(casts(f"{name}__fp32", name))
        nodes.append(node)
        nodes.extend(after)
    del graph.node[:]
    graph.node.extend(nodes)
    return model
