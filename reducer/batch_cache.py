"""Results shared from night to night (`onnx-reduce batch --cache DIR`): a model whose bytes, inputs, check
script, reduce options and runtimes are all unchanged since a night that finished it gets that night's result
(its report, minimal model and bundle) instead of a reduction: no engine build, no check. A runtime upgrade
changes the key, so everything is checked again."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from importlib import metadata
from pathlib import Path

import onnx

# what a model's result depends on besides its own files; an upgrade of any of these re-checks everything
RUNTIMES = ("onnx-reducer", "onnxruntime", "onnxruntime-gpu", "onnx", "onnxconverter-common", "polygraphy",
            "tensorrt", "tensorrt-cu12", "tensorrt-cu13", "tensorrt-rtx-cu12-bindings", "tensorrt-rtx-cu13-bindings",
            "numpy")
NOT_KEPT = ("activations", "work", "previous", ".lock", "cache.jsonl")  # per-night scratch, or large and rebuilt
KEY_VERSION = 1


def runtime_versions() -> dict[str, str]:
    found = {}
    for name in RUNTIMES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def result_key(model: Path, argv: list[str], versions: dict[str, str]) -> str | None:
    """What a model's result depends on, hashed; None when the model cannot be read (it is reduced, and its
    error reported, as without a cache). `argv`: its reduce command line without the output folder; the
    files it names (inputs, a check script) count by their bytes."""
    from reducer.model import _check_external_data, _fingerprint, file_digest

    try:
        proto = onnx.load(str(model), load_external_data=False)
        fingerprint = _fingerprint(model, _check_external_data(proto, model.parent))
    except Exception:
        return None
    files = {arg: file_digest(arg) for arg in argv if os.path.isabs(arg) and os.path.isfile(arg)}
    identity = {"version": KEY_VERSION, "model": fingerprint, "argv": argv, "files": files, "runtimes": versions}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def restore(cache: Path, key: str, out: Path) -> dict | None:
    """The cached night's record, its files copied into `out`; None when there is none."""
    entry = cache / key
    try:
        record = json.loads((entry / "record.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    shutil.copytree(entry / "out", out, dirs_exist_ok=True, symlinks=False)
    return record


def store(cache: Path, key: str, out: Path, record: dict) -> None:
    """Keep a finished model's result under `key`; written aside and renamed, so a night killed meanwhile
    leaves no half entry (and of two nights writing one key, the first kept wins)."""
    entry = cache / key
    if entry.exists():
        return
    cache.mkdir(parents=True, exist_ok=True)
    # named by host and process: on a shared cache, two nodes' workers may hold the same process id
    staging = cache / f".{key}.{socket.gethostname()}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(out, staging / "out", ignore=shutil.ignore_patterns(*NOT_KEPT), symlinks=False)
    (staging / "record.json").write_text(json.dumps(record, indent=2) + "\n")
    try:
        os.rename(staging, entry)
    except OSError:  # another night kept it first
        shutil.rmtree(staging, ignore_errors=True)
