"""What travels in a bundle with a check command: the check's script, and the files the user names with
--ship; never the other files the command line names (a credentials file, a private config), which
report.md lists as not shipped. Light to import: the CLI uses it before the reduction starts."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from reducer.errors import UsageError

SHIPPED_FILE_MAX_BYTES = 8 << 20
SHIPPED_TOTAL_MAX_BYTES = 16 << 20  # under a common issue-tracker attachment limit (25 MB), with the rest
INTERPRETER = re.compile(r"(python|pypy)[\d.]*|sh|bash|dash|zsh|ksh|env")
SCRIPT_SUFFIXES = (".py", ".sh", ".bash")
POLYGRAPHY_ARTIFACT = "polygraphy_debug.onnx"  # as oracles/command.py names the candidate: never a file of the user's


def _is_interpreter(arg: str) -> bool:
    return bool(INTERPRETER.fullmatch(os.path.basename(arg)))


def _existing_file(arg: str) -> bool:
    return bool(arg) and not arg.startswith("-") and "{" not in arg and os.path.isfile(arg)


def _installed_program(arg: str) -> bool:
    """A program in a folder of PATH is a tool the vendor installs (polygraphy, trtexec), not the check's script."""
    folder = os.path.dirname(os.path.realpath(arg))
    return any(os.path.realpath(d) == folder for d in os.environ.get("PATH", "").split(os.pathsep) if d)


def check_script(command: list[str]) -> str | None:
    """The check's own script: the command itself when it is a file of the user's (`./check.sh`), else the
    script an interpreter runs: its first operand (`python check.py`), or the first .py/.sh file named
    after it (`sh -c '...' x python check.py`)."""
    first = command[0]
    if not _is_interpreter(first):
        return first if "/" in first and _existing_file(first) and not _installed_program(first) else None
    operands = [arg for arg in command[1:] if not arg.startswith("-")]
    if operands and _existing_file(operands[0]):
        return operands[0]
    return next((arg for arg in command[1:] if arg.endswith(SCRIPT_SUFFIXES) and _existing_file(arg)), None)


def runs_python(command: list[str]) -> bool:
    script = check_script(command) or ""
    return bool(re.fullmatch(r"(python|pypy)[\d.]*", os.path.basename(command[0]))) or script.endswith(".py")


def python_exit_warning(command: list[str], fail_codes: list[int], ignore_fail_codes: list[int],
                        fail_regexes: list[str]) -> str | None:
    """Exit code 1 as the failure, from a Python check, with no --fail-regex: an uncaught exception (a
    missing file, an import error) exits 1 too. Failures are told apart by their traceback, but a check
    that crashes on the whole model would be taken for the failure itself."""
    if not command or fail_regexes or 1 in ignore_fail_codes or (fail_codes and 1 not in fail_codes):
        return None
    if not runs_python(command):
        return None
    return ("the check runs Python and exit code 1 counts as failing, which a crash of the check (an uncaught "
            "exception) also gives: pass --fail-regex (or another --fail-code) that only the failure matches")


def bundle_options(ship: list[str] | tuple[str, ...], exclude: list[str] | tuple[str, ...]) -> dict:
    """--ship/--exclude as report.json records them: absolute paths (a later `bundle make` may run elsewhere).
    A missing file, one to ship over the size cap, or one named by both is refused now, before the reduction."""
    for flag, paths in (("--ship", ship), ("--exclude", exclude)):
        for path in paths:
            if not os.path.isfile(path):
                raise UsageError(f"{flag} {path}: no such file")
    for path in ship:
        if os.path.getsize(path) > SHIPPED_FILE_MAX_BYTES:
            raise UsageError(f"--ship {path}: {os.path.getsize(path) / 1e6:.1f} MB, over the "
                             f"{SHIPPED_FILE_MAX_BYTES / 1e6:.0f} MB a shipped file may have")
    both = {os.path.realpath(p) for p in ship} & {os.path.realpath(p) for p in exclude}
    if both:
        raise UsageError(f"--ship and --exclude both name {sorted(both)[0]}")
    return {"ship": [os.path.abspath(p) for p in ship], "exclude": [os.path.abspath(p) for p in exclude]}


