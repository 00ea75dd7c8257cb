"""The release's sources agree: one place sets the version, the changelog has its entry and
towncrier can build the next one, README's "Use it under your application" commands are there
to be run (the 3.11 tier runs them as written: tests/test_tiers.py)."""

from __future__ import annotations

import configparser
import importlib.util
import re
import subprocess
import sys

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from tests.support.harness import REPO_ROOT
from tests.support.tier_steps import readme_use_commands
from txdilation import __version__


class VersionTests(SynchronousTestCase):
    def test_one_place_sets_the_version(self) -> None:
        """setup.cfg reads the version from ``txdilation._version``; no other file of the
        package spells it; the changelog's newest entry is for it."""
        setup = configparser.ConfigParser()
        setup.read(REPO_ROOT / "setup.cfg")
        self.assertEqual(setup["metadata"]["version"], "attr: txdilation._version.__version__")
        spelled = [
            str(path.relative_to(REPO_ROOT))
            for path in (REPO_ROOT / "src").rglob("*.py")
            if f'"{__version__}"' in path.read_text(encoding="utf-8")
        ]
        self.assertEqual(spelled, ["src/txdilation/_version.py"])
        changelog = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
        newest = re.search(r"^## txdilation (\S+) \(\d{4}-\d\d-\d\d\)$", changelog, flags=re.M)
        self.assertIsNotNone(newest, "no release entry in CHANGELOG.md")
        assert newest is not None
        self.assertEqual(newest.group(1), __version__)

    def test_python_versions(self) -> None:
        """python_requires and the classifiers say 3.10 to 3.13, as the tiers check."""
        setup = configparser.ConfigParser()
        setup.read(REPO_ROOT / "setup.cfg")
        self.assertEqual(setup["options"]["python_requires"], ">=3.10")
        classifiers = setup["metadata"]["classifiers"]
        found = re.findall(r"Programming Language :: Python :: (3\.\d+)", classifiers)
        self.assertEqual(found, ["3.10", "3.11", "3.12", "3.13"])

    def test_towncrier_builds_the_next_entry(self) -> None:
        """``towncrier build --draft`` reads the configuration and the fragments directory."""
        if importlib.util.find_spec("towncrier") is None:
            raise SkipTest("towncrier is not installed (pip install -e '.[dev]')")
        done = subprocess.run(
            [sys.executable, "-m", "towncrier", "build", "--draft", "--version", "9.9.9"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("## txdilation 9.9.9", done.stdout)


class ReadmeTests(SynchronousTestCase):
    def test_use_it_under_your_application(self) -> None:
        """The section's commands: install, then ``txdilation exec`` an application with a
        proof file, ``enable``, ``which``, ``disable``; README's two set-up commands stay
        the only ``sh`` blocks (tests/test_quality.py)."""
        commands = readme_use_commands((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
        # the wheel of this version, by its file name (not on the package index yet)
        self.assertEqual(commands[0], f"pip install ./txdilation-{__version__}-py3-none-any.whl")
        self.assertTrue(commands[1].startswith("txdilation exec --proof "), commands)
        self.assertEqual(
            commands[2:], ["txdilation enable", "txdilation which", "txdilation disable"]
        )
