"""`--jobs N` with the command oracle on this machine: the same reduction with 1 and with N check
commands at once, on the failing corpus models. The result must be identical (the same kept nodes);
the figure is the wall-time speed-up. Appends its table to BENCHMARKS.md with --write.

    python scripts/bench_jobs.py --jobs 2 --repeat 3 --write
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_vs_polygraphy import CORPUS, check_command, faithful, layerwise_inputs, run_reducer  # noqa: E402

HEADING = "## `--jobs` with the command oracle"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="only these corpus entries (comma-separated names)")
    parser.add_argument("--write", action="store_true", help="replace the section in BENCHMARKS.md")
    args = parser.parse_args()
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    entries = [e for e in manifest if e["expect"] == "fail" and (not args.only or e["name"] in args.only.split(","))]
    rows = []
    for entry in entries:
        work = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
        try:
            command = check_command(entry, layerwise_inputs(entry, work))
            flags = ["--inputs", str(CORPUS / entry["inputs"]), *faithful(entry), "--fail-code", "1"]
            runs: dict[int, list[dict]] = {1: [], args.jobs: []}
            for _ in range(args.repeat):  # interleaved, so drift in machine load hits both alike
                for jobs in runs:
                    runs[jobs].append(run_reducer(entry, [*flags, "--jobs", str(jobs), "--check", *command], work))
            serial, parallel = runs[1], runs[args.jobs]
            same = len({json.dumps(r["kept"]) for r in serial + parallel}) == 1
            row = {"name": entry["name"], "nodes": serial[0]["nodes"], "checks": (serial[0]["checks"],
                   parallel[0]["checks"]), "seconds": (statistics.median(r["seconds"] for r in serial),
                   statistics.median(r["seconds"] for r in parallel)), "same": same}
            rows.append(row)
            print(json.dumps(row), flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    table = render(rows, args)
    print(table)
    if args.write:
        path = ROOT / "BENCHMARKS.md"
        text = path.read_text()
        before, _, rest = text.partition(HEADING)
        after = ("\n## " + rest.split("\n## ", 1)[1]) if "\n## " in rest else ""
        path.write_text(before.rstrip() + "\n\n" + table + after)
    return 0


def render(rows: list[dict], args) -> str:
    lines = [HEADING, "",
             f"Written by `python scripts/bench_jobs.py --jobs {args.jobs} --repeat {args.repeat}` on "
             f"{len(os.sched_getaffinity(0))} CPU cores (medians). The same command as above (check_candidate.py), "
             f"with `--jobs 1` and `--jobs {args.jobs}`; the result must be the same model.", "",
             f"| model | final nodes | checks, jobs 1 / {args.jobs} | wall s, jobs 1 / {args.jobs} | speed-up "
             "| same kept nodes |", "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        one, many = r["seconds"]
        lines.append(f"| {r['name']} | {r['nodes']} | {r['checks'][0]} / {r['checks'][1]} | {one:.1f} / {many:.1f} "
                     f"| {one / many:.2f}x | {'yes' if r['same'] else 'NO'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
