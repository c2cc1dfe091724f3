"""Inputs of the seventh held-out set (corpus/heldout7.json), made before any reduction ran on its models: numpy
only, deterministic, no wheel needed. Each builder (corpus/heldout7_inputs/) says which package's preprocessing it
follows. `python corpus/make_heldout7_inputs.py` writes corpus/inputs/<name>.npz; `--check` compares instead (exit 1
on a difference)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from heldout7_inputs import vision  # noqa: E402
from make_heldout3_inputs import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("heldout7.json", vision.BUILDERS, __doc__))
