"""A self-contained check command, usable by `polygraphy debug reduce --check` and `onnx-reduce --check`
alike: run MODEL on the fp32 reference and on the target runner with inputs from a Polygraphy JSON
(or .npz; names the model does not take are ignored, as Polygraphy does). Exit 0: passes; 1: fails
the way asked (NaN/Inf, tolerance, or with `--fail-on error` the target raised and --fail-regex matched
its message); 3: another failure (the target raised otherwise), so that a reducer using `--fail-code 1`
does not slip to it.

    python scripts/check_candidate.py polygraphy_debug.onnx layerwise_inputs.json \
        --runner onnxruntime:cpu:fp16-storage --fail-on nan
"""

from __future__ import annotations

import argparse
import re
import sys

import numpy as np
import onnx

from oracles import make_runner
from oracles.base import RunResult
from oracles.checks import NanCheck, ToleranceCheck
from reducer.activations import REFERENCE_RUNNER
from reducer.inputs import load_inputs_file


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("inputs")
    parser.add_argument("--runner", default="onnxruntime:cpu:fp16-storage")
    parser.add_argument("--fail-on", choices=["nan", "tolerance", "error"], default="nan")
    parser.add_argument("--fail-regex", default="", help="with --fail-on error: what the error must say")
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--rtol", type=float, default=1e-5)
    args = parser.parse_args()

    model = onnx.load(args.model, load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    wanted = [i.name for i in model.graph.input if i.name not in initializers]
    if args.inputs.endswith(".npz"):  # every captured tensor: read only the ones this candidate takes
        with np.load(args.inputs, allow_pickle=False) as data:
            missing = [name for name in wanted if name not in data.files]
            feeds = {name: np.asarray(data[name]) for name in wanted if name not in missing}
    else:
        data = load_inputs_file(args.inputs)
        missing = [name for name in wanted if name not in data]
        feeds = {name: np.asarray(data[name]) for name in wanted if name not in missing}
    if missing:
        print(f"no data for inputs {missing}", file=sys.stderr)
        return 2
    target = make_runner(args.runner)
    if args.fail_on == "error":  # a build or parse failure: no reference needed
        try:
            target.run(args.model, feeds, None)
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            matched = re.search(args.fail_regex, message) is not None
            print(f"{'FAIL' if matched else 'OTHER ERROR'}: {message[:500]}")
            return 1 if matched else 3
        print("PASS: the target ran")
        return 0
    reference = make_runner(REFERENCE_RUNNER).run(args.model, feeds, None)
    try:
        result = RunResult("ok", target.run(args.model, feeds, None))
    except Exception as exc:
        result = RunResult("error", error=str(exc))
    check = NanCheck() if args.fail_on == "nan" else ToleranceCheck(args.atol, args.rtol)
    verdict = check.judge(result, reference)
    print(f"FAIL ({verdict.signature.kind}): {verdict.reason}" if verdict.failing else f"PASS: {verdict.reason}")
    if verdict.elements is not None:  # read by onnx-reduce's proof of cause
        print(f"failing_elements={verdict.elements}")
    if not verdict.failing:
        return 0
    return 1 if verdict.signature.kind == args.fail_on else 3


if __name__ == "__main__":
    sys.exit(main())
