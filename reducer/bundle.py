"""The bug-report bundle: OUT/bundle/ and OUT/bundle.zip, everything a vendor needs to see the failure and
replay it without our tool; and `bundle verify`, which replays one with it."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import onnx

from oracles.base import CheckJob, Signature, Verdict
from oracles.command import KEEP_FP32
from oracles.worker import write_feeds
from reducer import bundle_files, environment
from reducer.activations import ActivationStore
from reducer.candidate import TWO_GIB_MARGIN, save_model
from reducer.driver import MINIMAL
from reducer.errors import BadModelError, ReducerError, UsageError
from reducer.model import _check_external_data, mark_external_sources
from reducer.repro import ReproFacts, family_of

BUNDLE_DIR = "bundle"
BUNDLE_ZIP = "bundle.zip"
ZIP_ROOT = "bundle"  # the zip's one top folder: unzipping never scatters files
SIZE_WARNING_BYTES = 25 * 1000 * 1000  # a common issue-tracker attachment limit (GitHub: 25 MB)
MAX_MEMBERS = 10_000
MAX_UNPACKED_BYTES = 4 << 30
MAX_RATIO = 500  # unpacked / packed, for members above a few MB: a zip bomb
LOG_CHARS = 64_000
TRUST_FLAG = "--trust-bundle-command"

# exit codes of `bundle verify`
REPRODUCED, NOT_REPRODUCED, CANNOT_RUN = 0, 1, 2


class BadBundleError(ReducerError):
    """Not a bundle, or a hostile one: exit 2 with one line."""


@dataclass
class BundleResult:
    folder: Path
    zip_path: Path
    zip_bytes: int
    seconds: float
    reproduced: bool  # the target, run once more while bundling, failed the same way
    warning: str | None = None

    def to_json(self) -> dict:
        return {"folder": self.folder.name, "zip": self.zip_path.name, "zip_bytes": self.zip_bytes,
                "seconds": round(self.seconds, 3), "reproduced": self.reproduced, "warning": self.warning}


# -- privacy -------------------------------------------------------------------------------------------
class Scrubber:
    """Machine-private paths out of text and JSON: the output directory, the working directory and the
    home directory become OUT, . and ~; other absolute paths on a command line keep their file name."""

    def __init__(self, out_dir: Path, staging: Path):
        pairs = [(staging, "bundle"), (out_dir, "OUT"), (Path.cwd(), "."), (Path.home(), "~")]
        found: dict[str, str] = {}
        for path, name in pairs:
            for form in {str(path.absolute()), str(path.resolve())}:
                if len(form) > 1:
                    found.setdefault(form, name)
        # longest first (the output directory inside the working directory); whole path components only
        self.replacements = [(re.compile(re.escape(path) + r"(?![\w.-])"), name)
                             for path, name in sorted(found.items(), key=lambda item: -len(item[0]))]

    def text(self, text: str) -> str:
        for path, name in self.replacements:
            text = path.sub(name, text)
        return text

    def value(self, value):
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value

    def argument(self, arg: str) -> str:
        arg = self.text(arg)
        flag, equals, path = arg.rpartition("=") if arg.startswith("-") else ("", "", arg)
        return f"{flag}{equals}.../{os.path.basename(path)}" if os.path.isabs(path) else arg


# -- writing -------------------------------------------------------------------------------------------
def make_bundle(out_dir: Path, oracle=None, observed: tuple[Verdict, dict] | None = None,
                ship: list[str] = (), exclude: list[str] = (), store: ActivationStore | None = None) -> BundleResult:
    """Build OUT/bundle/ and OUT/bundle.zip from an output directory. `observed`: the reduction's final
    re-check of minimal.onnx (verdict, target outputs), shown as it is; else the target runs once more,
    with `oracle`, the reduction's own and warm, or one built from report.json's oracle options.
    `ship`/`exclude`: files to ship with a check command, or not, besides report.json's bundle_options.
    `store`: the reduction's activation store, open (else OUT/activations' index is read)."""
    started = time.perf_counter()
    out_dir = Path(out_dir).absolute()  # the check runs in a folder of its own: {model} must not be relative
    report = _read_json(out_dir / "report.json", f"{out_dir}: no report.json (not an onnx-reduce output directory)")
    if not (out_dir / MINIMAL).is_file() or not (out_dir / "minimal_inputs.npz").is_file():
        raise UsageError(f"{out_dir}: no minimal.onnx and minimal_inputs.npz to bundle (status: "
                         f"{report.get('status', 'unknown')})")
    options = dict(report.get("oracle_options") or {})
    if not options:
        raise UsageError(f"{out_dir}/report.json: no oracle_options (written by an older onnx-reduce?)")
    staging = out_dir / (BUNDLE_DIR + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    scrub = Scrubber(out_dir, staging)

    # the graph only: its weights (minimal.onnx.data, when it keeps them beside it) are copied, never loaded
    model = onnx.load(str(out_dir / MINIMAL), load_external_data=False)
    onnx.checker.check_model(str(out_dir / MINIMAL))
    shutil.copyfile(out_dir / MINIMAL, staging / "minimal.onnx")
    for weights in _check_external_data(model, out_dir):
        shutil.copyfile(weights, staging / weights.name)
    with np.load(out_dir / "minimal_inputs.npz", allow_pickle=False) as data:
        feeds = {name: np.asarray(data[name]) for name in data.files}
    np.savez(staging / "inputs.npz", **feeds)

    runner_spec = (report.get("environment") or {}).get("runner") or options.get("runner", "")
    target_model, target_note = _target_model(options, runner_spec, model, staging, out_dir)
    shipping = _ship(options, report.get("bundle_options") or {}, ship, exclude, staging, scrub)
    run_options = options  # the check as it ran here; the bundle's names the shipped copies
    if options.get("check_command"):
        options = {**options, "check_command": shipping.pop("command")}
    facts = ReproFacts(options, runner_spec, target_model, report.get("signature"),
                       {name: list(value.shape) for name, value in feeds.items()})
    family = family_of(facts)
    for name, text in (("repro.py", family.repro_py(facts)), ("repro.sh", family.repro_sh(facts))):
        (staging / name).write_text(text)
        (staging / name).chmod(0o755)
    # repro.py runs once (the proof that it works, and the runtime's verbose log) while the rest is written;
    # where the target runs again here, after it, so that the two never share a device
    self_checked = facts.family == "onnxruntime"
    self_check = _start_repro(staging) if self_checked and observed is not None else None

    recorded = Signature.from_json(report["signature"]) if report.get("signature") else None
    try:
        _save_polygraphy_json(staging / "inputs.json", [feeds])
        if any(KEEP_FP32 in arg for arg in options.get("check_command") or ()):  # the repro: no node kept in fp32
            (staging / "keep_fp32.json").write_text(json.dumps({"nodes": [], "tensors": []}) + "\n")
        reference_note = None
        index = _store_index(out_dir, model, store)
        try:
            reference = _reference_outputs(out_dir, index, model, feeds, staging / "work",
                                           stale=bool(report.get("edits")))
        except BadBundleError as exc:
            if recorded is None or recorded.is_numeric:
                raise  # a numeric repro without the values it is judged against is no repro
            # an error needs no reference values: the bundle is still what the vendor needs (SLANet's Loop, cut
            # to one trip, fails ONNX Runtime's fp32 run but reproduces TensorRT's assertion)
            reference, reference_note = {}, f"none: {exc} (the failure, {recorded.kind}, is judged without them)"
        _save_run_results(staging / "reference_outputs", reference, "reference")

        when = "the reduction's final re-check" if observed is not None else "run again while bundling"
        if observed is not None:
            verdict, observed = observed
        else:
            own = oracle is None
            oracle = oracle or _build_oracle(run_options)
            try:
                verdict, observed = _observe(oracle, _weights_from(model, out_dir), feeds, reference,
                                             staging / "work")
            finally:
                if own:
                    oracle.close()
        if self_checked and self_check is None:
            self_check = _start_repro(staging)
        if observed:
            np.savez(staging / "target_outputs.npz", **observed)
        reproduced = bool(verdict.failing and verdict.signature.same_failure(recorded))

        env = environment.collect(scrub.value(report.get("environment") or {}),
                                  [scrub.argument(a) for a in report.get("command_line") or []] or None,
                                  family.environment())
        (staging / "env.json").write_text(json.dumps(env, indent=2) + "\n")
        log = (f"# the target run on minimal.onnx ({when}): {'FAIL' if verdict.failing else 'PASS'} - "
               f"{verdict.reason}\n" + (verdict.log.strip() or "(the runner logged nothing)") + "\n")
        (staging / "runner.log").write_text(scrub.text(log[-LOG_CHARS:]))

        history = _read_history(out_dir / "history.jsonl")
        (staging / "history.jsonl").write_text("".join(json.dumps(step) + "\n" for step in history))
        shapes = _tensor_shapes(index, model, feeds, reference)
        from reducer.pictures import draw_graph, draw_reduction

        failing = list(verdict.signature.outputs) if verdict.signature else list((recorded or Signature("")).outputs)
        draw_graph(model, failing, shapes, staging / "graph.png")
        from reducer.model import count_nodes

        draw_reduction(history, report.get("nodes_before", count_nodes(model.graph)), count_nodes(model.graph),
                       report.get("checks", 0), staging / "reduction.png")

        private = ("bundle", "bundle_options")  # the latter: this machine's paths, as given
        bundle_report = scrub.value({**{k: v for k, v in report.items() if k not in private},
                                     "oracle_options": options})
        bundle_report["model"] = scrub.argument(str(report.get("model", "")))
        if "command_line" in bundle_report:
            bundle_report["command_line"] = [scrub.argument(a) for a in report["command_line"]]
        bundle_report.update({
            "observed": {**verdict.to_json(), "reproduced": reproduced},
            "outputs": _output_errors(reference, observed, options, failing),
            "minimal_graph": _graph_table(model, shapes),
            "target_model": target_model,
            "target_model_note": target_note,
            "reference_outputs_note": scrub.text(reference_note) if reference_note else None,
            "repro_self_check": _finish_repro(self_check, staging, scrub, options) if self_check else None,
            **shipping,
        })
        _write_reports(staging, bundle_report, env, None)
    except BaseException:  # a bundle that fails midway leaves no repro.py running behind it
        if self_check is not None:
            self_check[0].kill()
        raise
    shutil.rmtree(staging / "work", ignore_errors=True)

    zip_path = out_dir / BUNDLE_ZIP
    zip_bytes = _zip(staging, zip_path)
    warning = None
    if zip_bytes > SIZE_WARNING_BYTES:
        largest = sorted(((p.stat().st_size, p.name) for p in staging.iterdir()), reverse=True)[:3]
        warning = (f"{BUNDLE_ZIP} is {zip_bytes / 1e6:.1f} MB, over the {SIZE_WARNING_BYTES / 1e6:.0f} MB many issue "
                   "trackers accept; largest: " + ", ".join(f"{name} {size / 1e6:.1f} MB" for size, name in largest))
        _write_reports(staging, bundle_report, env, warning)
        zip_bytes = _zip(staging, zip_path)
    folder = out_dir / BUNDLE_DIR
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(staging, folder)
    return BundleResult(folder, zip_path, zip_bytes, time.perf_counter() - started, reproduced, warning)


def _read_json(path: Path, missing: str) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(missing) from None
    except (OSError, ValueError) as exc:
        raise BadBundleError(f"{path}: cannot read it ({exc})") from None


def _read_history(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def _save_polygraphy_json(path: Path, feeds: list[dict[str, np.ndarray]]) -> None:
    """Polygraphy's --load-inputs format: a list of feed dicts."""
    from polygraphy.json import save_json

    save_json(feeds, str(path))


