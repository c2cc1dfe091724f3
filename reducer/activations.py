"""Every tensor's value from one reference run, kept on disk and memory-mapped when read."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the reference worker writes the store: it need not import the graph tools
    import onnx

    from reducer.model import Model

REFERENCE_RUNNER = "onnxruntime:cpu:fp32:O0"  # fp32, graph optimizations off: the plain semantics
# Smaller tensors are read whole: mapping a file costs more than reading it (a probe of 100k nodes loads
# the reference of every tensor), and a small one held in memory costs nothing worth mapping.
MAPPED_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)  # 100k of them at 100k nodes: no dict each
class TensorRecord:
    file: str
    dtype: str
    shape: tuple[int, ...]
    finite: bool  # no NaN/Inf anywhere
    max_abs: float  # largest finite magnitude (0 for non-numeric tensors)


class ActivationStore:
    """Maps tensor names to .npy files written by the reference run (inputs included)."""

    def __init__(self, root: Path, records: dict[str, TensorRecord], key: str):
        self.root = root
        self.records = records
        self.key = key

    def __contains__(self, name: str) -> bool:
        return name in self.records

    def path(self, name: str) -> Path:
        return self.root / self.records[name].file

    def load(self, name: str) -> np.ndarray:
        """Read-only: memory-mapped, or (a small tensor) read whole."""
        record = self.records[name]
        if np.dtype(record.dtype).itemsize * int(np.prod(record.shape)) >= MAPPED_BYTES:
            return np.load(self.path(name), mmap_mode="r", allow_pickle=False)
        data = self.path(name).read_bytes()
        array = _plain_npy(data, record)
        if array is None:  # not as this store writes its files: numpy's own reader
            array = np.load(io.BytesIO(data), allow_pickle=False)
            array.flags.writeable = False
        return array

    @classmethod
    def open(cls, root: Path, key: str) -> ActivationStore | None:
        """The store left by an earlier run with the same model and inputs, if any."""
        try:
            index = json.loads((root / "index.json").read_text())
        except (OSError, ValueError):
            return None
        if index.get("key") != key:
            return None
        shapes: dict[tuple[int, ...], tuple[int, ...]] = {}  # the same shape, dtype held once
        records = {}
        for name, rec in index["tensors"].items():
            shape = tuple(rec["shape"])
            records[name] = TensorRecord(**{**rec, "dtype": sys.intern(rec["dtype"]),
                                            "shape": shapes.setdefault(shape, shape)})
        try:  # one listing, not a look-up per tensor (100k of them at 100k nodes)
            present = {entry.name for entry in os.scandir(root) if entry.is_file()}
        except OSError:
            return None
        if not all(rec.file in present for rec in records.values()):
            return None
        return cls(root, records, key)

    @classmethod
    def write(cls, root: Path, key: str, arrays) -> ActivationStore:
        """Write (name, array) pairs one at a time, so only one is held here at once."""
        root.mkdir(parents=True, exist_ok=True)
        records = {}
        for number, (name, array) in enumerate(arrays):
            array = np.asarray(array)
            file = f"{number:06d}.npy"
            _save(root / file, array)
            records[name] = _describe(file, array)
        index = {"key": key, "tensors": {n: {**asdict(r), "shape": list(r.shape)} for n, r in records.items()}}
        tmp = root / "index.json.tmp"
        tmp.write_text(json.dumps(index))
        os.replace(tmp, root / "index.json")
        return cls(root, records, key)


class _PlainWriter:
    """A file numpy does not recognise as one: it then writes through Python, whose errors name their cause
    (ENOSPC, EFBIG, EACCES); its own fast path says only "N requested and M written" when the disk fills."""

    def __init__(self, handle):
        self.write = handle.write


def _save(path: Path, array: np.ndarray) -> None:
    try:
        with open(path, "wb") as handle:
            np.lib.format.write_array(_PlainWriter(handle), array, allow_pickle=False)
    except OSError as exc:
        path.unlink(missing_ok=True)  # half a tensor is of no use, and a full disk wants its room back
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None  # which file the disk could not take


def _plain_npy(data: bytes, record: TensorRecord) -> np.ndarray | None:
    """A version 1 .npy file of a C-ordered array of the record's dtype and shape, read without numpy's
    header parser (which compiles the header: most of the time a small tensor takes to load); else None."""
    if data[:8] != b"\x93NUMPY\x01\x00":
        return None
    start = 10 + int.from_bytes(data[8:10], "little")
    header = data[10:start]
    if b"'fortran_order': False" not in header or f"'descr': '{record.dtype}'".encode() not in header:
        return None
    array = np.frombuffer(data, dtype=record.dtype, offset=start)
    return array.reshape(record.shape) if array.size == int(np.prod(record.shape)) else None


def _describe(file: str, array: np.ndarray) -> TensorRecord:
    if array.dtype.kind in "fc" and array.size:
        finite_mask = np.isfinite(array)
        finite = bool(finite_mask.all())
        max_abs = float(np.abs(array[finite_mask]).max()) if finite_mask.any() else 0.0
    elif array.dtype.kind in "iub" and array.size:
        finite, max_abs = True, float(np.abs(array.astype(np.float64)).max())
    else:
        finite, max_abs = True, 0.0
    return TensorRecord(file, array.dtype.str, tuple(int(d) for d in array.shape), finite, max_abs)


def store_key(model: Model, feeds: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256(model.fingerprint.encode())
    for name in sorted(feeds):
        array = np.ascontiguousarray(feeds[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def capture_model(model: Model) -> onnx.ModelProto:
    """The original model with every top-level tensor marked as an output, for one reference run."""
    proto = model.full_proto()
    proto.graph.output.extend(_captured_outputs(model, proto.graph))
    return proto


def write_capture_model(model: Model, path: Path) -> None:
    """capture_model, written to `path`. Where the model holds its weights serialized (no external data, no
    inlined control flow), from its nodes' and weights' fields as they are, not as a message: the whole model
    parsed into one, then serialized, set the driver's peak at 100k nodes (150 MB more than the loaded model)."""
    import onnx

    from reducer.model import ModelBytes, SerializedTensors, copy_but

    if model.inlined or not isinstance(model.initializers, SerializedTensors):
        onnx.save(capture_model(model), str(path))
        return
    shell = copy_but(model.proto, "graph")
    shell.graph.CopyFrom(copy_but(model.proto.graph, "node"))
    shell.graph.output.extend(_captured_outputs(model, shell.graph))
    fields = [*model.node_fields(range(len(model.nodes))), *model.initializers.fields()]
    with open(path, "wb") as handle:
        ModelBytes.of(shell, fields).write(handle)


def _captured_outputs(model: Model, graph) -> list:
    import onnx

    present = {o.name for o in graph.output}
    outputs = []
    for writes in model.node_writes:
        for name in writes:
            if name not in present:
                outputs.append(onnx.ValueInfoProto(name=name))
                present.add(name)
    return outputs

