#!/usr/bin/env python3
"""Check that every corpus case fails (or passes) the way manifest.json says.

Standalone: numpy + onnx + onnxruntime + onnxconverter-common only (onnx comes
with onnxconverter-common).  For each manifest entry it runs

* the reference: onnxruntime CPU, fp32, graph_optimization_level=ORT_DISABLE_ALL
* the target runner:
    onnxruntime:cpu:fp16      model converted with
                              onnxconverter_common.float16.convert_float_to_float16(
                                  model, keep_io_types=True,
                                  node_block_list=<names of all Cast(to=FLOAT) nodes>)
                              run with ORT_ENABLE_ALL
    onnxruntime:cpu:fp32:ON   the fp32 model at level O0..O3
                              (O0=DISABLE_ALL, O1=BASIC, O2=EXTENDED, O3=ALL)
* the check:
    nan        fails when a target output element is NaN/Inf where the
               reference element is finite
    tolerance  Polygraphy's elemwise rule: fails when some element has |target-ref| > atol
               and |target-ref|/|ref| > rtol (a NaN difference always fails)
               (a non-finite difference counts as exceeding it)

and prints whether the outcome matches "expect".  Exit status 1 if any entry
does not behave as declared (or, with --strict, if a model is missing).
Models marked "fetch" in the manifest come from scripts/fetch_corpus.py; when
absent they are reported as SKIP.

    python corpus/verify_cases.py [--strict] [--only NAME ...] [-v]
"""
import argparse
import copy
import hashlib
import json
import os
import sys
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnxconverter_common import float16

HERE = os.path.dirname(os.path.abspath(__file__))
# the converter warns for every constant it clamps to [1e-7, 1e4]; noise here
warnings.filterwarnings("ignore", module="onnxconverter_common")