def _save_run_results(stem: Path, outputs: dict[str, np.ndarray], runner_name: str) -> None:
    """.npz, and .json as Polygraphy's RunResults: what `polygraphy run --load-outputs` compares against."""
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult

    np.savez(stem.with_suffix(".npz"), **outputs)
    from polygraphy.json import save_json

    results = RunResults()
    results.append((runner_name, [IterationResult(dict(outputs), runner_name=runner_name)]))
    save_json(results, str(stem.with_suffix(".json")))  # RunResults.save would log to the console


def _store_index(out_dir: Path, model: onnx.ModelProto, store: ActivationStore | None) -> dict:
    """The activation store's files and shapes of the tensors `model` names: from `store`, else from its
    index on disk (100k records at 100k nodes: 60 MB parsed, dropped at once)."""
    graph = model.graph
    named = {*(n for node in graph.node for n in (*node.input, *node.output)), *(i.name for i in graph.input),
             *(o.name for o in graph.output)}
    if store is not None:  # where the reduction inlined control flow, a store of its own (its names too)
        return {name: {"path": store.path(name), "shape": list(store.records[name].shape)}
                for name in named if name in store}
    try:
        tensors = json.loads((out_dir / "activations" / "index.json").read_text())["tensors"]
    except (OSError, ValueError, KeyError):
        return {}
    return {name: {"path": out_dir / "activations" / tensors[name]["file"], "shape": tensors[name]["shape"]}
            for name in named if name in tensors}


