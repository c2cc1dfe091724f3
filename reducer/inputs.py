"""The data fed to the model's inputs: loaded from a file, or generated from a seed, and validated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from reducer.errors import BadInputsError
from reducer.model import Model

DEFAULT_DYNAMIC_DIM = 1


def load_inputs_file(path: str | Path) -> dict[str, np.ndarray]:
    """A .npz keyed by input name, or a Polygraphy `--save-inputs` JSON (its first iteration)."""
    path = Path(path)
    if not path.is_file():
        raise BadInputsError(f"--inputs: {path}: no such file")
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return {name: np.asarray(data[name]) for name in data.files}
        if path.suffix == ".json":
            from polygraphy.json import load_json

            loaded = load_json(str(path))
            feeds = loaded[0] if isinstance(loaded, list) else loaded
            return {name: np.asarray(value) for name, value in dict(feeds).items()}
    except Exception as exc:
        raise BadInputsError(f"--inputs: {path}: cannot read it ({str(exc).splitlines()[0][:200]})") from None
    raise BadInputsError(f"--inputs: {path}: expected a .npz or a Polygraphy .json file")


def declared_shape(info: onnx.ValueInfoProto) -> list[int | str | None]:
    dims = []
    for dim in info.type.tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value)
        else:
            dims.append(dim.dim_param or None)
    return dims


def declared_dtype(info: onnx.ValueInfoProto) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type))


def prepare_inputs(
    model: Model,
    given: dict[str, np.ndarray] | None,
    shapes: dict[str, tuple[int, ...]],
    seed: int,
    input_range: tuple[float, float],
) -> dict[str, np.ndarray]:
    """Feeds for every graph input: the given ones checked against the model, the rest generated."""
    given = dict(given or {})
    for name in [*given, *shapes]:
        if name not in model.graph_inputs:
            known = ", ".join(model.graph_inputs) or "none"
            raise BadInputsError(f"input '{name}' is not an input of the model (its inputs: {known})")
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, info in model.graph_inputs.items():
        if not info.type.HasField("tensor_type"):
            raise BadInputsError(f"input '{name}' is not a tensor; only tensor inputs are supported")
        dtype = declared_dtype(info)
        declared = declared_shape(info)
        if name in given:
            feeds[name] = _checked(name, given[name], dtype, declared)
            continue
        shape = shapes.get(name)
        if any(isinstance(d, int) and d < 0 for d in declared):
            raise BadInputsError(f"input '{name}': the model declares a negative dimension {declared}")
        if shape is None:
            shape = tuple(d if isinstance(d, int) else DEFAULT_DYNAMIC_DIM for d in declared)
        _check_shape(name, shape, declared, "--input-shapes")
        feeds[name] = _generate(rng, shape, dtype, input_range, name)
    return feeds


def defaulted_dims(model: Model, given: dict[str, np.ndarray] | None, shapes: dict[str, tuple[int, ...]]) -> str:
    """The dynamic dims that generated inputs set to DEFAULT_DYNAMIC_DIM, with the flag to set them, e.g.
    "dims defaulted to 1: x[0], x[2]; set them with --input-shapes x:[N,3,T]"; "" when there are none."""
    dims, flags = [], []
    for name, info in model.graph_inputs.items():
        if name in (given or {}) or name in shapes or not info.type.HasField("tensor_type"):
            continue
        declared = declared_shape(info)
        unset = [axis for axis, d in enumerate(declared) if not isinstance(d, int)]
        if unset:
            dims += [f"{name}[{axis}]" for axis in unset]
            flags.append(f"{name}:[{','.join('?' if d is None else str(d) for d in declared)}]")
    if not dims:
        return ""
    return f"dims defaulted to {DEFAULT_DYNAMIC_DIM}: {', '.join(dims)}; set them with --input-shapes {' '.join(flags)}"


def _checked(name: str, value: np.ndarray, dtype: np.dtype, declared: list) -> np.ndarray:
    if value.dtype != dtype:
        raise BadInputsError(f"input '{name}': the model wants {dtype}, the file holds {value.dtype}")
    _check_shape(name, value.shape, declared, "the inputs file")
    return np.ascontiguousarray(value)


def _check_shape(name: str, shape: tuple[int, ...], declared: list, source: str) -> None:
    if declared and len(shape) != len(declared):
        raise BadInputsError(
            f"input '{name}': {source} gives shape {list(shape)}, the model declares {declared}"
        )
    for got, want in zip(shape, declared, strict=False):
        if isinstance(want, int) and want > 0 and got != want:
            raise BadInputsError(
                f"input '{name}': {source} gives shape {list(shape)}, the model declares {declared}"
            )


MAX_GENERATED_BYTES = 2 << 30  # a hostile or mistyped shape must not exhaust memory


def _generate(rng: np.random.Generator, shape, dtype: np.dtype, input_range, name: str = "") -> np.ndarray:
    size = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    if size > MAX_GENERATED_BYTES:
        raise BadInputsError(
            f"input '{name}': shape {list(shape)} would take {size / (1 << 30):.1f} GiB; "
            "give smaller --input-shapes or the data itself with --inputs"
        )
    low, high = input_range
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        low, high, limits = int(np.ceil(low)), int(np.floor(high)), np.iinfo(dtype)
        if not limits.min <= low <= high <= limits.max:  # numpy would refuse it, or wrap it around silently
            raise BadInputsError(f"input '{name}' is {dtype}: --input-range {input_range[0]:g},{input_range[1]:g} "
                                 f"holds no whole numbers within {limits.min}..{limits.max}")
        return rng.integers(low, high, size=shape, endpoint=True).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.uniform(low, high, size=shape).astype(dtype)
    raise BadInputsError(f"cannot generate data of type {dtype}; give it with --inputs")
