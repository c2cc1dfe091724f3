"""Standalone repro scripts (repro.py, repro.sh) and environment extras for a bundle, per runner family:
the first part of the runner spec (`onnxruntime:cpu:fp16` -> `onnxruntime`), or `command` for a --check
oracle. A family without an entry gets scripts that say plainly what is not supported."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from oracles.onnxruntime_runner import LEVELS, OnnxRuntimeRunner
from reducer.errors import UsageError

SCRIPTS = Path(__file__).parent / "repro_scripts"
ORT_PROVIDERS = {"cpu": ["CPUExecutionProvider"], "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"]}
SH_HEADER = ('#!/bin/sh\n# Exit status non-zero: the failure reproduces (like a failing test).\n'
             'set -u\ncd "$(dirname "$0")"\n')


@dataclass(frozen=True)
class ReproFacts:
    """What a repro needs to know: the oracle's options as recorded, and the files in the bundle."""

    options: dict  # OracleOptions as a dict (report.json's oracle_options)
    runner: str  # the runner's full spec, e.g. onnxruntime:cpu:fp16:O3
    target_model: str  # the model file the target runs (minimal.onnx, or target.onnx when the runner converts)
    signature: dict | None = None  # the recorded failure
    input_shapes: dict = field(default_factory=dict)  # the minimal model's inputs, as fed

    @property
    def exit_code(self) -> int | None:
        """The check command's exit code that the recorded failure had, when that is what identifies it."""
        match = re.fullmatch(r"exit code (-?\d+)", (self.signature or {}).get("detail", ""))
        return int(match.group(1)) if match else None

    @property
    def non_finite(self) -> bool:
        """Whether the recorded command failure held NaN/Inf, as its check counted (Signature.non_finite)."""
        return bool((self.signature or {}).get("non_finite"))

    @property
    def exception(self) -> str | None:
        """The Python exception the recorded command failure ended with ('' none; None: not recorded)."""
        return (self.signature or {}).get("exception")

    @property
    def family(self) -> str:
        return "command" if self.options.get("check_command") else self.runner.split(":", 1)[0]


@dataclass(frozen=True)
class Family:
    repro_py: Callable[[ReproFacts], str]
    repro_sh: Callable[[ReproFacts], str]
    environment: Callable[[], dict]  # family-specific facts for env.json


def fill(template: str, settings: dict) -> str:
    """Replace `NAME = ...` lines of a script's settings block with the given values."""
    for name, value in settings.items():
        template, count = re.subn(rf"^{name} = .*$", lambda _, v=value, n=name: f"{n} = {v!r}", template, count=1,
                                  flags=re.MULTILINE)
        if count != 1:
            raise ValueError(f"repro template has no setting {name}")
    return template


# -- onnxruntime ---------------------------------------------------------------------------------------
def _ort_runner(facts: ReproFacts):
    """The recorded onnxruntime runner, parsed as the reducer parses it; None when no script can run it."""
    try:
        runner = OnnxRuntimeRunner(facts.runner)
    except UsageError:
        return None
    return runner if runner.device in ORT_PROVIDERS else None


def _ort_providers(runner) -> list:
    """The providers as the runner created them: on cuda, TF32 on or off as its spec says."""
    if runner.device != "cuda":
        return ORT_PROVIDERS[runner.device]
    return [["CUDAExecutionProvider", {"use_tf32": "1" if runner.tf32 else "0"}], "CPUExecutionProvider"]


def ort_repro_py(facts: ReproFacts) -> str:
    runner = _ort_runner(facts)
    if runner is None:
        return unsupported_py(facts)
    options = facts.options
    return fill((SCRIPTS / "onnxruntime_repro.py").read_text(), {
        "CHECK": options["fail_on"],
        "ATOL": float(options["atol"]),
        "RTOL": float(options["rtol"]),
        "FAIL_REGEX": list(options.get("fail_regex", [])),
        "TARGET_MODEL": facts.target_model,
        "TARGET_PROVIDERS": _ort_providers(runner),
        "TARGET_OPTIMIZATION": LEVELS[runner.level],
    })