@dataclass
class Shipped:
    name: str  # in the bundle folder
    source: Path
    data: bytes
    why: str  # "the check script" or "--ship"

    def to_json(self, shown_source: str) -> dict:
        return {"name": self.name, "from": shown_source, "bytes": len(self.data),
                "sha256": hashlib.sha256(self.data).hexdigest(), "why": self.why}


def plan(command: list[str], ship: list[str], exclude: list[str],
         reserved: set[str]) -> tuple[list[Shipped], list[tuple[str, str]]]:
    """What ships (read now, capped) and what does not, with why: (shipped, [(path, reason)]). `reserved`:
    names the bundle's own files take."""
    excluded = {os.path.realpath(p) for p in exclude}
    script = check_script(command)
    wanted = [(script, "the check script")] if script else []
    wanted += [(path, "--ship") for path in ship]
    shipped: list[Shipped] = []
    left: list[tuple[str, str]] = []
    taken = set(reserved)
    total = 0
    for path, why in wanted:
        real = os.path.realpath(path)
        if any(os.path.realpath(s.source) == real for s in shipped):
            continue
        if real in excluded:
            left.append((path, "excluded (--exclude)"))
            continue
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            left.append((path, f"cannot be read ({exc.strerror})"))
            continue
        if why == "the check script" and not _is_text(data):
            left.append((path, "not a text file (pass --ship FILE to include it)"))
            continue
        if len(data) > SHIPPED_FILE_MAX_BYTES or total + len(data) > SHIPPED_TOTAL_MAX_BYTES:
            left.append((path, f"{len(data) / 1e6:.1f} MB, over the cap ({SHIPPED_FILE_MAX_BYTES / 1e6:.0f} MB a "
                               f"file, {SHIPPED_TOTAL_MAX_BYTES / 1e6:.0f} MB in all)"))
            continue
        total += len(data)
        name = _free_name(Path(path).name, taken)
        taken.add(name)
        shipped.append(Shipped(name, Path(path), data, why))
    listed = {os.path.realpath(s.source) for s in shipped} | {os.path.realpath(p) for p, _ in left}
    for path in _named_files(command):
        if os.path.realpath(path) not in listed:
            listed.add(os.path.realpath(path))
            left.append((path, "named on the check command; pass --ship FILE to include it"))
    return shipped, left


def _named_files(command: list[str]) -> list[str]:
    """Existing files the command's arguments name, `--config=FILE` included."""
    named = []
    for arg in command[1:]:
        path = arg.partition("=")[2] if arg.startswith("-") else arg
        if _existing_file(path) and os.path.basename(path) != POLYGRAPHY_ARTIFACT:
            named.append(path)
    return named


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _free_name(name: str, taken: set[str]) -> str:
    """The file's own name, unless the bundle has one by that name already (report.json, another check.py)."""
    candidate, number = name, 1
    while candidate in taken:
        candidate = f"check{number if number > 1 else ''}_{name}"
        number += 1
    return candidate


def shipped_command(command: list[str], shipped: list[Shipped]) -> list[str]:
    """The command as the bundle runs it: the shipped copies as {bundle}/NAME. A shipped script that was the
    command itself runs through its #! interpreter, by name: a zip does not keep the executable bit."""
    names = {os.path.realpath(s.source): s.name for s in shipped}
    result = []
    for position, arg in enumerate(command):
        name = names.get(os.path.realpath(arg)) if _existing_file(arg) else None
        if name is None:
            result.append(arg)
        elif position == 0:
            data = next(s.data for s in shipped if s.name == name)
            result += [*interpreter_of(data), "{bundle}/" + name]
        else:
            result.append("{bundle}/" + name)
    return result


def interpreter_of(script: bytes) -> list[str]:
    first = script.split(b"\n", 1)[0].decode("utf-8", "replace")
    words = first[2:].split() if first.startswith("#!") else []
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if w != "-S"]
    return [os.path.basename(words[0]), *words[1:]] if words else ["sh"]
