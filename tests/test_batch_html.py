"""summary.html, the batch's page for people: escaped against hostile names and reasons, every link to a file of
RUN_DIR, every bug with its baseline badge; then the page of a real two-night batch in a headless Chromium
(Selenium): rows rendered, numeric columns sorted numerically, pictures loaded, no console error."""

from __future__ import annotations

import os
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from test_bad_input import write_model
from test_batch import _command_corpus, batch, chain, summary

from reducer.batch_html import counts_shown, summary_html

HOSTILE_NAME = "<script>alert(1)</script>"
HOSTILE_TEXT = "a \"quoted\" & 'single' <img src=x onerror=alert(2)>"
HOSTILE_FILE = "<img src=x onerror=alert(3)> & co.onnx"  # a legal file name: the model's path is shown as given
HOSTILE_BUG = "ORT-7 <script>alert(4)</script> & \"q\""  # an id from a baseline's summary.json: a file from elsewhere


class Page(HTMLParser):
    """The page's elements, as a browser's parser sees them, and its text."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def tags(self, name: str) -> list[dict]:
        return [attrs for tag, attrs in self.elements if tag == name]

    def links(self) -> list[str]:
        return [attrs[key] for _, attrs in self.elements for key in ("href", "src") if attrs.get(key) is not None]


def assert_nothing_injected(page: Page) -> None:
    """One script (the page's own), no event-handler attribute, pictures only where the page puts them."""
    assert len(page.tags("script")) == 1
    assert not [(tag, key) for tag, attrs in page.elements for key in attrs if key.lower().startswith("on")]
    assert all(img.get("src", "").endswith("graph.png") for img in page.tags("img"))


# --- the page from a summary (in-process) ----------------------------------------------------------------------
def hostile_summary() -> dict:
    models = [
        {"name": HOSTILE_NAME, "path": HOSTILE_FILE, "output": "models/x", "outcome": "reduced", "bug": HOSTILE_BUG,
         "nodes_before": 12, "nodes_after": 1, "checks": 7, "seconds": 1.5, "reason": HOSTILE_TEXT},
        {"name": "a&b \"c\" 'd'", "path": "ok.onnx", "output": "models/y", "outcome": "error", "bug": None,
         "nodes_before": None, "nodes_after": None, "checks": 0, "seconds": 0.2, "reason": HOSTILE_TEXT},
    ]
    bugs = [
        {"id": HOSTILE_BUG, "signature": f"nan: {HOSTILE_TEXT}", "status": "known", "models": [HOSTILE_NAME],
         "bundle": "../../etc/passwd", "nodes": 1},
        {"id": "bug-0123456789", "signature": "tolerance: Conv", "status": "fixed", "models": ["gone tonight"],
         "bundle": None, "nodes": None, "baseline_bundle": "models/gone/bundle.zip", "reason": HOSTILE_TEXT},
        {"id": "bug-9876543210", "signature": "nan: Relu", "status": "changed", "models": [HOSTILE_NAME],
         "bundle": None, "nodes": None, "reason": "its models fail otherwise now"},
    ]
    return {"version": 1, "interrupted": False, "baseline": "night1 <b>&", "bugs": bugs, "models": models,
            "counts": {"models": 2, "reduced": 1, "error": 1, "bugs": 1, "new_bugs": 0},
            "run": {"started": "2024-01-01 00:00:00 +0000", "seconds": 3.0, "host": HOSTILE_TEXT,
                    "command": f"onnx-reduce batch {HOSTILE_NAME}", "jobs": 1, "versions": {"onnxruntime": "<1>"}}}


def test_hostile_names_reasons_and_ids_are_shown_escaped_and_inject_nothing(tmp_path):
    text = summary_html(hostile_summary(), tmp_path)
    page = Page(text)
    assert_nothing_injected(page)
    assert "<script>alert" not in text and "<img src=x" not in text and "<b>&" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&quot;quoted&quot; &amp; &#x27;single&#x27;" in text
    shown = "".join(page.text)
    for value in (HOSTILE_NAME, HOSTILE_TEXT, HOSTILE_FILE, HOSTILE_BUG, "night1 <b>&"):
        assert value in shown  # shown as text, not dropped
    ids = [attrs["id"] for _, attrs in page.elements if "id" in attrs]
    assert len(ids) == len(set(ids)) and all(" " not in i and "<" not in i for i in ids)
    # a record's path that leaves RUN_DIR (or names no file) is never linked
    assert not [link for link in page.links() if not link.startswith("#") and "passwd" in unquote(link)]


def test_a_fixed_bug_without_models_tonight_keeps_its_row_with_the_fixed_badge(tmp_path):
    (tmp_path / "models" / "x" / "bundle").mkdir(parents=True)
    for name in ("graph.png", "report.md"):
        (tmp_path / "models" / "x" / "bundle" / name).write_bytes(b"made by its reduction")
    text = summary_html(hostile_summary(), tmp_path)
    page = Page(text)
    rows = {attrs["data-bug"]: attrs["data-status"] for attrs in page.tags("article")}
    assert rows == {HOSTILE_BUG: "known", "bug-0123456789": "fixed", "bug-9876543210": "changed"}
    # the model's picture is its known bug's: the baseline's bug it no longer shows gets none
    pictured = [row for row in text.split("<article")[1:] if "<img" in row]
    assert len(pictured) == 1 and 'data-status="known"' in pictured[0] and "models/x/bundle/report.md" in pictured[0]
    text = "".join(page.text)
    assert "expected (known bug)" in text and "fixed" in text and "models/gone/bundle.zip" in text
    cards = {attrs["data-count"] for attrs in page.tags("div") if "data-count" in attrs}
    assert cards == {"models", "failing", "reduced", "errors", "distinct bugs", "new", "fixed"}


# --- the page of a real batch, two nights ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_nights(tmp_path_factory) -> Path:
    """Night 1: Mul, Sigmoid and Tanh broken. Night 2 (a manifest, --baseline night 1): Mul fixed, Sigmoid's model
    changed (not fixed), Tanh still broken, Exp newly broken in two models (one of them a hostile file name),
    Softplus a known bug, one malformed model, one passing; chains of 2 to 12 nodes, so a
    numeric sort and a text sort of "nodes before" differ."""
    root = tmp_path_factory.mktemp("html")
    night1 = {"mul": ["Relu", "Mul"], "sig": ["Relu", "Sigmoid"], "tanh": ["Tanh", "Relu"]}
    check = _command_corpus(root, "Mul Sigmoid Tanh", night1)
    first = batch(root, "corpus", "-o", "night1", "--jobs", "2", *check)
    assert first.returncode == 1, first.stderr
    tonight = {**night1, "sig": ["Relu", "Relu"], "exp": ["Relu"] * 10 + ["Exp"], "known": ["Softplus"],
               "fine": ["Relu"] * 8}
    check = _command_corpus(root, "Sigmoid Tanh Exp Softplus", tonight)
    write_model(root / "corpus" / HOSTILE_FILE, chain(["Exp", "Relu"], "hostile"))
    (root / "corpus" / "broken.onnx").write_text("not a protobuf\n")
    entries = [f'[[model]]\npath = "{name}.onnx"\n' for name in tonight if name != "known"]
    entries += ['[[model]]\npath = "known.onnx"\nexpect = "fail"\nbug = "ORT-7"\n',
                f'[[model]]\npath = "{HOSTILE_FILE}"\nname = "hostile"\n', '[[model]]\npath = "broken.onnx"\n']
    (root / "corpus" / "night2.toml").write_text("\n".join(entries))
    second = batch(root, "corpus/night2.toml", "-o", "night2", "--baseline", "night1", "--jobs", "2", *check)
    assert second.returncode == 1, second.stderr
    assert "summary.html" in second.stderr
    return root / "night2"


def test_every_bug_of_a_real_batch_has_its_row_badge_and_picture(two_nights):
    found = summary(two_nights)
    page = Page((two_nights / "summary.html").read_text())
    assert_nothing_injected(page)
    statuses = {attrs["data-bug"]: attrs["data-status"] for attrs in page.tags("article")}
    assert statuses == {b["id"]: b["status"] for b in found["bugs"]}
    assert sorted(statuses.values()) == ["fixed", "known", "new", "not-fixed", "still-failing"]
    pictures = [img["src"] for img in page.tags("img")]
    assert len(pictures) == 3  # new, still failing, known: the bugs with a model tonight
    rows = [attrs for attrs in page.tags("tr") if "data-outcome" in attrs]
    assert sorted(r["data-outcome"] for r in rows) == sorted(m["outcome"] for m in found["models"])
    cards = {attrs["data-count"]: int(attrs["data-value"]) for attrs in page.tags("div") if "data-count" in attrs}
    assert cards == counts_shown(found)
    assert cards["fixed"] == 1 and cards["new"] == 1 and cards["errors"] == 1
    assert "onnx-reduce batch corpus/night2.toml -o night2 --baseline night1" in "".join(page.text)


def test_every_link_of_a_real_batch_page_is_a_file_of_run_dir(two_nights):
    page = Page((two_nights / "summary.html").read_text())
    ids = {attrs["id"] for _, attrs in page.elements if "id" in attrs}
    links = page.links()
    files = [link for link in links if not link.startswith("#")]
    assert len(files) >= 3 * 2 + 9  # each bug with a model: bundle.zip and report.md; a log per model at least
    for link in links:
        parts = urlsplit(link)
        assert not parts.scheme and not parts.netloc, link  # relative: no network, no absolute path
        if link.startswith("#"):
            assert link[1:] in ids, link
            continue
        target = (two_nights / unquote(parts.path)).resolve()
        assert target.is_file() and two_nights.resolve() in target.parents, link


# --- the page in a real browser --------------------------------------------------------------------------------
def _browser_parts() -> tuple[str | None, str | None, list[str]]:
    """Chromium's and chromedriver's paths, and what is missing for a browser test."""
    missing = []
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install selenium)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else shutil.which("chromedriver")
    if not chromium:
        missing.append("chromium (apt-get install chromium)")
    if not driver:
        missing.append("chromedriver (apt-get install chromium-driver)")
    return chromium, driver, missing


