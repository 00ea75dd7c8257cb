"""The release and the per-Python tiers (``tests.support.tiers``): what CI's summary shows.

The sdist and the wheel are built once and checked (``twine check --strict``, metadata, what
each carries); then Python 3.10, 3.11, 3.12 and 3.13 each install the *wheel* in a fresh
virtualenv and run the smoke steps, stock's dilation tests with txdilation, and (from an
unpacked sdist) the unit tests, one interop pairing each way and ``txdilation exec``'s tests;
the tier of the suite's own Python (3.11 in CI) runs README's "Use it under your application"
commands and docs/dropin.md's pipx commands (fowl installed by pipx, txdilation injected and
enabled), and from the sdist only a few tests (the suite runs the rest on that Python). Under
pytest the run starts as collection ends and overlaps the suite (``tests.support.tiers_plugin``);
these tests, moved to the end, wait for it. A Python that pyenv does not have skips its tier,
except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from tests.support.tiers import BACKGROUND


def report(steps: list[dict[str, Any]]) -> str:
    """One line per step (name, seconds, ok), then the failures' output."""
    lines = [f"  {s['name']}: {s['seconds']} s {'ok' if s['ok'] else 'FAILED'}" for s in steps]
    return "\n".join(lines + [f"--- {s['name']}\n{s['tail']}" for s in steps if not s["ok"]])


class TierTests(SynchronousTestCase):
    """Each part of the background run passed (its steps' times are printed)."""

    _results: dict[str, Any] | None = None

    def results(self) -> dict[str, Any]:
        cls = type(self)
        if cls._results is None:
            cls._results = BACKGROUND.results()
        return cls._results

    def check_tier(self, version: str) -> None:
        results = self.results()
        self.check_release()
        tier = results["tiers"][version]
        if tier["python"] is None:
            if os.environ.get("CI") == "true":
                self.fail(f"no Python {version} (pyenv's) on this machine: its tier cannot run")
            raise SkipTest(f"no Python {version} here (pyenv install {version})")
        print(f"\ntier {version} ({tier['python']}): {tier['seconds']} s\n{report(tier['steps'])}")
        self.assertTrue(
            tier["steps"] and all(s["ok"] for s in tier["steps"]), report(tier["steps"])
        )

    def check_release(self) -> None:
        release = self.results()["release"]
        self.assertTrue(all(s["ok"] for s in release["steps"]), report(release["steps"]))

    def test_release(self) -> None:
        """``python -m build`` makes the sdist and the wheel; ``twine check --strict`` passes;
        the wheel has the version, Python 3.10 to 3.13 and what the drop-in needs, no tests;
        the sdist carries the tests, the docs and the changelog's entry."""
        release = self.results()["release"]
        print(f"\nrelease:\n{report(release['steps'])}\nwheel: {release.get('wheel_contents')}")
        self.check_release()

    def test_python_3_10(self) -> None:
        """The tier of Python 3.10 (see the module docstring)."""
        self.check_tier("3.10")

    def test_python_3_11(self) -> None:
        """The tier of Python 3.11 (in CI the suite's own: with README's and the pipx
        commands)."""
        self.check_tier("3.11")

    def test_python_3_12(self) -> None:
        """The tier of Python 3.12."""
        self.check_tier("3.12")

    def test_python_3_13(self) -> None:
        """The tier of Python 3.13; and the whole run's time."""
        self.check_tier("3.13")
        results = self.results()
        print(f"\ntiers: {results['seconds']} s run, {results['waited_s']} s from start to here")
