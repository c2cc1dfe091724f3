"""What GPUs this machine shows, read from nvidia-smi: for worker placement, fingerprints and `doctor`.

nvidia-smi rather than a CUDA library: the driver process must never create a CUDA context (workers do),
and nvidia-smi answers even where the CUDA runtime is missing or broken, which is what doctor reports.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass

QUERY = "index,name,compute_cap,driver_version,memory.total"


@dataclass(frozen=True)
class Gpu:
    index: str  # as CUDA_VISIBLE_DEVICES names it
    name: str
    compute_capability: str
    driver: str
    memory: str


@functools.lru_cache(maxsize=1)
def _smi() -> tuple[tuple[Gpu, ...], str, str]:
    """(all GPUs, CUDA version the driver supports, why none were read)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return (), "", "nvidia-smi not found (no NVIDIA driver)"
    try:
        listing = subprocess.run([smi, f"--query-gpu={QUERY}", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=20)
        banner = subprocess.run([smi], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), "", f"nvidia-smi failed: {exc}"
    if listing.returncode != 0:
        return (), "", f"nvidia-smi failed: {(listing.stderr or listing.stdout).strip()[:200]}"
    gpus = []
    for line in listing.stdout.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 5:
            gpus.append(Gpu(*fields))
    cuda = ""
    if "CUDA Version:" in banner:
        cuda = banner.split("CUDA Version:", 1)[1].split()[0]
    return tuple(gpus), cuda, "" if gpus else "nvidia-smi lists no GPU"


def visible_gpus() -> list[Gpu]:
    """The GPUs a CUDA program started now would see, in CUDA_VISIBLE_DEVICES order."""
    gpus, _, _ = _smi()
    wanted = os.environ.get("CUDA_VISIBLE_DEVICES")
    if wanted is None:
        return list(gpus)
    by_index = {g.index: g for g in gpus}
    return [by_index[i.strip()] for i in wanted.split(",") if i.strip() in by_index]


def driver_cuda_version() -> str:
    """The highest CUDA version the installed driver supports ("" without a driver)."""
    return _smi()[1]


def why_no_gpu() -> str:
    """Why no GPU is visible, or "" when one is."""
    if visible_gpus():
        return ""
    reason = _smi()[2]
    if not reason and os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        reason = f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides every GPU"
    return reason or "no GPU visible"


def describe_gpus() -> list[dict]:
    return [{"name": g.name, "compute_capability": g.compute_capability, "driver": g.driver} for g in visible_gpus()]