def skip_or_fail(why: str) -> None:
    """Skipped with the reason, unless ONNX_REDUCE_REQUIRE_CORPUS=1 (CI) makes a missing browser a failure."""
    if os.environ.get("ONNX_REDUCE_REQUIRE_CORPUS") == "1":
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


@pytest.fixture
def browser():
    """Chromium, headless, driven by Selenium through the system's chromedriver."""
    chromium, driver, missing = _browser_parts()
    if missing:
        skip_or_fail("a browser test needs " + ", ".join(missing))
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)  # no sandbox: CI containers and root cannot give Chromium its own
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for its errors
    session = webdriver.Chrome(service=Service(driver), options=options)
    yield session
    session.quit()


def _column(driver, heading: str) -> list[str]:
    return driver.execute_script(
        """const table = document.getElementById("model-table");
        const column = Array.from(table.tHead.rows[0].cells).findIndex(th => th.textContent.trim() === arguments[0]);
        return Array.from(table.tBodies[0].rows).map(row => row.cells[column].dataset.sort);""", heading)


@pytest.mark.browser
def test_the_page_in_a_headless_browser_sorts_numerically_and_shows_its_pictures(two_nights, browser, tmp_path):
    from selenium.webdriver.common.by import By

    found = summary(two_nights)
    browser.get((two_nights / "summary.html").as_uri())
    assert len(browser.find_elements(By.CSS_SELECTOR, "article.bug")) == len(found["bugs"])
    assert len(browser.find_elements(By.CSS_SELECTOR, "#model-table tbody tr")) == len(found["models"])
    assert browser.find_element(By.CSS_SELECTOR, "article[data-status=fixed] .badge").text == "fixed"

    heading = browser.find_element(By.XPATH, "//th[normalize-space()='Nodes before']")
    numbers = [v for v in _column(browser, "Nodes before") if v]
    assert sorted(numbers, key=float) != sorted(numbers)  # "12" < "3" as text: the test can tell the two apart
    heading.click()
    shown = _column(browser, "Nodes before")
    present = [float(v) for v in shown if v]
    assert present == sorted(present) and shown[len(present):] == [""] * (len(shown) - len(present))  # errors last
    assert heading.get_attribute("aria-sort") == "ascending"
    heading.click()
    shown = _column(browser, "Nodes before")
    present = [float(v) for v in shown if v]
    assert present == sorted(present, reverse=True) and len(present) == len(numbers)
    assert heading.get_attribute("aria-sort") == "descending"
    browser.find_element(By.XPATH, "//th[normalize-space()='Model']").click()
    names = [row.get_attribute("id") for row in browser.find_elements(By.CSS_SELECTOR, "#model-table tbody tr")]
    assert names == sorted(names, key=str.lower)

    images = browser.execute_script(
        "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth]);")
    assert len(images) == 3 and all(complete and width > 0 for _, complete, width in images), images
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []  # no script error, no refused resource (the page's own CSP included)
    assert browser.execute_script("return document.title").startswith("onnx-reduce batch")
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, min(height + 140, 4000))
    assert browser.save_screenshot(str(tmp_path / "summary.png"))
    assert (tmp_path / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_browser_skips_here_and_fails_where_ci_requires_it(monkeypatch):
    monkeypatch.delenv("ONNX_REDUCE_REQUIRE_CORPUS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs chromium"):
        skip_or_fail("a browser test needs chromium")
    monkeypatch.setenv("ONNX_REDUCE_REQUIRE_CORPUS", "1")
    with pytest.raises(pytest.fail.Exception, match="needs chromium"):
        skip_or_fail("a browser test needs chromium")
