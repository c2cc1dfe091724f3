"""Over 2 GB: a transformer-like stack whose fp32 weights pass protobuf's 2 GiB limit (kept as external data),
with one planted fp16 overflow, reduced by onnx-reduce; prints the figures of BENCHMARKS.md's "Over 2 GB".

    python scripts/bench_big_model.py DIR                      # 5 blocks of 4096x16384 + 16384x4096: 2.7 GB
    python scripts/bench_big_model.py DIR --hidden 1024 --ff 1536  # ~50 MB, the same graph

Each block: MatMul(W1) + Add(b1) -> Gelu -> MatMul(W2) + Add(b2) -> residual Add -> LayerNormalization.
Block `--overflow-block` has its W2 scaled by 1e5: its MLP output passes 65504, so fp16 storage turns it to
Inf and the LayerNormalization after it to NaN; in fp32 the LayerNormalization brings it back to ~1.
The oracle: `--runner onnxruntime:cpu:fp16-storage --fail-on nan`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, external_data_helper, helper, numpy_helper

WEIGHTS = "weights.bin"
# onnx's own default (size_threshold): smaller tensors stay in the graph. ONNX Runtime maps each external tensor
# on its own: a model of 14k blocks with every bias external (86k mappings) passes Linux's vm.max_map_count
# (65530) and fails to load with std::bad_alloc
INLINE_BELOW = 1024


def transformer_stack(folder: Path, hidden: int = 4096, ff: int = 16384, blocks: int = 5, seq: int = 8,
                      overflow_block: int = 3, seed: int = 0) -> Path:
    """Write folder/model.onnx and folder/weights.bin, one tensor at a time (never the whole model in memory)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / WEIGHTS).unlink(missing_ok=True)
    rng = np.random.default_rng(seed)
    initializers: list[onnx.TensorProto] = []

    def weight(name: str, array: np.ndarray) -> str:
        tensor = numpy_helper.from_array(array.astype(np.float32), name)
        if len(tensor.raw_data) < INLINE_BELOW:  # as onnx.save_model(save_as_external_data=True) keeps them
            initializers.append(tensor)
            return name
        external_data_helper.set_external_data(tensor, WEIGHTS)
        external_data_helper.save_external_data(tensor, str(folder))  # appended; offset and length recorded
        tensor.ClearField("raw_data")
        initializers.append(tensor)
        return name

    nodes, previous = [], "x"
    for b in range(blocks):
        w1 = rng.standard_normal((hidden, ff), dtype=np.float32) / np.float32(np.sqrt(hidden))
        w2 = rng.standard_normal((ff, hidden), dtype=np.float32) / np.float32(np.sqrt(ff))
        if b == overflow_block:
            w2 *= np.float32(1e5)  # |MLP output| ~ 1e5: past fp16's 65504 somewhere
        p = f"block{b}"
        names = [weight(f"{p}.w1", w1), weight(f"{p}.b1", rng.standard_normal(ff) * 0.01),
                 weight(f"{p}.w2", w2), weight(f"{p}.b2", rng.standard_normal(hidden) * 0.01),
                 weight(f"{p}.gamma", np.ones(hidden)), weight(f"{p}.beta", np.zeros(hidden))]
        del w1, w2
        nodes += [
            helper.make_node("MatMul", [previous, names[0]], [f"{p}.h"], name=f"{p}/fc1"),
            helper.make_node("Add", [f"{p}.h", names[1]], [f"{p}.hb"], name=f"{p}/fc1_bias"),
            helper.make_node("Gelu", [f"{p}.hb"], [f"{p}.g"], name=f"{p}/gelu"),
            helper.make_node("MatMul", [f"{p}.g", names[2]], [f"{p}.o"], name=f"{p}/fc2"),
            helper.make_node("Add", [f"{p}.o", names[3]], [f"{p}.ob"], name=f"{p}/fc2_bias"),
            helper.make_node("Add", [previous, f"{p}.ob"], [f"{p}.res"], name=f"{p}/residual"),
            helper.make_node("LayerNormalization", [f"{p}.res", names[4], names[5]], [f"{p}.out"],
                             name=f"{p}/norm", axis=-1),
        ]
        previous = f"{p}.out"
    graph = helper.make_graph(nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, seq, hidden])],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())  # the graph alone: the weights are in weights.bin already
    return path


def _tree(pid: int) -> list[int]:
    """A process and its descendants, from /proc (no psutil needed)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        found.append(pending.pop())
        pending.extend(parents.get(found[-1], []))
    return found


def _high_water(pid: int) -> int:
    """VmHWM: the peak resident memory of one process so far, in bytes."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _peak_rss_of_tree(pid: int, peaks: dict, stop: threading.Event) -> None:
    """The driver's peak resident memory and its workers' (the largest of them), sampled every 100 ms."""
    while not stop.is_set():
        tree = _tree(pid)
        peaks["driver"] = max(peaks.get("driver", 0), _high_water(pid))
        for child in tree[1:]:
            peaks["worker"] = max(peaks.get("worker", 0), _high_water(child))
        stop.wait(0.1)


def _disk_peak(folder: Path, peaks: dict, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            used = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0
        except OSError:  # a check's folder removed while it was walked: the next sample counts
            used = 0
        peaks["out"] = max(peaks.get("out", 0), used)
        stop.wait(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=Path)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--ff", type=int, default=16384)
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the model and OUT afterwards")
    args = parser.parse_args()
    started = time.perf_counter()
    path = transformer_stack(args.dir / "model", args.hidden, args.ff, args.blocks)
    made = time.perf_counter() - started
    out = args.dir / "out"
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "reducer", "reduce", str(path), "-o", str(out),
               "--runner", "onnxruntime:cpu:fp16-storage", "--fail-on", "nan"]
    peaks: dict = {}
    stop = threading.Event()
    started = time.perf_counter()
    process = subprocess.Popen(command)
    watchers = [threading.Thread(target=_peak_rss_of_tree, args=(process.pid, peaks, stop)),
                threading.Thread(target=_disk_peak, args=(out, peaks, stop))]
    for watcher in watchers:
        watcher.start()
    code = process.wait()
    seconds = time.perf_counter() - started
    stop.set()
    for watcher in watchers:
        watcher.join()
    report = json.loads((out / "report.json").read_text())
    model_bytes = path.stat().st_size + (path.parent / WEIGHTS).stat().st_size
    figures = {
        "exit_code": code, "model_bytes": model_bytes,
        "nodes": len(onnx.load(str(path), load_external_data=False).graph.node),
        "make_seconds": round(made, 1), "reduce_seconds": round(seconds, 1),
        "minimal_nodes": report.get("nodes_after") or report.get("top_level_nodes_after"),
        "checks": (report.get("counters") or {}).get("checks", report.get("checks")),
        "peak_rss_driver": peaks.get("driver"), "peak_rss_worker": peaks.get("worker"),
        "peak_out_bytes": peaks.get("out"),
        "out_bytes_after": sum(p.stat().st_size for p in out.rglob("*") if p.is_file()),
        "minimal_bytes": sum(p.stat().st_size for p in out.glob("minimal.onnx*")),
        "bundle_zip_bytes": (out / "bundle.zip").stat().st_size if (out / "bundle.zip").exists() else None,
    }
    print(json.dumps(figures, indent=2))
    if not args.keep:
        shutil.rmtree(args.dir / "model", ignore_errors=True)


if __name__ == "__main__":
    main()
