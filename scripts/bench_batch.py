"""Batch throughput: `onnx-reduce batch corpus/batch.toml` with the local executor at --jobs 1 and --jobs 2, and
with the Ray executor on a fresh local Ray instance (its start and shutdown included), the configurations
interleaved, each in a new RUN_DIR; medians. Also checks that every configuration finds the same outcomes and bug
ids. Prints the table of BENCHMARKS.md's "Batch runs" section.

    python scripts/fetch_corpus.py      # the corpus models not in the repository
    python scripts/bench_batch.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "corpus" / "batch.toml"
CONFIGS = {
    "local `--jobs 1`": ["--jobs", "1"],
    "local `--jobs 2`": ["--jobs", "2"],
    "`--executor ray` (fresh local instance)": ["--executor", "ray"],
}
RAY_READY = re.compile(r"\[\s*([\d.]+)s\] started a local Ray instance")


def run_once(args: list[str], run_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # never someone's cluster
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "reducer", "batch", str(MANIFEST), "-o", str(run_dir), *args],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"batch {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    summary = json.loads((run_dir / "summary.json").read_text())
    ready = RAY_READY.search(done.stderr)
    return {"wall": wall, "ray_start": float(ready.group(1)) if ready else None,
            "outcomes": {m["name"]: (m["outcome"], m.get("bug"), m.get("nodes_after"), m.get("checks"))
                         for m in summary["models"]},
            "checks": sum(m.get("checks") or 0 for m in summary["models"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as scratch:
        for repeat in range(args.repeats):
            for index, (name, flags) in enumerate(CONFIGS.items()):
                result = run_once(flags, Path(scratch) / f"run{repeat}-{index}")
                runs[name].append(result)
                print(f"{name} #{repeat + 1}: {result['wall']:.1f} s", file=sys.stderr, flush=True)
    # other work on the machine skews every figure: said with them (the configurations are interleaved, so
    # the comparison suffers less than the absolute times)
    load = os.getloadavg()[1]
    reference = runs["local `--jobs 1`"][0]["outcomes"]
    same = all(r["outcomes"] == reference for results in runs.values() for r in results)
    models = len(reference)
    print(f"{models} models, {os.cpu_count()} CPU cores; outcomes, bug ids, nodes and checks identical in every "
          f"run: {'yes' if same else 'NO'}; load average over the last 5 min at the end: {load:.1f}\n")
    print(f"| | wall s ({args.repeats} runs) | median | models/min |")
    print("|---|---|---:|---:|")
    for name, results in runs.items():
        walls = [r["wall"] for r in results]
        median = statistics.median(walls)
        print(f"| {name} | {', '.join(f'{w:.1f}' for w in walls)} | {median:.1f} | {models / median * 60:.0f} |")
    starts = [r["ray_start"] for r in runs["`--executor ray` (fresh local instance)"] if r["ray_start"]]
    if starts:
        print(f"\nRay instance start (until the first task is submitted): median {statistics.median(starts):.1f} s")


if __name__ == "__main__":
    main()
