"""What a proven repro costs Polygraphy: `polygraphy debug reduce --mode=bisect` handed scripts/proving_check.py,
the same check as scripts/evaluate.py's with the proof onnx-reduce makes added to it (a candidate counts as failing
only where it carries the whole model's failure, fed the reference), on a set's tolerance rows. Every run is
counted as a check: the candidates' and the proof's (the whole model's once, then the runs no earlier candidate
made). Set beside the figures scripts/evaluate.py recorded for Polygraphy's plain run and ours (`--results`).

    python scripts/evaluate_proving.py --manifest corpus/evaluation.json --results results.jsonl \
        --only ddddocr_rawpixels_fp16_tolerance --output proving.jsonl
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import evaluate  # noqa: E402

PROVING_CHECK = Path(__file__).resolve().parent / "proving_check.py"


def prove_with_polygraphy(entry: dict, timeout: float) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"proving-{entry['name']}-"))
    try:
        tensors, given = evaluate.capture(entry, work)
        log = work / "proof" / "runs.jsonl"
        log.parent.mkdir()
        command = [sys.executable, str(PROVING_CHECK), "polygraphy_debug.onnx", str(tensors), entry["model"],
                   str(work / "ref" / "activations"), str(log),
                   *evaluate.oracle_flags(entry)]
        result = evaluate.run_polygraphy(entry, command, given, tensors, work, timeout)
        lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        result["runs"] = sum(line["runs"] for line in lines)
        result["proofs_held"] = sum(1 for line in lines if line.get("holds"))
        result["bystanders"] = sum(1 for line in lines if line.get("holds") is False)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=evaluate.ROOT / "corpus" / "evaluation.json")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--results", type=Path, help="scripts/evaluate.py's results for the same set, to set beside")
    parser.add_argument("--output", type=Path, required=True, help="JSON lines, one a row (appended)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--runner", help="every entry under this runner instead of its own (onnxruntime:cuda:fp16)")
    args = parser.parse_args()
    evaluate.polygraphy_argv()  # said before any row runs

    entries = json.loads(args.manifest.read_text())
    entries = entries if isinstance(entries, list) else entries.get("entries", entries)
    recorded = {}
    if args.results and args.results.exists():
        recorded = {row["name"]: row for row in map(json.loads, args.results.read_text().splitlines())}
    for entry in entries:
        if entry["fail_on"] != "tolerance" or (args.only is not None and entry["name"] not in args.only):
            continue
        folder = args.manifest.resolve().parent  # the check runs in Polygraphy's folder: no relative path
        entry = dict(entry, model=str(folder / entry["model"]), inputs=str(folder / entry["inputs"]),
                     runner=args.runner or entry["runner"])
        proving = prove_with_polygraphy(entry, args.timeout)
        known = recorded.get(entry["name"], {})
        row = {"name": entry["name"], "runner": entry["runner"], "proving": proving,
               "polygraphy": known.get("polygraphy"), "ours": known.get("command")}
        with open(args.output, "a") as out:
            out.write(json.dumps(row) + "\n")
        print(f"{entry['name']}: proving {evaluate.cell(proving)}, {proving['runs']} runs, "
              f"cause {evaluate.cause_cell(proving)}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
