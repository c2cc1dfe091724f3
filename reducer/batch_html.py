"""summary.html: a batch's results as one self-contained page a person opens from RUN_DIR (file://, no network):
the run's counts, one row per bug with its minimal graph's picture and its bundle, one row per model, sortable.

Every string from the records (model names, reasons, error text: from user files) goes through html.escape, and
through urllib's quote where it is part of a link; the page's one script reads data- attributes only, and a
Content-Security-Policy allows that script alone (by its hash), so a string that slipped through still runs nothing.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
import re
from functools import cache
from importlib import resources
from pathlib import Path
from string import Template
from urllib.parse import quote

from reducer.batch import tally

# status of a bug (batch_report) -> badge label and colour class
BUG_BADGES = {
    "new": ("new", "red"),
    "still-failing": ("still failing", "amber"),
    "fixed": ("fixed", "green"),
    "known": ("expected (known bug)", "grey"),
    "not-fixed": ("not fixed", "amber"),
    "changed": ("changed", "blue"),
    "unverified": ("unverified", "grey"),
    "not-run": ("not run", "grey"),
}
BASELINE_ONLY = ("fixed", "not-fixed", "changed", "unverified", "not-run")  # bugs of the baseline gone tonight
OUTCOME_BADGES = {
    "reduced": "red", "not-reproduced": "amber", "expected-failure": "grey", "flaky": "purple",
    "unexpected-pass": "amber", "passing": "green", "error": "darkred", "timeout": "darkred", "not-run": "grey",
}
# the models table's columns: (heading, sort type); "num" sorts numerically, a missing value last
MODEL_COLUMNS = (("Model", "text"), ("Outcome", "text"), ("Nodes before", "num"), ("Nodes after", "num"),
                 ("Checks", "num"), ("Seconds", "num"), ("Bug", "text"), ("Files", None))



# a policy that lets the page show its own pictures and run its own script (by hash), nothing else
POLICY = "default-src 'none'; img-src 'self' file:; style-src 'unsafe-inline'; script-src '{script_hash}'"
PAGE = Template("""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="$policy">
<title>$title</title>
<style>
$style
</style>
</head>
<body>
<header>
<h1>$title</h1>
<div class="meta">$meta</div>
</header>
<main>
<section class="cards">$cards</section>
$notice
<h2 id="bugs">Bugs <span class="count">($bug_count)</span></h2>
<section class="panel">$bugs</section>
<h2 id="models">Models <span class="count">($model_count)</span></h2>
<section class="panel scroll">
<table class="sortable" id="model-table">
<thead><tr>$model_headers</tr></thead>
<tbody>
$model_rows
</tbody>
</table>
</section>
<footer>Written by onnx-reduce batch with summary.json and junit.xml. Click a column heading to sort.</footer>
</main>
<script>
$script
</script>
</body>
</html>
""")


def e(value) -> str:
    """Text or an attribute value, escaped (quotes too): record strings come from user files."""
    return html.escape("" if value is None else str(value), quote=True)


def summary_html(summary: dict, run_dir: Path) -> str:
    """The page for `summary` (summary.json's content), its links relative to `run_dir`, where it is written."""
    models = summary.get("models") or []
    bugs = summary.get("bugs") or []
    model_anchor = _anchors([m.get("name") for m in models], "model-")
    bug_anchor = _anchors([b.get("id") for b in bugs], "")
    return PAGE.substitute(
        title=e(f"onnx-reduce batch: {run_dir.name or run_dir}"),
        style=_asset("summary.css"),
        script=_asset("summary.js"),
        policy=POLICY.format(script_hash=_script_hash(_asset("summary.js"))),
        meta=_meta(summary),
        cards=_cards(summary),
        notice=_notice(summary),
        bug_count=len(bugs),
        bugs="\n".join(_bug_row(bug, models, run_dir, bug_anchor, model_anchor) for bug in bugs)
        or '<div class="empty">No failing model: no bug.</div>',
        model_count=len(models),
        model_headers="".join(_heading(name, kind) for name, kind in MODEL_COLUMNS),
        model_rows="\n".join(_model_row(model, run_dir, bug_anchor, model_anchor) for model in models),
    )


@cache
def _asset(name: str) -> str:
    """The page's stylesheet or script, shipped beside this module (inlined: the page stands alone)."""
    return resources.files("reducer").joinpath("page", name).read_text(encoding="utf-8").strip()


def _script_hash(script: str) -> str:
    """The CSP hash of the inline script as the page holds it (between the newlines around it)."""
    return "sha256-" + base64.b64encode(hashlib.sha256(f"\n{script}\n".encode()).digest()).decode()


def counts_shown(summary: dict) -> dict[str, int]:
    """The header's counts, as the progress lines count them (failing: reduced, not reproduced or expected)."""
    models = summary.get("models") or []
    counts = summary.get("counts") or {}
    return {
        "models": len(models),
        **tally(m.get("outcome") for m in models),
        "distinct bugs": int(counts.get("bugs", 0)),
        "new": int(counts.get("new_bugs", 0)),
        "fixed": sum(b.get("status") == "fixed" for b in summary.get("bugs") or []),
    }


def _cards(summary: dict) -> str:
    counts = counts_shown(summary)
    tone = {"failing": "alert", "errors": "alert", "new": "alert", "fixed": "good"}
    return "".join(
        f'<div class="card {tone.get(label, "") if value else ""}" data-count="{e(label)}" data-value="{value}">'
        f'<div class="value">{value}</div><div class="label">{e(label)}</div></div>'
        for label, value in counts.items())


def _meta(summary: dict) -> str:
    run = summary.get("run") or {}
    parts = []
    if run.get("started"):
        took = f" in {_duration(run['seconds'])}" if isinstance(run.get("seconds"), (int, float)) else ""
        parts.append(f"Ran {e(run['started'])}{took}")
    if run.get("host"):
        parts.append(f"on {e(run['host'])}")
    if run.get("jobs"):
        parts.append(f"{e(run['jobs'])} model(s) at a time")
    if summary.get("baseline"):
        parts.append(f"baseline <code>{e(summary['baseline'])}</code>")
    versions = run.get("versions") or {}
    if versions:
        parts.append(", ".join(f"{e(k)} {e(v)}" for k, v in versions.items()))
    line = " &middot; ".join(parts) or "When it ran is not recorded (an older summary.json)."
    if run.get("command"):
        line += f'<br><code>{e(run["command"])}</code>'
    return line


def _notice(summary: dict) -> str:
    if not summary.get("interrupted"):
        return ""
    return ('<div class="notice"><strong>Interrupted.</strong> Models not finished are <em>not-run</em>; run the '
            "same command again to go on. Bugs are not compared with the baseline.</div>")


def _bug_row(bug: dict, models: list[dict], run_dir: Path, bug_anchor: dict, model_anchor: dict) -> str:
    status = bug.get("status") or "new"
    label, colour = BUG_BADGES.get(status, (status, "grey"))
    # a bug known only from the baseline has no repro tonight: a folder of tonight's may hold another bug's
    folder = _repro_folder(bug, models, run_dir) if status not in BASELINE_ONLY else None
    picture = _file(run_dir, f"{folder}/bundle/graph.png") if folder else None
    report = _file(run_dir, f"{folder}/bundle/report.md") if folder else None
    bundle = _file(run_dir, bug.get("bundle"))
    if picture:
        image = (f'<a href="{_href(picture)}"><img src="{_href(picture)}" alt="{e(bug.get("id"))}: the minimal '
                 f'graph, failing tensors in red" loading="lazy"></a>')
        shown = f'<div class="picture">{image}</div>'
    elif status in BASELINE_ONLY:
        shown = '<div class="picture none">no picture: no model shows this bug tonight</div>'
    else:
        shown = '<div class="picture none">no picture: its repro has no graph.png</div>'
    kind, detail = _kind(bug)
    present = {m.get("name") for m in models}
    affected = ", ".join(
        f'<a href="#{e(model_anchor[name])}">{e(name)}</a>' if name in present else e(name)
        for name in bug.get("models") or []) or "none"
    links = []
    if bundle:
        links.append(f'<a href="{_href(bundle)}">bundle.zip</a>')
    if report:
        links.append(f'<a href="{_href(report)}">report.md</a>')
    if not links and bug.get("baseline_bundle"):
        links.append(f'<span class="why">the baseline\'s bundle: <code>{e(bug["baseline_bundle"])}</code></span>')
    why = f'<p class="why">{e(bug["reason"])}</p>' if bug.get("reason") else ""
    nodes = (f"<dt>Repro</dt><dd>{e(bug['nodes'])} node{'s' * (bug['nodes'] != 1)}</dd>\n"
             if bug.get("nodes") is not None else "")  # a bug from the baseline only: no repro tonight
    anchor = bug_anchor[bug.get("id")]
    return f"""<article class="bug" id="{e(anchor)}" data-bug="{e(bug.get('id'))}" data-status="{e(status)}">
{shown}
<div>
<div class="title"><code>{e(bug.get('id'))}</code> <span class="badge {colour}">{e(label)}</span></div>
<p class="reason"><span class="kind">{e(kind)}</span>{e(detail)}</p>
{why}<dl>
<dt>Models</dt><dd>{affected} <span class="why">({len(bug.get('models') or [])})</span></dd>
{nodes}<dt>Files</dt><dd class="links">{''.join(links) or 'none'}</dd>
</dl>
</div>
</article>"""


def _kind(bug: dict) -> tuple[str, str]:
    """The failure kind and the rest of the signature's line (`nan` and `: Relu -> Mul`)."""
    line = str(bug.get("signature") or "")
    kind = str(((bug.get("canonical") or {}).get("failure") or {}).get("kind") or line.split(":")[0].split(" (")[0])
    rest = line[len(kind):] if line.startswith(kind) else (f": {line}" if line else "")
    return kind or "unknown", rest


def _repro_folder(bug: dict, models: list[dict], run_dir: Path) -> str | None:
    """The model folder whose repro stands for the bug: its bundle's (the smallest repro), else the first
    affected model's that has a picture."""
    folders = []
    if bug.get("bundle"):
        folders.append(os.path.dirname(str(bug["bundle"])))
    outputs = {m.get("name"): m.get("output") for m in models}
    folders += [outputs[name] for name in bug.get("models") or [] if outputs.get(name)]
    for folder in folders:
        if _file(run_dir, f"{folder}/bundle/graph.png"):
            return folder
    return folders[0] if folders else None


def _heading(name: str, kind: str | None) -> str:
    sort = f' data-type="{kind}"' if kind else ""
    numeric = ' class="num"' if kind == "num" else ""
    return f'<th scope="col"{sort}{numeric}>{e(name)}</th>'


def _model_row(model: dict, run_dir: Path, bug_anchor: dict, model_anchor: dict) -> str:
    outcome = model.get("outcome") or "?"
    bug = model.get("bug")
    bug_cell = f'<a href="#{e(bug_anchor[bug])}">{e(bug)}</a>' if bug in bug_anchor else e(bug or "")
    folder = model.get("output") or ""
    files = [(label, _file(run_dir, relative)) for label, relative in (
        ("report.md", f"{folder}/bundle/report.md"), ("bundle.zip", model.get("bundle")),
        ("log", f"logs/{model.get('name')}.log"))]
    links = " ".join(f'<a href="{_href(path)}">{label}</a>' for label, path in files if path)
    reason = f'<div class="reason">{e(model["reason"])}</div>' if model.get("reason") else ""
    path = f'<div class="path mono">{e(model["path"])}</div>' if model.get("path") else ""
    cached = ' <span class="badge grey" title="a night\'s result for the same model and runtimes">cached</span>' if (
        model.get("cached")) else ""
    cells = [
        f'<td data-sort="{e(model.get("name"))}"><strong>{_breakable(model.get("name"))}</strong>{path}{reason}</td>',
        f'<td data-sort="{e(outcome)}"><span class="badge {OUTCOME_BADGES.get(outcome, "grey")}">{e(outcome)}'
        f'</span>{cached}</td>',
        *(_number(model.get(key)) for key in ("nodes_before", "nodes_after", "checks", "seconds")),
        f'<td data-sort="{e(bug or "")}" class="mono">{bug_cell}</td>',
        f'<td class="links">{links}</td>',
    ]
    return (f'<tr id="{e(model_anchor[model.get("name")])}" data-outcome="{e(outcome)}">' + "".join(cells) + "</tr>")


def _breakable(name) -> str:
    """A long model name (`vision__resnet50_fp16_tolerance`) may wrap after its underscores, not mid-word."""
    return e(name).replace("_", "_<wbr>")  # escaped text holds no `_` of its own: its entities have none


def _number(value) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return '<td class="num" data-sort="">&ndash;</td>'
    shown = f"{value:.1f}" if isinstance(value, float) else str(value)
    return f'<td class="num" data-sort="{value!r}">{shown}</td>'


def _anchors(names: list, prefix: str) -> dict:
    """An id for each name, made of safe characters and unique in the page (names come from user files)."""
    anchors: dict = {}
    used: set[str] = set()
    for name in names:
        if name in anchors:
            continue
        anchor = prefix + (re.sub(r"[^A-Za-z0-9_.-]", "_", str(name)) or "_")
        while anchor in used:
            anchor += "_"
        used.add(anchor)
        anchors[name] = anchor
    return anchors


def _file(run_dir: Path, relative) -> str | None:
    """`relative` (a path in RUN_DIR from a record) when it is a file inside RUN_DIR, else None."""
    if not isinstance(relative, str) or not relative or os.path.isabs(relative):
        return None
    root = run_dir.resolve()
    path = (root / relative).resolve()
    if root not in path.parents or not path.is_file():
        return None
    return path.relative_to(root).as_posix()


def _href(relative: str) -> str:
    return e(quote(relative))


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"
