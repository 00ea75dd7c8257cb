"""The documentation site, built as CI and a person build it (``docs/build``), and the set-up a
new user reads in README.md and docs/.

- the build (Sphinx with MyST; the ``docs`` extra) ends with no warning at all: ``docs/build``
  makes every warning an error;
- every internal link of the built site resolves: each relative ``href``/``src`` names a file
  of the site, and each ``#fragment`` an element of that page;
- the generated reference holds what it is generated from: every command's help, the public
  API's docstrings, every Dilation setting, every state diagram;
- README.md says where its commands run (a virtual environment, the checkout's top directory),
  and docs/ says how to install from a checkout (``pip install -e '.[...]'``), not from the
  package index, where txdilation is not yet.

Without Sphinx or MyST installed the build is skipped, except under ``CI=true``, where the
README's test command installs them and the build must run.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from twisted.trial.unittest import SynchronousTestCase

from tests.support.harness import REPO_ROOT

DOCS = REPO_ROOT / "docs"
BUILD_TIMEOUT = 300.0


class _Links(HTMLParser):
    """The ids of a page and the relative URLs it links to or loads."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            elif name in ("href", "src") and value and _internal(value):
                self.urls.append(value)


def _internal(url: str) -> bool:
    """A link within the site: no scheme (``https:``, ``mailto:``) and no host (``//``)."""
    parts = urlsplit(url)
    return not parts.scheme and not parts.netloc


def _parse(page: Path) -> _Links:
    links = _Links()
    links.feed(page.read_text(encoding="utf-8"))
    return links


def broken_links(site: Path) -> list[str]:
    """Every internal link of the HTML pages under ``site`` that does not resolve, as
    ``page: url (why)``."""
    pages = {page: _parse(page) for page in site.rglob("*.html")}
    broken = []
    for page, links in pages.items():
        for url in links.urls:
            parts = urlsplit(url)
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            where = f"{page.relative_to(site)}: {url}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where} (no such anchor)")
    return broken


_SITE: dict[str, Path] = {}


def built_site(testcase: SynchronousTestCase) -> Path:
    """``docs/build`` into a temporary directory, once per process; fails with Sphinx's
    output (its warnings) when it does not exit 0."""
    missing = [m for m in ("sphinx", "myst_parser") if importlib.util.find_spec(m) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (pip install -e '.[docs]')"
        if os.environ.get("CI") == "true":
            testcase.fail(f"{reason}: under CI=true the documentation site must build")
        testcase.skipTest(reason)
    if "site" not in _SITE:
        output = Path(testcase.mktemp()).resolve() / "html"
        done = subprocess.run(
            ["sh", str(DOCS / "build"), str(output)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            cwd=REPO_ROOT,
            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        )
        if done.returncode != 0:
            testcase.fail(f"docs/build exited {done.returncode}:\n{done.stdout}{done.stderr}")
        _SITE["site"] = output
    return _SITE["site"]


class SiteTests(SynchronousTestCase):
    """The site builds with no warning, and its links and reference are whole."""

    def test_builds_without_warnings_and_every_internal_link_resolves(self) -> None:
        """``docs/build`` (warnings are errors) succeeds; each guide page of docs/ is a page of
        the site; no internal link or image is broken."""
        site = built_site(self)
        for page in DOCS.glob("*.md"):
            self.assertTrue((site / f"{page.stem}.html").is_file(), page.name)
        self.assertEqual(broken_links(site), [])

    def test_generated_reference(self) -> None:
        """The reference pages hold every command's help (in argparse's format), the public
        API from its docstrings, every Dilation setting and every state diagram."""
        from txdilation.session.config import DILATION_SETTINGS

        site = built_site(self)
        reference = site / "reference"
        cli = (reference / "cli.html").read_text()
        for usage in (
            "usage: txdilation [-h] [-V]",
            "usage: txdilation run [options]",
            "usage: txdilation demo",
            "usage: txdilation pairing show",
            "usage: twistd [options] dilation [options]",
            "usage: txdilation-analytics analyze",
        ):
            self.assertEqual(cli.count(usage), 1, usage)  # (each command once)
        api = (reference / "api.html").read_text()
        for name in ("txdilation.install", "txdilation.dilate", "PairingOptions", "PairedWormhole"):
            self.assertIn(name, api)
        self.assertIn("start_mailbox_server", api)
        settings = (reference / "settings.html").read_text()
        for setting in DILATION_SETTINGS:
            self.assertIn(setting.variable, settings)
        endpoints = (reference / "endpoint-strings.html").read_text()
        self.assertIn("DilationServerEndpoint", endpoints)
        diagrams = (reference / "state-diagrams.html").read_text()
        for svg in (REPO_ROOT / "state-diagrams").glob("*.svg"):
            self.assertRegex(diagrams, rf'<img[^>]+src="[^"]*{re.escape(svg.name)}"')

    def test_the_link_check_finds_broken_links(self) -> None:
        """The check itself: a missing page, a missing anchor and a missing image are found;
        external links are not followed."""
        site = Path(self.mktemp()).resolve()
        site.mkdir()
        (site / "a.html").write_text(
            '<p id="here"><a href="b.html#nowhere">x</a><a href="#here">y</a>'
            '<a href="gone.html">z</a><img src="_images/none.svg">'
            '<a href="https://example.com/x">e</a><a href="b.html">b</a></p>'
        )
        (site / "b.html").write_text('<p id="there">b</p>')
        self.assertEqual(
            broken_links(site),
            [
                "a.html: b.html#nowhere (no such anchor)",
                "a.html: gone.html (no such file)",
                "a.html: _images/none.svg (no such file)",
            ],
        )


class NewUserReadingTests(SynchronousTestCase):
    """README.md and docs/ as a new user follows them, literally."""

    def test_readme_says_where_the_commands_run(self) -> None:
        """README.md tells to make and enter a virtual environment and to be in the
        checkout's top directory before its two commands, and each installs the checkout
        itself (``pip install -e``)."""
        readme = (REPO_ROOT / "README.md").read_text()
        first_command = readme.index("```sh")
        before = " ".join(readme[:first_command].split())
        self.assertIn("python3 -m venv .venv && . .venv/bin/activate", before)
        self.assertIn("`cd txdilation`", before)
        for block in re.findall(r"```sh\n(.*?)\n```", readme, flags=re.S):
            self.assertTrue(block.startswith("pip install -e '.["), block)

    def test_docs_install_from_a_checkout(self) -> None:
        """No page of docs/ tells to ``pip install 'txdilation[...]'`` (the package index has
        no txdilation yet): a checkout's ``pip install -e '.[...]'`` instead."""
        for page in DOCS.glob("*.md"):
            text = " ".join(page.read_text().split())
            self.assertNotRegex(text, r"pip install '?txdilation", page.name)


class LayoutTests(SynchronousTestCase):
    """docs/ holds the pages and the site's own files; raw figures live beside the benchmarks."""

    def test_no_raw_figures_among_the_pages(self) -> None:
        """No ``.json``/``.jsonl`` record file in docs/ (outside a local build's ``_build``):
        they belong in ``benchmarks/figures/``, next to the benchmarks that write them."""
        records = [
            path.relative_to(DOCS).as_posix()
            for path in DOCS.rglob("*.json*")
            if path.suffix in (".json", ".jsonl") and "_build" not in path.relative_to(DOCS).parts
        ]
        self.assertEqual(records, [])
        self.assertTrue(
            (REPO_ROOT / "benchmarks" / "figures" / "reliability-figures.json").exists()
        )
