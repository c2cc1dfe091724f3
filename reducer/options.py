"""Options of a reduction, and the oracle they name: light to import, so that the CLI can start the
oracle's warm workers (which import their runtime) before it imports the rest of the reducer."""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass, field

from oracles.base import Oracle
from reducer.errors import UsageError

DEFAULT_INPUT_RANGE = (0.0, 1.0)  # Polygraphy's default for generated data


def parse_input_shapes(specs: tuple[str, ...] | list[str]) -> dict[str, tuple[int, ...]]:
    """`name:[1,3,224,224]` (Polygraphy's syntax), several per option or the option repeated."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        for item in re.findall(r"[^\s:]+:\[[^\]]*\]|\S+", spec):
            match = re.fullmatch(r"(.+):\[([0-9,\s]*)\]", item)
            if not match:
                raise UsageError(f"--input-shapes: cannot read '{item}'; expected name:[d0,d1,...]")
            dims = [d for d in match.group(2).replace(" ", "").split(",") if d]
            shapes[match.group(1)] = tuple(int(d) for d in dims)
    return shapes


def parse_input_range(text: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--input-range: expected 'low,high', got '{text}'") from None
    if not low <= high:
        raise UsageError(f"--input-range: low ({low}) is above high ({high})")
    if not math.isfinite(high - low):  # inf, or a span numpy's uniform cannot draw from
        raise UsageError(f"--input-range: '{text}' is not a finite range")
    return low, high


DEFAULT_CHECK_TIMEOUT = 300.0
MAX_CHECK_TIMEOUT = 7 * 24 * 3600.0  # a week; far longer overflows the timeouts of threads and processes
# What one job holds at least: a warm worker (Python, numpy, the runtime, a small model's session) or a
# check command's process. `--jobs` beyond what memory holds swaps or gets killed, whatever the cores say.
JOB_MEMORY_BYTES = 512 << 20


@dataclass
class OracleOptions:
    runner: str = "onnxruntime:cpu:fp16"
    fail_on: str = "nan"
    atol: float = 1e-5  # Polygraphy's defaults
    rtol: float = 1e-5
    fail_regex: list[str] = field(default_factory=list)
    ignore_fail_regex: list[str] = field(default_factory=list)
    fail_code: list[int] = field(default_factory=list)
    ignore_fail_code: list[int] = field(default_factory=list)
    check_command: list[str] = field(default_factory=list)
    check_timeout: float = DEFAULT_CHECK_TIMEOUT
    faithful_max: float | None = None  # overrides the runner's bound; a --check command has none
    jobs: int | None = None  # candidates checked at once; None: 1, or one per visible GPU for GPU runners
    repeat: int = 1  # runs per candidate (engine builds are not deterministic)
    min_fails: int = 1  # failing runs, of `repeat`, that make a candidate failing

    def __post_init__(self) -> None:
        # NaN passes no comparison, so each bound is written as what must hold: NaN then fails it
        if not 0 < self.check_timeout <= MAX_CHECK_TIMEOUT:
            raise UsageError(f"--check-timeout must be above 0 and at most {MAX_CHECK_TIMEOUT:.0f} seconds "
                             f"(a week), got {self.check_timeout:g}")
        for flag, value in (("--atol", self.atol), ("--rtol", self.rtol)):
            if not 0 <= value < math.inf:
                raise UsageError(f"{flag} must be a finite number >= 0, got {value:g}")
        if self.faithful_max is not None and not 0 < self.faithful_max < math.inf:
            raise UsageError(f"--faithful-max must be a finite number above 0, got {self.faithful_max:g}")


@dataclass
class InputOptions:
    inputs: str | None = None
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    seed: int = 0
    input_range: tuple[float, float] = DEFAULT_INPUT_RANGE

    def __post_init__(self) -> None:
        if self.seed < 0:  # numpy's generators take no negative seed
            raise UsageError(f"--seed must be 0 or more, got {self.seed}")


def _regexes(patterns: list[str], flag: str) -> list[re.Pattern]:
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise UsageError(f"{flag}: bad regular expression '{pattern}': {exc}") from None
    return compiled


def build_oracle(options: OracleOptions) -> Oracle:
    fail_regexes = _regexes(options.fail_regex, "--fail-regex")
    ignore_regexes = _regexes(options.ignore_fail_regex, "--ignore-fail-regex")
    if options.jobs is not None and options.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if options.jobs is not None:
        options.jobs, why = usable_jobs(options.jobs, _uses_gpu(options))
        if why:
            print(f"onnx-reduce: note: {why}", file=sys.stderr)
    from oracles.repeat import RepeatedOracle, check_repeat

    check_repeat(options.repeat, options.min_fails)  # before any worker starts
    oracle = _build_oracle(options, fail_regexes, ignore_regexes)
    if options.faithful_max is not None:
        oracle.max_abs_value = options.faithful_max
    if options.repeat > 1:
        oracle = RepeatedOracle(oracle, options.repeat, options.min_fails)
    return oracle


def usable_jobs(requested: int, uses_gpu: bool) -> tuple[int, str]:
    """`--jobs` capped at what this machine has: the cores this process may use, the jobs available memory
    holds, and for a GPU runner the visible GPUs. Returns the jobs and, when capped, a line saying why."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    bounds = {f"{cores} usable cores": cores}
    memory = _available_memory()
    if memory is not None:
        bounds[f"{memory / 1e9:.1f} GB of memory available, {JOB_MEMORY_BYTES >> 20} MB a job"] = (
            memory // JOB_MEMORY_BYTES)
    if uses_gpu:
        from oracles.gpu import visible_gpus

        gpus = len(visible_gpus())
        if gpus:  # none resolved: CUDA chooses, as without --jobs
            bounds[f"{gpus} visible GPUs"] = gpus
    reason, bound = min(bounds.items(), key=lambda item: item[1])
    bound = max(1, bound)
    if requested <= bound:
        return requested, ""
    return bound, f"--jobs {requested} capped at {bound} ({reason})"


def _available_memory() -> int | None:
    """Bytes the kernel could give without swapping (Linux's MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _uses_gpu(options: OracleOptions) -> bool:
    if options.check_command:
        return False  # a command's device is unknown
    from oracles import make_runner

    return getattr(make_runner(options.runner), "uses_gpu", False)


def _build_oracle(options: OracleOptions, fail_regexes, ignore_regexes) -> Oracle:
    if options.check_command:
        from oracles.command import CommandOracle

        return CommandOracle(
            options.check_command,
            options.check_timeout,
            options.fail_code,
            options.ignore_fail_code,
            fail_regexes,
            ignore_regexes,
        )
    if options.fail_code or options.ignore_fail_code or options.ignore_fail_regex:
        raise UsageError("--fail-code, --ignore-fail-code and --ignore-fail-regex apply to --check commands only")
    from oracles.builtin import BuiltinOracle
    from oracles.checks import ErrorCheck, NanCheck, ToleranceCheck

    if options.fail_on == "nan":
        check, params = NanCheck(), {}
    elif options.fail_on == "tolerance":
        check, params = ToleranceCheck(options.atol, options.rtol), {"atol": options.atol, "rtol": options.rtol}
    elif options.fail_on == "error":
        check, params = ErrorCheck(fail_regexes), {"fail_regex": options.fail_regex}
    else:
        raise UsageError(f"unknown --fail-on '{options.fail_on}' (known: nan, tolerance, error)")
    # repeated runs are for flaky builds: a shared timing cache would make every rebuild pick the same tactics
    env = {"ONNX_REDUCE_TRT_TIMING_CACHE": "0"} if options.repeat > 1 else {}
    return BuiltinOracle(options.runner, check, options.check_timeout, params, options.jobs, env)
