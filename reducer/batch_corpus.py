"""A batch's corpus: a folder of .onnx files (searched recursively) or a TOML manifest that gives each model its
own settings. Paths a manifest names are relative to its folder and must stay inside it."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from reducer.errors import UsageError

try:
    import tomllib
except ImportError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib

# what a manifest may set per model; the reduce options of the command line are the defaults
SETTINGS = ("inputs", "input_shapes", "runner", "fail_on", "atol", "rtol", "check", "expect")
MODEL_KEYS = ("path", "name", "bug", *SETTINGS)
FAIL_ON = ("nan", "tolerance", "error")


@dataclass
class Entry:
    """One model of the corpus. `name` is unique and safe as a folder name: RUN_DIR/models/NAME/."""

    name: str
    path: Path  # absolute
    shown: str  # as the corpus names it
    settings: dict = field(default_factory=dict)  # manifest values, checked; paths absolute
    expect: str = "pass"  # "fail": a known failure, tracked under `bug`
    bug: str | None = None


def load_corpus(corpus: Path, skip: Path | None = None) -> list[Entry]:
    """The corpus's models in a stable order; `skip` (the run directory) is never searched."""
    if corpus.is_dir():
        return _folder_entries(corpus, skip)
    if corpus.is_file() and corpus.suffix == ".toml":
        return _manifest_entries(corpus)
    if corpus.is_file():
        raise UsageError(f"{corpus}: a corpus is a folder of .onnx files or a .toml manifest")
    raise UsageError(f"{corpus}: no such file or directory")


def _folder_entries(folder: Path, skip: Path | None) -> list[Entry]:
    skipped = skip.resolve() if skip else None
    found = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not _is_output(Path(here) / d, skipped))
        found += [Path(here) / f for f in sorted(files) if f.endswith(".onnx") and not f.startswith(".")]
    if not found:
        raise UsageError(f"{folder}: no .onnx file in it (or in its folders)")
    entries, taken = [], set()
    for path in sorted(found, key=lambda p: p.relative_to(folder).as_posix()):
        shown = path.relative_to(folder).as_posix()
        entries.append(Entry(_unique(_safe(shown[: -len(".onnx")]), taken), path.absolute(), shown))
    return entries


def _is_output(folder: Path, run_dir: Path | None) -> bool:
    """This run's folder, or another run's output (a reduction's or a batch's holds a .lock): their
    minimal.onnx files are results, not corpus models."""
    return folder.resolve() == run_dir or (folder / ".lock").exists()


def _manifest_entries(manifest: Path) -> list[Entry]:
    try:
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{manifest}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{manifest}: not valid TOML ({exc})") from None
    unknown = sorted(set(data) - {"defaults", "model"})
    if unknown:
        raise UsageError(f"{manifest}: unknown table '{unknown[0]}' (known: [defaults], [[model]])")
    defaults, models = data.get("defaults", {}), data.get("model", [])
    if not isinstance(defaults, dict) or not isinstance(models, list) or not models:
        raise UsageError(f"{manifest}: expected a [defaults] table and at least one [[model]] entry")
    root = manifest.parent.absolute()
    base = _settings(defaults, SETTINGS, root, f"{manifest}: [defaults]")
    entries, taken = [], set()
    for number, model in enumerate(models, 1):
        where = f"{manifest}: [[model]] {number}"
        if not isinstance(model, dict) or not isinstance(model.get("path"), str):
            raise UsageError(f"{where}: needs a path (a string)")
        settings = {**base, **_settings(model, MODEL_KEYS, root, where)}
        path = _inside(root, model["path"], f"{where}: path")
        name = model.get("name", model["path"].removesuffix(".onnx"))
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"{where}: name must be a non-empty string")
        bug = model.get("bug")
        if bug is not None and not (isinstance(bug, str) and re.fullmatch(r"[\w.#:/-]{1,100}", bug)):
            raise UsageError(f"{where}: bug must be an id (letters, digits, . _ - # : /), got {bug!r}")
        expect = settings.pop("expect", "pass")
        if bug is not None and expect != "fail":
            raise UsageError(f"{where}: a bug id goes with expect = \"fail\"")
        entries.append(Entry(_unique(_safe(name), taken), path, model["path"], settings, expect, bug))
    return entries


def _settings(table: dict, allowed: tuple[str, ...], root: Path, where: str) -> dict:
    """A manifest table's settings, each checked for its type; paths resolved against the manifest's folder."""
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise UsageError(f"{where}: unknown key '{unknown[0]}' (known: {', '.join(allowed)})")
    found = {}
    for key, value in table.items():
        if key in ("path", "name", "bug"):
            continue
        if key == "inputs":
            found[key] = str(_inside(root, _text(value, where, key), f"{where}: inputs"))
        elif key in ("runner",):
            found[key] = _text(value, where, key)
        elif key == "fail_on":
            if value not in FAIL_ON:
                raise UsageError(f"{where}: fail_on must be one of {', '.join(FAIL_ON)}, got {value!r}")
            found[key] = value
        elif key == "expect":
            if value not in ("pass", "fail"):
                raise UsageError(f"{where}: expect must be \"pass\" or \"fail\", got {value!r}")
            found[key] = value
        elif key in ("atol", "rtol"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise UsageError(f"{where}: {key} must be a finite number >= 0, got {value!r}")
            found[key] = float(value)
        elif key == "input_shapes":
            found[key] = _shapes(value, where)
        elif key == "check":
            if not (isinstance(value, list) and value and all(isinstance(a, str) for a in value)):
                raise UsageError(f"{where}: check must be a command as a list of strings, e.g. [\"python\", "
                                 "\"check.py\", \"{model}\"]")
            found[key] = [absolute_if_there(arg, root) for arg in value]
    return found


def _text(value, where: str, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _shapes(value, where: str) -> list[str]:
    """Polygraphy's `name:[d,...]` strings, or a table of name = [d, ...]."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    if isinstance(value, dict) and all(isinstance(d, list) and all(type(x) is int and x >= 0 for x in d)
                                       for d in value.values()):
        return [f"{name}:[{','.join(map(str, dims))}]" for name, dims in value.items()]
    raise UsageError(f"{where}: input_shapes must be \"x:[1,3,224,224]\" strings or a table x = [1, 3, 224, 224]")


def _inside(root: Path, relative: str, what: str) -> Path:
    """A path of the manifest: relative to its folder and inside it (no absolute path, no way out by `..`
    or by a symbolic link)."""
    if os.path.isabs(relative) or re.match(r"^[A-Za-z]:", relative):
        raise UsageError(f"{what}: '{relative}' is absolute; paths are relative to the manifest's folder")
    path = root / relative
    resolved, top = path.resolve(), root.resolve()
    if resolved != top and top not in resolved.parents:
        raise UsageError(f"{what}: '{relative}' leads outside the manifest's folder")
    return path


def absolute_if_there(arg: str, root: Path) -> str:
    """A check command's argument that names a file next to the manifest, made absolute: the check runs
    in its own folder."""
    if arg.startswith("-") or "{" in arg or os.path.isabs(arg) or not (root / arg).exists():
        return arg
    return str(root / arg)


def _safe(text: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("/", "__")).strip("._") or "model"
    return safe[:100]


def _unique(name: str, taken: set[str]) -> str:
    unique, number = name, 2
    while unique.lower() in taken:  # case-insensitive file systems
        unique, number = f"{name}-{number}", number + 1
    taken.add(unique.lower())
    return unique
