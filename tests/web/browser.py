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
def browser_page(width: int = 1280, height: int = 900) -> Iterator:
    """A fresh browser context and page; closed afterwards."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; Django's ORM refuses to run in a
    # thread with a running loop unless told that this is a synchronous caller.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=FLAGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": width, "height": height})
            yield context.new_page()
        finally:
            browser.close()


def screenshot(page, name: str) -> Path:
    """Save a full-page PNG named ``name`` under the artifacts folder; its path."""
    folder = ARTIFACTS / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