LEVELS = {
    "O0": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "O1": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "O2": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "O3": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def cast_to_float_nodes(graph):
    """Names of Cast nodes with to=FLOAT, in the graph and all subgraphs.

    onnxconverter-common 1.16 leaves Cast(to=FLOAT) untouched but marks its
    output value_info as float16, so onnxruntime rejects the converted model
    ("Type (tensor(float16)) of output arg ... does not match expected type
    (tensor(float))").  Blocking those nodes by name keeps them fp32 and makes
    the converter insert a Cast to fp16 after them.  (Putting "Cast" in
    op_block_list instead makes the converter loop forever.)
    """
    names = []
    for node in graph.node:
        if node.op_type == "Cast" and any(
                a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in node.attribute):
            names.append(node.name)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                names += cast_to_float_nodes(a.g)
            for g in a.graphs:
                names += cast_to_float_nodes(g)
    return names


def to_fp16(model):
    m = copy.deepcopy(model)  # the converter may modify its argument in place
    return float16.convert_float_to_float16(
        m, keep_io_types=True, node_block_list=cast_to_float_nodes(m.graph))


def session(model, level):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def timed_run(sess, feeds):
    t = time.perf_counter()
    out = sess.run(None, feeds)
    return out, time.perf_counter() - t


def target_kind(runner):
    """(precision, level) of a runner this script runs alone: ONNX Runtime CPU fp16 (at O3) or fp32 at a level;
    None for the others (fp16 storage, a GPU), which `onnx-reduce check` runs."""
    parts = runner.split(":")
    if parts[:2] != ["onnxruntime", "cpu"] or len(parts) < 3:
        return None
    if parts[2:] == ["fp16"]:
        return "fp16", "O3"
    if parts[2] == "fp32":
        return "fp32", parts[3] if len(parts) > 3 else "O3"
    return None


def build_target(model, runner):
    kind = target_kind(runner)
    if kind is None:
        raise ValueError("unknown runner " + runner)
    precision, level = kind
    return session(to_fp16(model) if precision == "fp16" else model, LEVELS[level])


def check(kind, ref, tgt, atol, rtol):
    """Return (failed, detail) over all outputs."""
    details = []
    failed = False
    for name, r, t in zip(ref.keys(), ref.values(), tgt.values(), strict=False):
        r = np.asarray(r)
        t = np.asarray(t)
        if r.shape != t.shape:
            details.append(f"{name}: shape {r.shape} vs {t.shape}")
            failed = True
            continue
        if r.dtype.kind != "f":
            if not np.array_equal(r, t) and kind == "tolerance":
                failed = True
                details.append(f"{name}: non-float output differs")
            continue
        r64 = r.astype(np.float64)
        t64 = t.astype(np.float64)
        if kind == "nan":
            bad = ~np.isfinite(t64) & np.isfinite(r64)
            n = int(bad.sum())
            if n:
                failed = True
                details.append("%s: %d/%d non-finite (nan=%d inf=%d) where ref finite"
                               % (name, n, bad.size, int(np.isnan(t64).sum()), int(np.isinf(t64).sum())))
            else:
                details.append(f"{name}: finite")
        elif kind == "tolerance":
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                diff = np.abs(t64 - r64)
                # Polygraphy's elemwise rule: both the absolute and the relative error too large
                rel = diff / np.where(r64 == 0, np.finfo(np.float64).eps, np.abs(r64))
                bad = ((diff > atol) | np.isnan(diff)) & ((rel > rtol) | np.isnan(rel))
            n = int(bad.sum())
            finite = diff[np.isfinite(diff)]
            maxd = float(finite.max()) if finite.size else float("nan")
            if n:
                failed = True
            details.append("%s: %d/%d out of tol, max|diff|=%.3g, target finite=%s"
                           % (name, n, bad.size, maxd, bool(np.isfinite(t64).all())))
        else:
            raise ValueError("unknown fail_on " + kind)
    return failed, details


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", default=os.path.join(HERE, "manifest.json"))
    ap.add_argument("--strict", action="store_true", help="missing models count as mismatches")
    ap.add_argument("--only", nargs="*", help="entry names to run")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    with open(args.manifest) as f:
        entries = json.load(f)
    base = os.path.dirname(os.path.abspath(args.manifest))
    mismatches = skipped = ok = 0
    for e in entries:
        if args.only and e["name"] not in args.only:
            continue
        if target_kind(e["runner"]) is None or e["fail_on"] not in ("nan", "tolerance"):  # fp16 storage, errors
            print("SKIP     %-48s %s %s is not one this script runs alone (onnx-reduce check runs it)"
                  % (e["name"], e["runner"], e["fail_on"]))
            skipped += 1
            continue
        mpath = os.path.join(base, e["model"])
        if not os.path.exists(mpath):
            print("SKIP     %-48s model %s missing (python scripts/fetch_corpus.py)" % (e["name"], e["model"]))
            skipped += 1
            if args.strict:
                mismatches += 1
            continue
        if sha256_of(mpath) != e["sha256"]:
            print("MISMATCH %-48s sha256 of %s differs from manifest" % (e["name"], e["model"]))
            mismatches += 1
            continue
        model = onnx.load(mpath)
        with np.load(os.path.join(base, e["inputs"])) as z:
            feeds = {k: z[k] for k in z.files}
        ref_sess = session(model, LEVELS["O0"])
        names = [o.name for o in ref_sess.get_outputs()]
        ref_out, t_ref = timed_run(ref_sess, feeds)
        try:
            tgt_sess = build_target(model, e["runner"])
            tgt_out, t_tgt = timed_run(tgt_sess, feeds)
        except Exception as exc:  # this script's own conversion, not the tool's runner: say so in a line
            print("MISMATCH %-48s %s: the target did not run here: %s"
                  % (e["name"], e["runner"], str(exc).strip().splitlines()[0][:200]))
            mismatches += 1
            continue
        failed, details = check(e["fail_on"], dict(zip(names, ref_out, strict=True)),
                                dict(zip(names, tgt_out, strict=True)), e.get("atol", 0.0), e.get("rtol", 0.0))
        got = "fail" if failed else "pass"
        good = got == e["expect"]
        ok += good
        mismatches += not good
        tol = " atol={:g} rtol={:g}".format(e["atol"], e["rtol"]) if e["fail_on"] == "tolerance" else ""
        print("%s %-48s %s %s%s -> %s (expected %s)  [ref %.3fs, target %.3fs]"
              % ("OK      " if good else "MISMATCH", e["name"], e["runner"], e["fail_on"], tol,
                 got, e["expect"], t_ref, t_tgt))
        if args.verbose or not good:
            for d in details:
                print("           " + d)
    print("%d as declared, %d mismatched, %d skipped" % (ok, mismatches, skipped))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
