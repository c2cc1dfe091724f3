"""A self-contained check command, usable by `polygraphy debug reduce --check` and `onnx-reduce --check`
alike: run MODEL on the fp32 reference and on the target runner with inputs from a Polygraphy JSON
(or .npz; names the model does not take are ignored, as Polygraphy does). Exit 0: passes; 1: fails
the way asked (NaN/Inf, tolerance, or with `--fail-on error` the target raised or crashed, run in a
process of its own, and --fail-regex matched its message); 3: another failure (the target raised
otherwise), so that a reducer using `--fail-code 1` does not slip to it; 2: nothing was judged (an input
without data, or a runner that cannot run on this machine, said in one line).

    python scripts/check_candidate.py polygraphy_debug.onnx layerwise_inputs.json \
        --runner onnxruntime:cpu:fp16-storage --fail-on nan

`--keep-fp32 FILE` (onnx-reduce's `{keep_fp32}`): the nodes it names are computed in fp32 by an fp16 runner,
so that onnx-reduce proves a repro kept in fp32 through this command, as through its own runner.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import onnx

from oracles import make_runner
from oracles.base import RunResult
from oracles.checks import NanCheck, ToleranceCheck
from oracles.onnxruntime_runner import EXACT_OUTPUTS_KEY
from oracles.worker import Worker, write_feeds
from reducer.activations import REFERENCE_RUNNER
from reducer.errors import EXIT_BAD_INPUT, BadInputsError, BadModelError, ReducerError
from reducer.inputs import load_inputs_file
from reducer.options import DEFAULT_CHECK_TIMEOUT


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("inputs")
    parser.add_argument("--runner", default="onnxruntime:cpu:fp16-storage")
    parser.add_argument("--fail-on", choices=["nan", "tolerance", "error"], default="nan")
    parser.add_argument("--fail-regex", default="", help="with --fail-on error: what the error must say")
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--keep-fp32", metavar="FILE", help='{"nodes": [...], "tensors": [...]}: keep those in fp32')
    args = parser.parse_args()

    try:
        model = onnx.load(args.model, load_external_data=False)
    except Exception as exc:  # protobuf raises several types for truncated or foreign files
        raise BadModelError(f"{args.model}: cannot load it as an ONNX model ({type(exc).__name__})") from None
    initializers = {t.name for t in model.graph.initializer}
    wanted = [i.name for i in model.graph.input if i.name not in initializers]
    if args.inputs.endswith(".npz"):  # every captured tensor: read only the ones this candidate takes
        if not Path(args.inputs).is_file():
            raise BadInputsError(f"{args.inputs}: no such file")
        try:
            with np.load(args.inputs, allow_pickle=False) as data:
                missing = [name for name in wanted if name not in data.files]
                feeds = {name: np.asarray(data[name]) for name in wanted if name not in missing}
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise BadInputsError(f"{args.inputs}: cannot read it as .npz ({type(exc).__name__})") from None
    else:
        data = load_inputs_file(args.inputs)
        missing = [name for name in wanted if name not in data]
        feeds = {name: np.asarray(data[name]) for name in wanted if name not in missing}
    if missing:
        print(f"no data for inputs {missing}", file=sys.stderr)
        return EXIT_BAD_INPUT
    why_not = make_runner(args.runner).unavailable_reason()
    if why_not:  # not the model's failure, and not a pass: say why, as onnx-reduce's own checks do
        print(f"cannot run {args.runner} here: {why_not}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.fail_on == "error":  # a build or parse failure: no reference needed
        message = _error_of(args.runner, args.model, feeds)
        if message is None:
            print("PASS: the target ran")
            return 0
        matched = re.search(args.fail_regex, message) is not None
        print(f"{'FAIL' if matched else 'OTHER ERROR'}: {message[:500]}")
        return 1 if matched else 3
    target = make_runner(args.runner)
    reference = make_runner(REFERENCE_RUNNER).run(args.model, feeds, None)
    # beside the model, where its external data's relative paths still lead
    kept = Path(args.model).with_name(f"kept_in_fp32_{os.getpid()}.onnx")
    target_model = _kept_in_fp32(model, args.keep_fp32, kept) or args.model
    try:
        result = RunResult("ok", target.run(target_model, feeds, None))
    except Exception as exc:
        result = RunResult("error", error=str(exc))
    finally:
        kept.unlink(missing_ok=True)
    check = NanCheck() if args.fail_on == "nan" else ToleranceCheck(args.atol, args.rtol)
    verdict = check.judge(result, reference)
    print(f"FAIL ({verdict.signature.kind}): {verdict.reason}" if verdict.failing else f"PASS: {verdict.reason}")
    if verdict.elements is not None:  # read by onnx-reduce's proof of cause
        print(f"failing_elements={verdict.elements}")
    if verdict.failing and verdict.signature.outputs:  # the search drops the parts whose outputs pass
        print(f"failing_outputs={json.dumps(list(verdict.signature.outputs))}")
    if result.status == "ok":  # NaN/Inf where the reference is finite: onnx-reduce then seeks the onset
        print(f"nonfinite_elements={NanCheck().judge(result, reference).elements}")
    if not verdict.failing:
        return 0
    return 1 if verdict.signature.kind == args.fail_on else 3


def _error_of(runner: str, model: str, feeds: dict[str, np.ndarray]) -> str | None:
    """What the target raises on the model, None where it runs. In a worker process of its own, as onnx-reduce's
    built-in checks run it: a runtime that crashes (a segfault in a graph optimiser) is an error to reduce too,
    said by its signal, not this command dying unheard."""
    with tempfile.TemporaryDirectory(prefix="check-candidate-") as scratch:
        worker = Worker(runner)
        try:
            result = worker.run(Path(model), write_feeds(feeds, Path(scratch)), DEFAULT_CHECK_TIMEOUT)
        except ReducerError as exc:  # the runner cannot start here: another failure, not the one asked for
            return f"{type(exc).__name__}: {exc}"
        finally:
            worker.close()
    if result.status == "ok":
        return None
    return result.error if result.status == "error" else f"{result.status}: {result.error}"


def _kept_in_fp32(model: onnx.ModelProto, keep_file: str | None, path: Path) -> str | None:
    """The model with the tensors the file names marked for onnx-reduce's fp16 runners to compute in fp32 (their
    interface, EXACT_OUTPUTS_KEY); None where it names none."""
    tensors = json.loads(Path(keep_file).read_text()).get("tensors", []) if keep_file else []
    if not tensors:
        return None
    props = [p for p in model.metadata_props if p.key != EXACT_OUTPUTS_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(props)
    model.metadata_props.add(key=EXACT_OUTPUTS_KEY, value=json.dumps(tensors))
    onnx.save(model, str(path))
    return str(path)


def _main() -> int:
    """main, with what the user gave wrong (a missing file, a runner that is not one) said in one line, exit 2."""
    try:
        return main()
    except ReducerError as exc:
        print(f"check_candidate: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(_main())