def _reference_outputs(out_dir: Path, index: dict, model: onnx.ModelProto, feeds: dict, scratch: Path,
                       stale: bool = False) -> dict[str, np.ndarray]:
    """The values the oracle judged against: the reference run's, from the activation store; a reference
    run of the minimal model when the store is gone, or `stale` (edits changed what the nodes compute)."""
    names = [o.name for o in model.graph.output]
    if not stale and all(name in index for name in names):
        return {name: np.load(index[name]["path"], allow_pickle=False) for name in names}
    from oracles.worker import Worker
    from reducer.activations import REFERENCE_RUNNER
    from reducer.options import DEFAULT_CHECK_TIMEOUT

    paths = write_feeds(feeds, scratch)
    save_model(_weights_from(model, out_dir), scratch / "reference.onnx")
    worker = Worker(REFERENCE_RUNNER)
    try:
        result = worker.run(scratch / "reference.onnx", paths, DEFAULT_CHECK_TIMEOUT)
    finally:
        worker.close()
    if result.status != "ok":
        raise BadBundleError(f"the reference run of minimal.onnx fails: {result.error.splitlines()[0][:300]}")
    return result.outputs


def _weights_from(model: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
    """A copy whose external tensors read from `folder`, for save_model to write with what it uses."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return mark_external_sources(copy, folder)


def _build_oracle(options: dict):
    from reducer.options import OracleOptions, build_oracle

    known = {f.name for f in fields(OracleOptions)}
    return build_oracle(OracleOptions(**{**{k: v for k, v in options.items() if k in known}, "jobs": 1}))


def _observe(oracle, model, feeds, reference, scratch: Path) -> tuple[Verdict, dict[str, np.ndarray]]:
    """One more check of the minimal model: the target's outputs as observed (a command has none)."""
    job = CheckJob(model, write_feeds(feeds, scratch), reference, scratch / "check")
    job.workdir.mkdir(parents=True, exist_ok=True)
    observe = getattr(oracle, "observe", None)
    if observe is None:
        return oracle.judge(job), {}
    result, verdict = observe(job)
    return verdict, {name: np.asarray(value) for name, value in result.outputs.items()}


def _target_model(options: dict, runner_spec: str, model: onnx.ModelProto, staging: Path,
                  weights_dir: Path) -> tuple[str, str]:
    """target.onnx when the runner runs something else than minimal.onnx (fp16-converted, rounded)."""
    if options.get("check_command"):
        return "minimal.onnx", "the check command receives minimal.onnx"
    try:
        from oracles import make_runner

        runner = make_runner(runner_spec)
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # converters change their argument in place
        # external weights stay references to minimal.onnx.data, shipped beside it, except for the fp16
        # converter, which reads them from `weights_dir`
        executed = runner.executed_model(copy, weights_dir) if hasattr(runner, "executed_model") else copy
    except Exception:  # an unknown runner here: minimal.onnx is still what to run
        return "minimal.onnx", f"runner {runner_spec} is not known here"
    if executed.SerializeToString() == model.SerializeToString():
        return "minimal.onnx", f"{runner_spec} runs minimal.onnx as it is"
    if executed.ByteSize() > TWO_GIB_MARGIN:  # fp16-converted weights past protobuf's limit: beside it
        onnx.save(executed, str(staging / "target.onnx"), save_as_external_data=True, location="target.onnx.data")
    else:
        onnx.save(executed, str(staging / "target.onnx"))
    precision = runner_spec.split(":")[2] if runner_spec.count(":") >= 2 else ""
    what = {"fp16": "converted to fp16 by onnxconverter-common (keep_io_types=True), as the runner does",
            "fp16-storage": "with every float tensor rounded through fp16 where it is produced (Cast pairs), "
                            "emulating an fp16 engine's activations"}.get(precision, "as the runner executes it")
    return "target.onnx", f"target.onnx is minimal.onnx {what}"


def _ship(options: dict, recorded: dict, ship: list[str], exclude: list[str], staging: Path,
          scrub: Scrubber) -> dict:
    """The check command's files into the bundle: its script, and the files asked for with --ship (recorded
    by the reduction, plus `ship` now), less those excluded. Returns report.json's `shipped` and
    `not_shipped`, and the command naming the shipped copies as {bundle}/NAME."""
    command = list(options.get("check_command") or [])
    if not command:
        if ship or exclude:
            raise UsageError("--ship and --exclude apply to --check commands only")
        return {}
    ship_now, exclude_now = set(map(os.path.realpath, ship)), set(map(os.path.realpath, exclude))
    ships = [p for p in recorded.get("ship", []) if os.path.realpath(p) not in exclude_now] + list(ship)
    excludes = [p for p in recorded.get("exclude", []) if os.path.realpath(p) not in ship_now] + list(exclude)
    from reducer.bundle_report import FILES

    shipped, left = bundle_files.plan(command, ships, excludes, set(FILES) | {"work"})
    for item in shipped:
        (staging / item.name).write_bytes(item.data)
    return {"command": bundle_files.shipped_command(command, shipped),
            "shipped": [item.to_json(scrub.argument(str(item.source))) for item in shipped],
            "not_shipped": [{"file": scrub.argument(path), "why": why} for path, why in left]}


def _start_repro(staging: Path) -> tuple[subprocess.Popen, float]:
    process = subprocess.Popen([sys.executable, "repro.py", "--verbose"], cwd=staging, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    return process, time.perf_counter()


def _finish_repro(started: tuple[subprocess.Popen, float], staging: Path, scrub: Scrubber, options: dict) -> dict:
    """repro.py's exit code and summary; its output, the runtime's verbose log included, goes to repro.log."""
    process, start = started
    try:
        output, _ = process.communicate(timeout=float(options.get("check_timeout", 300.0)))
        code = process.returncode
    except subprocess.TimeoutExpired:
        process.kill()
        output, code = process.communicate()[0] + "\nrepro.py did not finish in time; killed\n", None
    (staging / "repro.log").write_text(scrub.text(output[-LOG_CHARS:]))
    summary = next((line for line in reversed(output.splitlines()) if "REPRODUCED" in line), "")
    return {"exit_code": code, "reproduced": code == 1, "summary": scrub.text(summary),
            "seconds": round(time.perf_counter() - start, 3)}


def _tensor_shapes(index: dict, model: onnx.ModelProto, feeds: dict, reference: dict) -> dict[str, list]:
    """Every tensor's shape: the values themselves where we have them, else shape inference."""
    shapes: dict[str, list] = {}
    try:
        typed = onnx.shape_inference.infer_shapes(model)
        for info in [*typed.graph.value_info, *typed.graph.output]:
            dims = info.type.tensor_type.shape.dim
            shapes[info.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
    except Exception:  # shapes are a courtesy in the report
        pass
    shapes.update({name: list(rec["shape"]) for name, rec in index.items()})
    shapes.update({name: list(np.shape(v)) for name, v in {**feeds, **reference}.items()})
    for tensor in model.graph.initializer:
        shapes[tensor.name] = list(tensor.dims)
    return shapes


def _graph_table(model: onnx.ModelProto, shapes: dict[str, list]) -> list[dict]:
    return [{"name": node.name, "op_type": node.op_type,
             "inputs": [[name, shapes.get(name)] for name in node.input if name],
             "outputs": [[name, shapes.get(name)] for name in node.output if name]} for node in model.graph.node]


def _output_errors(reference: dict, observed: dict, options: dict, failing: list[str]) -> list[dict]:
    """Per output, reference against target: the numbers a reader wants first."""
    from oracles.checks import ToleranceCheck

    tolerance = ToleranceCheck(float(options.get("atol", 1e-5)), float(options.get("rtol", 1e-5)))
    rows = []
    for name, ref in reference.items():
        ref = np.asarray(ref)
        row = {"name": name, "shape": list(ref.shape), "dtype": str(ref.dtype), "failing": name in failing,
               "reference_nan": int(np.isnan(ref).sum()) if ref.dtype.kind in "fc" else 0,
               "reference_inf": int(np.isinf(ref).sum()) if ref.dtype.kind in "fc" else 0}
        target = observed.get(name)
        if target is not None and target.shape == ref.shape and target.dtype.kind in "fciu" and ref.size:
            t64, r64 = target.astype(np.float64), ref.astype(np.float64)
            both = np.isfinite(t64) & np.isfinite(r64)
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                absdiff = np.abs(t64 - r64)
                reldiff = absdiff / np.maximum(np.abs(r64), np.finfo(np.float64).eps)
            bad, _ = tolerance.mismatches(target, ref)
            row.update({
                "max_abs_error": float(absdiff[both].max()) if both.any() else None,
                "max_rel_error": float(reldiff[both].max()) if both.any() else None,
                "outside_tolerance": int(bad.sum()),
                "elements": int(ref.size),
                "target_nan": int(np.isnan(t64).sum()),
                "target_inf": int(np.isinf(t64).sum()),
            })
        elif target is not None:
            row["target_shape"] = list(target.shape)
        rows.append(row)
    return rows


def _write_reports(staging: Path, report: dict, env: dict, warning: str | None) -> None:
    from reducer.bundle_report import render_markdown

    files = {p.name for p in staging.iterdir() if p.is_file()} | {"report.json", "report.md"}
    report = {**report, "size_warning": warning, "files": sorted(files)}
    (staging / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (staging / "report.md").write_text(render_markdown(report, env))


def _zip(folder: Path, zip_path: Path) -> int:
    tmp = zip_path.with_name(zip_path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.iterdir()):
            if path.is_file():
                archive.write(path, f"{ZIP_ROOT}/{path.name}")
    os.replace(tmp, zip_path)
    return zip_path.stat().st_size


# -- verifying -----------------------------------------------------------------------------------------
def verify_bundle(path: Path, trust_command: bool = False) -> tuple[int, str]:
    """Replay a bundle (folder or .zip) with its recorded oracle: (exit code, one line). A bundle is data from
    a stranger: its check command (and the scripts shipped with it) runs only with `trust_command`."""
    path = Path(path)
    if not path.exists():
        raise BadBundleError(f"{path}: no such file or directory")
    if path.is_dir():
        return _replay(_bundle_root(path), trust_command)
    with tempfile.TemporaryDirectory(prefix="onnx-reduce-verify-") as scratch:
        safe_extract(path, Path(scratch))
        return _replay(_bundle_root(Path(scratch)), trust_command)


def _bundle_root(folder: Path) -> Path:
    if (folder / "report.json").is_file():
        return folder
    inner = [p for p in folder.iterdir() if p.is_dir()]
    if len(inner) == 1 and (inner[0] / "report.json").is_file():
        return inner[0]
    raise BadBundleError(f"{folder}: not a bundle (no report.json)")


def _member_problem(info: zipfile.ZipInfo) -> str | None:
    name = info.filename.replace("\\", "/")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "an absolute name"
    if ".." in name.split("/"):
        return "a '..' in its name"
    if "\x00" in name:
        return "a NUL in its name"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "a symbolic link"
    if info.flag_bits & 0x1:
        return "encryption"
    return None


def safe_extract(zip_path: Path, dest: Path) -> None:
    """Extract after checking every member: no absolute names, no '..', no links, no zip bombs."""
    try:
        archive = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BadBundleError(f"{zip_path}: not a readable zip ({exc})") from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise BadBundleError(f"{zip_path}: refused, {len(members)} members (more than {MAX_MEMBERS})")
        total = 0
        for info in members:
            problem = _member_problem(info)
            if problem:
                raise BadBundleError(f"{zip_path}: refused, member {info.filename!r} has {problem}")
            total += info.file_size
            ratio = info.file_size / max(1, info.compress_size)
            if total > MAX_UNPACKED_BYTES or (info.file_size > (8 << 20) and ratio > MAX_RATIO):
                raise BadBundleError(f"{zip_path}: refused, it would unpack to {total / 2**30:.1f} GiB or more "
                                     f"(member {info.filename!r}, ratio {ratio:.0f}:1)")
        root = dest.resolve()
        for info in members:
            target = (dest / info.filename.replace("\\", "/")).resolve()
            if root not in target.parents and target != root:
                raise BadBundleError(f"{zip_path}: refused, member {info.filename!r} lands outside the folder")
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_limited(archive, info, target, zip_path)


def _copy_limited(archive: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, zip_path: Path) -> None:
    """Copy one member, trusting its header's size no further than it goes."""
    written = 0
    try:
        with archive.open(info) as source, open(target, "xb") as sink:
            while chunk := source.read(1 << 20):
                written += len(chunk)
                if written > info.file_size:
                    raise BadBundleError(f"{zip_path}: refused, member {info.filename!r} is larger than it says")
                sink.write(chunk)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise BadBundleError(f"{zip_path}: member {info.filename!r} cannot be read ({exc})") from None


def _replay(root: Path, trust_command: bool) -> tuple[int, str]:
    report = _read_json(root / "report.json", f"{root}: not a bundle (no report.json)")
    if not isinstance(report, dict):
        raise BadBundleError(f"{root}/report.json: not a JSON object")
    options = _checked_options(report.get("oracle_options"))
    recorded = _checked_signature(report.get("signature"))
    for name in ("minimal.onnx", "inputs.npz", "reference_outputs.npz"):
        if not (root / name).is_file():
            raise BadBundleError(f"{root}: not a complete bundle (no {name})")
    if options["check_command"]:
        if not trust_command:
            return CANNOT_RUN, (f"refusing to run the bundle's check command: {_one_line(options['check_command'])} "
                                f"(code from the bundle, it would run as you; read it, then pass {TRUST_FLAG} "
                                "to run it)")
        # the files shipped with the command are in this bundle
        options = {**options, "check_command": [a.replace("{bundle}", str(root)) for a in options["check_command"]]}
    reason = _cannot_run_reason(options)
    if reason:
        return CANNOT_RUN, f"cannot run here: {reason}"
    model = _load_bundled_model(root)
    try:
        with np.load(root / "inputs.npz", allow_pickle=False) as data:
            feeds = {name: np.asarray(data[name]) for name in data.files}
        with np.load(root / "reference_outputs.npz", allow_pickle=False) as data:
            reference = {name: np.asarray(data[name]) for name in data.files}
    except Exception as exc:
        raise BadBundleError(f"{root}: cannot read the bundle's arrays ({_first_line(exc)})") from None
    try:
        oracle = _build_oracle(options)
    except UsageError as exc:
        return CANNOT_RUN, f"cannot run here: {exc}"
    with tempfile.TemporaryDirectory(prefix="onnx-reduce-verify-") as scratch:
        try:
            verdict, _ = _observe(oracle, model, feeds, reference, Path(scratch))
        finally:
            oracle.close()
    if verdict.failing and verdict.signature.same_failure(recorded):
        return REPRODUCED, f"reproduced: {verdict.signature} - {verdict.reason}"
    if verdict.failing:
        return NOT_REPRODUCED, (f"not reproduced: it fails differently ({verdict.signature}, recorded: {recorded}) "
                                f"- {_first_line(verdict.reason)}")
    return NOT_REPRODUCED, f"not reproduced: {_first_line(verdict.reason)}"


def _first_line(text) -> str:
    return (str(text).strip().splitlines() or [type(text).__name__])[0][:300]


def _one_line(command: list[str]) -> str:
    """A command from a bundle, shown on one line as it is: control characters escaped, its length capped."""
    text = shlex.join(command)
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= 500 else text[:500] + "..."


def _load_bundled_model(root: Path) -> onnx.ModelProto:
    """minimal.onnx, with external data read only from inside the bundle's folder (when a check writes it)."""
    try:
        model = onnx.load(str(root / "minimal.onnx"), load_external_data=False)
        _check_external_data(model, root)
        onnx.checker.check_model(str(root / "minimal.onnx"))
    except BadModelError as exc:
        raise BadBundleError(f"{root}/minimal.onnx: {exc}") from None
    except Exception as exc:
        raise BadBundleError(f"{root}: cannot read the bundle's model ({_first_line(exc)})") from None
    return mark_external_sources(model, root)


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_str_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _backtracks(pattern: str) -> bool:
    """Whether a regular expression nests one unbounded repeat in another (`(a+)+`, `(.*)*`): on a long log
    such a pattern can take hours (catastrophic backtracking), and Python's `re` has no timeout."""
    try:
        import re._parser as parser  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse as parser
    repeats = {parser.MAX_REPEAT, parser.MIN_REPEAT, getattr(parser, "POSSESSIVE_REPEAT", None)}

    def walk(items, inside_repeat: bool) -> bool:
        for op, arg in items:
            if op in repeats:
                low, high, sub = arg
                unbounded = high is parser.MAXREPEAT or high > 1
                if unbounded and inside_repeat:
                    return True
                if walk(sub, inside_repeat or unbounded):
                    return True
            elif op is parser.SUBPATTERN and walk(arg[-1], inside_repeat):
                return True
            elif op is parser.BRANCH and any(walk(branch, inside_repeat) for branch in arg[1]):
                return True
        return False

    try:
        return walk(parser.parse(pattern), False)
    except Exception:  # not a pattern at all: build_oracle says so
        return False


def _is_regex_list(value) -> bool:
    return _is_str_list(value) and all(len(v) <= 1000 and not _backtracks(v) for v in value)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1000


# what each oracle option of a bundle's report.json must be: it is untrusted data
OPTION_RULES = {
    "runner": (lambda v: isinstance(v, str), "a string"),
    "fail_on": (lambda v: v in ("nan", "tolerance", "error"), "one of nan, tolerance, error"),
    "atol": (lambda v: _is_number(v) and v >= 0, "a finite number, 0 or more"),
    "rtol": (lambda v: _is_number(v) and v >= 0, "a finite number, 0 or more"),
    "fail_regex": (_is_regex_list, "a list of patterns without nested repeats such as (a+)+"),
    "ignore_fail_regex": (_is_regex_list, "a list of patterns without nested repeats such as (a+)+"),
    "fail_code": (lambda v: isinstance(v, list) and all(_is_number(c) and isinstance(c, int) for c in v),
                  "a list of integers"),
    "ignore_fail_code": (lambda v: isinstance(v, list) and all(_is_number(c) and isinstance(c, int) for c in v),
                         "a list of integers"),
    "check_command": (lambda v: _is_str_list(v) and (not v or bool(v[0])), "a list of strings"),
    "check_timeout": (lambda v: _is_number(v) and v > 0, "a finite number above 0"),
    "faithful_max": (lambda v: v is None or (_is_number(v) and v > 0), "null or a finite number above 0"),
    "jobs": (lambda v: v is None or _is_count(v), "null or an integer from 1 to 1000"),
    "repeat": (_is_count, "an integer from 1 to 1000"),
    "min_fails": (_is_count, "an integer from 1 to 1000"),
}


def _checked_options(options) -> dict:
    """report.json's oracle_options, each one of the types it must have (missing ones take their defaults)."""
    from reducer.options import OracleOptions

    if not isinstance(options, dict):
        raise BadBundleError("report.json: oracle_options is missing or not an object")
    checked = {}
    for name, default in vars(OracleOptions()).items():
        if name not in OPTION_RULES:  # an option no rule checks yet: its default, never the bundle's value
            checked[name] = default
            continue
        value = options.get(name, default)
        rule, words = OPTION_RULES[name]
        if not rule(value):
            raise BadBundleError(f"report.json: oracle_options.{name} must be {words}, not {_shown(value)}")
        checked[name] = value
    return checked


def _checked_signature(data) -> Signature | None:
    if data is None:
        return None
    valid = (isinstance(data, dict) and isinstance(data.get("kind"), str) and isinstance(data.get("detail", ""), str)
             and _is_str_list(data.get("outputs", [])) and isinstance(data.get("exception", ""), (str, type(None))))
    if not valid:
        raise BadBundleError(f"report.json: signature must be an object with a string kind, not {_shown(data)}")
    return Signature.from_json(data)


def _cannot_run_reason(options: dict) -> str | None:
    """Why the recorded oracle cannot run on this machine (runner unknown or unavailable), or None."""
    if options.get("check_command"):
        command = options["check_command"][0]
        return None if shutil.which(command) else f"the check command '{command}' is not found here"
    from oracles import make_runner

    try:
        runner = make_runner(options.get("runner", ""))
    except UsageError as exc:
        return str(exc)
    unavailable = getattr(runner, "unavailable_reason", None)
    return unavailable() if unavailable else None
