"""The machine a failure was seen on, as NVIDIA's TensorRT issue template asks for it (TensorRT, GPU,
driver, CUDA, cuDNN, OS, Python, PyTorch/TensorFlow, baremetal or container), plus the versions that
decide our own results. Only named versions are read: never the process environment."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PROBE_TIMEOUT = 10.0  # seconds for nvidia-smi / nvcc: a wedged driver must not hang the bundle

# The template's fields, in its order and words: report.md prints them as the template does.
TEMPLATE_FIELDS = {
    "tensorrt_version": "TensorRT Version",
    "nvidia_gpu": "NVIDIA GPU",
    "nvidia_driver_version": "NVIDIA Driver Version",
    "cuda_version": "CUDA Version",
    "cudnn_version": "CUDNN Version",
    "operating_system": "Operating System",
    "python_version": "Python Version (if applicable)",
    "tensorflow_version": "Tensorflow Version (if applicable)",
    "pytorch_version": "PyTorch Version (if applicable)",
    "baremetal_or_container": "Baremetal or Container (if so, version)",
}


def package_version(*names: str) -> str | None:
    """The installed version of the first of these distributions that is installed."""
    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def _run(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def gpus() -> list[dict]:
    """Name, driver and compute capability of each NVIDIA GPU nvidia-smi sees (none: an empty list)."""
    text = _run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"])
    found = []
    for line in (text or "").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3:
            found.append({"name": fields[0], "driver_version": fields[1], "compute_capability": fields[2]})
    return found


def cuda_version() -> tuple[str | None, str | None]:
    """(the CUDA runtime found: pip wheel or nvcc, the newest CUDA the driver supports: nvidia-smi)."""
    runtime = package_version("nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11",
                              "nvidia-cuda-runtime")
    if runtime is None:
        nvcc = _run(["nvcc", "--version"]) or ""
        match = re.search(r"release ([\d.]+)", nvcc)
        runtime = match.group(1) if match else None
    smi = _run(["nvidia-smi"]) or ""
    match = re.search(r"CUDA Version:\s*([\d.]+)", smi)
    return runtime, match.group(1) if match else None


def cudnn_version() -> str | None:
    wheel = package_version("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11")
    if wheel:
        return wheel
    for header in (Path("/usr/include/cudnn_version.h"), Path("/usr/local/cuda/include/cudnn_version.h")):
        try:
            text = header.read_text()
        except OSError:
            continue
        parts = [re.search(rf"#define CUDNN_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCHLEVEL")]
        if all(parts):
            return ".".join(m.group(1) for m in parts)
    return None


def operating_system() -> str:
    try:
        name = platform.freedesktop_os_release().get("PRETTY_NAME", "")
    except (OSError, AttributeError):
        name = ""
    base = f"{platform.system()} {platform.release()} {platform.machine()}"
    return f"{name} ({base})" if name else base


def container() -> str:
    """Baremetal, or the kind of container: what the template asks."""
    if Path("/.dockerenv").exists():
        return "container (docker)"
    if Path("/run/.containerenv").exists():
        return "container (podman)"
    try:
        cgroup = Path("/proc/1/cgroup").read_text()
    except OSError:
        cgroup = ""
    for marker in ("docker", "kubepods", "containerd", "lxc"):
        if marker in cgroup:
            return f"container ({marker})"
    return "baremetal"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def collect(runner: dict, command_line: list[str] | None, family_extras: dict) -> dict:
    """env.json: the template's fields first (null where the machine has no such thing), then ours."""
    found = gpus()
    runtime_cuda, driver_cuda = cuda_version()
    environment = {
        "tensorrt_version": package_version("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu11",
                                            "tensorrt_rtx", "tensorrt-rtx"),
        "nvidia_gpu": ", ".join(g["name"] for g in found) or None,
        "nvidia_driver_version": found[0]["driver_version"] if found else None,
        "cuda_version": runtime_cuda,
        "cudnn_version": cudnn_version(),
        "operating_system": operating_system(),
        "python_version": platform.python_version(),
        "tensorflow_version": package_version("tensorflow", "tensorflow-cpu"),
        "pytorch_version": package_version("torch"),
        "baremetal_or_container": container(),
        "gpu_compute_capability": ", ".join(g["compute_capability"] for g in found) or None,
        "cuda_driver_supports": driver_cuda,
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "onnx_version": package_version("onnx"),
        "onnxruntime_version": package_version("onnxruntime", "onnxruntime-gpu"),
        "polygraphy_version": package_version("polygraphy"),
        "onnxconverter_common_version": package_version("onnxconverter-common"),
        "onnx_reducer_version": package_version("onnx-reducer"),
        "numpy_version": package_version("numpy"),
        "runner": runner,
        "command_line": command_line,
    }
    environment.update(family_extras)
    return environment
