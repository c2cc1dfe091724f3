"""TensorRT runner: `tensorrt:fp32|tf32|fp16|bf16|int8|fp8|best`, through TensorRT's Python API.

It uses full TensorRT (module `tensorrt`) or TensorRT-RTX (`tensorrt_rtx`), whichever imports, full
TensorRT first, and every log starts by saying which. The same Builder / OnnxParser / Runtime calls
serve both; they differ in precision: TensorRT-RTX builds strongly typed networks only and takes no
precision flags, so `fp16` there means the model converted to fp16 (onnxconverter-common, fp32 inputs and
outputs kept), then built strongly typed; bf16, int8, fp8 and best need full TensorRT's flags.

Each check parses (with the model's path, so external data resolves), builds with an optimization
profile set from the shapes actually fed, then executes through Polygraphy's TrtRunner (device buffers
via Polygraphy's CUDA wrapper: no PyTorch). The builder log is kept at verbose level so --fail-regex can
match any line of it. Parse errors, build failures (no engine), internal assertions and engine
load/execution errors raise distinct exception types, which become distinct failure signatures. The
timing cache is kept in the worker across the checks of one run: rebuilds of similar candidates reuse
tactic timings, which makes them faster and their tactic choices consistent (--repeat turns it off, so
that a flaky tactic choice can show).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx

from reducer.errors import UsageError

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8", "best")
FLAVOURS = ("tensorrt", "tensorrt_rtx")
FP16_MAX = 65504.0
_FLAGS = {"tf32": ["TF32"], "fp16": ["FP16"], "bf16": ["BF16"], "int8": ["INT8"], "fp8": ["FP8"],
          "best": ["TF32", "FP16", "BF16", "INT8", "FP8"]}
_SEVERITY = {"INTERNAL_ERROR": "F", "ERROR": "E", "WARNING": "W", "INFO": "I", "VERBOSE": "V"}


class TensorRTParseError(RuntimeError):
    """The ONNX parser refused the model."""


class TensorRTBuildError(RuntimeError):
    """The builder returned no engine."""


class TensorRTInternalError(RuntimeError):
    """The builder hit an internal assertion or error (and did not crash)."""


class TensorRTEngineError(RuntimeError):
    """The engine was built but could not be loaded or executed here."""


class TensorRTUnavailableError(RuntimeError):
    unavailable = True


def installed_flavour() -> str | None:
    """The TensorRT module this runner would use, without importing it (the driver builds no engines)."""
    from importlib.util import find_spec

    for name in FLAVOURS:
        try:
            if find_spec(name) is not None:
                return name
        except (ImportError, ValueError):
            continue
    return None


def classify_build_failure(errors: list[str]) -> type[RuntimeError]:
    """An internal assertion or internal error is a different bug from a refused layer or a missing tactic."""
    text = "\n".join(errors).lower()
    if "assertion" in text or "internal error" in text:
        return TensorRTInternalError
    return TensorRTBuildError


class TensorRTRunner:
    uses_gpu = True

    def __init__(self, spec: str):
        parts = spec.split(":")
        precision = parts[1] if len(parts) > 1 else "fp32"
        if precision not in PRECISIONS or len(parts) > 2:
            raise UsageError(f"unknown runner '{spec}': expected tensorrt:{'|'.join(PRECISIONS)}")
        self.precision = precision
        self.spec = f"tensorrt:{precision}"
        self.max_abs_value = FP16_MAX if precision in ("fp16", "best") else None
        self.flavour = installed_flavour()
        # TensorRT-RTX's fp16 is the converted model, which can keep marked nodes in fp32 (EXACT_OUTPUTS_KEY)
        self.computes_exactly = self.flavour == "tensorrt_rtx" and precision == "fp16"
        self.exact_on_trust = False  # TensorRT may run an fp32 layer in TF32: the driver checks it once
        self.keep_timing_cache = os.environ.get("ONNX_REDUCE_TRT_TIMING_CACHE", "1") != "0"
        self._timing_cache = b""
        self._trt = None

    # -- driver side: cheap, imports nothing ---------------------------------------------------------
    def describe(self) -> dict:
        from oracles.gpu import describe_gpus

        return {"runner": self.spec, "tensorrt_flavour": self.flavour, "tensorrt": _version(self.flavour),
                "gpus": describe_gpus()}

    def unavailable_reason(self) -> str | None:
        from importlib.util import find_spec

        from oracles.gpu import why_no_gpu

        if self.flavour is None:
            return "neither tensorrt nor tensorrt_rtx is installed (full TensorRT's builder is not on PyPI " \
                   "for every platform; TensorRT-RTX is: tensorrt-rtx-cu13-libs + -bindings)"
        if self.flavour == "tensorrt_rtx" and self.precision in ("bf16", "int8", "fp8", "best"):
            return f"TensorRT-RTX takes no precision flags: tensorrt:{self.precision} needs full TensorRT " \
                   "(give an explicitly typed or Q/DQ model with tensorrt:fp32 instead)"
        if self.flavour == "tensorrt_rtx" and self.precision == "fp16" and find_spec("onnxconverter_common") is None:
            return "onnxconverter-common (the fp16 converter TensorRT-RTX's fp16 needs) is not installed"
        return why_no_gpu() or None

    def executed_model(self, model: onnx.ModelProto, weights_dir: Path | None = None) -> onnx.ModelProto:
        if self.flavour == "tensorrt_rtx" and self.precision == "fp16":
            from oracles.onnxruntime_runner import _to_fp16

            return _to_fp16(model, weights_dir)
        return model

    # -- worker side ----------------------------------------------------------------------------------
    def _import(self):
        if self._trt is None:
            if self.flavour is None:
                raise TensorRTUnavailableError(self.unavailable_reason())
            if self.flavour == "tensorrt_rtx":  # Polygraphy's TrtRunner follows this switch
                os.environ["POLYGRAPHY_USE_TENSORRT_RTX"] = "1"
                import polygraphy.config

                polygraphy.config.USE_TENSORRT_RTX = True
            try:
                self._trt = __import__(self.flavour)
            except ImportError as exc:
                raise TensorRTUnavailableError(f"{self.flavour} does not import: {exc}") from None
        return self._trt

    def run(self, model_path: Path, feeds: dict[str, np.ndarray], external_dir: Path | None = None) -> dict:
        trt = self._import()
        print(f"[onnx-reduce] {self.spec} with {self.flavour} {trt.__version__}", file=sys.stderr, flush=True)
        logger = _make_logger(trt)
        engine_bytes = self._build(trt, logger, Path(model_path), feeds, external_dir)
        return self._execute(trt, logger, engine_bytes, feeds)

    def _build(self, trt, logger, model_path: Path, feeds: dict, external_dir: Path | None) -> bytes:
        builder = trt.Builder(logger)
        strongly_typed = self.flavour == "tensorrt_rtx" and hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if strongly_typed else 0
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger)
        if self.flavour == "tensorrt_rtx" and self.precision == "fp16":
            data = self.executed_model(onnx.load(str(model_path))).SerializeToString()
        else:
            data = model_path.read_bytes()
        where = Path(external_dir) / model_path.name if external_dir else model_path  # external data resolves here
        if not parser.parse(data, str(where)):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise TensorRTParseError("; ".join(errors) or "the ONNX parser failed: " + logger.last_errors())
        config = builder.create_builder_config()
        if self.flavour == "tensorrt":
            if self.precision == "fp32" and hasattr(trt.BuilderFlag, "TF32"):
                config.clear_flag(trt.BuilderFlag.TF32)  # on by default: fp32 means fp32
            for flag in _FLAGS.get(self.precision, []):
                if hasattr(trt.BuilderFlag, flag):
                    config.set_flag(getattr(trt.BuilderFlag, flag))
        profile = builder.create_optimization_profile()
        profiled = False
        for index in range(network.num_inputs):
            tensor = network.get_input(index)
            value = feeds.get(tensor.name)
            if value is None:
                continue
            if tensor.is_shape_tensor:
                values = [int(v) for v in np.asarray(value).reshape(-1)]
                profile.set_shape_input(tensor.name, values, values, values)
                profiled = True
            elif any(d < 0 for d in tensor.shape):  # dynamic: built for exactly the shapes fed
                shape = tuple(np.asarray(value).shape)
                profile.set_shape(tensor.name, shape, shape, shape)
                profiled = True
        if profiled:
            config.add_optimization_profile(profile)
        cache = None
        if self.keep_timing_cache and hasattr(config, "create_timing_cache"):
            cache = config.create_timing_cache(self._timing_cache)
            config.set_timing_cache(cache, False)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            errors = logger.errors or ["build_serialized_network returned no engine"]
            raise classify_build_failure(errors)("; ".join(errors[-5:]))
        if cache is not None:
            self._timing_cache = bytes(cache.serialize())
        return bytes(serialized)

    def _execute(self, trt, logger, engine_bytes: bytes, feeds: dict) -> dict:
        from polygraphy.backend.trt import TrtRunner
        from polygraphy.exception import PolygraphyException

        runtime = trt.Runtime(logger)
        engine = runtime.deserialize_cuda_engine(engine_bytes)
        if engine is None:
            raise TensorRTEngineError("the engine does not load here: " + logger.last_errors())
        try:
            with TrtRunner(engine) as runner:
                outputs = runner.infer(feeds)
        except PolygraphyException as exc:
            raise TensorRTEngineError(f"{exc}; {logger.last_errors()}") from None
        return {name: np.asarray(value) for name, value in outputs.items()}


def _make_logger(trt):
    """A TensorRT logger at verbose level: every line goes to stderr (the worker's log, which --fail-regex
    searches), and errors are kept to name the failure."""

    class Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity, msg):
            name = getattr(severity, "name", str(severity)).rsplit(".", 1)[-1]
            letter = _SEVERITY.get(name, "?")
            if letter in "FE":
                self.errors.append(msg)
            sys.stderr.write(f"[TRT] [{letter}] {msg}\n")

        def last_errors(self) -> str:
            return "; ".join(self.errors[-3:]) or "no error was logged"

    logger = Logger()
    if hasattr(logger, "min_severity"):
        logger.min_severity = trt.ILogger.Severity.VERBOSE
    return logger


def _version(flavour: str | None) -> str | None:
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    if flavour is None:
        return None
    known = packages_distributions()
    names = known.get(flavour, []) + known.get(f"{flavour}_bindings", []) + [flavour]
    for distribution in names:
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return None
