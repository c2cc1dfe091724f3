"""The small interfaces every runner, check and oracle implements, and the data they exchange."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # only in annotations: the CLI imports this before its workers start
    import numpy as np
    import onnx

    from reducer.model import ModelBytes

LOG_TAIL_CHARS = 64_000


# signals that stop a process from outside; a crash by any other (SIGSEGV, SIGABRT) is the model's doing
KILLED_FROM_OUTSIDE = frozenset({"SIGKILL", "SIGTERM", "SIGINT", "SIGHUP"})


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass
class RunResult:
    """What one runner execution produced: outputs, or an error / crash / timeout with its log."""

    status: str  # "ok" | "error" | "crash" | "timeout" | "unavailable" (the runner cannot run here at all)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    error: str = ""
    log: str = ""
    seconds: float = 0.0

    @property
    def text(self) -> str:
        """Everything the runner said: what --fail-regex searches."""
        return f"{self.error}\n{self.log}" if self.error else self.log


PYTHON_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"([A-Za-z_][\w.]*)(?::|$)")
_UNCOMPILED = re.compile(r'^  File "[^"\n]*", line \d+\n(?:.*\n){0,4}?(SyntaxError|IndentationError|TabError):',
                         re.MULTILINE)


def python_exception(output: str) -> str:
    """The exception type of the last Python traceback in a command's output ('' when there is none): a check
    that crashes (a missing data file) exits 1 as a failing check may, yet it is another failure."""
    start = output.rfind(PYTHON_TRACEBACK)
    if start < 0:  # a script that does not compile prints no traceback, only where and why
        unparsed = _UNCOMPILED.findall(output)
        return unparsed[-1] if unparsed else ""
    for line in output[start + len(PYTHON_TRACEBACK):].splitlines():
        if line.strip() and not line[0].isspace():  # the frames are indented; the exception line is not
            match = _EXCEPTION_LINE.match(line)
            return match.group(1) if match else "?"
    return "?"


@dataclass(frozen=True)
class Signature:
    """How a model fails. Two failures are the same when kind and detail agree, and the Python exception a
    command's output ended with (if both recorded one); the failing outputs may differ, since cutting a graph
    renames which tensor is an output."""

    kind: str  # "nan" | "tolerance" | "error" | "crash" | "timeout" | "command"
    detail: str = ""
    outputs: tuple[str, ...] = ()
    exception: str | None = None  # a command's: its last traceback's exception type, "" none; None: not recorded
    # a command's failure whose check said its outputs hold NaN/Inf where the reference's are finite (it printed
    # `nonfinite_elements=N`, N > 0): a NaN/Inf failure, whose repro is its onset, as the built-in `nan` check's
    non_finite: bool = False

    @property
    def is_numeric(self) -> bool:
        """Judged against reference values (a command's, unless its --fail-regex names a message: it may be)."""
        return self.kind in ("nan", "tolerance") or (self.kind == "command" and not self.names_a_message)

    @property
    def names_a_message(self) -> bool:
        """A command's failure that its --fail-regex matched: a message, an error as a builder's is."""
        return self.kind == "command" and self.detail.startswith("matched /")

    def same_failure(self, other: Signature | None) -> bool:
        """Whether this failure (a candidate's) is `other` (the one reduced): where that one's outputs held NaN/Inf,
        this one's must too; where they did not, a candidate's may (an overflow's onset gives Inf that the whole
        model squashes into a value merely wrong)."""
        if other is None or self.kind != other.kind or self.detail != other.detail:
            return False
        if other.non_finite and not self.non_finite:
            return False
        # a signature recorded before exceptions were part of it says nothing about them
        return self.exception is None or other.exception is None or self.exception == other.exception

    def to_json(self) -> dict:
        data = {"kind": self.kind, "detail": self.detail, "outputs": list(self.outputs)}
        if self.exception is not None:
            data["exception"] = self.exception
        if self.non_finite:
            data["non_finite"] = True
        return data

    @classmethod
    def from_json(cls, data: dict) -> Signature:
        return cls(data["kind"], data.get("detail", ""), tuple(data.get("outputs", ())), data.get("exception"),
                   bool(data.get("non_finite")))

    def __str__(self) -> str:
        where = f" in {', '.join(self.outputs[:3])}" if self.outputs else ""
        details = [d for d in (self.detail, f"Python {self.exception}" if self.exception else "",
                               "NaN/Inf outputs" if self.non_finite else "") if d]
        return f"{self.kind}{' (' + ', '.join(details) + ')' if details else ''}{where}"


@dataclass
class Verdict:
    """FAIL (with a signature) or PASS, and why, in words."""

    failing: bool
    signature: Signature | None = None
    reason: str = ""
    log: str = ""  # not cached: only kept for the current best
    runs: tuple[int, int] | None = None  # (failing, made) when the oracle repeats runs (--repeat)
    elements: int | None = None  # output elements that fail (NaN/Inf, out of tolerance); None: not counted
    # False when the check was killed from outside (a user, a shutdown, the OOM killer) or nothing was judged:
    # a re-run would say something else, so the verdict is never cached (not written to JSON: never kept)
    lasting: bool = True
    # the output's lines a --fail-regex matched: the error in its own words, where it names the node it came from
    # (Reduction.named); cached, so a re-run from the cache searches as the first run did
    message: str = ""
    # the output elements its check counted NaN/Inf where the reference is finite (a command that printed
    # nonfinite_elements=N); None: not counted. 0 is a failure known to be finite, which an overflow would not leave
    nonfinite_elements: int | None = None

    @property
    def finite_counted(self) -> bool:
        return self.nonfinite_elements == 0

    @property
    def flaky(self) -> bool:
        """Some runs failed and some passed."""
        return self.runs is not None and 0 < self.runs[0] < self.runs[1]

    def to_json(self) -> dict:
        data = {
            "failing": self.failing,
            "signature": self.signature.to_json() if self.signature else None,
            "reason": self.reason,
        }
        if self.runs is not None:
            data["runs"] = list(self.runs)
        if self.elements is not None:
            data["elements"] = self.elements
        if self.message:
            data["message"] = self.message
        if self.nonfinite_elements is not None:
            data["nonfinite_elements"] = self.nonfinite_elements
        return data

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        signature = Signature.from_json(data["signature"]) if data.get("signature") else None
        runs = tuple(data["runs"]) if data.get("runs") else None
        return cls(data["failing"], signature, data.get("reason", ""), runs=runs, elements=data.get("elements"),
                   message=data.get("message", ""),
                   # a verdict cached before the count was kept said only whether it was 0
                   nonfinite_elements=data.get("nonfinite_elements", 0 if data.get("finite_counted") else None))


MESSAGE_CHARS = 4000  # of the lines a --fail-regex matched: an error's own lines, not a verbose log


def matched_lines(text: str, regexes: list[re.Pattern]) -> str:
    """The lines of `text` that a --fail-regex matches (its last MESSAGE_CHARS characters)."""
    return "\n".join(line for line in text.splitlines() if any(r.search(line) for r in regexes))[-MESSAGE_CHARS:]


class Runner(Protocol):
    """Executes a model on one backend. Runs inside a worker process; may crash or hang."""

    spec: str
    max_abs_value: float | None  # largest magnitude the target precision holds (faithfulness bound)

    def run(self, model_path: Path, feeds: dict[str, np.ndarray], external_dir: Path | None) -> dict[str, np.ndarray]:
        """Return outputs by name; raise with a clear message on a build or run error."""
        ...

    def describe(self) -> dict:
        """Versions and settings that decide its results (the cache fingerprint, env.json)."""
        ...

    def unavailable_reason(self) -> str | None:
        """Why it cannot run on this machine (a runtime, a GPU or a provider missing), or None. Cheap: it
        runs in the driver process, which never builds an engine."""
        ...


class Check(Protocol):
    """Turns what a runner produced, and the reference values, into a verdict."""

    name: str

    def judge(self, result: RunResult, reference: dict[str, np.ndarray]) -> Verdict: ...


@dataclass
class CheckJob:
    """One candidate to judge: the model, which store tensors feed its inputs, where to work."""

    model: onnx.ModelProto | bytes | ModelBytes  # serialized already (save_model writes them as they are)
    feeds: dict[str, Path]  # input name -> .npy file
    reference: dict[str, np.ndarray] | None  # output name -> value (memory-mapped); None: the oracle runs it
    workdir: Path  # private to this check
    external_data: bool = True  # False: the model holds no tensor whose data lives in a file (none to copy)
    # False: valid by construction (Materialized.as_original): a built-in runner's check spares onnx's checker;
    # a command is always handed a checked file
    checked: bool = True
    # the proof's `exact` run (reducer/counterfactual.py): the nodes to compute in fp32 and the tensors they write
    # (also in the model's metadata, EXACT_OUTPUTS_KEY, for the built-in runners); empty for every other check
    keep_fp32_nodes: tuple[str, ...] = ()
    keep_fp32_tensors: tuple[str, ...] = ()


class Oracle(Protocol):
    """Decides whether a candidate fails: runner(s) + check + isolation."""

    description: str
    fingerprint: str  # changes whenever a verdict could change
    max_abs_value: float | None
    names_failing_outputs: bool  # whether its verdicts say which outputs fail (a command's do not)
    computes_exactly: bool  # whether it can run a model with marked nodes kept in fp32 (EXACT_OUTPUTS_KEY)
    exact_on_trust: bool  # whether every node kept so computes the reference (else the driver checks it once)

    def judge(self, job: CheckJob) -> Verdict: ...

    def close(self) -> None: ...
