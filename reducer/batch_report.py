"""A batch's results: models grouped into bugs by their repro's signature, bugs compared with a baseline run
(a fix is believed only once the baseline's bundle no longer reproduces), summary.json and junit.xml."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import socket
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from reducer.batch import ERRORS, FAILING, write_text
from reducer.batch_corpus import Entry
from reducer.errors import UsageError

SUMMARY_VERSION = 1
PASSING = ("passing", "unexpected-pass")


def summarize(entries: list[Entry], records: dict[str, dict], baseline: dict | None, interrupted: bool = False,
              trusted_commands: list[list[str]] = ()) -> dict:
    """summary.json's content: every model (those not finished as `not-run`), every bug, and the counts."""
    models = [_shown(records.get(e.name)) or {"name": e.name, "path": e.shown, "outcome": "not-run", "bug": None}
              for e in entries]
    bugs = _group(models)
    if baseline is not None and not interrupted:
        _compare(bugs, models, baseline, trusted_commands)
    counts = {outcome: sum(m["outcome"] == outcome for m in models) for outcome in
              sorted({m["outcome"] for m in models})}
    counts.update(models=len(models), bugs=sum(b["status"] in _OPEN for b in bugs),
                  new_bugs=sum(b["status"] == "new" for b in bugs))
    return {"version": SUMMARY_VERSION, "interrupted": interrupted, "baseline": baseline["path"] if baseline else None,
            "counts": counts, "bugs": bugs, "models": models}


_OPEN = ("new", "still-failing", "known")


def _shown(record: dict | None) -> dict | None:
    """A model's record as summary.json shows it: its repro's canonical form goes to its bug."""
    if record is None:
        return None
    hidden = ("argv", "version", "complete", "signature")
    shown = {k: v for k, v in record.items() if k not in hidden}
    if record.get("signature"):
        shown["canonical"] = record["signature"]
    return shown


def _group(models: list[dict]) -> list[dict]:
    """One bug per repro signature. A signature that a model expected to fail shows is tracked under that
    model's known bug id, for every model that shows it."""
    known = {}
    for model in models:
        if model["outcome"] == "expected-failure" and model.get("signature_id"):
            known.setdefault(model["signature_id"], model.get("known_bug") or model["signature_id"])
    bugs: dict[str, dict] = {}
    for model in models:
        signature = model.get("signature_id")
        if not signature:
            continue
        bug_id = known.get(signature, signature)
        model["bug"] = bug_id
        bug = bugs.setdefault(bug_id, {"id": bug_id, "signature_id": signature,
                                       "signature": model.get("signature_summary"), "canonical": model.pop("canonical"),
                                       "known": signature in known, "status": "known" if signature in known else "new",
                                       "models": [], "bundle": None, "nodes": None})
        model.pop("canonical", None)
        bug["models"].append(model["name"])
        nodes = model.get("nodes_after")
        if model.get("bundle") and (bug["nodes"] is None or (nodes or 0) < bug["nodes"]):
            bug["bundle"], bug["nodes"] = model["bundle"], nodes  # the smallest repro is the bug's bundle
    return sorted(bugs.values(), key=lambda b: (-len(b["models"]), b["id"]))


def _compare(bugs: list[dict], models: list[dict], baseline: dict, trusted_commands) -> None:
    """new / still-failing by the baseline's bug ids; a baseline bug gone since, whose models now pass, is
    fixed only when its bundle no longer reproduces here."""
    before = {b["id"]: b for b in baseline["bugs"]}
    for bug in bugs:
        if bug["status"] == "new" and bug["id"] in before:
            bug["status"] = "still-failing"
    today = {m["name"]: m for m in models}
    present = {b["id"] for b in bugs}
    for old in baseline["bugs"]:
        if old["id"] in present:
            continue
        gone = {"id": old["id"], "signature_id": old.get("signature_id"), "signature": old.get("signature"),
                "known": old.get("known", False), "models": old["models"], "bundle": None, "nodes": None,
                "baseline_bundle": old.get("bundle")}
        ran = [today[n] for n in old["models"] if n in today and today[n]["outcome"] != "not-run"]
        if not ran:
            gone.update(status="not-run", reason="none of its models is in this run")
        elif not all(m["outcome"] in PASSING for m in ran):
            now = ", ".join(f"{m['name']}: {m.get('bug') or m['outcome']}" for m in ran)
            gone.update(status="changed", reason=f"its models fail otherwise now ({now})")
        else:
            gone.update(_reverified(baseline["dir"], old.get("bundle"), trusted_commands))
        bugs.append(gone)