def ort_repro_sh(facts: ReproFacts) -> str:
    runner = _ort_runner(facts)
    if runner is None:
        return unsupported_sh(facts)
    options = facts.options
    run = ["polygraphy", "run", facts.target_model, "--onnxrt", "--providers", runner.device,
           "--graph-optimization-level", LEVELS[runner.level], "--load-inputs", "inputs.json"]
    regenerate = ("# The reference (reference_outputs.json) is ONNX Runtime, CPU, fp32, optimizations off;\n"
                  "# to recompute it:\n"
                  "#   polygraphy run minimal.onnx --onnxrt --providers cpu --graph-optimization-level ORT_DISABLE_ALL "
                  "--load-inputs inputs.json --save-outputs reference_outputs.json\n")
    converted = facts.target_model != "minimal.onnx"
    target = (f"# The target: {facts.target_model}"
              + (" (minimal.onnx as the runner converts it; see report.md)" if converted else "")
              + f", {facts.runner}\n")
    check = options["fail_on"]
    if check == "tolerance":
        line = shlex.join(run + ["--load-outputs", "reference_outputs.json", "--check-error-stat", "elemwise",
                                 "--infinities-compare-equal", "--atol", repr(float(options["atol"])),
                                 "--rtol", repr(float(options["rtol"]))])
        return SH_HEADER + target + regenerate + line + "\n"
    if check == "nan":
        note = "# --validate fails on any NaN/Inf in the target (the reducer's check: where the reference is finite)\n"
        return SH_HEADER + target + note + shlex.join(run + ["--validate"]) + "\n"
    regexes = options.get("fail_regex", [])
    if not regexes:
        return SH_HEADER + target + "# polygraphy exits non-zero when the target raises\n" + shlex.join(run) + "\n"
    pattern = "|".join(f"({r})" for r in regexes)
    return (SH_HEADER + target + "# reproduced when the target's error output matches the recorded --fail-regex\n"
            f"if {shlex.join(run)} 2>&1 | grep -qE {shlex.quote(pattern)}; then exit 1; fi\nexit 0\n")


def ort_environment() -> dict:
    try:
        import onnxruntime
    except ImportError:
        return {"onnxruntime_providers": None}
    return {"onnxruntime_providers": list(onnxruntime.get_available_providers())}


# -- command (--check) ---------------------------------------------------------------------------------
def command_repro_py(facts: ReproFacts) -> str:
    options = facts.options
    return fill((SCRIPTS / "command_repro.py").read_text(), {
        "COMMAND": list(options["check_command"]),
        "FAIL_CODES": list(options.get("fail_code", [])),
        "IGNORE_FAIL_CODES": list(options.get("ignore_fail_code", [])),
        "FAIL_REGEX": list(options.get("fail_regex", [])),
        "IGNORE_FAIL_REGEX": list(options.get("ignore_fail_regex", [])),
        "TIMEOUT": float(options.get("check_timeout", 300.0)),
        "RECORDED_EXIT_CODE": facts.exit_code,
        "RECORDED_EXCEPTION": facts.exception,
        "RECORDED_NON_FINITE": facts.non_finite,
    })


def command_repro_sh(facts: ReproFacts) -> str:
    command = list(facts.options["check_command"])
    setup = "" if any("{model}" in arg for arg in command) else 'cp minimal.onnx "$scratch/polygraphy_debug.onnx"\n'
    expected = f"exit code {facts.exit_code}" if facts.exit_code is not None else "the recorded failure"
    return (SH_HEADER + f"# The recorded check command, on the minimal model; reproduced: {expected}\n"
            "# (repro.py applies the recorded --fail-code/--fail-regex rule and says so).\n"
            'here="$(pwd)"\nscratch="$(mktemp -d)"\ntrap \'rm -rf "$scratch"\' EXIT\n' + setup
            + 'cd "$scratch" && ' + " ".join(_sh_word(arg) for arg in command) + "\n")


def _sh_word(arg: str) -> str:
    """One shell word, with {model}, {inputs} and {keep_fp32} pointing into the bundle."""
    places = {"{model}": '"$here/minimal.onnx"', "{inputs}": '"$here/inputs.json"', "{bundle}": '"$here"',
              "{keep_fp32}": '"$here/keep_fp32.json"'}
    pieces = re.split(r"(\{model\}|\{inputs\}|\{bundle\}|\{keep_fp32\})", arg)
    return "".join(places.get(piece) or shlex.quote(piece) for piece in pieces if piece) or "''"


# -- tensorrt ------------------------------------------------------------------------------------------
TRTEXEC_FLAGS = {"fp32": ["--noTF32"], "tf32": [], "fp16": ["--fp16"], "bf16": ["--bf16"], "int8": ["--int8"],
                 "fp8": ["--fp8"], "best": ["--best"]}
POLYGRAPHY_TRT_FLAGS = {"fp32": [], "tf32": ["--tf32"], "fp16": ["--fp16"], "bf16": ["--bf16"],
                        "int8": ["--int8"], "fp8": ["--fp8"], "best": ["--tf32", "--fp16", "--bf16", "--int8"]}


