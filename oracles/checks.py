"""Checks: NaN/Inf, tolerance (Polygraphy's elementwise rule) and error (optionally matched by regex)."""

from __future__ import annotations

import re

import numpy as np

from oracles.base import KILLED_FROM_OUTSIDE, RunResult, Signature, Verdict, matched_lines

_ORT_STATUS = re.compile(r"\[ONNXRuntimeError\] : \d+ : (\w+)")


def runner_failure(result: RunResult, regexes: list[re.Pattern] | None = None) -> Verdict:
    """A run that produced no outputs: an error, a crash or a timeout, with what identifies it."""
    text = result.text
    if result.status == "error":
        if regexes:
            matched = [r.pattern for r in regexes if r.search(text)]
            if not matched:  # Polygraphy's meaning: only a matching failure counts
                return Verdict(False, None, "error, but no --fail-regex matched: " + _first_line(result.error))
            detail = "matched /" + "/, /".join(matched) + "/"
        else:
            status = _ORT_STATUS.search(text)
            detail = status.group(1) if status else text.split(":", 1)[0].strip()
        return Verdict(True, Signature("error", detail), _first_line(result.error), result.log,
                       message=matched_lines(text, regexes) if regexes else "")
    killed_by = re.search(r"killed by (SIG\w+|signal \d+)", result.error) if result.status == "crash" else None
    detail = killed_by.group(1) if killed_by else ""
    return Verdict(True, Signature(result.status, detail), _first_line(result.error), result.log,
                   lasting=detail not in KILLED_FROM_OUTSIDE)


def non_finite(value: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Where the target holds NaN/Inf and the reference is finite (where their shapes differ: wherever it does)."""
    bad = ~np.isfinite(value)
    return bad & np.isfinite(ref) if ref.shape == value.shape else bad


class NanCheck:
    """Fails where the target produces NaN/Inf and the reference is finite."""

    name = "nan"

    def judge(self, result: RunResult, reference: dict[str, np.ndarray]) -> Verdict:
        if result.status != "ok":
            return runner_failure(result)
        failing, notes, elements = [], [], 0
        for name, value in result.outputs.items():
            ref = reference.get(name)
            value = np.asarray(value)
            if ref is None or value.dtype.kind not in "fc":
                continue
            count = int(non_finite(value, ref).sum())
            elements += count
            if count:
                failing.append(name)
                notes.append(f"{name}: {count} of {value.size} non-finite ({int(np.isnan(value).sum())} NaN)")
        if failing:
            return Verdict(True, Signature("nan", "", tuple(failing)), "; ".join(notes[:3]), result.log,
                           elements=elements)
        return Verdict(False, None, "all outputs finite where the reference is", result.log, elements=0)


class ToleranceCheck:
    """Polygraphy's elementwise rule (`polygraphy run --check-error-stat elemwise`, its default), per
    output: an element mismatches when its absolute difference exceeds atol AND its relative difference
    (against |ref|, zeros nudged by 2.2e-16) exceeds rtol; NaN differences always mismatch, except where both
    runs hold the same infinity (Polygraphy's --infinities-compare-equal), or both NaN: a model (or a cut) holds
    them by design, such as T5's log of a zero relative position, an attention mask, or caustic-nmr's NaN for a
    residue without the atom asked for, and would fail against itself. (Polygraphy counts a NaN in both runs as a
    mismatch; it has no flag to say otherwise.)"""

    name = "tolerance"

    def __init__(self, atol: float, rtol: float):
        self.atol, self.rtol = atol, rtol

    def mismatches(self, target: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The elements that mismatch, and the absolute differences (for the report)."""
        target, expected = np.asarray(target, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            absdiff = np.abs(target - expected)
            same = (np.isinf(expected) & (target == expected)) | (np.isnan(expected) & np.isnan(target))
            absdiff = np.where(same, 0.0, absdiff)  # the same infinity, or NaN in both
            denominator = np.where(expected == 0, np.finfo(np.float64).eps, np.abs(expected))
            reldiff = absdiff / denominator
        bad = ((absdiff > self.atol) | np.isnan(absdiff)) & ((reldiff > self.rtol) | np.isnan(reldiff))
        return bad, absdiff

    def judge(self, result: RunResult, reference: dict[str, np.ndarray]) -> Verdict:
        if result.status != "ok":
            return runner_failure(result)
        failing, notes, elements = [], [], 0
        for name, value in result.outputs.items():
            ref = reference.get(name)
            if ref is None:
                continue
            value = np.asarray(value)
            if value.shape != ref.shape:
                failing.append(name)
                elements += ref.size
                notes.append(f"{name}: shape {list(value.shape)}, reference {list(ref.shape)}")
                continue
            if value.dtype.kind not in "fciu" or value.size == 0:
                continue
            bad, diff = self.mismatches(value, ref)
            if bad.any():
                elements += int(bad.sum())
                failing.append(name)
                finite = np.isfinite(diff)
                worst = float(diff[finite].max()) if finite.any() else float("nan")
                # NaN/Inf where the reference is finite leave the largest difference: say how many (rivaGAN's
                # decoder in fp16 on an H200, whose ReduceMean overflows: "max abs diff 0.01182" alone hid them)
                lost = int(non_finite(value, ref).sum())
                held = f" ({lost} NaN/Inf where the reference is finite)" if lost else ""
                of_rest = " of the rest" if lost else ""
                notes.append(f"{name}: {int(bad.sum())} of {value.size} mismatched{held}, max abs diff{of_rest} "
                             f"{worst:.4g}")
        if failing:
            return Verdict(True, Signature("tolerance", "", tuple(failing)), "; ".join(notes[:3]), result.log,
                           elements=elements)
        return Verdict(False, None, f"all outputs within atol={self.atol:g} or rtol={self.rtol:g}", result.log,
                       elements=0)


class ErrorCheck:
    """Fails when the runner raised; with --fail-regex, the matched pattern is part of the signature."""

    name = "error"

    def __init__(self, regexes: list[re.Pattern] | None = None):
        self.regexes = regexes or None

    def judge(self, result: RunResult, reference: dict[str, np.ndarray]) -> Verdict:
        if result.status == "ok":
            return Verdict(False, None, "the runner succeeded", result.log)
        return runner_failure(result, self.regexes)


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]
