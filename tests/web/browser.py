"""Headless Chromium (Debian's, /usr/bin/chromium) driven by Playwright, and screenshots saved as
test artifacts under ``artifacts/screenshots/`` (``LOOPWRIGHT_ARTIFACTS`` overrides the folder)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("LOOPWRIGHT_ARTIFACTS", ROOT / "artifacts"))
CHROMIUM = os.environ.get("LOOPWRIGHT_CHROMIUM", "/usr/bin/chromium")
# Chromium's own background traffic has nowhere to go on a closed network: switch it off.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    found = shutil.which(CHROMIUM) or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if not found:
        pytest.fail(f"Chromium not found at {CHROMIUM}: .ci/run installs Debian's chromium package")
    return found


@contextmanager
def browser_page(width: int = 1280, height: int = 900, color_scheme: str = "light") -> Iterator:
    """A fresh browser context and page (``color_scheme``: what the system prefers, light or
    dark); closed afterwards."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; Django's ORM refuses to run in a
    # thread with a running loop unless told that this is a synchronous caller.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=FLAGS, headless=True)
        try:
            context = browser.new_context(
                viewport={"width": width, "height": height}, color_scheme=color_scheme
            )
            page = context.new_page()
            # every page keeps to its Content-Security-Policy: a refused script, style or frame
            # is reported on the console, and fails the test
            refused: list[str] = []
            page.on(
                "console",
                lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None,
            )
            yield page
            assert not refused, f"the CSP refused: {refused}"
        finally:
            # While Playwright's loop runs in this thread, the ORM's queries (a test checking
            # the database between clicks) get connections of their own: close them here, or
            # they outlive the test database.
            from django.db import connections

            connections.close_all()
            browser.close()


def screenshot(page, name: str) -> Path:
    """Save a full-page PNG named ``name`` under the artifacts folder; its path."""
    folder = ARTIFACTS / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def sign_in(page, url: str, email: str, password: str) -> None:
    """Log in through the form."""
    page.goto(f"{url}/login")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("form[action='/login'] button[type=submit]")
    page.wait_for_url(lambda u: "/login" not in u)


# Every element that sticks out of the viewport (its right edge past the screen, or wider than
# it), and how far the page scrolls sideways: both must be nothing on a phone.
_TOO_WIDE = """() => {
  const width = window.innerWidth;
  const out = [];
  for (const el of document.querySelectorAll("body *")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.right > width + 0.5 || r.width > width + 0.5) {
      const name = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
        (el.className && typeof el.className === "string" ? "." + el.className.split(" ").join(".") : "");
      out.push(`${name} right=${Math.round(r.right)} width=${Math.round(r.width)}`);
    }
  }
  return {scroll: document.documentElement.scrollWidth, width, out: out.slice(0, 10)};
}"""


def too_wide(page) -> list[str]:
    """What sticks out of a phone's screen on ``page`` (empty: nothing), once it has loaded."""
    page.wait_for_load_state("load")
    found = page.evaluate(_TOO_WIDE)
    problems = list(found["out"])
    if found["scroll"] > found["width"]:
        problems.append(f"the page scrolls sideways: {found['scroll']} > {found['width']}")
    return problems


def _axe_source() -> str:
    """axe-core's script, as the axe-playwright-python package ships it (installed with the
    development dependencies: nothing is fetched while the tests run)."""
    from importlib.resources import files

    return (files("axe_playwright_python") / "axe.min.js").read_text(encoding="utf-8")


# axe-core's WCAG 2.x A and AA rules and its best practices, on the whole document
_AXE_RUN = """async () => {
  const result = await axe.run(document, {
    runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]},
    resultTypes: ["violations"],
  });
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ") + ": " + (n.failureSummary || "").split("\\n").slice(1, 2).join("")),
  }));
}"""


def axe_violations(
    page,
    impacts: tuple[str, ...] = ("serious", "critical"),
    rules: tuple[str, ...] = ("heading-order",),
) -> list[dict]:
    """axe-core's violations on ``page`` of the given impacts, and of the given rules whatever
    their impact (empty: none). The script runs in the page's own context through the DevTools
    protocol, which the page's CSP does not govern."""
    page.wait_for_load_state("load")
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.evaluate(_axe_source() + "\n;undefined")
    return [v for v in page.evaluate(_AXE_RUN) if v["impact"] in impacts or v["id"] in rules]


def load_seconds(page) -> float:
    """How long the page's last navigation took, from its start to the end of its load event
    (the browser's Navigation Timing)."""
    page.wait_for_load_state("load")
    return (
        page.evaluate(
            "() => { const n = performance.getEntriesByType('navigation')[0];"
            " return (n.loadEventEnd || n.responseEnd) - n.startTime; }"
        )
        / 1000
    )