def _trt_precision(facts: ReproFacts) -> str:
    parts = facts.runner.split(":")
    return parts[1] if len(parts) > 1 else "fp32"


def trt_repro_py(facts: ReproFacts) -> str:
    options = facts.options
    return fill((SCRIPTS / "tensorrt_repro.py").read_text(), {
        "CHECK": options["fail_on"],
        "ATOL": float(options["atol"]),
        "RTOL": float(options["rtol"]),
        "FAIL_REGEX": list(options.get("fail_regex", [])),
        "TARGET_MODEL": facts.target_model,
        "PRECISION": _trt_precision(facts),
    })


def trt_repro_sh(facts: ReproFacts) -> str:
    precision = _trt_precision(facts)
    converted = facts.target_model != "minimal.onnx"  # TensorRT-RTX: the fp16 model, built strongly typed
    shapes = ",".join(f"{name}:{'x'.join(map(str, shape))}" for name, shape in facts.input_shapes.items() if shape)
    trtexec = ["trtexec", f"--onnx={facts.target_model}", "--verbose",
               *([] if converted else TRTEXEC_FLAGS[precision])] + ([f"--shapes={shapes}"] if shapes else [])
    polygraphy = ["polygraphy", "run", facts.target_model, "--trt", "--load-inputs", "inputs.json",
                  *([] if converted else POLYGRAPHY_TRT_FLAGS[precision])]
    for name, shape in facts.input_shapes.items():
        if shape:
            polygraphy += ["--trt-min-shapes", f"{name}:{shape}", "--trt-opt-shapes", f"{name}:{shape}",
                           "--trt-max-shapes", f"{name}:{shape}"]
    options = facts.options
    lines = [SH_HEADER.rstrip("\n"),
             f"# The target: {facts.target_model}, {facts.runner}. With TensorRT-RTX, use its `tensorrt_rtx` tool",
             "# in place of trtexec and set POLYGRAPHY_USE_TENSORRT_RTX=1 for polygraphy.",
             "# The engine build, verbose (the builder's log is what the reducer's --fail-regex searched):",
             "# " + shlex.join(trtexec)]
    if options["fail_on"] == "error":
        regexes = options.get("fail_regex", [])
        pattern = "|".join(f"({r})" for r in regexes) or "."
        lines += ["# reproduced when building/running the engine fails with the recorded message",
                  f"if ! {shlex.join(polygraphy)} > repro.log 2>&1 && grep -qE {shlex.quote(pattern)} repro.log; "
                  "then exit 1; fi", "exit 0"]
    elif options["fail_on"] == "tolerance":
        lines.append(shlex.join(polygraphy + ["--load-outputs", "reference_outputs.json", "--check-error-stat",
                                              "elemwise", "--infinities-compare-equal",
                                              "--atol", repr(float(options["atol"])),
                                              "--rtol", repr(float(options["rtol"]))]))
    else:
        lines.append(shlex.join(polygraphy + ["--validate"]))
    return "\n".join(lines) + "\n"


def trt_environment() -> dict:
    from oracles.tensorrt_runner import _version, installed_flavour

    flavour = installed_flavour()
    return {"tensorrt_flavour": flavour, "tensorrt_module_version": _version(flavour)}


# -- anything else -------------------------------------------------------------------------------------
def unsupported_py(facts: ReproFacts) -> str:
    return (
        "#!/usr/bin/env python3\n"
        f'"""No standalone repro for runner {facts.runner!r} yet; `onnx-reduce bundle verify` replays this bundle."""\n'
        "import sys\n\n"
        f"print('cannot run here: no standalone repro for runner {facts.runner}; "
        "use `onnx-reduce bundle verify` on this bundle')\n"
        "sys.exit(2)\n"
    )


def unsupported_sh(facts: ReproFacts) -> str:
    return (SH_HEADER + f"echo 'cannot run here: no command line for runner {facts.runner}; "
            "use `onnx-reduce bundle verify` on this bundle'\nexit 2\n")


def no_environment() -> dict:
    return {}


FAMILIES: dict[str, Family] = {
    "onnxruntime": Family(ort_repro_py, ort_repro_sh, ort_environment),
    "command": Family(command_repro_py, command_repro_sh, no_environment),
    "tensorrt": Family(trt_repro_py, trt_repro_sh, trt_environment),
}
UNSUPPORTED = Family(unsupported_py, unsupported_sh, no_environment)


def family_of(facts: ReproFacts) -> Family:
    return FAMILIES.get(facts.family, UNSUPPORTED)
