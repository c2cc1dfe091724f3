"""The driver's own overhead per candidate at scale, side by side for two or more checkouts in one run: what
a change to materialize, key, feeds or save_model buys, with the anchor measured on the same machine at the
same time (checkouts run in turn, `--rounds` times, so that a noisy neighbour weighs on each alike).

    python scripts/bench_overhead.py ANCHOR_CHECKOUT .          # e.g. a `git worktree` of the commit before
    python scripts/bench_overhead.py . --nodes 10000 --rounds 1

The graph is bench_scale.py's transformer; a candidate of k nodes (1, 1,000, 10,000, half the graph and all but
10 of its nodes) is k consecutive nodes from the top of the topological order (fed what the first nodes compute:
faithful), made ready for a check as the reduction does and saved as the oracle saves it. Each checkout, in its
own process, reports the median of 9 candidates per size (the first two of a size pay for the page cache
growing); the table gives the median over the rounds, in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(nodes: int, folder: Path) -> dict[int, float]:
    """In the checkout this process imports: ms per candidate of each size, the median of 9."""
    import reducer
    from reducer.driver import Progress, Reduction
    from reducer.options import InputOptions, OracleOptions, build_oracle
    from reducer.session import prepare

    here = Path(os.environ["PYTHONPATH"]).resolve()
    assert Path(reducer.__file__).resolve().is_relative_to(here), reducer.__file__  # the checkout asked for
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_scale

    path, inputs = folder / f"transformer{nodes}.onnx", folder / f"transformer{nodes}_inputs.npz"
    if not path.exists():
        bench_scale.write_case("transformer", nodes, folder)
    work = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    try:
        model, store = prepare(str(path), InputOptions(inputs=str(inputs)), work / "ref", Progress())
        oracle = build_oracle(OracleOptions(runner=bench_scale.RUNNER, fail_on="nan"))
        try:
            measured = bench_scale.candidate_overhead(Reduction(model, store, oracle, work / "checks", []),
                                                      sizes=(1, 1000, 10000, len(model) - 10), repeat=9)
            return {**measured, "peak_mb": _peak_mb()}
        finally:
            oracle.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _peak_mb() -> float:
    """This process's peak resident memory (VmHWM): the model loaded, its store opened, the candidates made."""
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", nargs="+", help="folders of onnx-reducer checkouts (the anchor first)")
    parser.add_argument("--nodes", type=int, default=100001)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure here, print JSON
    args = parser.parse_args()
    folder = ROOT / "out" / "scale"
    if args.one:
        print(json.dumps(measure(args.nodes, folder)))
        return 0
    runs: dict[str, list[dict]] = {c: [] for c in args.checkouts}
    for _ in range(args.rounds):
        for checkout in args.checkouts:
            env = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())}  # its `reducer`, not this one's
            done = subprocess.run([sys.executable, __file__, ".", "--one", "1", "--nodes", str(args.nodes)],
                                  env=env, capture_output=True, text=True, check=True)
            runs[checkout].append(json.loads(done.stdout.strip().splitlines()[-1]))
    sizes = sorted({int(k) for r in runs.values() for m in r for k in m if k.isdigit()})
    print(f"| commit | {' | '.join(f'{s} nodes' for s in sizes)} | driver peak MB |")
    print("|---|" + "---:|" * (len(sizes) + 1))
    for checkout, measured in runs.items():
        commit = subprocess.run(["git", "-C", checkout, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "?"
        dirty = subprocess.run(["git", "-C", checkout, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        cells = [f"{statistics.median(m[str(s)] for m in measured):.1f}" for s in sizes]
        peak = statistics.median(m["peak_mb"] for m in measured)
        print(f"| {commit}{' + changes' if dirty else ''} | {' | '.join(cells)} | {peak:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
