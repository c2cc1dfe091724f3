"""What a process that imports onnx costs at its start, side by side for two or more Python environments in one
run: each reduce, each worker and each `--check` script that reads the model pays it. Environments run in turn,
`--rounds` times, so that a noisy neighbour weighs on each alike; the table gives medians, in seconds.

    python scripts/bench_startup.py ANCHOR_VENV/bin/python .venv/bin/python --rounds 5

The anchor is an environment with only the package in question changed (e.g. `pip install ml_dtypes==0.7.0` in a
copy of .venv). Measured: `import onnx`, and README's first command (Silero VAD at fp16, 9 checks) end to end.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_REDUCE = ["-m", "reducer", "reduce", "corpus/models/silero_vad_16k_op15.onnx",
                 "--inputs", "corpus/inputs/silero_vad_int16pcm.npz", "--runner", "onnxruntime:cpu:fp16",
                 "--fail-on", "tolerance", "--atol", "0.01", "--rtol", "0.01"]


def seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - started


def versions(python: str) -> str:
    return subprocess.run([python, "-c", "import importlib.metadata as m; print('ml_dtypes', m.version('ml_dtypes'),"
                           " 'onnx', m.version('onnx'), 'numpy', m.version('numpy'))"],
                          check=True, capture_output=True, text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pythons", nargs="+", help="the interpreters of the environments to compare")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, dict[str, list[float]]] = {p: {"import onnx": [], "README's reduce": []} for p in args.pythons}
    for _ in range(args.rounds):
        for python in args.pythons:
            times[python]["import onnx"].append(seconds([python, "-c", "import onnx"]))
            with tempfile.TemporaryDirectory() as out:
                times[python]["README's reduce"].append(seconds([python, *README_REDUCE, "-o", out]))
    print("| environment | import onnx, s | README's reduce, s |")
    print("|---|---:|---:|")
    for python, row in times.items():
        cells = " | ".join(f"{statistics.median(v):.2f}" for v in row.values())
        print(f"| {versions(python)} | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
