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
