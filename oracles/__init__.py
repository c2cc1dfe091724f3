"""Runners (backends), checks, and the oracles that combine them in isolated workers.

Runners are registered by the first part of their spec (`onnxruntime:cpu:fp16` -> `onnxruntime`);
third parties add theirs through the `onnx_reducer.oracles` entry point group.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points

from reducer.errors import UsageError

BUILTIN_RUNNERS = {
    "onnxruntime": "oracles.onnxruntime_runner:OnnxRuntimeRunner",
    "tensorrt": "oracles.tensorrt_runner:TensorRTRunner",
}


def runner_families() -> dict[str, str]:
    families = dict(BUILTIN_RUNNERS)
    for entry in entry_points(group="onnx_reducer.oracles"):
        families.setdefault(entry.name, entry.value)
    return families


def make_runner(spec: str):
    family = spec.split(":", 1)[0]
    families = runner_families()
    if family not in families:
        raise UsageError(f"unknown runner '{spec}' (known: {', '.join(sorted(families))})")
    module, _, attr = families[family].partition(":")
    return getattr(import_module(module), attr)(spec)
