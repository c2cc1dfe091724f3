"""A check command that asks of a candidate what onnx-reduce's proof asks: it fails the way asked (through
scripts/check_candidate.py, as both tools' same command) and it carries the whole model's failure (the original
with the candidate's nodes fed from the reference passes, or fails in at most a tenth of the elements it did; the
candidate and all below it, fed exact inputs, still fail). For scripts/evaluate_proving.py, which hands it to
`polygraphy debug reduce`: what a proven repro costs Polygraphy, set beside what it costs ours.

    python scripts/proving_check.py CANDIDATE TENSORS MODEL ACTIVATIONS RUNS.jsonl \
        --runner onnxruntime:cpu:fp16 --fail-on tolerance --atol 0.01 --rtol 0.01

(MODEL, the original; ACTIVATIONS, its reference's folder; RUNS.jsonl, the log: positional, as Polygraphy takes
an option after `--check` that begins as one of its own for its own.)

Exit 1: fails and carries; 0: passes alone, or fails alone without carrying the failure (a bystander); otherwise
check_candidate's own code; 2 also where a file it is given is missing or unreadable. Each run it makes (the
candidate's check, and the proof's runs that no earlier invocation made: their verdicts are cached beside the log)
is a line of the log."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def log_runs(path: Path, kind: str, runs: int, **facts) -> None:
    with open(path, "a") as log:
        log.write(json.dumps({"kind": kind, "runs": runs, **facts}) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidate")
    parser.add_argument("tensors")
    parser.add_argument("original")
    parser.add_argument("store", help="the reference's activations (reducer.activations)")
    parser.add_argument("log", type=Path)
    parser.add_argument("--runner", required=True)
    parser.add_argument("--fail-on", required=True)
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--rtol", type=float, default=1e-5)
    args = parser.parse_args()
    missing = [path for path in (args.candidate, args.tensors, args.original, Path(args.store) / "index.json")
               if not Path(path).is_file()]
    if missing:  # said before any run: the log then holds none of this invocation's
        print(f"proving_check: no such file: {missing[0]}", file=sys.stderr)
        return 2

    flags = ["--runner", args.runner, "--fail-on", args.fail_on, "--atol", str(args.atol), "--rtol", str(args.rtol)]
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_candidate.py"), args.candidate, args.tensors,
                           *flags], capture_output=True, text=True)
    print(done.stdout, end="")
    print(done.stderr, end="", file=sys.stderr)
    log_runs(args.log, "candidate", 1, code=done.returncode)
    if done.returncode != 1:
        return done.returncode

    from reducer.activations import ActivationStore
    from reducer.candidate import Candidate
    from reducer.driver import Reduction
    from reducer.model import load_model
    from reducer.options import OracleOptions, build_oracle

    model = load_model(args.original)
    store_dir = Path(args.store)
    store = ActivationStore.open(store_dir, json.loads((store_dir / "index.json").read_text())["key"])
    by_name = {node.name: index for index, node in enumerate(model.nodes)}
    names = [node.name for node in onnx.load(args.candidate, load_external_data=False).graph.node]
    kept = frozenset(by_name[name] for name in names if name in by_name)
    options = OracleOptions(runner=args.runner, fail_on=args.fail_on, atol=args.atol, rtol=args.rtol)
    # the cache beside the log answers what an earlier invocation ran (the whole model's run, a shared run)
    reduction = Reduction(model, store, build_oracle(options), args.log.parent / "proof", [])
    try:
        reduction.cause_method = "reference"  # what a check command allows, and what ours is proven by
        reduction.start()
        holds = bool(kept) and reduction.proves_cause and reduction.proof(Candidate(kept)).holds
        log_runs(args.log, "proof", reduction.counters.checks, holds=holds, nodes=len(kept))
    finally:
        reduction.close()
    print(f"carries the failure: {'yes' if holds else 'no (a bystander)'}")
    return 1 if holds else 0


def _main() -> int:
    """main, with what it was given wrong (a model onnx cannot read, an activation folder of another model) said in
    one line, exit 2, as check_candidate says it."""
    from google.protobuf.message import DecodeError

    from reducer.errors import ReducerError

    try:
        return main()
    except (ReducerError, OSError, ValueError, KeyError, DecodeError, onnx.checker.ValidationError) as exc:
        print(f"proving_check: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_main())
