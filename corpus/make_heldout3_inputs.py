"""Inputs of the third held-out set (corpus/heldout3.json), made before any reduction ran on its models: numpy
only, deterministic, no wheel needed. Each builder (corpus/heldout3_inputs/) says which package's preprocessing it
follows. `python corpus/make_heldout3_inputs.py` writes corpus/inputs/<name>.npz; `--check` compares instead (exit 1
on a difference)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from heldout3_inputs import audio, text, vision  # noqa: E402


def builders(manifest: str = "heldout3.json", made: dict | None = None) -> dict:
    """The builders of the inputs a set's manifest names (another set's builders by `made`)."""
    wanted = {Path(case["inputs"]).stem for case in json.loads((HERE / manifest).read_text())}
    made = made or {**audio.BUILDERS, **vision.BUILDERS, **text.BUILDERS}
    return {name: made[name] for name in sorted(wanted)}


def main(manifest: str = "heldout3.json", made: dict | None = None, description: str = __doc__) -> int:
    """Write (or with --check compare) the inputs of a set; the fourth set's script calls this with its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    args = parser.parse_args()
    differ = 0
    for name, build in builders(manifest, made).items():
        arrays = build()
        path = HERE / "inputs" / f"{name}.npz"
        if args.check:
            with np.load(path) as saved:
                same = set(saved.files) == set(arrays) and all(
                    saved[k].dtype == arrays[k].dtype and np.array_equal(saved[k], arrays[k]) for k in arrays)
            print(("same    " if same else "DIFFERS ") + path.name)
            differ += not same
        else:
            np.savez_compressed(path, **arrays)
            print(path.name, {k: (v.shape, str(v.dtype)) for k, v in arrays.items()})
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