def _reverified(baseline_dir: Path, bundle: str | None, trusted_commands) -> dict:
    from reducer.bundle import NOT_REPRODUCED, REPRODUCED, verify_bundle

    if not bundle:
        return {"status": "unverified", "reason": "the baseline has no bundle for it"}
    path = _inside(baseline_dir, bundle)
    if path is None:
        return {"status": "unverified", "reason": f"its bundle '{bundle}' is not inside the baseline"}
    folder = path.with_suffix("") if path.suffix == ".zip" else path
    target = folder if (folder / "report.json").is_file() else path
    try:
        code, line = verify_bundle(target, _is_trusted(folder, trusted_commands))
    except Exception as exc:  # a bad bundle (BadBundleError) or one that cannot run: unverified, said why
        return {"status": "unverified", "reason": f"{type(exc).__name__}: {exc}"}
    if code == REPRODUCED:
        return {"status": "not-fixed", "reason": f"not fixed: the bundle still reproduces ({line})"}
    if code == NOT_REPRODUCED:
        return {"status": "fixed", "reason": f"its models pass and its bundle no longer reproduces ({line})"}
    return {"status": "unverified", "reason": line}


def _is_trusted(folder: Path, trusted_commands) -> bool:
    """A bundle's check command runs only when it is a command this run was given, its shipped scripts the
    same bytes as this run's: code the user runs tonight anyway, not code from the baseline."""
    try:
        recorded = json.loads((folder / "report.json").read_text())["oracle_options"]["check_command"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not recorded or not isinstance(recorded, list):
        return False
    return any(_same_command(recorded, shipped_form, folder) for command in trusted_commands
               for shipped_form in _as_shipped(command))


def _as_shipped(command: list[str]) -> list[list[str]]:
    """The command as given, and, where its first word is a script, as a bundle records it: run by the
    interpreter its #! line names (`./check.sh` becomes `sh {bundle}/check.sh`)."""
    from reducer.bundle_files import interpreter_of

    forms = [command]
    if command and os.path.isfile(command[0]):
        try:
            forms.append([*interpreter_of(Path(command[0]).read_bytes()), *command])
        except OSError:
            pass
    return forms


def _same_command(recorded: list, command: list[str], folder: Path) -> bool:
    if len(recorded) != len(command):
        return False
    for shipped, given in zip(recorded, command, strict=True):
        if isinstance(shipped, str) and shipped.startswith("{bundle}/"):
            copy = folder / shipped.removeprefix("{bundle}/")
            if not (os.path.isfile(given) and copy.is_file() and _digest(Path(given)) == _digest(copy)):
                return False
        elif shipped != given:
            return False
    return True


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _inside(root: Path, relative: str) -> Path | None:
    if not isinstance(relative, str) or os.path.isabs(relative):
        return None
    path = (root / relative).resolve()
    return path if root.resolve() in path.parents else None


def read_baseline(run_dir: Path) -> dict:
    """The previous run's bugs, checked: a baseline is a file from elsewhere (a CI artifact)."""
    path = run_dir / "summary.json"
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"--baseline {run_dir}: cannot read its summary.json ({exc.strerror or exc})") from None
    except ValueError:
        raise UsageError(f"--baseline {path}: not valid JSON") from None
    bugs = data.get("bugs") if isinstance(data, dict) else None
    valid = isinstance(bugs, list) and all(
        isinstance(b, dict) and isinstance(b.get("id"), str) and isinstance(b.get("models"), list)
        and all(isinstance(m, str) for m in b["models"]) for b in bugs)
    if not valid:
        raise UsageError(f"--baseline {path}: not a batch summary (no list of bugs with an id and models)")
    # the baseline's own fixed bugs stay fixed: only those still open there are compared
    open_bugs = [b for b in bugs if b.get("status", "new") in _OPEN + ("not-fixed",)]
    return {"path": str(run_dir), "dir": run_dir, "bugs": open_bugs}


