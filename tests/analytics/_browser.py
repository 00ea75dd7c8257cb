"""A real headless Chromium (Debian's ``chromium``, driven by the ``playwright`` package) for
looking at generated pages: a full-page screenshot plus everything the page logged.

The browser is the system's (``executable_path``; ``playwright install`` is never needed), with
a fresh profile per use and every background service off, and the page is opened from a
``file://`` URL: nothing leaves the machine. When the browser or the package is missing the
check is skipped, except under ``CI=true``, where it must run and so fails.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from unittest import SkipTest

CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
BROWSERS = ("chromium", "chromium-browser")
TIMEOUT_MS = 60_000


def find_browser() -> str:
    """The Chromium executable; raises SkipTest (or AssertionError under ``CI=true``) with
    what is missing and how to install it."""
    missing = []
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (pip install -e '.[dev]')")
    executable = next((p for b in BROWSERS if (p := shutil.which(b))), None)
    if executable is None:
        missing.append("Chromium (apt-get install chromium; .ci/run installs it)")
    if missing:
        reason = "needs " + " and ".join(missing)
        if os.environ.get("CI") == "true":
            raise AssertionError(f"{reason}: under CI=true the browser check must run")
        raise SkipTest(reason)
    assert executable is not None
    return executable


@dataclass
class PageVisit:
    """What a page did in the browser."""

    console: list[tuple[str, str]] = field(default_factory=list)  # (type, text)
    page_errors: list[str] = field(default_factory=list)  # uncaught exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page loaded
    failed_requests: list[str] = field(default_factory=list)
    height: int = 0  # the document's height in CSS pixels

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads, one line each."""
        return (
            [f"console {kind}: {text}" for kind, text in self.console if kind == "error"]
            + [f"uncaught: {e}" for e in self.page_errors]
            + [f"failed to load: {url}" for url in self.failed_requests]
        )


def screenshot(html_path: str, png_path: str, width: int = 1100) -> PageVisit:
    """Open ``html_path`` in headless Chromium, wait until it has loaded, and save a full-page
    PNG screenshot ``width`` CSS pixels wide to ``png_path``."""
    from playwright.sync_api import sync_playwright

    executable = find_browser()
    visit = PageVisit()
    profile = tempfile.mkdtemp(prefix="txdilation-chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=executable,
                headless=True,
                args=list(CHROMIUM_ARGS),
                viewport={"width": width, "height": 900},
                timeout=TIMEOUT_MS,
            )
            try:
                page = context.new_page()
                page.on("console", lambda m: visit.console.append((m.type, m.text)))
                page.on("pageerror", lambda e: visit.page_errors.append(str(e)))
                page.on("request", lambda r: visit.requests.append(r.url))
                page.on("requestfailed", lambda r: visit.failed_requests.append(r.url))
                page.goto(
                    "file://" + os.path.abspath(html_path), wait_until="load", timeout=TIMEOUT_MS
                )
                visit.height = int(page.evaluate("document.documentElement.scrollHeight"))
                page.screenshot(path=png_path, full_page=True, timeout=TIMEOUT_MS)
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return visit
