"""A real headless Chromium (Debian's ``chromium``, driven by the ``playwright`` package) for
looking at generated pages: a full-page screenshot, everything the page logged, and the tick
labels of every chart as laid out.

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
from typing import Any
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
CHART_AXES = """() => Array.from(document.querySelectorAll("figure svg")).map(svg => {
  const box = svg.getBoundingClientRect();
  const inside = r => r.width > 0 && r.height > 0 && r.left >= box.left - 1 &&
    r.right <= box.right + 1 && r.top >= box.top - 1 && r.bottom <= box.bottom + 1;
  const labels = axis => Array.from(svg.querySelectorAll(`g[id^="${axis}tick_"] text`))
    .filter(t => inside(t.getBoundingClientRect()) && t.textContent.trim())
    .map(t => t.textContent.trim());
  const caption = svg.closest("figure").querySelector("figcaption");
  return {caption: caption ? caption.textContent : "", x: labels("x"), y: labels("y")};
})"""
"""Every chart's tick labels as the browser lays them out: those with a size, inside the SVG."""


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
    charts: list[dict[str, Any]] = field(default_factory=list)  # see CHART_AXES

    def unlabelled_axes(self, least: int = 2) -> list[str]:
        """The charts with fewer than ``least`` visible tick labels on an axis, one line each
        (its caption, the axis, the labels it has)."""
        return [
            f"{chart['caption'][:60]!r}: {axis} axis labels {chart[axis]}"
            for chart in self.charts
            for axis in ("x", "y")
            if len(chart[axis]) < least
        ]

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
                visit.charts = list(page.evaluate(CHART_AXES))
                page.screenshot(path=png_path, full_page=True, timeout=TIMEOUT_MS)
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return visit