def write_reports(run_dir: Path, summary: dict) -> None:
    """summary.json, junit.xml and summary.html (the page for people: reducer/batch_html.py)."""
    from reducer.batch_html import summary_html

    write_text(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    write_text(run_dir / "junit.xml", junit_xml(summary))
    write_text(run_dir / "summary.html", summary_html(summary, run_dir))


def run_facts(started: float, jobs: int) -> dict:
    """When and how this batch ran, for the page's header: the command, the host, the runtimes' versions."""
    from reducer.batch_cache import runtime_versions

    return {"started": time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(started)),
            "seconds": round(time.time() - started, 1), "command": shlex.join(["onnx-reduce", *sys.argv[1:]]),
            "host": socket.gethostname(), "jobs": jobs, "versions": runtime_versions()}


def junit_xml(summary: dict) -> str:
    """One testcase per model: a failure names its bug and why; an error or a timeout is an error; a known
    failure is skipped. The form Jenkins' junit-10.xsd (and GitLab, GitHub actions) read."""
    models = summary["models"]
    failures = sum(m["outcome"] in FAILING + ("flaky",) and m["outcome"] != "expected-failure" for m in models)
    errors = sum(m["outcome"] in ERRORS for m in models)
    skipped = sum(m["outcome"] in ("expected-failure", "not-run") for m in models)
    seconds = sum(m.get("seconds") or 0 for m in models)
    suites = ET.Element("testsuites", name="onnx-reduce batch", tests=str(len(models)), failures=str(failures),
                        errors=str(errors), time=f"{seconds:.3f}")
    suite = ET.SubElement(suites, "testsuite", name="onnx-reduce batch", tests=str(len(models)),
                          failures=str(failures), errors=str(errors), skipped=str(skipped), time=f"{seconds:.3f}",
                          timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"), hostname=socket.gethostname() or "localhost")
    for model in models:
        case = ET.SubElement(suite, "testcase", classname="onnx-reduce.batch", name=model["name"],
                             time=f"{model.get('seconds') or 0:.3f}")
        outcome, reason = model["outcome"], model.get("reason") or ""
        if outcome in ERRORS:
            ET.SubElement(case, "error", type=outcome, message=reason).text = f"{model['path']}: {reason}"
        elif outcome in ("expected-failure", "not-run"):
            why = f"known failure {model.get('bug')}" if outcome == "expected-failure" else "not run (interrupted)"
            ET.SubElement(case, "skipped", message=why)
        elif outcome in FAILING or outcome == "flaky":
            bug = model.get("bug") or outcome
            ET.SubElement(case, "failure", type=bug, message=f"{bug}: {reason}").text = (
                f"{model['path']}: {outcome}; bundle: {model.get('bundle') or 'none'}")
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def closing_lines(summary: dict, run_dir: Path) -> list[str]:
    counts = summary["counts"]
    lines = [f"{counts['models']} models: " + ", ".join(f"{counts[k]} {k}" for k in sorted(counts)
                                                          if k not in ("models", "bugs", "new_bugs"))]
    for bug in summary["bugs"]:
        reason = f" - {bug['reason']}" if bug.get("reason") else ""
        lines.append(f"{bug['id']} [{bug['status']}] {len(bug['models'])} model(s): {bug.get('signature')}{reason}")
    lines.append(f"{counts['new_bugs']} new bug(s); {run_dir / 'summary.json'}, {run_dir / 'junit.xml'}, "
                 f"{run_dir / 'summary.html'}")
    return lines
